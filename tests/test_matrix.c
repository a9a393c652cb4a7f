/* mpx matrix over hand-made run records with known values: cells equal the records,
 * seeds aggregate to the mean ± t(0.975, n−1)·s/√n computed here by hand, skipped and
 * failed runs show with their reasons, and runs that differ in more than the seed are
 * refused. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "support/shell.h"

/* DIR/NAME/run.json for a run of policy `prec` with seed, status and EM/F1. */
static void put_run(const char *dir, const char *name, const char *prec, int seed, double lr,
                    const char *status, const char *why, double em, double f1)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    cr_assert_eq(mkdir(path, 0777), 0, "%s", path);
    json_t *metrics = json_object();
    if (!strcmp(status, "finished")) {
        json_object_set_new(metrics, "EM", json_real(em));
        json_object_set_new(metrics, "F1", json_real(f1));
    }
    json_t *j = json_pack("{s:s, s:{s:{s:{s:s, s:i, s:s}, s:{s:s}, s:{s:s, s:f}}}, s:o, s:{s:f}}",
                          "status", status, "config", "effective", "run", "name", "m", "seed", seed,
                          "output_dir", dir, "precision", "plugin", prec, "optimizer", "plugin", "adam", "lr", lr,
                          "metrics", metrics, "memory", "bytes_per_param", 16.0);
    if (!strcmp(status, "skipped")) json_object_set_new(j, "reason", json_string(why));
    else json_object_set_new(j, "error", why ? json_string(why) : json_null());
    strcat(path, "/run.json");
    cr_assert_eq(json_dump_file(j, path, 0), 0);
    json_decref(j);
}

/* The JSON matrix cell at (row, col). */
static json_t *cell_at(json_t *m, const char *row, const char *col)
{
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(m, "cells"), i, c)
        if (!strcmp(json_string_value(json_object_get(c, "row")), row) &&
            !strcmp(json_string_value(json_object_get(c, "col")), col)) return c;
    cr_assert_fail("no cell %s/%s", row, col);
    return NULL;
}

static double stat_of(json_t *cell, const char *metric, const char *what)
{
    json_t *v = json_object_get(json_object_get(json_object_get(cell, "metrics"), metric), what);
    return json_is_null(v) ? NAN : json_number_value(v);
}

/* fp32: EM 1, 2, 3 over seeds (mean 2, s 1, t(0.975, 2) = 4.303 -> 4.303/√3 = 2.4842);
 * amp: one run, EM 7.5; fp16: skipped; bf16: failed; pure: 5 seeds 10, 12, 9, 11, 13
 * (mean 11, s = √2.5 = 1.5811, t(0.975, 4) = 2.7764 -> 2.7764·1.5811/√5 = 1.9632). */
static char *fixture(void)
{
    char *dir = ts_tmpdir("matrix");
    put_run(dir, "fp32_1", "fp32", 1, 1e-4, "finished", NULL, 1, 10);
    put_run(dir, "fp32_2", "fp32", 2, 1e-4, "finished", NULL, 2, 20);
    put_run(dir, "fp32_3", "fp32", 3, 1e-4, "finished", NULL, 3, 60);
    put_run(dir, "amp_1", "amp", 1, 1e-4, "finished", NULL, 7.5, 80);
    put_run(dir, "fp16_1", "fp16-scaled", 1, 1e-4, "skipped", "precision/fp16-scaled not found (searched: x)", 0, 0);
    put_run(dir, "bf16_1", "bf16-master", 1, 1e-4, "failed", "step 3: loss is NaN", 0, 0);
    static const double pure[5] = { 10, 12, 9, 11, 13 };
    for (int i = 0; i < 5; i++) {
        char name[32];
        snprintf(name, sizeof name, "pure_%d", i);
        put_run(dir, name, "pure-bf16", i + 1, 1e-4, "finished", NULL, pure[i], 50);
    }
    return dir;
}

Test(matrix, seeds_aggregate_to_mean_interval_and_n)
{
    char *dir = fixture();
    static char out[1 << 20];
    cr_assert_eq(ts_sh(out, sizeof out, "build/bin/mpx matrix %s --rows precision.plugin --cols optimizer.plugin "
                    "--metric EM,F1,memory.bytes_per_param --format json", dir), 0, "%s", out);
    json_error_t e;
    json_t *m = json_loads(out, 0, &e);
    cr_assert_not_null(m, "%s\n%s", e.text, out);

    json_t *c = cell_at(m, "fp32", "adam");
    cr_expect_eq(stat_of(c, "EM", "n"), 3);
    cr_expect_float_eq(stat_of(c, "EM", "mean"), 2.0, 1e-12);
    cr_expect_float_eq(stat_of(c, "EM", "sd"), 1.0, 1e-12);
    cr_expect_float_eq(stat_of(c, "EM", "ci95"), 4.302653 / sqrt(3.0), 1e-6);
    cr_expect_float_eq(stat_of(c, "EM", "ci95"), 2.4842, 1e-4);
    cr_expect_float_eq(stat_of(c, "F1", "mean"), 30.0, 1e-12);  /* (10 + 20 + 60) / 3 */
    cr_expect_float_eq(stat_of(c, "F1", "sd"), sqrt(700.0), 1e-9); /* (400 + 100 + 900) / 2 */
    cr_expect_float_eq(stat_of(c, "memory.bytes_per_param", "mean"), 16.0, 1e-12);

    c = cell_at(m, "amp", "adam");
    cr_expect_eq(stat_of(c, "EM", "n"), 1);
    cr_expect_float_eq(stat_of(c, "EM", "mean"), 7.5, 1e-12);
    cr_expect(isnan(stat_of(c, "EM", "ci95")));

    c = cell_at(m, "pure-bf16", "adam");
    cr_expect_eq(stat_of(c, "EM", "n"), 5);
    cr_expect_float_eq(stat_of(c, "EM", "mean"), 11.0, 1e-12);
    cr_expect_float_eq(stat_of(c, "EM", "ci95"), 1.9632, 1e-4);

    c = cell_at(m, "fp16-scaled", "adam");
    cr_expect_str_eq(json_string_value(json_object_get(c, "status")), "skipped");
    cr_expect(strstr(json_string_value(json_object_get(c, "reason")), "precision/fp16-scaled not found"));
    c = cell_at(m, "bf16-master", "adam");
    cr_expect_str_eq(json_string_value(json_object_get(c, "status")), "failed");
    cr_expect(strstr(json_string_value(json_object_get(c, "reason")), "loss is NaN"));
    json_decref(m);
}

Test(matrix, markdown_shows_values_and_footnotes)
{
    char *dir = fixture();
    static char out[1 << 20];
    cr_assert_eq(ts_sh(out, sizeof out, "build/bin/mpx matrix %s --rows precision.plugin --cols optimizer.plugin "
                    "--metric EM,F1", dir), 0, "%s", out);
    cr_expect(strstr(out, "| precision.plugin \\ optimizer.plugin | adam |"), "%s", out);
    cr_expect(strstr(out, "| fp32 | 2 ± 2.484 / 30 ± 65.72 (n=3) |"), "%s", out); /* 4.3027·√700/√3 = 65.72 */
    cr_expect(strstr(out, "| amp | 7.5 / 80 |"), "%s", out);
    cr_expect(strstr(out, "| pure-bf16 | 11 ± 1.963 / 50 ± 0 (n=5) |"), "%s", out);
    /* no sweep.json: rows sorted by value, footnotes numbered as they appear */
    cr_expect(strstr(out, "| bf16-master | failed [1] |"), "%s", out);
    cr_expect(strstr(out, "| fp16-scaled | skipped [2] |"), "%s", out);
    cr_expect(strstr(out, "\n[1] failed: step 3: loss is NaN\n"), "%s", out);
    cr_expect(strstr(out, "\n[2] skipped: precision/fp16-scaled not found (searched: x)\n"), "%s", out);
}

Test(matrix, csv_has_one_line_per_cell_and_metric)
{
    char *dir = fixture();
    static char out[1 << 20];
    cr_assert_eq(ts_sh(out, sizeof out, "build/bin/mpx matrix %s --rows precision.plugin --cols optimizer.plugin "
                    "--metric EM --format csv", dir), 0, "%s", out);
    cr_expect(strstr(out, "precision.plugin,optimizer.plugin,metric,status,n,mean,ci95,sd,reason\n"), "%s", out);
    cr_expect(strstr(out, "\nfp32,adam,EM,finished,3,2,2.48413"), "%s", out);
    cr_expect(strstr(out, "\nfp16-scaled,adam,EM,skipped,0,,,,skipped: precision/fp16-scaled not found (searched: x)\n"), "%s", out);
}

Test(matrix, runs_that_differ_beyond_the_seed_are_refused)
{
    char *dir = fixture();
    put_run(dir, "fp32_4", "fp32", 4, 3e-4, "finished", NULL, 4, 40);
    char out[8192];
    cr_expect_eq(ts_sh(out, sizeof out, "build/bin/mpx matrix %s --rows precision.plugin --cols optimizer.plugin "
                    "--metric EM 2>&1", dir), 2);
    cr_expect(strstr(out, "optimizer.lr"), "%s", out);
    /* with the lr as the column it is a table again */
    cr_expect_eq(ts_sh(out, sizeof out, "build/bin/mpx matrix %s --rows precision.plugin --cols optimizer.lr "
                    "--metric EM 2>&1", dir), 0, "%s", out);
    cr_expect(strstr(out, "| fp32 | 2 ± 2.484 (n=3) | 4 |"), "%s", out);
}

/* Adds KEY = VALUE (a JSON literal) under config.effective of DIR/NAME/run.json. */
static void add_key(const char *dir, const char *name, const char *group, const char *sub, const char *key,
                    const char *value)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s/run.json", dir, name);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    cr_assert(j, "%s: %s", path, je.text);
    json_t *eff = json_object_get(json_object_get(j, "config"), "effective");
    json_t *g = json_object_get(eff, group);
    if (!g) json_object_set_new(eff, group, g = json_object());
    json_t *s = json_object_get(g, sub);
    if (!s) json_object_set_new(g, sub, s = json_object());
    json_object_set_new(s, key, json_loads(value, JSON_DECODE_ANY, &je));
    cr_assert_eq(json_dump_file(j, path, 0), 0);
    json_decref(j);
}

/* A record written by an mpx that did not have a key yet shares a cell with one that
 * has it at its schema default (the core's data.squad.group_by_length = false, the adam
 * plugin's optimizer.adam.anyprecision = false), and not with one that set it. */
Test(matrix, a_key_an_older_record_lacks_matches_only_its_default)
{
    char *dir = fixture();
    put_run(dir, "fp32_4", "fp32", 4, 1e-4, "finished", NULL, 4, 40);
    add_key(dir, "fp32_4", "data", "squad", "group_by_length", "false");
    add_key(dir, "fp32_4", "optimizer", "adam", "anyprecision", "false");
    char out[8192];
    cr_expect_eq(ts_sh(out, sizeof out, "build/bin/mpx matrix %s --rows precision.plugin --metric EM 2>&1", dir), 0,
                 "%s", out);
    /* EM 1, 2, 3, 4: mean 2.5, s = 1.291, t(0.975, 3) = 3.182 -> 3.182 * 1.291 / 2 = 2.054 */
    cr_expect(strstr(out, "| fp32 | 2.5 ± 2.054 (n=4) |"), "%s", out);
    /* the defaults come from the plugins mpx run would load: --plugin-dir as there */
    cr_expect_eq(ts_sh(out, sizeof out, "build/bin/mpx matrix %s --rows precision.plugin --metric EM "
                       "--plugin-dir build/test-plugins 2>&1", dir), 0, "%s", out);
    cr_expect(strstr(out, "| fp32 | 2.5 ± 2.054 (n=4) |"), "%s", out);
    put_run(dir, "fp32_5", "fp32", 5, 1e-4, "finished", NULL, 5, 50);
    add_key(dir, "fp32_5", "optimizer", "adam", "anyprecision", "true");
    cr_expect_eq(ts_sh(out, sizeof out, "build/bin/mpx matrix %s --rows precision.plugin --metric EM 2>&1", dir), 2);
    cr_expect(strstr(out, "optimizer.adam.anyprecision (not at its default)"), "%s", out);
}

Test(matrix, unknown_keys_and_metrics_are_named)
{
    char *dir = fixture();
    char out[8192];
    cr_expect_eq(ts_sh(out, sizeof out, "build/bin/mpx matrix %s --rows precision.plugn --cols optimizer.plugin "
                    "--metric EM 2>&1", dir), 2);
    cr_expect(strstr(out, "precision.plugn"), "%s", out);
    cr_expect_eq(ts_sh(out, sizeof out, "build/bin/mpx matrix %s --rows precision.plugin --metric EMM 2>&1", dir), 2);
    cr_expect(strstr(out, "EMM") && strstr(out, "EM, F1"), "%s", out);
}

/* final_loss_mean of a record written before it existed comes from metrics.losses: the
 * finite ones among the last 200. Seed 1: losses 0, 1, ..., 249 with steps 240-249 null
 * (not finite): the last 200 are steps 50-249, of which 50-239 count: mean 144.5. Seed 2:
 * 30 losses 1, 2, ..., 30 (fewer than 200: all of them): 15.5. The two seeds: mean 80. */
Test(matrix, final_loss_mean_of_an_older_record_is_its_last_200_finite_losses)
{
    char *dir = ts_tmpdir("matrix-tail");
    for (int seed = 1; seed <= 2; seed++) {
        char name[32];
        snprintf(name, sizeof name, "fp32_%d", seed);
        put_run(dir, name, "fp32", seed, 1e-4, "finished", NULL, 1, 1);
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s/run.json", dir, name);
        json_error_t e;
        json_t *j = json_load_file(path, 0, &e);
        cr_assert_not_null(j, "%s", e.text);
        json_t *losses = json_array();
        int n = seed == 1 ? 250 : 30;
        for (int i = 0; i < n; i++)
            json_array_append_new(losses, seed == 1 && i >= 240 ? json_null() : json_real(seed == 1 ? i : i + 1));
        json_object_set_new(json_object_get(j, "metrics"), "losses", losses);
        cr_assert_eq(json_dump_file(j, path, 0), 0);
        json_decref(j);
    }
    static char out[1 << 20];
    cr_assert_eq(ts_sh(out, sizeof out, "build/bin/mpx matrix %s --rows run.seed --metric final_loss_mean --format json",
                       dir), 0, "%s", out);
    json_error_t e;
    json_t *m = json_loads(out, 0, &e);
    cr_assert_not_null(m, "%s\n%s", e.text, out);
    json_t *cells = json_object_get(m, "cells");   /* one column (null), rows by seed */
    cr_assert_eq(json_array_size(cells), 2, "%s", out);
    for (size_t i = 0; i < 2; i++) {
        json_t *c = json_array_get(cells, i);
        json_int_t seed = json_integer_value(json_object_get(c, "row"));
        cr_expect_float_eq(stat_of(c, "final_loss_mean", "mean"), seed == 1 ? 144.5 : 15.5, 1e-12, "seed %d",
                           (int)seed);
    }
    json_decref(m);
    cr_assert_eq(ts_sh(out, sizeof out, "build/bin/mpx matrix %s --rows precision.plugin --metric final_loss_mean "
                       "--format json", dir), 0, "%s", out);
    m = json_loads(out, 0, &e);
    cr_assert_not_null(m, "%s\n%s", e.text, out);
    cells = json_object_get(m, "cells");
    cr_assert_eq(json_array_size(cells), 1, "%s", out);
    cr_expect_float_eq(stat_of(json_array_get(cells, 0), "final_loss_mean", "mean"), 80.0, 1e-12);
    cr_expect_eq(stat_of(json_array_get(cells, 0), "final_loss_mean", "n"), 2);
    json_decref(m);
}

/* A plugin's own option as a column, over runs of which some selected another plugin:
 * those show "—" in that column instead of stopping the table (a policy's option against
 * fp32 runs). */
Test(matrix, a_plugin_option_is_not_applicable_to_runs_of_other_plugins)
{
    char *dir = ts_tmpdir("matrix-na"), out[8192];
    cr_assert_eq(ts_sh(NULL, 0, "build/bin/mpx run configs/toy.cfg --out %s/fp32 >/dev/null 2>&1 && "
                       "build/bin/mpx run configs/toy.cfg -s 'precision.plugin=\"amp\"' --out %s/amp16 >/dev/null 2>&1 && "
                       "build/bin/mpx run configs/toy.cfg -s 'precision.plugin=\"amp\"' -s 'precision.amp.dtype=\"bf16\"' "
                       "--out %s/amp-bf16 >/dev/null 2>&1", dir, dir, dir), 0);
    cr_assert_eq(ts_sh(out, sizeof out, "build/bin/mpx matrix %s --rows precision.plugin --cols precision.amp.dtype "
                       "--metric accuracy 2>&1", dir), 0, "%s", out);
    cr_expect(strstr(out, "| precision.plugin \\ precision.amp.dtype | bf16 | fp16 | \u2014 |"), "%s", out);
    cr_expect(strstr(out, "| fp32 | \u2014 | \u2014 | "), "%s", out);
    /* each cell holds the one run made with its settings, at that run's own accuracy */
    char *js = malloc(1 << 16);
    cr_assert_eq(ts_sh(js, 1 << 16, "build/bin/mpx matrix %s --rows precision.plugin --cols precision.amp.dtype "
                       "--metric accuracy --format json", dir), 0, "%s", js);
    json_error_t e;
    json_t *m = json_loads(js, 0, &e);
    cr_assert_not_null(m, "%s\n%s", e.text, js);
    static const struct { const char *row, *col, *run; } want[] = {
        { "amp", "bf16", "amp-bf16" }, { "amp", "fp16", "amp16" }, { "fp32", "\u2014", "fp32" },
    };
    json_t *cells = json_object_get(m, "cells");
    cr_expect_eq(json_array_size(cells), 3, "%s", js);
    for (size_t k = 0; k < 3; k++) {
        json_t *c = NULL, *x;
        size_t i;
        json_array_foreach(cells, i, x)
            if (!strcmp(json_string_value(json_object_get(x, "row")), want[k].row) &&
                !strcmp(json_string_value(json_object_get(x, "col")), want[k].col)) c = x;
        cr_assert_not_null(c, "no cell %s / %s:\n%s", want[k].row, want[k].col, js);
        json_t *runs = json_object_get(c, "runs");
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", dir, want[k].run);
        cr_expect(json_array_size(runs) == 1 && !strcmp(json_string_value(json_object_get(json_array_get(runs, 0), "dir")), path),
                  "cell %s / %s does not hold %s alone", want[k].row, want[k].col, path);
        snprintf(path, sizeof path, "%s/%s/run.json", dir, want[k].run);
        json_t *rec = ts_load_json(path);
        double acc = json_number_value(json_object_get(json_object_get(rec, "metrics"), "accuracy"));
        cr_expect_eq(stat_of(c, "accuracy", "mean"), acc, "cell %s / %s: %.17g, its run %.17g", want[k].row, want[k].col,
                     stat_of(c, "accuracy", "mean"), acc);
        json_decref(rec);
    }
    json_decref(m);
    free(js);
    /* a key no run has is still an error */
    cr_expect_eq(ts_sh(out, sizeof out, "build/bin/mpx matrix %s --rows precision.plugin --cols precision.amp.dtyp "
                       "--metric accuracy 2>&1", dir), 2, "%s", out);
}

/* Per-rank arrays in a record (metrics.replica_divergence.rel_l2, one value a rank): a
 * numeric path part indexes the array, a last part max, min or mean reduces it. Values
 * chosen by hand: [0.5, 2, 0.25, 1.25] -> element 1 = 2, max 2, min 0.25, mean 1. */
Test(matrix, a_per_rank_array_is_indexed_or_reduced)
{
    char *dir = ts_tmpdir("matrix-array"), path[PATH_MAX];
    put_run(dir, "fp32_1", "fp32", 1, 1e-4, "finished", NULL, 1, 1);
    snprintf(path, sizeof path, "%s/fp32_1/run.json", dir);
    json_error_t e;
    json_t *j = json_load_file(path, 0, &e);
    cr_assert_not_null(j, "%s", e.text);
    json_object_set_new(json_object_get(j, "metrics"), "replica_divergence",
                        json_pack("{s:[f, f, f, f]}", "rel_l2", 0.5, 2.0, 0.25, 1.25));
    cr_assert_eq(json_dump_file(j, path, 0), 0);
    json_decref(j);
    static const struct { const char *metric; double want; } cases[] = {
        { "metrics.replica_divergence.rel_l2.1", 2.0 }, { "metrics.replica_divergence.rel_l2.max", 2.0 },
        { "metrics.replica_divergence.rel_l2.min", 0.25 }, { "metrics.replica_divergence.rel_l2.mean", 1.0 },
        { "replica_divergence.rel_l2.3", 1.25 },
    };
    static char out[1 << 16];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        cr_assert_eq(ts_sh(out, sizeof out, "build/bin/mpx matrix %s --rows precision.plugin --metric %s --format json",
                           dir, cases[i].metric), 0, "%s", out);
        json_t *m = json_loads(out, 0, &e);
        cr_assert_not_null(m, "%s\n%s", e.text, out);
        cr_expect_float_eq(stat_of(json_array_get(json_object_get(m, "cells"), 0), cases[i].metric, "mean"),
                           cases[i].want, 1e-12, "%s", cases[i].metric);
        json_decref(m);
    }
    cr_expect_neq(ts_sh(out, sizeof out, "build/bin/mpx matrix %s --rows precision.plugin "
                        "--metric metrics.replica_divergence.rel_l2.9 2>&1", dir), 0, "past the end: %s", out);
}
