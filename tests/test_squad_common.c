#include "test_squad_common.h"

#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "../datasets/sha256.h"

char **squad_fixture_lines(const char *path, int *n_lines)
{
    gzFile f = gzopen(path, "rb");
    *n_lines = 0;
    if (!f) return NULL;
    int cap = 1024, n = 0;
    char **lines = malloc(sizeof *lines * (size_t)cap), buf[4096];
    while (lines && gzgets(f, buf, sizeof buf)) {
        size_t len = strlen(buf);
        while (len && (buf[len - 1] == '\n' || buf[len - 1] == '\r')) buf[--len] = '\0';
        if (n + 1 >= cap) {
            cap *= 2;
            char **p = realloc(lines, sizeof *lines * (size_t)cap);
            if (!p) break;
            lines = p;
        }
        lines[n] = malloc(len + 1);
        memcpy(lines[n++], buf, len + 1);
    }
    gzclose(f);
    if (lines) lines[n] = NULL;
    *n_lines = n;
    return lines;
}

void squad_fixture_free(char **lines, int n)
{
    for (int i = 0; lines && i < n; i++) free(lines[i]);
    free(lines);
}

void squad_hash_ints(const int32_t *v, size_t n, char hex[17])
{
    mpx_sha256_ctx s;
    mpx_sha256_init(&s);
    for (size_t i = 0; i < n; i++) {
        uint32_t x = (uint32_t)v[i];
        uint8_t b[4] = {(uint8_t)x, (uint8_t)(x >> 8), (uint8_t)(x >> 16), (uint8_t)(x >> 24)};
        mpx_sha256_update(&s, b, 4);
    }
    uint8_t d[32];
    mpx_sha256_final(&s, d);
    mpx_sha256_hex(d, 8, hex);
}

void squad_hash_text(const char *t, char hex[17])
{
    uint8_t d[32];
    mpx_sha256(t, strlen(t), d);
    mpx_sha256_hex(d, 8, hex);
}

static uint64_t splitmix64(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

float squad_synthetic_logit(int64_t feature, int32_t pos, int which)
{
    uint64_t key = (((uint64_t)feature * 384u + (uint64_t)pos) << 1) | (uint64_t)which;
    uint64_t h = splitmix64(key ^ 0x5EED5EEDull);
    return (float)((int64_t)(h >> 40) - (1 << 23)) / (float)(1 << 20);
}
