/* Shared helpers of the SQuAD suites: data paths, gz fixtures of per-item hashes. */
#ifndef MPX_TEST_SQUAD_COMMON_H
#define MPX_TEST_SQUAD_COMMON_H

#include <stddef.h>
#include <stdint.h>

#define SQUAD_DEV "datasets/data/dev-v1.1.json"
#define SQUAD_TRAIN "datasets/data/train-v1.1.json"
#define SQUAD_VOCAB "datasets/data/vocab.txt"
#define SQUAD_FIXTURES "tests/fixtures/squad/"

/* Lines of a gzip'd text fixture (NULL-terminated array, one malloc'd block each). */
char **squad_fixture_lines(const char *path, int *n_lines);
void squad_fixture_free(char **lines, int n_lines);
/* sha256 of little-endian int32 values / of a string: first 8 bytes as 16 hex digits. */
void squad_hash_ints(const int32_t *v, size_t n, char hex[17]);
void squad_hash_text(const char *s, char hex[17]);
/* The fixtures' synthetic logit (see make_fixtures.py synthetic_logits). */
float squad_synthetic_logit(int64_t feature, int32_t pos, int which);

#endif
