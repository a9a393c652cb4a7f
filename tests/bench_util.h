/* The benches' shared timing helpers (header-only, so every bench links as before). */
#ifndef MPX_BENCH_UTIL_H
#define MPX_BENCH_UTIL_H

#include <stdlib.h>
#include <time.h>

/* Monotonic seconds. */
static inline double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v[0..n) (sorts v). */
static inline double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* config.json of a bert-base-shaped model (random init when the folder holds nothing else). */
static const char bench_bert_base_json[] =
    "{\"architectures\": [\"BertForQuestionAnswering\"], \"model_type\": \"bert\",\n"
    " \"hidden_size\": 768, \"num_hidden_layers\": 12, \"num_attention_heads\": 12,\n"
    " \"intermediate_size\": 3072, \"vocab_size\": 30522, \"max_position_embeddings\": 512,\n"
    " \"type_vocab_size\": 2, \"hidden_act\": \"gelu\", \"hidden_dropout_prob\": 0.1,\n"
    " \"attention_probs_dropout_prob\": 0.1, \"initializer_range\": 0.02,\n"
    " \"layer_norm_eps\": 1e-12, \"pad_token_id\": 0}\n";

#endif
