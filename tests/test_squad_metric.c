/* The official v1.1 metric: aggregates on six prediction sets equal the official
 * evaluate-v1.1 logic (values in tests/fixtures/squad/metric_expected.json, made by
 * make_fixtures.py with the same perturbation rule as perturb() below), the squad-eval
 * command, and normalisation cases whose expected strings Python printed. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../datasets/squad_metric.h"
#include "test_squad_common.h"

TestSuite(squad_metric, .timeout = 60);

/* Same rule as make_fixtures.py perturb(i, g); ASCII-only edits plus fixed UTF-8 text. */
static char *perturb(int32_t i, const char *g)
{
    size_t n = strlen(g);
    char *o = malloc(3 * n + 32);
    switch (i % 10) {
    case 0: sprintf(o, "The %s", g); break;
    case 1: sprintf(o, "\"%s\"!", g); break;
    case 2: sprintf(o, "\xe2\x80\x9c%s\xe2\x80\x9d", g); break;
    case 3:
        for (size_t k = 0; k <= n; k++) o[k] = g[k] >= 'a' && g[k] <= 'z' ? (char)(g[k] - 32) : g[k];
        break;
    case 4: {
        size_t w = 0;
        o[w++] = ' ', o[w++] = ' ';
        for (size_t k = 0; k < n; k++) {
            if (g[k] == ' ') o[w++] = ' ', o[w++] = '\t', o[w++] = ' ';
            else o[w++] = g[k];
        }
        o[w++] = '\n';
        o[w] = '\0';
        break;
    }
    case 5: sprintf(o, "%s an", g); break;
    case 6: sprintf(o, "%s\xe2\x80\x94", g); break;
    case 7: {
        const char *sp = strrchr(g, ' ');
        size_t k = sp ? (size_t)(sp - g) : 0;
        memcpy(o, g, k);
        o[k] = '\0';
        break;
    }
    case 8: sprintf(o, "\xe2\x80\x9cthe\xe2\x80\x9d %s", g); break;
    default: strcpy(o, g);
    }
    return o;
}

static void check_set(const mpx_squad_dataset *d, json_t *expected, const char *name, int do_perturb, int omit,
                      int empty, int none)
{
    const char **preds = calloc((size_t)d->n_questions, sizeof *preds);
    for (int32_t i = 0; i < d->n_questions; i++) {
        if (none || (omit && i % 50 == 3)) continue;
        const char *g = d->questions[i].answers[0].text;
        preds[i] = empty ? strdup("") : do_perturb ? perturb(i, g) : strdup(g);
    }
    mpx_squad_scores s;
    char err[256];
    cr_assert_eq(mpx_squad_evaluate(d, preds, &s, err, sizeof err), 0, "%s", err);
    json_t *e = json_object_get(expected, name);
    cr_assert(e, "no %s in metric_expected.json", name);
    double em = json_real_value(json_object_get(e, "exact_match")), f1 = json_real_value(json_object_get(e, "f1"));
    if (json_is_integer(json_object_get(e, "f1"))) f1 = (double)json_integer_value(json_object_get(e, "f1"));
    fprintf(stderr, "%-15s EM %.12f (official %.12f)  F1 %.12f (official %.12f)  unanswered %d\n", name,
            s.exact_match, em, s.f1, f1, s.n_unanswered);
    cr_assert(fabs(s.exact_match - em) <= 1e-9, "%s: EM %.15g, official %.15g", name, s.exact_match, em);
    cr_assert(fabs(s.f1 - f1) <= 1e-9, "%s: F1 %.15g, official %.15g", name, s.f1, f1);
    cr_assert_eq(s.n_unanswered, (int32_t)json_integer_value(json_object_get(e, "unanswered")));
    for (int32_t i = 0; i < d->n_questions; i++) free((void *)preds[i]);
    free(preds);
}

Test(squad_metric, aggregates_equal_official)
{
    char err[256];
    mpx_squad_dataset d;
    cr_assert_eq(mpx_squad_load(SQUAD_DEV, &d, err, sizeof err), 0, "%s (run `make data`)", err);
    json_error_t je;
    json_t *exp = json_load_file(SQUAD_FIXTURES "metric_expected.json", 0, &je);
    cr_assert(exp, "%s", je.text);
    check_set(&d, exp, "gold", 0, 0, 0, 0);
    check_set(&d, exp, "empty_strings", 0, 0, 1, 0);
    check_set(&d, exp, "no_predictions", 0, 0, 0, 1);
    check_set(&d, exp, "perturbed", 1, 0, 0, 0);
    check_set(&d, exp, "omit_2pct", 0, 1, 0, 0);
    check_set(&d, exp, "perturbed_omit", 1, 1, 0, 0);
    json_decref(exp);
    mpx_squad_free(&d);
}

static void norm(const char *in, const char *want)
{
    char *got = mpx_squad_normalize_answer(in);
    cr_assert_str_eq(got, want, "normalize_answer(\"%s\")", in);
    free(got);
}

/* Expected strings printed by evaluate-v1.1's normalize_answer under Python 3.11. */
Test(squad_metric, normalisation)
{
    norm("The  Cat, an apple!", "cat apple");
    norm("\xe2\x80\x9cthe\xe2\x80\x9d end", "\xe2\x80\x9c \xe2\x80\x9d end"); /* “the” -> “ ” */
    norm("theatre an-a", "theatre ana"); /* punctuation goes first: "an-a" -> "ana" */
    norm("the\xcc\x81 x", "\xcc\x81 x");                                      /* U+0301 is \W */
    norm("\xc4\xb0 \xce\x9f\xce\x94\xce\x9f\xce\xa3", "i\xcc\x87 \xce\xbf\xce\xb4\xce\xbf\xcf\x82"); /* İ, final sigma */
    norm("a\xc2\xa0" "b\xe2\x80\x83" "c", "b c");                             /* NBSP, EM SPACE split */
    norm("", "");
    cr_assert_float_eq(mpx_squad_f1("the cat sat", "cat sat down"), 0.8, 1e-12);
    cr_assert_float_eq(mpx_squad_f1("a", "the"), 0.0, 1e-12);
    cr_assert_float_eq(mpx_squad_exact_match("The Cat.", "cat"), 1.0, 1e-12);
}

static void redirect(void) { cr_redirect_stdout(); cr_redirect_stderr(); }

Test(squad_metric, cli_gold_is_100, .init = redirect)
{
    const char *pp = "build/tests/squad_gold_predictions.json";
    char err[256];
    mpx_squad_dataset d;
    cr_assert_eq(mpx_squad_load(SQUAD_DEV, &d, err, sizeof err), 0, "%s", err);
    json_t *o = json_object();
    for (int32_t i = 0; i < d.n_questions; i++)
        json_object_set_new(o, d.questions[i].id, json_string(d.questions[i].answers[0].text));
    cr_assert_eq(json_dump_file(o, pp, 0), 0);
    json_decref(o);
    mpx_squad_free(&d);
    char *argv[] = {"squad-eval", SQUAD_DEV, (char *)pp, NULL};
    cr_assert_eq(mpx_squad_eval_main(3, argv), 0);
    fflush(stdout);
    cr_assert_stdout_eq_str("{\"exact_match\": 100.0, \"f1\": 100.0}\n");
}

/* --help, as every other mpx command's: the usage on stdout, named as argv[0] names it
 * (`mpx squad-eval` passes "mpx squad-eval"), exit 0 */
Test(squad_metric, cli_help, .init = redirect)
{
    char *help[] = {"mpx squad-eval", "--help", NULL};
    cr_assert_eq(mpx_squad_eval_main(2, help), 0);
    fflush(stdout);
    char text[1024] = "";
    FILE *f = cr_get_redirected_stdout();
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = 0;
    const char *want = "usage: mpx squad-eval DATA.json PREDICTIONS.json";
    cr_expect(strncmp(text, want, strlen(want)) == 0, "%s", text);
}

Test(squad_metric, cli_errors, .init = redirect)
{
    char *usage[] = {"squad-eval", SQUAD_DEV, NULL};
    cr_assert_eq(mpx_squad_eval_main(2, usage), 2);
    /* "-h" after --per-question is the output file's name, not a request for help */
    char *dash_h[] = {"squad-eval", SQUAD_DEV, "--per-question", "-h", NULL};
    cr_assert_eq(mpx_squad_eval_main(4, dash_h), 2);
    FILE *f = fopen("build/tests/squad_bad_predictions.json", "w");
    fputs("{\"x\": 1,}", f);
    fclose(f);
    char *bad[] = {"squad-eval", SQUAD_DEV, "build/tests/squad_bad_predictions.json", NULL};
    cr_assert_eq(mpx_squad_eval_main(3, bad), 1);
    char *missing[] = {"squad-eval", "build/tests/no-such-data.json", "build/tests/squad_bad_predictions.json", NULL};
    cr_assert_eq(mpx_squad_eval_main(3, missing), 1);
}

Test(squad_metric, python_float_repr)
{
    char b[64];
    mpx_format_double_py(100.0, b, sizeof b);
    cr_assert_str_eq(b, "100.0");
    mpx_format_double_py(0.0, b, sizeof b);
    cr_assert_str_eq(b, "0.0");
    mpx_format_double_py(78.2459145451481, b, sizeof b);
    cr_assert_str_eq(b, "78.2459145451481");
    mpx_format_double_py(0.02838221381267739, b, sizeof b);
    cr_assert_str_eq(b, "0.02838221381267739");
    mpx_format_double_py(1e-05, b, sizeof b);
    cr_assert_str_eq(b, "1e-05");
}

/* --per-question: one row per answered question whose EM/F1 averaged over ALL questions
 * give the official aggregate (metric_expected.json "perturbed_omit", from the official
 * script), unanswered questions left out, and hand-known rows: an unchanged gold answer
 * (i % 10 == 9) scores 1/1, "The gold" (i % 10 == 0) scores EM 1 (articles go). */
Test(squad_metric, per_question_scores, .init = redirect)
{
    const char *pp = "build/tests/squad_perturbed_omit.json", *qs = "build/tests/squad_question_scores.csv";
    char err[256];
    mpx_squad_dataset d;
    cr_assert_eq(mpx_squad_load(SQUAD_DEV, &d, err, sizeof err), 0, "%s", err);
    json_t *o = json_object();
    for (int32_t i = 0; i < d.n_questions; i++) {
        if (i % 50 == 3) continue;
        char *p = perturb(i, d.questions[i].answers[0].text);
        json_object_set_new(o, d.questions[i].id, json_string(p));
        free(p);
    }
    cr_assert_eq(json_dump_file(o, pp, 0), 0);
    json_decref(o);
    char *argv[] = {"squad-eval", SQUAD_DEV, (char *)pp, "--per-question", (char *)qs, NULL};
    cr_assert_eq(mpx_squad_eval_main(5, argv), 0);
    json_error_t je;
    json_t *exp = json_load_file(SQUAD_FIXTURES "metric_expected.json", 0, &je);
    cr_assert(exp, "%s", je.text);
    json_t *e = json_object_get(exp, "perturbed_omit");
    double want_em = json_number_value(json_object_get(e, "exact_match"));
    double want_f1 = json_number_value(json_object_get(e, "f1"));
    FILE *f = fopen(qs, "r");
    cr_assert(f);
    char line[256];
    cr_assert(fgets(line, sizeof line, f));
    cr_assert_str_eq(line, "id,exact_match,f1\n");
    double em = 0, f1 = 0;
    int32_t rows = 0, next = 0;
    while (fgets(line, sizeof line, f)) {
        char id[128];
        int e1;
        double f1v;
        cr_assert_eq(sscanf(line, "%127[^,],%d,%lf", id, &e1, &f1v), 3, "bad row: %s", line);
        while (next < d.n_questions && strcmp(d.questions[next].id, id)) {
            cr_assert_eq(next % 50, 3, "question %d (%s) missing from the per-question file", next, d.questions[next].id);
            next++;
        }
        cr_assert(next < d.n_questions, "unknown or out-of-order id %s", id);
        if (next % 10 == 9) cr_assert(e1 == 1 && f1v == 1.0, "%s: gold answer scored %d/%g", id, e1, f1v);
        if (next % 10 == 0) cr_assert_eq(e1, 1, "%s: 'The ' + gold should match exactly", id);
        cr_assert(f1v >= 0 && f1v <= 1 && (e1 == 0 || f1v == 1.0));
        em += e1;
        f1 += f1v;
        rows++;
        next++;
    }
    fclose(f);
    cr_assert_eq(rows, d.n_questions - (d.n_questions + 46) / 50);
    cr_assert(fabs(100.0 * em / d.n_questions - want_em) <= 1e-9, "EM %.12g vs official %.12g", 100.0 * em / d.n_questions, want_em);
    cr_assert(fabs(100.0 * f1 / d.n_questions - want_f1) <= 1e-6, "F1 %.12g vs official %.12g", 100.0 * f1 / d.n_questions, want_f1);
    json_decref(exp);
    mpx_squad_free(&d);
}
