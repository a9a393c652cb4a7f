/* Hostile SQuAD files (issue 15), made up here from the tiny fixture vocabulary (no SQuAD
 * text): a train file where 41 of 42 answers start past their context used to train
 * "successfully" with the 41 dropped silently; answer_start = 2147483647 overflowed a
 * signed sum (UBSan); a dev context of one very long word passed a null pointer to qsort
 * (UBSan). Now skipped questions are counted by reason in run.json with a note on
 * stderr (and so are ignored extra answers, cut queries and questions with no window),
 * a mostly-unusable file is an error (mpx check and mpx run), and both UB cases
 * are plain skips / empty candidate lists, run under the sanitizer build in CI. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/shell.h"

static char out[16384];

#define CONTEXT "tok5 tok6 tok7 tok8 tok9 tok10 tok11 tok12"

/* A SQuAD v1.1 file of n questions on CONTEXT; question i answers "tok7" at offset 10,
 * or at `bad_start` for the first n_bad ones. */
static void write_squad(const char *path, int n, int n_bad, json_int_t bad_start, const char *context)
{
    json_t *qas = json_array();
    for (int i = 0; i < n; i++) {
        char id[32];
        snprintf(id, sizeof id, "q%d", i);
        json_array_append_new(qas, json_pack("{s:s, s:s, s:[{s:s, s:I}]}", "id", id, "question", "tok20 tok21 tok22",
                                             "answers", "text", "tok7", "answer_start", i < n_bad ? bad_start : 10));
    }
    json_t *root = json_pack("{s:s, s:[{s:s, s:[{s:s, s:o}]}]}", "version", "1.1", "data", "title", "made_up",
                             "paragraphs", "context", context ? context : CONTEXT, "qas", qas);
    cr_assert_eq(json_dump_file(root, path, 0), 0, "%s", path);
    json_decref(root);
}

static int mpx_tiny(const char *cmd, const char *train, const char *dev, const char *outdir)
{
    return ts_sh(out, sizeof out, "build/bin/mpx %s configs/tiny_squad.cfg -s 'data.squad.train_file=\"%s\"' "
                 "-s 'data.squad.dev_file=\"%s\"' -s data.squad.train_questions=0 -s data.squad.dev_questions=0 "
                 "-s train.max_steps=2 %s %s 2>&1", cmd, train, dev, outdir ? "--out" : "", outdir ? outdir : "");
}

Test(hostile_squad, a_train_file_of_mostly_unusable_answers_is_an_error, .timeout = 60)
{
    char *d = ts_tmpdir("hostile-squad"), train[512], dev[512], run[512];
    snprintf(train, sizeof train, "%s/train.json", d);
    snprintf(dev, sizeof dev, "%s/dev.json", d);
    snprintf(run, sizeof run, "%s/run", d);
    write_squad(train, 42, 41, 1000, NULL);
    write_squad(dev, 4, 0, 0, NULL);
    cr_expect_eq(mpx_tiny("check", train, dev, NULL), 1, "%s", out);
    cr_expect(strstr(out, "41 of 42 training questions are unusable (answer_outside_context 41)") != NULL, "%s", out);
    cr_expect_eq(mpx_tiny("run", train, dev, run), 1, "%s", out);
    cr_expect(strstr(out, "41 of 42 training questions are unusable") != NULL, "%s", out);
}

Test(hostile_squad, a_skipped_question_is_counted_with_its_reason_and_noted, .timeout = 60)
{
    char *d = ts_tmpdir("hostile-squad"), train[512], dev[512], run[512], path[600];
    snprintf(train, sizeof train, "%s/train.json", d);
    snprintf(dev, sizeof dev, "%s/dev.json", d);
    snprintf(run, sizeof run, "%s/run", d);
    write_squad(train, 42, 1, 2147483647, NULL); /* the largest answer_start the reader takes */
    write_squad(dev, 4, 0, 0, NULL);
    cr_assert_eq(mpx_tiny("run", train, dev, run), 0, "%s", out);
    cr_expect(strstr(out, "note: ") && strstr(out, "1 of 42 training questions skipped (answer_outside_context 1)"),
              "%s", out);
    snprintf(path, sizeof path, "%s/run.json", run);
    json_t *j = ts_load_json(path);
    json_t *tr = json_object_get(json_object_get(j, "data_dropped"), "train");
    cr_expect_eq(json_integer_value(json_object_get(tr, "questions")), 42);
    cr_expect_eq(json_integer_value(json_object_get(tr, "skipped_questions")), 1);
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(tr, "reasons"), "answer_outside_context")), 1);
    json_decref(j);
}

/* What else the windows leave out, silently in run_squad.py, counted and noted: answers
 * past answers[0] (training reads the first only), queries past max_query_length (16 in
 * tiny_squad.cfg; 20 words give at least 20 sub-tokens), and questions whose context
 * gives no sub-token (control characters only, which BERT's clean_text drops: no
 * window) — skipped in training, scored 0 at evaluation. */
static json_t *question(const char *id, const char *q, const char *text, int start, const char *text2)
{
    json_t *a = json_pack("[{s:s, s:i}]", "text", text, "answer_start", start);
    if (text2) json_array_append_new(a, json_pack("{s:s, s:i}", "text", text2, "answer_start", 15));
    return json_pack("{s:s, s:s, s:o}", "id", id, "question", q, "answers", a);
}

static void write_cut_squad(const char *path, int n, int n_two_answers, int long_query, const char *blank_ctx)
{
    json_t *qas = json_array();
    char long_q[400] = "";
    for (int k = 0; k < 20; k++) snprintf(long_q + strlen(long_q), sizeof long_q - strlen(long_q), "tok%d ", 20 + k);
    for (int i = 0; i < n; i++) {
        char id[32];
        snprintf(id, sizeof id, "q%d", i);
        json_array_append_new(qas, question(id, i == long_query ? long_q : "tok20 tok21 tok22", "tok7", 10,
                                            i < n_two_answers ? "tok8" : NULL));
    }
    json_t *blank = json_pack("{s:s, s:[o]}", "context", blank_ctx, "qas", question("blank", "tok20", blank_ctx, 0, NULL));
    json_t *root = json_pack("{s:s, s:[{s:s, s:[{s:s, s:o}, o]}]}", "version", "1.1", "data", "title", "made_up",
                             "paragraphs", "context", CONTEXT, "qas", qas, blank);
    cr_assert_eq(json_dump_file(root, path, 0), 0, "%s", path);
    json_decref(root);
}

Test(hostile_squad, extra_answers_cut_queries_and_windowless_questions_are_counted_and_noted, .timeout = 60)
{
    char *d = ts_tmpdir("hostile-squad"), train[512], dev[512], run[512], path[600];
    snprintf(train, sizeof train, "%s/train.json", d);
    snprintf(dev, sizeof dev, "%s/dev.json", d);
    snprintf(run, sizeof run, "%s/run", d);
    write_cut_squad(train, 8, 2, 3, "\x01\x02");
    write_cut_squad(dev, 3, 0, -1, "\x01");
    cr_assert_eq(mpx_tiny("run", train, dev, run), 0, "%s", out);
    cr_expect(strstr(out, "1 of 9 training questions skipped (context_without_tokens 1); 2 extra answers ignored "
                          "(training reads answers[0] only); 1 questions cut to 16 query sub-tokens") != NULL, "%s", out);
    cr_expect(strstr(out, "dev.json: 1 questions have no window") != NULL, "%s", out);
    snprintf(path, sizeof path, "%s/run.json", run);
    json_t *j = ts_load_json(path), *dd = json_object_get(j, "data_dropped");
    json_t *tr = json_object_get(dd, "train"), *dv = json_object_get(dd, "dev");
    cr_expect_eq(json_integer_value(json_object_get(tr, "questions")), 9);
    cr_expect_eq(json_integer_value(json_object_get(tr, "skipped_questions")), 1);
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(tr, "reasons"), "context_without_tokens")), 1);
    cr_expect_eq(json_integer_value(json_object_get(tr, "extra_answers")), 2);
    cr_expect_eq(json_integer_value(json_object_get(tr, "truncated_queries")), 1);
    cr_expect_eq(json_integer_value(json_object_get(dv, "questions")), 4);
    cr_expect_eq(json_integer_value(json_object_get(dv, "questions_without_windows")), 1);
    cr_expect_null(json_object_get(dv, "truncated_queries"));
    json_decref(j);
}

Test(hostile_squad, a_dev_context_of_one_very_long_word_evaluates, .timeout = 60)
{
    char *d = ts_tmpdir("hostile-squad"), train[512], dev[512], run[512];
    snprintf(train, sizeof train, "%s/train.json", d);
    snprintf(dev, sizeof dev, "%s/dev.json", d);
    snprintf(run, sizeof run, "%s/run", d);
    char *word = malloc(3001);
    memset(word, 'a', 3000);
    word[3000] = 0;
    write_squad(train, 8, 0, 0, NULL);
    write_squad(dev, 2, 2, 0, word);
    free(word);
    cr_assert_eq(mpx_tiny("run", train, dev, run), 0, "%s", out);
    /* both questions scored, each prediction a span of the context (a run of 'a's) or the
     * original script's placeholder "empty" (no valid span among the n-best); the gold
     * "tok7" is not in the context, so EM and F1 are 0 */
    char path[600];
    snprintf(path, sizeof path, "%s/predictions.json", run);
    json_t *pred = ts_load_json(path);
    for (int i = 0; i < 2; i++) {
        char id[16];
        snprintf(id, sizeof id, "q%d", i);
        const char *t = json_string_value(json_object_get(pred, id));
        cr_assert_not_null(t, "no prediction for %s", id);
        size_t k = strspn(t, "a");
        cr_expect(!strcmp(t, "empty") || (k == strlen(t) && k > 0 && k <= 3000), "%s: \"%.40s\" is no span of the context",
                  id, t);
    }
    json_decref(pred);
    snprintf(path, sizeof path, "%s/run.json", run);
    json_t *j = ts_load_json(path), *m = json_object_get(j, "metrics");
    cr_expect_eq(json_integer_value(json_object_get(m, "eval_questions")), 2);
    cr_expect(json_is_number(json_object_get(m, "exact_match")) && json_number_value(json_object_get(m, "exact_match")) == 0 &&
              json_number_value(json_object_get(m, "f1")) == 0, "EM and F1 should be 0");
    json_decref(j);
}

/* A diverged model (lr 1e30, no clipping): evaluation used to end with "out of memory
 * building JSON" and leave predictions.json.tmp. Now it is an error that says so and
 * names the step where the training loss went non-finite; the loss curve keeps that
 * step (null: JSON has no NaN) rather than dropping it. A static loss scale (of 1)
 * skips the non-finite steps, so the run reaches evaluation; with no loss scale at all
 * ("none", fp32's default) it would now stop at the first one (tests/test_nonfinite.c). */
Test(hostile_squad, non_finite_scores_at_evaluation_are_an_error_naming_the_step, .timeout = 60)
{
    char *d = ts_tmpdir("hostile-nan"), path[600];
    int rc = ts_sh(out, sizeof out, "build/bin/mpx run configs/tiny_squad.cfg -s optimizer.lr=1e30 -s train.gradient_clipping=0 "
                   "-s train.max_steps=5 -s 'precision.loss_scale=\"static\"' --out %s/run 2>&1", d);
    cr_expect_eq(rc, 1, "%s", out);
    cr_expect(strstr(out, "logits are not finite (NaN or inf): the model diverged; the training loss first went "
                          "non-finite at step ") != NULL, "%s", out);
    snprintf(path, sizeof path, "%s/run/run.json", d);
    json_t *j = ts_load_json(path);
    json_t *m = json_object_get(j, "metrics");
    json_int_t bad = json_integer_value(json_object_get(m, "first_nonfinite_loss_step"));
    json_t *losses = json_object_get(m, "losses");
    cr_expect_eq(json_array_size(losses), 5);
    /* the first null of the curve (one loss per step from step 0), found here, is the step
     * the record and the message name; the steps before it are finite numbers */
    size_t first = 0;
    while (first < json_array_size(losses) && json_is_number(json_array_get(losses, first))) first++;
    cr_expect(first < 5 && json_is_null(json_array_get(losses, first)), "no null in the loss curve before its end");
    cr_expect_eq(bad, (json_int_t)first, "first_nonfinite_loss_step %lld, the curve's first null at %zu", (long long)bad, first);
    char said[160];
    snprintf(said, sizeof said, "the training loss first went non-finite at step %zu", first);
    cr_expect(strstr(out, said) != NULL, "no \"%s\" in:\n%s", said, out);
    json_decref(j);
    cr_expect_eq(ts_sh(out, sizeof out, "ls %s/run | grep -c tmp", d), 1, "no temp file left: %s", out);
}

/* A dev file the evaluation cannot score is refused before training (`mpx check` too):
 * a question with an empty answers list (before: it failed only after training, its
 * evaluation lost), and an id given to two questions (before: accepted, predictions
 * collide). */
Test(hostile_squad, a_dev_file_the_metric_cannot_score_is_refused_before_training, .timeout = 60)
{
    char *d = ts_tmpdir("hostile-squad"), train[512], dev[512], run[512], path[600];
    snprintf(train, sizeof train, "%s/train.json", d);
    snprintf(dev, sizeof dev, "%s/dev.json", d);
    write_squad(train, 8, 0, 0, NULL);
    for (int k = 0; k < 2; k++) {
        write_squad(dev, 4, 0, 0, NULL);
        json_t *root = ts_load_json(dev);
        json_t *qas = json_object_get(json_array_get(json_object_get(json_array_get(json_object_get(root, "data"), 0),
                                                                      "paragraphs"), 0), "qas");
        if (k == 0) json_object_set_new(json_array_get(qas, 2), "answers", json_array());
        else json_object_set_new(json_array_get(qas, 3), "id", json_string("q1"));
        cr_assert_eq(json_dump_file(root, dev, 0), 0);
        json_decref(root);
        const char *want = k == 0 ? "dev question q2 has no answers" : "the dev id q1 is given to two questions";
        cr_expect_eq(mpx_tiny("check", train, dev, NULL), 1, "%s", out);
        cr_expect(strstr(out, want), "check: %s", out);
        snprintf(run, sizeof run, "%s/run%d", d, k);
        cr_expect_eq(mpx_tiny("run", train, dev, run), 1, "%s", out);
        cr_expect(strstr(out, want), "run: %s", out);
        snprintf(path, sizeof path, "%s/metrics.csv", run);
        char *rows = ts_slurp(path, NULL);
        cr_expect(!strchr(strchr(rows, '\n') + 1, '\n'), "steps ran before the refusal:\n%s", rows);
        free(rows);
    }
}

/* A vocab.txt with Windows line ends: transformers keeps the "\r" in every token, so the
 * special tokens are missing; the error says why and how to fix it. */
Test(hostile_squad, a_crlf_vocabulary_is_named_as_such, .timeout = 60)
{
    char *d = ts_tmpdir("hostile-squad"), vocab[512];
    snprintf(vocab, sizeof vocab, "%s/vocab.txt", d);
    cr_assert_eq(ts_sh(NULL, 0, "sed 's/$/\\r/' tests/fixtures/bert/tiny/vocab.txt > %s", vocab), 0);
    int rc = ts_sh(out, sizeof out, "build/bin/mpx check configs/tiny_squad.cfg -s 'data.squad.vocab=\"%s\"' 2>&1", vocab);
    cr_expect_eq(rc, 1, "%s", out);
    cr_expect(strstr(out, "vocabulary has no [CLS] token (its lines end in \\r\\n") && strstr(out, "dos2unix"), "%s", out);
}

/* Issue 46: a vocab.txt with more tokens than the model's vocab_size passed mpx check
 * and stopped the run at step 0, when the first token past it reached the embeddings
 * (bert_forward's "input_ids ... vocab_size"). Now the task refuses it when it is
 * opened, naming the file, its size and the model's vocab_size: in mpx check, and in
 * mpx run before any step. */
Test(hostile_squad, a_vocabulary_larger_than_the_models_vocab_size_is_refused_before_training, .timeout = 60)
{
    char *d = ts_tmpdir("hostile-squad"), train[512], dev[512], vocab[512], run[512], path[600], want[700];
    snprintf(train, sizeof train, "%s/train.json", d);
    snprintf(dev, sizeof dev, "%s/dev.json", d);
    snprintf(vocab, sizeof vocab, "%s/vocab.txt", d);
    snprintf(run, sizeof run, "%s/run", d);
    /* the tiny model's 128 tokens and 72 more, which the data below uses */
    cr_assert_eq(ts_sh(NULL, 0, "cp tests/fixtures/bert/tiny/vocab.txt %s && for i in $(seq 128 199); do echo tok$i; "
                       "done >> %s", vocab, vocab), 0);
    const char *context = "tok5 tok6 tok7 tok150 tok151 tok199";
    write_squad(train, 8, 0, 0, context);
    write_squad(dev, 4, 0, 0, context);
    snprintf(want, sizeof want, "data.squad.vocab: %s holds 200 tokens, but the model's vocab_size is 128", vocab);
    static const char *const cmds[] = { "check", "run" };
    for (int i = 0; i < 2; i++) {
        int rc = ts_sh(out, sizeof out, "build/bin/mpx %s configs/tiny_squad.cfg -s 'data.squad.train_file=\"%s\"' "
                       "-s 'data.squad.dev_file=\"%s\"' -s 'data.squad.vocab=\"%s\"' -s train.max_steps=2 %s %s 2>&1",
                       cmds[i], train, dev, vocab, i ? "--out" : "", i ? run : "");
        cr_expect_eq(rc, 1, "mpx %s: exit %d\n%s", cmds[i], rc, out);
        cr_expect(strstr(out, want) != NULL, "mpx %s: no \"%s\" in\n%s", cmds[i], want, out);
    }
    snprintf(path, sizeof path, "%s/metrics.csv", run);
    char *rows = ts_slurp(path, NULL);
    cr_expect(rows && !strchr(strchr(rows, '\n') + 1, '\n'), "steps ran before the refusal:\n%s", rows ? rows : "");
    free(rows);
    /* the model's own vocabulary passes */
    cr_expect_eq(ts_sh(out, sizeof out, "build/bin/mpx check configs/tiny_squad.cfg >/dev/null 2>&1"), 0);
}
