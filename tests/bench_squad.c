/* Benchmark (not a test): tokenise and window the whole SQuAD v1.1 train set at
 * 384/128/64 (is_training), writing every window's arrays once; then the HF fast
 * tokenizer's time on the same work when Python can import it. One line per figure. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "../datasets/squad_features.h"
#include "bench_util.h"

int main(void)
{
    char err[512];
    mpx_bert_tokenizer *tok;
    mpx_squad_dataset d;
    if (mpx_bert_tokenizer_load("datasets/data/vocab.txt", &tok, err, sizeof err) ||
        mpx_squad_load("datasets/data/train-v1.1.json", &d, err, sizeof err)) {
        fprintf(stderr, "bench_squad: %s (run `make data`)\n", err);
        return 1;
    }
    double t0 = now();
    mpx_squad_feature_config cfg = {384, 128, 64, 1};
    mpx_squad_features *fs;
    if (mpx_squad_features_build(&d, tok, &cfg, &fs, err, sizeof err)) {
        fprintf(stderr, "bench_squad: %s\n", err);
        return 1;
    }
    static int32_t ids[384], seg[384], mask[384];
    long long sum = 0;
    for (int32_t f = 0; f < fs->n_features; f++) {
        mpx_squad_feature_fill(fs, f, 384, ids, seg, mask);
        sum += ids[5];
    }
    double t1 = now();
    printf("squad train tokenise+window (C, 1 thread): %d questions, %d features, %d skipped, %.2f s\n",
           (int)d.n_questions, (int)fs->n_features, (int)fs->n_skipped, t1 - t0);
    fflush(stdout);
    mpx_squad_features_free(fs);
    mpx_squad_free(&d);
    mpx_bert_tokenizer_free(tok);
    int rc = system("python3 -c 'import tokenizers' 2>/dev/null && python3 tests/fixtures/squad/bench_hf_fast.py");
    (void)rc;
    return sum < 0;
}
