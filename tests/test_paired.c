/* Paired bootstrap of two groups of runs on the same questions against an independent
 * reference: tests/fixtures/paired/expected.json, computed by make_paired_fixture.py with
 * numpy over the documented resampling rule (core/analysis/paired.h); the CLI's errors for
 * mismatched question lists and missing files; mpx matrix --paired. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/analysis/paired.h"
#include "support/shell.h"

#define FIX "tests/fixtures/paired/"

TestSuite(paired, .timeout = 120);

static void check_metric(json_t *want, const char *name, const mpx_paired_metric *m, double sda, double sdb)
{
    json_t *w = json_object_get(want, name);
    cr_assert(w, "expected.json has no %s", name);
    const char *keys[] = { "a", "b", "diff", "lo", "hi", "seed_sd_a", "seed_sd_b", "lo_seeds", "hi_seeds" };
    double got[] = { m->a, m->b, m->diff, m->lo, m->hi, sda, sdb, m->lo_seeds, m->hi_seeds };
    for (int i = 0; i < 9; i++) {
        double x = json_number_value(json_object_get(w, keys[i]));
        cr_assert(fabs(got[i] - x) <= 1e-9 * (1 + fabs(x)), "%s.%s: mpx %.15g, numpy %.15g", name, keys[i], got[i], x);
    }
}

static void check_case(const char *key, size_t resamples, uint64_t seed)
{
    const char *a[] = { FIX "a1", FIX "a2", FIX "a3" }, *b[] = { FIX "b1", FIX "b2" };
    mpx_paired_result r;
    char err[4096];
    cr_assert_eq(mpx_paired_compare(a, 3, b, 2, resamples, seed, &r, err, sizeof err), 0, "%s", err);
    cr_assert_eq(r.n_questions, 400);
    cr_assert_eq(r.n_a, 3);
    cr_assert_eq(r.n_b, 2);
    json_t *all = ts_load_json(FIX "expected.json");
    json_t *want = json_object_get(all, key);
    cr_assert(want, "expected.json has no %s", key);
    check_metric(want, "exact_match", &r.em, r.sd_em_a, r.sd_em_b);
    check_metric(want, "f1", &r.f1, r.sd_f1_a, r.sd_f1_b);
    /* the interval is the bootstrap's, not a formula: it must hold the mean; resampling the
     * seeds as well widens it (group A's runs spread by 2.3 EM points) */
    cr_assert(r.em.lo < r.em.diff && r.em.diff < r.em.hi);
    cr_assert(r.em.lo_seeds < r.em.lo && r.em.hi < r.em.hi_seeds, "[%g, %g] within [%g, %g]", r.em.lo_seeds,
              r.em.hi_seeds, r.em.lo, r.em.hi);
    json_decref(all);
}

Test(paired, equals_numpy_reference_10000_resamples) { check_case("r10000_s1", 10000, 1); }
Test(paired, equals_numpy_reference_other_seed) { check_case("r2000_s12345", 2000, 12345); }

static void write_scores(const char *dir, const char *name, int em)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    cr_assert_eq(ts_sh(NULL, 0, "mkdir -p %s", path), 0);
    snprintf(path, sizeof path, "%s/%s/question_scores.csv", dir, name);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("id,exact_match,f1\n", f);
    for (int q = 0; q < 10; q++) fprintf(f, "q%d,%d,%d\n", q, em, em);
    fclose(f);
}

/* Exhaustive: A's two runs score every question 1 and 0, B's one run 1. Over questions
 * B − A is 50 on every question (a point interval); over seeds A's resampled mean is 1, 1/2
 * or 0 with probabilities 1/4, 1/2, 1/4, so B − A is 0, 50 or 100 and the 95% interval's
 * ends are exactly 0 and 100. */
Test(paired, seed_level_interval_by_enumeration)
{
    char *dir = ts_tmpdir("paired-seeds"), a1[4200], a2[4200], b1[4200];
    write_scores(dir, "a1", 1);
    write_scores(dir, "a2", 0);
    write_scores(dir, "b1", 1);
    snprintf(a1, sizeof a1, "%s/a1", dir);
    snprintf(a2, sizeof a2, "%s/a2", dir);
    snprintf(b1, sizeof b1, "%s/b1", dir);
    const char *a[] = { a1, a2 }, *b[] = { b1 };
    mpx_paired_result r;
    char err[4096];
    cr_assert_eq(mpx_paired_compare(a, 2, b, 1, 10000, 3, &r, err, sizeof err), 0, "%s", err);
    cr_expect(r.em.diff == 50 && r.em.lo == 50 && r.em.hi == 50, "over questions: %g [%g, %g]", r.em.diff, r.em.lo,
              r.em.hi);
    cr_expect(r.em.lo_seeds == 0 && r.em.hi_seeds == 100, "over seeds: [%g, %g]", r.em.lo_seeds, r.em.hi_seeds);
    cr_expect(r.f1.lo_seeds == 0 && r.f1.hi_seeds == 100, "F1 over seeds: [%g, %g]", r.f1.lo_seeds, r.f1.hi_seeds);
    cr_assert_eq(mpx_paired_compare(b, 1, b, 1, 100, 3, &r, err, sizeof err), 0, "%s", err);
    cr_expect(isnan(r.em.lo_seeds) && isnan(r.em.hi_seeds), "one run a side: no seed-level interval");
    ts_sh(NULL, 0, "rm -rf %s", dir);
}

/* One run against several: the interval over seeds resamples only the several, and the
 * CLI says so on stderr, naming the side with one run; with runs to resample on both sides,
 * or on neither, it says nothing of it. */
Test(paired, one_run_against_several_says_whose_seeds_the_interval_leaves_out)
{
    char *dir = ts_tmpdir("paired-one"), out[8192];
    write_scores(dir, "a1", 1);
    write_scores(dir, "a2", 0);
    write_scores(dir, "b1", 1);
    write_scores(dir, "b2", 0);
    static const struct { const char *args, *want; } c[] = {
        { "a1 --vs b1 b2", "mpx paired: note: A has 1 run: the interval over seeds and questions resamples B's 2 runs" },
        { "a1 a2 --vs b1", "mpx paired: note: B has 1 run: the interval over seeds and questions resamples A's 2 runs" },
        { "a1 a2 --vs b1 b2", NULL },
        { "a1 --vs b1", NULL },
    };
    for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
        char args[256] = "";
        for (const char *p = c[i].args; *p;) {   /* each run name under dir */
            size_t n = strcspn(p, " ");
            if (strncmp(p, "--vs", 4)) snprintf(args + strlen(args), sizeof args - strlen(args), " %s/%.*s", dir, (int)n, p);
            else strncat(args, " --vs", sizeof args - strlen(args) - 1);
            p += n + strspn(p + n, " ");
        }
        cr_assert_eq(ts_sh(out, sizeof out, "build/bin/mpx paired%s --resamples 100 2>&1 >/dev/null", args), 0, "%s",
                     out);
        if (c[i].want) cr_expect(strstr(out, c[i].want) && strstr(out, "seed-to-seed spread is unknown"), "%s: %s",
                                 c[i].args, out);
        else cr_expect_null(strstr(out, "note"), "%s: %s", c[i].args, out);
    }
    ts_sh(NULL, 0, "rm -rf %s", dir);
}

Test(paired, identical_groups_give_zero)
{
    const char *a[] = { FIX "a1" };
    mpx_paired_result r;
    char err[4096];
    cr_assert_eq(mpx_paired_compare(a, 1, a, 1, 1000, 7, &r, err, sizeof err), 0, "%s", err);
    cr_assert(r.em.diff == 0 && r.em.lo == 0 && r.em.hi == 0 && r.f1.diff == 0);
    cr_assert(isnan(r.sd_em_a), "one run has no seed-to-seed sd");
}

Test(paired, cli_refuses_other_questions_and_missing_files)
{
    char *dir = ts_tmpdir("paired"), path[PATH_MAX], out[8192];
    snprintf(path, sizeof path, "%s/x", dir);
    cr_assert_eq(ts_sh(NULL, 0, "mkdir -p %s && head -n 300 " FIX "a1/question_scores.csv > %s/question_scores.csv",
                       path, path), 0);
    cr_assert_eq(ts_sh(out, sizeof out, "build/bin/mpx paired " FIX "a1 --vs %s 2>&1", path), 2);
    cr_assert(strstr(out, "question 300 is (none), but tests/fixtures/paired/a1 has q0299"), "%s", out);
    cr_assert_eq(ts_sh(out, sizeof out, "build/bin/mpx paired " FIX "a1 --vs %s/none 2>&1", dir), 2);
    cr_assert(strstr(out, "none/question_scores.csv: No such file"), "%s", out);
    cr_assert_eq(ts_sh(out, sizeof out, "build/bin/mpx paired " FIX "a1 " FIX "a2 " FIX "a3 --vs " FIX "b1 "
                       FIX "b2 --format json"), 0);
    json_error_t je;
    json_t *j = json_loads(out, 0, &je);
    cr_assert(j, "%s: %s", je.text, out);
    json_t *all = ts_load_json(FIX "expected.json");
    double want = json_number_value(json_object_get(json_object_get(json_object_get(all, "r10000_s1"), "f1"), "lo"));
    double got = json_number_value(json_object_get(json_object_get(j, "f1"), "lo"));
    cr_assert(fabs(got - want) <= 1e-9 * (1 + fabs(want)), "CLI f1.lo %.15g vs numpy %.15g", got, want);
    json_decref(j);
    json_decref(all);
    ts_sh(NULL, 0, "rm -rf %s", dir);
}

/* DIR/NAME: a finished run of policy prec with the fixture's question scores of `from`. */
static void put_run(const char *dir, const char *name, const char *prec, int seed, const char *from)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    cr_assert_eq(ts_sh(NULL, 0, "mkdir -p %s && cp " FIX "%s/question_scores.csv %s/", path, from, path), 0);
    json_t *j = json_pack("{s:s, s:{s:{s:{s:s, s:i}, s:{s:s}}}, s:{s:f}}", "status", "finished", "config",
                          "effective", "run", "name", "m", "seed", seed, "precision", "plugin", prec,
                          "metrics", "exact_match", 1.0);
    strcat(path, "/run.json");
    cr_assert_eq(json_dump_file(j, path, 0), 0);
    json_decref(j);
}

/* mpx matrix --paired: rows averaged over their seeds per question, against the base row;
 * the same numbers as the numpy reference for groups a1..a3 vs b1..b2. */
Test(paired, matrix_paired_rows)
{
    char *dir = ts_tmpdir("paired-matrix"), out[16384];
    put_run(dir, "fp32_1", "fp32", 1, "a1");
    put_run(dir, "fp32_2", "fp32", 2, "a2");
    put_run(dir, "fp32_3", "fp32", 3, "a3");
    put_run(dir, "bf16_1", "bf16-master", 1, "b1");
    put_run(dir, "bf16_2", "bf16-master", 2, "b2");
    cr_assert_eq(ts_sh(out, sizeof out, "build/bin/mpx matrix %s --rows precision.plugin --metric exact_match "
                       "--paired fp32", dir), 0, "%s", out);
    json_t *all = ts_load_json(FIX "expected.json");
    json_t *c = json_object_get(all, "r10000_s1");
    json_t *em = json_object_get(c, "exact_match"), *f1 = json_object_get(c, "f1");
    const char *row = strstr(out, "| bf16-master | 400 | ");
    cr_assert(row, "no bf16-master row of 400 questions in\n%s", out);
    double v[10], sda, sdb;
    int na, nb;
    cr_assert_eq(sscanf(row, "| bf16-master | 400 | %lf [%lf, %lf] | %lf [%lf, %lf] | [%lf, %lf] / [%lf, %lf] | "
                        "%d / %d | %lf / %lf |", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9],
                        &na, &nb, &sda, &sdb), 14, "%s", row);
    const char *keys[] = { "diff", "lo", "hi" }, *seed_keys[] = { "lo_seeds", "hi_seeds" };
    for (int i = 0; i < 10; i++) {
        double w = i < 6 ? json_number_value(json_object_get(i < 3 ? em : f1, keys[i % 3]))
                         : json_number_value(json_object_get(i < 8 ? em : f1, seed_keys[i % 2]));
        cr_assert(fabs(v[i] - w) <= 0.0051, "column %d: %.2f vs numpy %.6f", i, v[i], w);
    }
    cr_assert(na == 3 && nb == 2);
    cr_assert(fabs(sda - json_number_value(json_object_get(em, "seed_sd_a"))) <= 0.0051);
    cr_assert(fabs(sdb - json_number_value(json_object_get(em, "seed_sd_b"))) <= 0.0051);
    cr_assert_eq(ts_sh(out, sizeof out, "build/bin/mpx matrix %s --rows precision.plugin --metric exact_match "
                       "--paired fp64 2>&1", dir), 2);
    cr_assert(strstr(out, "--paired fp64: no row has precision.plugin = fp64 (the rows: "), "%s", out);
    cr_assert_null(strstr(out, "| precision.plugin |"), "the error comes before any table: %s", out);
    /* 3 runs against 2: no note; a row of 1 run against the base's 3: a note naming it */
    cr_assert_eq(ts_sh(out, sizeof out, "build/bin/mpx matrix %s --rows precision.plugin --metric exact_match "
                       "--paired fp32 2>&1 >/dev/null", dir), 0, "%s", out);
    cr_expect_null(strstr(out, "note"), "%s", out);
    put_run(dir, "fp16_1", "fp16-scaled", 1, "b1");
    cr_assert_eq(ts_sh(out, sizeof out, "build/bin/mpx matrix %s --rows precision.plugin --metric exact_match "
                       "--paired fp32 2>&1 >/dev/null", dir), 0, "%s", out);
    cr_expect(strstr(out, "mpx matrix --paired: fp16-scaled: note: this row has 1 run: the interval over seeds and "
                          "questions resamples the base row's 3 runs") && !strstr(out, "bf16-master: note"), "%s", out);
    json_decref(all);
    ts_sh(NULL, 0, "rm -rf %s", dir);
}

/* DIR/NAME: a run record naming its plugins (backend cpu at backend_ver, precision prec at
 * prec_ver, the rest 1.0.0), with the fixture's question scores of `from`. */
static void put_build(const char *dir, const char *name, const char *from, const char *backend_ver,
                      const char *prec, const char *prec_ver)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    cr_assert_eq(ts_sh(NULL, 0, "mkdir -p %s && cp " FIX "%s/question_scores.csv %s/", path, from, path), 0);
    json_t *j = json_pack("{s:s, s:{s:{s:{s:s, s:i}, s:{s:s}}}, s:{s:f}, s:{s:{s:s, s:s}, s:{s:s, s:s}, "
                          "s:{s:s, s:s}, s:{s:s, s:s}, s:{s:s, s:s}, s:{s:s, s:s}}}",
                          "status", "finished", "config", "effective", "run", "name", "m", "seed", 1, "precision",
                          "plugin", prec, "metrics", "exact_match", 1.0, "plugins",
                          "backend", "name", "cpu", "version", backend_ver, "precision", "name", prec, "version",
                          prec_ver, "model", "name", "bert-qa", "version", "1.0.0", "optimizer", "name", "adam",
                          "version", "1.0.0", "zero", "name", "stage0", "version", "1.0.0", "comm", "name", "local",
                          "version", "1.0.0");
    cr_assert_not_null(j);
    strcat(path, "/run.json");
    cr_assert_eq(json_dump_file(j, path, 0), 0);
    json_decref(j);
}

/* Runs whose records name the same plugin at other versions (the study's backend 1.0.0
 * and 1.4.1) get a note naming it and the two runs; other plugins of a kind (fp32 against
 * bf16-master: what the comparison is about) and folders without a record get none. */
Test(paired, note_names_a_plugin_at_another_version)
{
    char *dir = ts_tmpdir("paired-builds"), out[16384], p[4][PATH_MAX];
    put_build(dir, "old/fp32_1", "a1", "1.0.0", "fp32", "1.0.0");
    put_build(dir, "old/bf16_1", "b1", "1.0.0", "bf16-master", "1.1.0");
    put_build(dir, "new/bf16_1", "b2", "1.4.1", "bf16-master", "1.1.0");
    snprintf(p[0], sizeof p[0], "%s/old/fp32_1", dir);
    snprintf(p[1], sizeof p[1], "%s/old/bf16_1", dir);
    snprintf(p[2], sizeof p[2], "%s/new/bf16_1", dir);
    snprintf(p[3], sizeof p[3], FIX "a2");
    mpx_paired_result r;
    char err[4096], want[3 * PATH_MAX];
    const char *a[] = { p[0] }, *same[] = { p[1] }, *other[] = { p[2] }, *bare[] = { p[3] };
    cr_assert_eq(mpx_paired_compare(a, 1, same, 1, 100, 1, &r, err, sizeof err), 0, "%s", err);
    cr_assert_str_empty(r.build_note, "fp32 against bf16-master on one backend: %s", r.build_note);
    cr_assert_eq(mpx_paired_compare(a, 1, bare, 1, 100, 1, &r, err, sizeof err), 0, "%s", err);
    cr_assert_str_empty(r.build_note, "a folder without run.json: %s", r.build_note);
    cr_assert_eq(mpx_paired_compare(a, 1, other, 1, 100, 1, &r, err, sizeof err), 0, "%s", err);
    snprintf(want, sizeof want, "backend cpu 1.0.0 in %s, 1.4.1 in %s", p[0], p[2]);
    cr_assert_str_eq(r.build_note, want);
    /* a group that mixes two versions of its own plugin, against a group of another plugin
     * (a policy rebuilt between seeds): the first record of A names no bf16-master */
    char p5[PATH_MAX];
    put_build(dir, "old/bf16_2", "b2", "1.0.0", "bf16-master", "1.2.0");
    snprintf(p5, sizeof p5, "%s/old/bf16_2", dir);
    const char *mixed[] = { p[1], p5 };
    cr_assert_eq(mpx_paired_compare(a, 1, mixed, 2, 100, 1, &r, err, sizeof err), 0, "%s", err);
    snprintf(want, sizeof want, "precision bf16-master 1.1.0 in %s, 1.2.0 in %s", p[1], p5);
    cr_assert_str_eq(r.build_note, want);
    ts_sh(NULL, 0, "rm -rf %s", p5);
    /* within a group too, and on the CLI: the note after the table on stderr, the JSON flag */
    cr_assert_eq(ts_sh(out, sizeof out, "build/bin/mpx paired %s %s --vs %s 2>&1", p[1], p[2], p[0]), 0, "%s", out);
    snprintf(want, sizeof want, "mpx paired: note: the runs differ in plugin versions (backend cpu 1.0.0 "
             "in %s, 1.4.1 in %s)", p[1], p[2]);
    const char *note = strstr(out, want), *table = strstr(out, "| exact_match |");
    cr_assert(note && table && table < note, "%s", out);
    cr_assert_eq(ts_sh(out, sizeof out, "build/bin/mpx paired %s --vs %s 2>&1", p[0], p[1]), 0, "%s", out);
    cr_assert_null(strstr(out, "note"), "%s", out);
    cr_assert_eq(ts_sh(out, sizeof out, "build/bin/mpx paired %s --vs %s --format json 2>/dev/null", p[0], p[2]), 0);
    json_error_t je;
    json_t *j = json_loads(out, 0, &je);
    cr_assert(j, "%s: %s", je.text, out);
    cr_assert(json_is_true(json_object_get(j, "builds_differ")), "%s", out);
    cr_assert(strstr(json_string_value(json_object_get(j, "build_note")), ", 1.4.1 in "), "%s", out);
    json_decref(j);
    /* mpx matrix --paired: the row's note after the whole table */
    put_build(dir, "new/fp32_1", "a1", "1.4.1", "fp32", "1.0.0");
    cr_assert_eq(ts_sh(out, sizeof out, "build/bin/mpx matrix %s/new --rows precision.plugin --metric exact_match "
                       "--paired fp32 2>&1", dir), 0, "%s", out);
    cr_assert_null(strstr(out, "note"), "one build: %s", out);
    cr_assert_eq(ts_sh(NULL, 0, "mv %s/old/bf16_1 %s/new/bf16_0", dir, dir), 0);
    cr_assert_eq(ts_sh(out, sizeof out, "build/bin/mpx matrix %s/new --rows precision.plugin --metric exact_match "
                       "--paired fp32 2>&1", dir), 0, "%s", out);
    note = strstr(out, "mpx matrix --paired: bf16-master: note: the runs differ in plugin versions (backend cpu "
                       "1.4.1 in ");
    table = strstr(out, "| bf16-master | 400 |");
    cr_assert(note && table && table < note, "%s", out);
    ts_sh(NULL, 0, "rm -rf %s", dir);
}

/* docs/STUDY.md's tables are the output of the commands written above them, on the
 * records committed with them: regenerated from HEAD's tree they come out byte-identical
 * (docs/regen.sh --check). Skipped outside a git checkout of the tree. */
Test(paired, study_tables_regenerate_from_the_committed_records)
{
    if (ts_sh(NULL, 0, "git ls-files --error-unmatch docs/STUDY.md >/dev/null 2>&1") != 0)
        cr_skip_test("not run from a git checkout of this tree (e.g. the sanitizer suite's copy): the "
                     "committed records cannot be told from the working tree");
    char *dir = ts_tmpdir("study"), out[65536], mpx[PATH_MAX];
    cr_assert_not_null(realpath("build/bin/mpx", mpx));
    cr_assert_eq(ts_sh(NULL, 0, "git archive HEAD results docs | tar -x -C %s", dir), 0);
    int rc = ts_sh(out, sizeof out, "cd %s && bash docs/regen.sh --check docs/STUDY.md %s 2>&1", dir, mpx);
    cr_assert_eq(rc, 0, "%s", out);
    /* every block of the page was checked: as many as its opening markers, counted here */
    char count[64];
    cr_assert_eq(ts_sh(count, sizeof count, "grep -c '^<!-- mpx: ' %s/docs/STUDY.md", dir), 0);
    char want[128];
    snprintf(want, sizeof want, "docs/STUDY.md: %d block(s) up to date", atoi(count));
    cr_assert(atoi(count) > 0 && strstr(out, want), "want \"%s\" in:\n%s", want, out);
    ts_sh(NULL, 0, "rm -rf %s", dir);
}
