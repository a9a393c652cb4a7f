/* Benchmark (not a test): what data.squad.group_by_length saves with dynamic padding.
 * For the training windows of `make run`'s slice (480 questions, 256/128/64, batch 8)
 * and of the whole train set at the report's 384/128/64, batch 3: the tokens one epoch
 * computes (sum over batches of rows x longest window; what the linear layers cost) and
 * the attention positions (sum of rows x longest^2), in shuffled order and grouped.
 * The shuffle is the task's (Fisher-Yates on Philox, seeds 1..3). Exact counts: these
 * figures do not move with the machine's load. */
#include <stdio.h>
#include <stdlib.h>

#include "../core/tasks/length_group.h"
#include "../datasets/squad_features.h"
#include "mpx/numerics.h"

#define SHUFFLE_SITE 0x53510001u   /* core/tasks/task_squad.c's SQUAD_SHUFFLE_SITE */

static void cost(const int32_t *order, const int32_t *len, int32_t n, int32_t batch, double *tok, double *att)
{
    *tok = *att = 0;
    for (int32_t s = 0; s < n; s += batch) {
        int32_t rows = n - s < batch ? n - s : batch, m = 0;
        for (int32_t r = 0; r < rows; r++) m = len[order[s + r]] > m ? len[order[s + r]] : m;
        *tok += (double)rows * m;
        *att += (double)rows * m * m;
    }
}

static int report(const char *what, const mpx_squad_dataset *d, const mpx_bert_tokenizer *tok,
                  mpx_squad_feature_config cfg, int32_t batch)
{
    char err[512];
    mpx_squad_features *fs;
    if (mpx_squad_features_build(d, tok, &cfg, &fs, err, sizeof err)) { fprintf(stderr, "bench_padding: %s\n", err); return 1; }
    int32_t n = fs->n_features;
    int32_t *len = malloc((size_t)n * sizeof *len), *order = malloc((size_t)n * sizeof *order);
    if (!len || !order) return 1;
    double real = 0;
    for (int32_t i = 0; i < n; i++) real += len[i] = mpx_squad_feature_length(fs, i);
    for (uint64_t seed = 1; seed <= 3; seed++) {
        for (int32_t i = 0; i < n; i++) order[i] = i;
        for (int32_t i = n; i > 1; i--) {
            int32_t j = (int32_t)(mpx_philox_draw(seed, SHUFFLE_SITE, 0, (uint64_t)i) % (uint32_t)i);
            int32_t t = order[i - 1]; order[i - 1] = order[j]; order[j] = t;
        }
        double tok0, att0, tok1, att1;
        cost(order, len, n, batch, &tok0, &att0);
        if (mpx_group_by_length(order, n, len, batch)) return 1;
        cost(order, len, n, batch, &tok1, &att1);
        printf("%s, seed %d: %d windows, %.0f real tokens; tokens computed shuffled %.0f (%.1f%% padding), "
               "grouped %.0f (%.1f%%): %.3fx fewer; attention positions %.3fx fewer\n",
               what, (int)seed, (int)n, real, tok0, 100.0 * (1 - real / tok0), tok1, 100.0 * (1 - real / tok1),
               tok0 / tok1, att0 / att1);
    }
    free(len);
    free(order);
    mpx_squad_features_free(fs);
    return 0;
}

int main(void)
{
    char err[512];
    mpx_bert_tokenizer *tok;
    mpx_squad_dataset all, quick;
    if (mpx_bert_tokenizer_load("datasets/data/vocab.txt", &tok, err, sizeof err) ||
        mpx_squad_load("datasets/data/train-v1.1.json", &all, err, sizeof err) ||
        mpx_squad_slice_first(&all, 480, &quick, err, sizeof err)) {
        fprintf(stderr, "bench_padding: %s (run `make data`)\n", err);
        return 1;
    }
    mpx_squad_feature_config q = { 256, 128, 64, 1 }, full = { 384, 128, 64, 1 };
    int rc = report("make run's slice (480 questions, 256, batch 8)", &quick, tok, q, 8);
    rc |= report("whole train set (384, batch 3)", &all, tok, full, 3);
    mpx_squad_free(&quick);
    mpx_squad_free(&all);
    mpx_bert_tokenizer_free(tok);
    return rc;
}
