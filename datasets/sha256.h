/* SHA-256 (FIPS 180-4), self-contained: data files' digests for run records and the
 * per-item hashes of the SQuAD fixtures. */
#ifndef MPX_DATASETS_SHA256_H
#define MPX_DATASETS_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct mpx_sha256_ctx {
    uint32_t h[8];
    uint64_t n_bytes;
    uint8_t block[64];
    size_t fill;
} mpx_sha256_ctx;

void mpx_sha256_init(mpx_sha256_ctx *s);
void mpx_sha256_update(mpx_sha256_ctx *s, const void *data, size_t len);
void mpx_sha256_final(mpx_sha256_ctx *s, uint8_t digest[32]);
/* One-shot digest of a buffer. */
void mpx_sha256(const void *data, size_t len, uint8_t digest[32]);
/* Lower-case hex of the first n_bytes of a digest (n_bytes <= 32); hex needs 2n+1 bytes. */
void mpx_sha256_hex(const uint8_t digest[32], size_t n_bytes, char *hex);
/* sha256 of a whole file as 64 hex digits + NUL; 0 on success, else err names the file. */
int mpx_sha256_file(const char *path, char hex[65], char *err, size_t errlen);

#endif
