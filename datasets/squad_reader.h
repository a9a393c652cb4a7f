/* SQuAD v1.1 JSON reader (jansson) and question slices. */
#ifndef MPX_DATASETS_SQUAD_READER_H
#define MPX_DATASETS_SQUAD_READER_H

#include <stddef.h>
#include <stdint.h>

typedef struct mpx_squad_answer {
    char *text;
    int32_t answer_start; /* in code points (Python string index) */
} mpx_squad_answer;

typedef struct mpx_squad_question {
    char *id;
    char *text;
    int32_t paragraph; /* index into mpx_squad_dataset.paragraphs */
    int32_t n_answers;
    mpx_squad_answer *answers;
} mpx_squad_question;

typedef struct mpx_squad_paragraph {
    char *context;
    int32_t article; /* index into mpx_squad_dataset.titles */
} mpx_squad_paragraph;

/* Questions in file order; paragraphs and articles in file order. */
typedef struct mpx_squad_dataset {
    char *version; /* "" when the file has none */
    int32_t n_articles;
    char **titles;
    int32_t n_paragraphs;
    mpx_squad_paragraph *paragraphs;
    int32_t n_questions;
    mpx_squad_question *questions;
} mpx_squad_dataset;

/* Reads a SQuAD v1.1 file. 0 on success; otherwise err says, e.g.,
 * "FILE:LINE:COLUMN: invalid JSON: ..." (invalid UTF-8 included), "FILE: question ID:
 * \"answers\"[0].\"answer_start\" is missing or not an integer", "FILE: article 3,
 * paragraph 5: missing \"context\" string", or "FILE: empty file; expected a SQuAD
 * v1.1 JSON object {\"version\": ..., \"data\": [articles]}". */
int mpx_squad_load(const char *path, mpx_squad_dataset *out, char *err, size_t errlen);
void mpx_squad_free(mpx_squad_dataset *d);

/* Deep copy of the questions src->questions[idx[0..n)] (in that order), with only the
 * paragraphs and articles they use. */
int mpx_squad_subset(const mpx_squad_dataset *src, const int32_t *idx, int32_t n, mpx_squad_dataset *dst,
                     char *err, size_t errlen);
/* The first n questions (n larger than the set is an error). */
int mpx_squad_slice_first(const mpx_squad_dataset *src, int32_t n, mpx_squad_dataset *dst, char *err,
                          size_t errlen);
/* A seeded sample of n distinct questions, kept in file order: a partial Fisher-Yates
 * shuffle of the question indices driven by SplitMix64 (Steele et al. 2014) seeded with
 * `seed`; index j is swapped with j + (next() % (N - j)). Same seed, same sample, on
 * every platform. */
int mpx_squad_slice_sample(const mpx_squad_dataset *src, int32_t n, uint64_t seed, mpx_squad_dataset *dst,
                           char *err, size_t errlen);
/* The sample's indices alone (sorted ascending), for callers that keep the full set. */
int mpx_squad_sample_indices(int32_t n_total, int32_t n, uint64_t seed, int32_t *idx, char *err, size_t errlen);

/* Index of a question id, or -1 (linear; build your own map for many lookups). */
int32_t mpx_squad_find_question(const mpx_squad_dataset *d, const char *id);

#endif
