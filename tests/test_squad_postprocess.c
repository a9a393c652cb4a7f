/* Answer post-processing against transformers' compute_predictions_logits with
 * Google's WordPiece de-tokenisation (make_fixtures.py), on synthetic logits over every
 * dev window; plus get_final_text cases. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../datasets/squad_metric.h"
#include "../datasets/squad_postprocess.h"
#include "test_squad_common.h"

#define SEQ 384

TestSuite(squad_postprocess, .timeout = 60);

Test(squad_postprocess, dev_predictions_match_reference)
{
    char err[256];
    mpx_bert_tokenizer *tok;
    cr_assert_eq(mpx_bert_tokenizer_load(SQUAD_VOCAB, &tok, err, sizeof err), 0, "%s (run `make data`)", err);
    mpx_squad_dataset d;
    cr_assert_eq(mpx_squad_load(SQUAD_DEV, &d, err, sizeof err), 0, "%s", err);
    mpx_squad_feature_config cfg = {SEQ, 128, 64, 0};
    mpx_squad_features *fs;
    cr_assert_eq(mpx_squad_features_build(&d, tok, &cfg, &fs, err, sizeof err), 0, "%s", err);
    size_t n = (size_t)fs->n_features * SEQ;
    float *sl = malloc(sizeof(float) * n), *el = malloc(sizeof(float) * n);
    for (int32_t f = 0; f < fs->n_features; f++)
        for (int32_t p = 0; p < SEQ; p++) {
            sl[(size_t)f * SEQ + p] = squad_synthetic_logit(f, p, 0);
            el[(size_t)f * SEQ + p] = squad_synthetic_logit(f, p, 1);
        }
    mpx_squad_postprocess_config pc = {20, 30};
    mpx_squad_predictions *P;
    cr_assert_eq(mpx_squad_postprocess(fs, sl, el, SEQ, &pc, &P, err, sizeof err), 0, "%s", err);
    int nl;
    char **lines = squad_fixture_lines(SQUAD_FIXTURES "predictions_dev.txt.gz", &nl);
    cr_assert(lines && nl == d.n_questions + 1);
    int ok = 0, bad = 0;
    for (int32_t q = 0; q < d.n_questions; q++) {
        char qid[64], want[17], got[17];
        cr_assert_eq(sscanf(lines[q + 1], "%63s %16s", qid, want), 2);
        cr_assert_str_eq(qid, d.questions[q].id);
        squad_hash_text(P->text[q], got);
        if (!strcmp(got, want)) ok++;
        else if (bad++ < 5) fprintf(stderr, "prediction mismatch for %s\n", qid);
        cr_assert(P->n_nbest[q] >= 1 && P->n_nbest[q] <= 20);
    }
    fprintf(stderr, "predictions: %d/%d questions match the reference\n", ok, d.n_questions);
    cr_assert_eq(ok, d.n_questions);

    /* The files round-trip through the metric reader. */
    const char *pp = "build/tests/squad_predictions.json", *np = "build/tests/squad_nbest.json";
    cr_assert_eq(mpx_squad_predictions_write(P, &d, pp, np, err, sizeof err), 0, "%s", err);
    const char **preds;
    void *json;
    cr_assert_eq(mpx_squad_read_predictions(pp, &d, &preds, &json, err, sizeof err), 0, "%s", err);
    for (int32_t q = 0; q < d.n_questions; q++) cr_assert_str_eq(preds[q], P->text[q]);
    mpx_squad_predictions_json_free(preds, json);

    squad_fixture_free(lines, nl);
    mpx_squad_predictions_free(P);
    free(sl);
    free(el);
    mpx_squad_features_free(fs);
    mpx_squad_free(&d);
    mpx_bert_tokenizer_free(tok);
}

static void final_text(const char *pred, const char *orig, const char *want)
{
    char *got = mpx_squad_final_text(pred, orig);
    cr_assert_str_eq(got, want, "get_final_text('%s', '%s')", pred, orig);
    free(got);
}

/* Expected values from run_squad.py's get_final_text (the reference algorithm). */
Test(squad_postprocess, final_text_alignment)
{
    final_text("steve smith", "Steve Smith's", "Steve Smith");      /* the reference's docstring case */
    final_text("1895", "(1895)", "1895");
    final_text("cafe", "Café,", "Café");
    final_text("xyz", "Steve Smith's", "Steve Smith's");              /* not found: original */
    final_text("a", "Æon", "Æon");                                     /* no-space lengths differ */
}
