/* Feature windows against transformers' legacy SQuAD processor, checked line by line
 * against a port of Google's run_squad.py (tests/fixtures/squad/make_fixtures.py):
 * the dev set (is_training=False) and the first 2,000 train questions (is_training=True)
 * at max_seq_length 384, doc_stride 128, max_query_length 64. Dev lines are keyed by
 * question id (the official dev file's); train lines by content, since the train file
 * here is a reconstruction with synthetic ids. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../datasets/squad_features.h"
#include "test_squad_common.h"

#define SEQ 384

static mpx_bert_tokenizer *tok;

static void setup(void)
{
    char err[256];
    cr_assert_eq(mpx_bert_tokenizer_load(SQUAD_VOCAB, &tok, err, sizeof err), 0, "%s (run `make data`)", err);
}

static void teardown(void) { mpx_bert_tokenizer_free(tok); }

TestSuite(squad_features, .init = setup, .fini = teardown, .timeout = 60);

/* Hashes of one question's windows, laid out as the fixture script does. */
static void question_hashes(const mpx_squad_features *fs, int32_t q, int training, char ids_hex[17], char all_hex[17])
{
    int32_t nf = fs->n_question_features[q], first = fs->first_feature[q];
    int32_t per = 5 * SEQ + 2;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(SEQ * nf + 1));
    int32_t *all = malloc(sizeof(int32_t) * (size_t)(per * nf + 1));
    int32_t n_all = 0;
    for (int32_t k = 0; k < nf; k++) {
        int32_t f = first + k, *o = all + n_all;
        cr_assert_gt(mpx_squad_feature_fill(fs, f, SEQ, o, o + SEQ, o + 2 * SEQ), 0);
        memcpy(ids + k * SEQ, o, sizeof(int32_t) * SEQ);
        for (int32_t p = 0; p < SEQ; p++) {
            o[3 * SEQ + p] = mpx_squad_feature_token_to_orig(fs, f, p);
            o[4 * SEQ + p] = mpx_squad_feature_is_max_context(fs, f, p);
        }
        n_all += 5 * SEQ;
        if (training) {
            all[n_all++] = fs->features[f].start_position;
            all[n_all++] = fs->features[f].end_position;
        }
    }
    squad_hash_ints(ids, (size_t)(SEQ * nf), ids_hex);
    squad_hash_ints(all, (size_t)n_all, all_hex);
    free(ids);
    free(all);
}

/* The train fixture's key of a question: its content (tests/fixtures/squad/content_key.py),
 * so the fixture holds for the official train file as for the reconstructed one. */
static void question_key(const mpx_squad_dataset *d, int32_t q, char hex[17])
{
    const mpx_squad_question *qu = &d->questions[q];
    const char *ctx = d->paragraphs[qu->paragraph].context;
    const char *atext = qu->n_answers ? qu->answers[0].text : "";
    int astart = qu->n_answers ? (int)qu->answers[0].answer_start : -1;
    size_t len = strlen(qu->text) + strlen(ctx) + strlen(atext) + 32;
    char *s = malloc(len);
    cr_assert_not_null(s);
    snprintf(s, len, "%s\x1f%s\x1f%d\x1f%s", qu->text, ctx, astart, atext);
    squad_hash_text(s, hex);
    free(s);
}

static void compare(const char *data_path, int32_t first_n, int training, const char *fixture, int32_t want_features)
{
    char err[256];
    mpx_squad_dataset full, d;
    cr_assert_eq(mpx_squad_load(data_path, &full, err, sizeof err), 0, "%s", err);
    cr_assert_eq(mpx_squad_slice_first(&full, first_n, &d, err, sizeof err), 0, "%s", err);
    mpx_squad_free(&full);
    mpx_squad_feature_config cfg = {SEQ, 128, 64, training};
    mpx_squad_features *fs;
    cr_assert_eq(mpx_squad_features_build(&d, tok, &cfg, &fs, err, sizeof err), 0, "%s", err);
    int n;
    char **lines = squad_fixture_lines(fixture, &n);
    cr_assert(lines, "cannot read %s", fixture);
    int ok = 0, bad = 0, li = 1, skipped_lines = 0;
    for (int32_t q = 0; q < d.n_questions; q++) {
        if (training && fs->n_question_features[q] == 0) continue; /* skipped: listed at the end */
        char qid[64], hid[17], hall[17], gid[17], gall[17];
        int nf;
        cr_assert(li < n && sscanf(lines[li], "%63s %d %16s %16s", qid, &nf, hid, hall) == 4, "line %d", li);
        li++;
        if (training) {
            char key[17];
            question_key(&d, q, key);
            cr_assert_str_eq(qid, key, "question %d (%s): content key", q, d.questions[q].id);
        } else {
            cr_assert_str_eq(qid, d.questions[q].id);
        }
        question_hashes(fs, q, training, gid, gall);
        if (nf == fs->n_question_features[q] && !strcmp(gid, hid) && !strcmp(gall, hall)) ok++;
        else if (bad++ < 5)
            fprintf(stderr, "feature mismatch %s: %d windows (want %d), ids %s, rest %s\n", qid,
                    fs->n_question_features[q], nf, strcmp(gid, hid) ? "differ" : "equal",
                    strcmp(gall, hall) ? "differ" : "equal");
    }
    for (; li < n; li++) skipped_lines += strncmp(lines[li], "skipped ", 8) == 0;
    fprintf(stderr, "%s: %d features, %d/%d questions match; %d skipped (fixture %d)\n", fixture, fs->n_features, ok,
            d.n_questions - fs->n_skipped, fs->n_skipped, skipped_lines);
    cr_assert_eq(fs->n_features, want_features);
    cr_assert_eq(ok, d.n_questions - fs->n_skipped);
    cr_assert_eq(fs->n_skipped, skipped_lines);
    squad_fixture_free(lines, n);
    mpx_squad_features_free(fs);
    mpx_squad_free(&d);
}

Test(squad_features, dev_matches_reference) { compare(SQUAD_DEV, 10570, 0, SQUAD_FIXTURES "features_dev.txt.gz", 10833); }

Test(squad_features, train_slice_matches_reference)
{
    compare(SQUAD_TRAIN, 2000, 1, SQUAD_FIXTURES "features_train2000.txt.gz", 2054);
}

/* A hand-made SQuAD file at `path`: one article whose paragraphs are `paragraphs` (JSON
 * objects, comma-separated), loaded into *d. */
static void load_article(const char *path, const char *paragraphs, mpx_squad_dataset *d)
{
    FILE *f = fopen(path, "w");
    cr_assert(f, "cannot write %s", path);
    cr_assert(fprintf(f, "{\"version\": \"1.1\", \"data\": [{\"title\": \"t\", \"paragraphs\": [%s]}]}", paragraphs) > 0);
    cr_assert_eq(fclose(f), 0, "%s", path);
    char err[256];
    cr_assert_eq(mpx_squad_load(path, d, err, sizeof err), 0, "%s", err);
}

/* Hand-made SQuAD file: an answer not at its offset is counted and skipped, an empty
 * context yields no window, a long context yields overlapping windows. */
Test(squad_features, bad_answers_and_empty_context)
{
    mpx_squad_dataset d;
    load_article("build/tests/squad_features_small.json",
                 "{\"context\": \"The cat sat on the mat.\", \"qas\": ["
                 "{\"id\": \"good\", \"question\": \"Where?\", \"answers\": [{\"text\": \"the mat\", \"answer_start\": 15}]},"
                 "{\"id\": \"moved\", \"question\": \"Where?\", \"answers\": [{\"text\": \"the mat\", \"answer_start\": 2}]},"
                 "{\"id\": \"beyond\", \"question\": \"Where?\", \"answers\": [{\"text\": \"mat\", \"answer_start\": 90}]}]},"
                 "{\"context\": \"\", \"qas\": [{\"id\": \"empty\", \"question\": \"\", \"answers\": [{\"text\": \"x\", \"answer_start\": 0}]}]}",
                 &d);
    char err[256];
    mpx_squad_feature_config cfg = {16, 4, 4, 1};
    mpx_squad_features *fs;
    cr_assert_eq(mpx_squad_features_build(&d, tok, &cfg, &fs, err, sizeof err), 0, "%s", err);
    cr_assert_eq(fs->n_skipped, 3); /* moved, beyond, empty */
    cr_assert_eq(fs->n_question_features[0], 1);
    cr_assert_eq(fs->n_question_features[1] + fs->n_question_features[2] + fs->n_question_features[3], 0);
    /* "where ?" = 2 query tokens; doc "the cat sat on the mat ." = 7; answer "the mat" at 4..5 */
    cr_assert_eq(fs->features[0].start_position, 4 + 4);
    cr_assert_eq(fs->features[0].end_position, 5 + 4);
    int32_t idx[1] = {0};
    cr_assert_eq(mpx_squad_batch_max_length(fs, idx, 1), 2 + 7 + 3);
    int32_t ids[16], seg[16], mask[16];
    cr_assert_eq(mpx_squad_feature_fill(fs, 0, 16, ids, seg, mask), 12);
    cr_assert_eq(ids[0], 101);
    cr_assert_eq(ids[3], 102);
    cr_assert_eq(ids[11], 102);
    cr_assert_eq(ids[12], 0);
    cr_assert_eq(seg[3], 0);
    cr_assert_eq(seg[4], 1);
    cr_assert_eq(seg[11], 1);
    cr_assert_eq(seg[12], 0);
    cr_assert_eq(mask[11], 1);
    cr_assert_eq(mask[12], 0);
    cr_assert_eq(mpx_squad_feature_fill(fs, 0, 11, ids, seg, mask), -1);
    mpx_squad_features_free(fs);

    /* evaluation mode on the same file: windows of 16 - 2 - 3 = 11 doc tokens, stride 4 */
    cfg = (mpx_squad_feature_config){8, 4, 4, 0};
    cr_assert_eq(mpx_squad_features_build(&d, tok, &cfg, &fs, err, sizeof err), 0, "%s", err);
    cr_assert_eq(fs->n_skipped, 0);
    cr_assert_eq(fs->n_question_features[3], 0); /* empty context: no window */
    /* 7 doc tokens, 3 per window, stride 3 -> [0,3) [3,6) [4,7)? no: run_squad moves by
     * min(length, stride) = 3: starts 0, 3, 6 */
    cr_assert_eq(fs->n_question_features[0], 3);
    cr_assert_eq(fs->features[1].doc_start, 3);
    cr_assert_eq(fs->features[2].doc_start, 6);
    cr_assert_eq(fs->features[2].doc_len, 1);
    mpx_squad_features_free(fs);
    mpx_squad_free(&d);
}

/* make fuzz's first crasher (fuzz_squad, 2026-12-01): a file whose FIRST question is empty
 * copied zero query ids from a NULL buffer (undefined behaviour, caught by UBSan in
 * tests/sanitize.sh). The window is [CLS] [SEP] doc [SEP], as run_squad.py builds it. */
Test(squad_features, an_empty_first_question_has_a_window_without_query_tokens)
{
    mpx_squad_dataset d;
    load_article("build/tests/squad_features_empty_question.json",
                 "{\"context\": \"The cat sat on the mat.\", \"qas\": ["
                 "{\"id\": \"q0\", \"question\": \"\", \"answers\": [{\"text\": \"the mat\", \"answer_start\": 15}]}]}",
                 &d);
    char err[256];
    for (int training = 0; training < 2; training++) {
        mpx_squad_feature_config cfg = {16, 4, 4, training};
        mpx_squad_features *fs;
        cr_assert_eq(mpx_squad_features_build(&d, tok, &cfg, &fs, err, sizeof err), 0, "%s", err);
        cr_assert_eq(fs->n_question_features[0], 1);
        cr_assert_eq(fs->query_len[0], 0);
        int32_t ids[16], seg[16], mask[16];
        cr_assert_eq(mpx_squad_feature_fill(fs, 0, 16, ids, seg, mask), 0 + 7 + 3);
        cr_assert_eq(ids[0], 101);
        cr_assert_eq(ids[1], 102);
        cr_assert_eq(ids[9], 102);
        cr_assert_eq(seg[1], 0);
        cr_assert_eq(seg[2], 1);
        if (training) { /* "the mat" = doc tokens 4..5, after [CLS] [SEP] */
            cr_assert_eq(fs->features[0].start_position, 4 + 2);
            cr_assert_eq(fs->features[0].end_position, 5 + 2);
        }
        mpx_squad_features_free(fs);
    }
    mpx_squad_free(&d);
}
