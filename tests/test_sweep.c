/* mpx sweep, run as a child like a user would: the cross product of the axes runs, each
 * cell's record carries its axis values; a second sweep runs nothing; a killed or stale
 * cell is run again and only it; failed cells wait for --retry-failed; cells whose plugin
 * is missing or declared incompatible are recorded as skipped with the reason, and show
 * up so in the matrix. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "support/keep.h"
#include "support/shell.h"

static json_t *load(const char *path)
{
    json_error_t e;
    json_t *j = json_load_file(path, 0, &e);
    cr_assert_not_null(j, "%s: %s (line %d)", path, e.text, e.line);
    return j;
}

/* A sweep file in `dir` over the toy config (absolute base); returns its path. */
static char *sweep_file(const char *dir, const char *name, const char *axes)
{
    char base[PATH_MAX], text[2 * PATH_MAX], *path = ts_keep(malloc(PATH_MAX));
    cr_assert_not_null(realpath("configs/toy.cfg", base));
    snprintf(text, sizeof text, "name = \"%s\";\nbase = \"%s\";\naxes = ( %s );\n", name, base, axes);
    snprintf(path, PATH_MAX, "%s/%s.cfg", dir, name);
    ts_write_file(path, text);
    return path;
}

/* mpx sweep with the outputs in dir/out and short runs. */
static int sweep(const char *dir, const char *file, const char *env, const char *extra, char *out, size_t len)
{
    return ts_sh(out, len, "%s build/bin/mpx sweep %s -s 'run.output_dir=\"%s/out\"' -s train.epochs=2 %s 2>/dev/null",
              env, file, dir, extra);
}

static json_t *record_of(json_t *cell)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/run.json", json_string_value(json_object_get(cell, "dir")));
    return load(path);
}

static const char *status_of(json_t *cell)
{
    static char status[64];
    json_t *r = record_of(cell);
    snprintf(status, sizeof status, "%s", json_string_value(json_object_get(r, "status")));
    json_decref(r);
    return status;
}

static long long mtime_ns(json_t *cell)
{
    char path[PATH_MAX];
    struct stat st;
    snprintf(path, sizeof path, "%s/run.json", json_string_value(json_object_get(cell, "dir")));
    cr_assert_eq(stat(path, &st), 0, "%s", path);
    return (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
}

static const char *const toy_cells[4] = { "0.05_1", "0.05_2", "0.1_1", "0.1_2" };

Test(sweep, runs_every_cell_then_nothing_then_only_the_killed_one)
{
    char *dir = ts_tmpdir("sweep"), out[65536], idx_path[PATH_MAX];
    char *file = sweep_file(dir, "t", "{ key = \"optimizer.lr\"; values = (0.05, 0.1); },"
                                      "{ key = \"run.seed\"; values = (1, 2); }");
    cr_assert_eq(sweep(dir, file, "", "", out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "4 finished") && strstr(out, "ran 4 now"), "%s", out);
    snprintf(idx_path, sizeof idx_path, "%s/out/t/sweep.json", dir);
    json_t *idx = load(idx_path);
    cr_assert_eq(json_array_size(json_object_get(idx, "cells")), 4);
    long long before[4];
    static const double lr[4] = { 0.05, 0.05, 0.1, 0.1 };
    static const int seed[4] = { 1, 2, 1, 2 };
    for (int i = 0; i < 4; i++) {
        json_t *c = ts_sweep_cell(idx, toy_cells[i]), *r = record_of(c);
        cr_expect_str_eq(json_string_value(json_object_get(r, "status")), "finished");
        /* the folder is <name>-<8 hex> under out/t, and the run used the cell's values */
        const char *folder = json_string_value(json_object_get(c, "folder"));
        cr_expect_eq(strlen(folder), strlen(toy_cells[i]) + 9, "%s", folder);
        cr_expect(strncmp(folder, toy_cells[i], strlen(toy_cells[i])) == 0 && folder[strlen(toy_cells[i])] == '-', "%s", folder);
        cr_expect_eq(strspn(folder + strlen(toy_cells[i]) + 1, "0123456789abcdef"), 8, "%s", folder);
        json_t *eff = json_object_get(json_object_get(r, "config"), "effective");
        cr_expect_float_eq(json_number_value(json_object_get(json_object_get(eff, "optimizer"), "lr")), lr[i], 1e-15);
        cr_expect_eq(json_integer_value(json_object_get(json_object_get(eff, "run"), "seed")), seed[i]);
        cr_expect_eq(json_integer_value(json_object_get(json_object_get(eff, "train"), "epochs")), 2);
        before[i] = mtime_ns(c);
        json_decref(r);
    }

    /* again: nothing runs, no record is rewritten */
    cr_assert_eq(sweep(dir, file, "", "", out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "ran 0 now"), "%s", out);
    for (int i = 0; i < 4; i++) cr_expect_eq(mtime_ns(ts_sweep_cell(idx, toy_cells[i])), before[i], "%s rewritten", toy_cells[i]);

    /* one cell killed by the fault hook: only it runs again */
    json_t *victim = ts_sweep_cell(idx, "0.1_2");
    char base[PATH_MAX];
    cr_assert_not_null(realpath("configs/toy.cfg", base));
    ts_sh(NULL, 0, "MPX_FAULT_AT_STEP=5 build/bin/mpx run %s -s 'run.output_dir=\"%s/out\"' -s train.epochs=2 "
       "-s optimizer.lr=0.1 -s run.seed=2 --out %s >/dev/null 2>&1", base, dir,
       json_string_value(json_object_get(victim, "dir")));
    cr_assert_str_eq(status_of(victim), "killed");
    cr_assert_eq(sweep(dir, file, "", "--dry-run", out, sizeof out), 0);
    cr_expect(strstr(out, "todo      0.1_2"), "%s", out);
    cr_expect(strstr(out, "finished  0.05_1"), "%s", out);
    cr_assert_eq(sweep(dir, file, "", "", out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "ran 1 now"), "%s", out);
    cr_expect_str_eq(status_of(victim), "finished");
    for (int i = 0; i < 3; i++) cr_expect_eq(mtime_ns(ts_sweep_cell(idx, toy_cells[i])), before[i], "%s rewritten", toy_cells[i]);

    /* a record left "running" by a process that is gone is stale: run again */
    json_t *r = record_of(victim);
    json_object_set_new(r, "status", json_string("running"));
    json_object_set_new(r, "pid", json_integer(2147483600));
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/run.json", json_string_value(json_object_get(victim, "dir")));
    cr_assert_eq(json_dump_file(r, path, 0), 0);
    json_decref(r);
    cr_assert_eq(sweep(dir, file, "", "", out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "ran 1 now"), "%s", out);
    cr_expect_str_eq(status_of(victim), "finished");
    json_decref(idx);
}

Test(sweep, cells_killed_by_the_fault_hook_are_unfinished_then_resumed)
{
    char *dir = ts_tmpdir("sweep"), out[65536], idx_path[PATH_MAX];
    char *file = sweep_file(dir, "k", "{ key = \"run.seed\"; values = (1, 2); }");
    cr_expect_eq(sweep(dir, file, "MPX_FAULT_AT_STEP=3", "", out, sizeof out), 1, "%s", out);
    cr_expect(strstr(out, "0 finished") && strstr(out, "2 unfinished"), "%s", out);
    snprintf(idx_path, sizeof idx_path, "%s/out/k/sweep.json", dir);
    json_t *idx = load(idx_path);
    cr_expect_str_eq(status_of(ts_sweep_cell(idx, "1")), "killed");
    cr_expect_str_eq(status_of(ts_sweep_cell(idx, "2")), "killed");
    cr_expect_eq(sweep(dir, file, "", "", out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "ran 2 now"), "%s", out);
    cr_expect_str_eq(status_of(ts_sweep_cell(idx, "1")), "finished");
    json_decref(idx);
}

Test(sweep, failed_cells_are_retried_only_when_asked)
{
    char *dir = ts_tmpdir("sweep"), out[65536], idx_path[PATH_MAX];
    /* 0 is refused by the configuration (never started); 600 fails at run time */
    char *file = sweep_file(dir, "f", "{ key = \"train.batch_size\"; values = (32, 0, 600); }");
    cr_expect_eq(sweep(dir, file, "", "", out, sizeof out), 1, "%s", out);
    cr_expect(strstr(out, "1 finished") && strstr(out, "2 failed") && strstr(out, "ran 2 now"), "%s", out);
    snprintf(idx_path, sizeof idx_path, "%s/out/f/sweep.json", dir);
    json_t *idx = load(idx_path), *r = record_of(ts_sweep_cell(idx, "0"));
    cr_expect_str_eq(json_string_value(json_object_get(r, "status")), "failed");
    const char *err = json_string_value(json_object_get(r, "error"));
    cr_expect(err && strstr(err, "train.batch_size"), "%s", err ? err : "(none)");
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(json_object_get(r, "cell"), "axes"), "train.batch_size")), 0);
    json_decref(r);
    cr_expect_str_eq(status_of(ts_sweep_cell(idx, "600")), "failed");
    long long t600 = mtime_ns(ts_sweep_cell(idx, "600"));
    cr_expect_eq(sweep(dir, file, "", "", out, sizeof out), 1);
    cr_expect(strstr(out, "ran 0 now"), "%s", out);
    cr_expect_eq(mtime_ns(ts_sweep_cell(idx, "600")), t600);
    cr_expect_eq(sweep(dir, file, "", "--retry-failed", out, sizeof out), 1);
    cr_expect(strstr(out, "ran 1 now"), "%s", out);
    json_decref(idx);
}

/* A precision plugin mpx knows (DESIGN's list) that is not installed in this tree: its
 * sweep cell is skipped (a name mpx does not know at all is an error before any cell,
 * tests/test_hostile_config.c). NULL when every known one is installed. */
static const char *known_but_absent_policy(void)
{
    static const char *const planned[] = { "fp16-noscale", "fp8-delayed", "mxfp8" };
    static char names[8192];
    ts_sh(names, sizeof names, "build/bin/mpx plugins 2>&1");
    for (size_t i = 0; i < sizeof planned / sizeof *planned; i++) {
        char row[64];
        snprintf(row, sizeof row, " %s ", planned[i]);
        if (!strstr(names, row)) return planned[i];
    }
    return NULL;
}

Test(sweep, incompatible_and_missing_plugins_are_skipped_with_the_reason)
{
    const char *absent = known_but_absent_policy();
    if (!absent) cr_skip_test("every precision plugin mpx knows is installed here");
    char *dir = ts_tmpdir("sweep"), out[65536], idx_path[PATH_MAX], plugins[PATH_MAX], axes[256], want[256];
    /* only the test plugin in its folder: the other test plugins are broken on purpose */
    snprintf(plugins, sizeof plugins, "%s/plugins", dir);
    cr_assert_eq(ts_sh(NULL, 0, "mkdir -p %s && cp build/test-plugins/incompat_precision.so %s/", plugins, plugins), 0);
    snprintf(axes, sizeof axes, "{ key = \"precision.plugin\"; values = (\"fp32\", \"incompat-test\", \"%s\"); }", absent);
    char *file = sweep_file(dir, "s", axes);
    char extra[PATH_MAX + 32];
    snprintf(extra, sizeof extra, "--plugin-dir %s", plugins);
    cr_expect_eq(sweep(dir, file, "", extra, out, sizeof out), 0, "%s", out); /* skipped cells do not fail a sweep */
    cr_expect(strstr(out, "1 finished, 2 skipped") && strstr(out, "ran 1 now"), "%s", out);
    snprintf(idx_path, sizeof idx_path, "%s/out/s/sweep.json", dir);
    json_t *idx = load(idx_path);

    json_t *c = ts_sweep_cell(idx, "incompat-test"), *r = record_of(c);
    cr_expect_str_eq(json_string_value(json_object_get(r, "status")), "skipped");
    const char *why = json_string_value(json_object_get(r, "reason"));
    cr_assert_not_null(why);
    cr_expect(strstr(why, "precision/incompat-test cannot be combined with optimizer/sgd") &&
              strstr(why, "momentum SGD is declared unsupported"), "%s", why);
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(json_object_get(r, "cell"), "axes"),
                                                       "precision.plugin")), "incompat-test");
    cr_expect_str_eq(json_string_value(json_object_get(c, "state")), "skipped");
    json_decref(r);

    r = record_of(ts_sweep_cell(idx, absent));
    cr_expect_str_eq(json_string_value(json_object_get(r, "status")), "skipped");
    why = json_string_value(json_object_get(r, "reason"));
    snprintf(want, sizeof want, "precision/%s not found (searched: ", absent);
    cr_expect(why && strstr(why, want) && strstr(why, plugins), "%s", why);
    json_decref(r);

    /* the matrix shows both as skipped with their reasons, and the finished cell's value */
    char cmd_out[65536];
    cr_assert_eq(ts_sh(cmd_out, sizeof cmd_out, "build/bin/mpx matrix %s/out/s --rows precision.plugin --cols optimizer.plugin "
                    "--metric final_loss 2>&1", dir), 0);
    snprintf(want, sizeof want, "| %s | skipped [", absent);
    cr_expect(strstr(cmd_out, "| incompat-test | skipped [") && strstr(cmd_out, want), "%s", cmd_out);
    cr_expect(strstr(cmd_out, "] skipped: precision/incompat-test cannot be combined with optimizer/sgd"), "%s", cmd_out);
    snprintf(want, sizeof want, "] skipped: precision/%s not found", absent);
    cr_expect(strstr(cmd_out, want), "%s", cmd_out);
    r = record_of(ts_sweep_cell(idx, "fp32"));
    snprintf(want, sizeof want, "| fp32 | %.4g |", json_real_value(json_object_get(json_object_get(r, "metrics"), "final_loss")));
    cr_expect(strstr(cmd_out, want), "want %s in\n%s", want, cmd_out);
    json_decref(r);

    /* resuming leaves the skipped records alone */
    long long t = mtime_ns(ts_sweep_cell(idx, "incompat-test"));
    cr_expect_eq(sweep(dir, file, "", extra, out, sizeof out), 0);
    cr_expect(strstr(out, "ran 0 now"), "%s", out);
    cr_expect_eq(mtime_ns(ts_sweep_cell(idx, "incompat-test")), t);
    json_decref(idx);
}

Test(sweep, bad_sweep_files_name_the_file_and_line)
{
    char *dir = ts_tmpdir("sweep"), out[8192], path[PATH_MAX];
    snprintf(path, sizeof path, "%s/bad.cfg", dir);
    ts_write_file(path, "base = \"../toy.cfg\";\naxes = ( { key = \"run.seed\"; values = (1, 1); } );\n");
    cr_expect_eq(ts_sh(out, sizeof out, "build/bin/mpx sweep %s 2>&1", path), 2);
    cr_expect(strstr(out, "bad.cfg:2") && strstr(out, "twice"), "%s", out);
    ts_write_file(path, "base = \"../toy.cfg\";\nfoo = 1;\naxes = ( { key = \"run.seed\"; values = (1); } );\n");
    cr_expect_eq(ts_sh(out, sizeof out, "build/bin/mpx sweep %s 2>&1", path), 2);
    cr_expect(strstr(out, "bad.cfg:2") && strstr(out, "'foo'"), "%s", out);
}

/* A cell's folder hashes what the run computes: train.checkpoint_every (how often the
 * training state is saved; a resumed run equals an uninterrupted one), train.update_chunk
 * (the optimizer's window; bitwise the same run) and run.output_dir leave it unchanged,
 * any other key moves it. A cell finished with another update_chunk is found finished. */
Test(sweep, cell_folders_ignore_where_and_how_often_state_is_saved)
{
    char *dir = ts_tmpdir("sweep-hash"), *file = sweep_file(dir, "h", "{ key = \"optimizer.lr\"; values = (0.05); }");
    char plain[4096], ckpt[4096], chunk[4096], other[4096], moved[4096];
    cr_assert_eq(sweep(dir, file, "", "--dry-run", plain, sizeof plain), 0);
    cr_assert_eq(sweep(dir, file, "", "-s train.checkpoint_every=3 --dry-run", ckpt, sizeof ckpt), 0);
    cr_assert_eq(sweep(dir, file, "", "-s train.update_chunk=37 --dry-run", chunk, sizeof chunk), 0);
    cr_assert_eq(sweep(dir, file, "", "-s train.log_every=3 --dry-run", other, sizeof other), 0);
    cr_assert_str_eq(ckpt, plain);
    cr_assert_str_eq(chunk, plain);
    cr_assert_str_neq(other, plain);
    cr_assert_eq(ts_sh(moved, sizeof moved, "build/bin/mpx sweep %s -s 'run.output_dir=\"%s/out\"' -s train.epochs=2 "
                       "--dry-run 2>/dev/null | sed 's|%s/out|X|'", file, dir, dir), 0);
    cr_assert_eq(ts_sh(other, sizeof other, "build/bin/mpx sweep %s -s 'run.output_dir=\"%s/elsewhere\"' -s "
                       "train.epochs=2 --dry-run 2>/dev/null | sed 's|%s/elsewhere|X|'", file, dir, dir), 0);
    cr_assert_str_eq(other, moved);
    cr_assert(strstr(plain, "todo "), "%s", plain);
    cr_assert_eq(sweep(dir, file, "", "-s train.update_chunk=37", other, sizeof other), 0, "%s", other);
    cr_assert_eq(sweep(dir, file, "", "--dry-run", chunk, sizeof chunk), 0);
    cr_assert(strstr(chunk, "finished ") && !strstr(chunk, "todo "), "the cell run with update_chunk = 37:\n%s", chunk);
    ts_sh(NULL, 0, "rm -rf %s", dir);

}

/* --max-cells N: at most N unfinished cells in order, then exit 1 (cells left); the next
 * call goes on where it stopped. */
Test(sweep, max_cells_runs_a_study_in_parts)
{
    char *dir = ts_tmpdir("sweep-parts"), out[65536];
    char *file = sweep_file(dir, "p", "{ key = \"optimizer.lr\"; values = (0.05, 0.1); },"
                                      "{ key = \"run.seed\"; values = (1, 2); }");
    cr_assert_eq(sweep(dir, file, "", "--max-cells 1", out, sizeof out), 1, "%s", out);
    cr_expect(strstr(out, "1 finished") && strstr(out, "3 unfinished; ran 1 now"), "%s", out);
    cr_assert_eq(sweep(dir, file, "", "--dry-run", out, sizeof out), 0);
    cr_expect(strstr(out, "finished  0.05_1") && strstr(out, "todo      0.05_2"), "%s", out);
    cr_assert_eq(sweep(dir, file, "", "--max-cells 2", out, sizeof out), 1, "%s", out);
    cr_expect(strstr(out, "3 finished") && strstr(out, "ran 2 now"), "%s", out);
    cr_assert_eq(sweep(dir, file, "", "--max-cells 5", out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "4 finished") && strstr(out, "ran 1 now"), "%s", out);
    ts_sh(NULL, 0, "rm -rf %s", dir);

}

/* set = (...): overrides every cell takes after the user's -s and before the axes; a
 * malformed item names the file and line. */
Test(sweep, set_overrides_every_cell)
{
    char *dir = ts_tmpdir("sweep-set"), base[PATH_MAX], text[3 * PATH_MAX], file[PATH_MAX], out[65536], rec[PATH_MAX];
    cr_assert_not_null(realpath("configs/toy.cfg", base));
    snprintf(text, sizeof text, "name = \"s\";\nbase = \"%s\";\nset = (\"train.max_steps=3\", \"run.seed=9\");\n"
             "axes = ( { key = \"run.seed\"; values = (4); } );\n", base);
    snprintf(file, sizeof file, "%s/s.cfg", dir);
    ts_write_file(file, text);
    cr_assert_eq(ts_sh(out, sizeof out, "build/bin/mpx sweep %s -s 'run.output_dir=\"%s/out\"' -s train.max_steps=50 "
                       "2>/dev/null", file, dir), 0, "%s", out);
    cr_assert_eq(ts_sh(rec, sizeof rec, "ls -d %s/out/s/4-*/run.json | head -1 | tr -d '\\n'", dir), 0);
    json_t *r = load(rec);
    json_t *eff = json_object_get(json_object_get(r, "config"), "effective");
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(eff, "train"), "max_steps")), 3, "set beats -s");
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(eff, "run"), "seed")), 4, "the axis beats set");
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(r, "metrics"), "steps")), 3);
    json_decref(r);
    snprintf(text, sizeof text, "base = \"%s\";\nset = (\"max_steps\");\naxes = ( { key = \"run.seed\"; values = (4); } );\n", base);
    ts_write_file(file, text);
    cr_assert_eq(ts_sh(out, sizeof out, "build/bin/mpx sweep %s --dry-run 2>&1", file), 2);
    cr_expect(strstr(out, "s.cfg:2: set: item 1 is not \"GROUP.KEY=VALUE\""), "%s", out);
    ts_sh(NULL, 0, "rm -rf %s", dir);
}

/* An axis past the 100,000-cell cap is refused before its values are rendered or compared
 * (before: the O(N^2) duplicate check ran first, 10^10 comparisons for 1.5 10^5 values,
 * and a 10^6-value axis hung); a value listed twice among 2 10^4 is found by sorting.
 * (Sizes kept to what libconfig parses in seconds under the sanitizer suite.) */
Test(sweep, a_huge_axis_is_refused_at_once, .timeout = 60)
{
    char *dir = ts_tmpdir("sweep-huge"), path[4096], out[8192];
    static const size_t counts[] = { 150000, 20000 };
    for (size_t k = 0; k < 2; k++) {
        snprintf(path, sizeof path, "%s/s%zu.cfg", dir, k);
        FILE *f = fopen(path, "w");
        cr_assert_not_null(f);
        fprintf(f, "base = \"%s/configs/toy.cfg\";\naxes = ( { key = \"run.seed\"; values = (", getenv("PWD"));
        for (size_t i = 0; i < counts[k]; i++) fprintf(f, "%s%zu", i ? ", " : "", k && i == counts[k] - 1 ? (size_t)17 : i);
        fputs("); } );\n", f);
        fclose(f);
        int rc = ts_sh(out, sizeof out, "build/bin/mpx sweep %s --dry-run 2>&1", path);
        cr_expect_eq(rc, 2, "%s", out);
        cr_expect(strstr(out, k ? "lists the value 17 twice" : "lists 150000 values: a sweep has at most 100000 cells"),
                  "%s", out);
    }
    ts_sh(NULL, 0, "rm -rf %s", dir);
}

/* SIGTERM to a serial `mpx sweep` while a cell runs: the cell gets it too, records itself
 * killed and ends (before, it went on alone, orphaned, holding its folder's lock, and the
 * next sweep was refused); the sweep exits 1 and the same command resumes the cell. */
Test(sweep, a_terminated_serial_sweep_takes_its_running_cell_with_it, .timeout = 120)
{
    char *dir = ts_tmpdir("sweep-term"), out[8192];
    char *file = sweep_file(dir, "toy", "{ key = \"run.seed\"; values = (1); }");
    cr_assert_eq(ts_sh(out, sizeof out,
                       "build/bin/mpx sweep %s -s 'run.output_dir=\"%s/out\"' -s train.epochs=200 "
                       "-s train.checkpoint_every=50 >%s/log 2>&1 & pid=$!; "
                       "for i in $(seq 300); do ls %s/out/toy/1-*/train_state/state.json >/dev/null 2>&1 && break; "
                       "sleep 0.1; done; kill -TERM $pid; wait $pid; echo $?", file, dir, dir, dir), 0);
    cr_expect_eq(strtol(out, NULL, 10), 1, "a terminated sweep exits 1: %s", out);
    /* the cell's mpx run is gone within a second, its record final */
    cr_expect_eq(ts_sh(out, sizeof out, "for i in $(seq 20); do pgrep -f -- '[-]-out %s/out/toy/1-' >/dev/null || exit 0; "
                       "sleep 0.1; done; exit 1", dir), 0, "the cell's mpx run outlived the sweep");
    cr_expect_eq(ts_sh(out, sizeof out, "grep -l '\"status\": \"killed\"' %s/out/toy/1-*/run.json", dir), 0,
                 "the cell's record does not say killed");
    /* the folder is free: the same command resumes the cell from its checkpoint */
    cr_expect_eq(ts_sh(out, sizeof out, "build/bin/mpx sweep %s -s 'run.output_dir=\"%s/out\"' -s train.epochs=200 "
                       "-s train.checkpoint_every=50 2>&1", file, dir), 0, "%s", out);
    cr_expect(strstr(out, "1 finished") != NULL, "%s", out);
    cr_expect_eq(ts_sh(out, sizeof out, "grep -q '\"resumed\"' %s/out/toy/1-*/run.json", dir), 0,
                 "the cell started again instead of resuming from its checkpoint");
}
