/* Faults (issue 15): records are never lost, and a killed sweep resumes to the same end. A full disk (here /dev/full behind the
 * record's files) names the file and errno; a signal arriving while the disk is full
 * used to replace a good run.json with an empty file (the crash handler renamed after
 * a short write), now the previous record stays. */
#include <criterion/criterion.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "support/shell.h"

static char out[16384];

Test(faults, a_full_disk_names_the_file_and_errno, .timeout = 60)
{
    char *d = ts_tmpdir("faults"), path[512];
    /* metrics.csv is /dev/full's device node (char 1, 7): every write fails with ENOSPC. A
     * link to /dev/full would be refused as a link (test_run_folder). mknod needs
     * CAP_MKNOD: without it the test skips, saying so. */
    cr_assert_eq(ts_sh(NULL, 0, "mkdir -p %s/run", d), 0);
    if (ts_sh(NULL, 0, "mknod %s/run/metrics.csv c 1 7 2>/dev/null", d) != 0)
        cr_skip_test("cannot mknod a /dev/full node here (no CAP_MKNOD): the full-disk path is not tested");
    int rc = ts_sh(out, sizeof out, "build/bin/mpx run configs/toy.cfg -s train.max_steps=3 --out %s/run 2>&1", d);
    cr_expect_eq(rc, 1, "%s", out);
    char want[600];
    snprintf(want, sizeof want, "cannot append to %s/run/metrics.csv: No space left on device", d);
    cr_expect(strstr(out, want) != NULL, "no '%s' in\n%s", want, out);
    snprintf(path, sizeof path, "%s/run/run.json", d);
    json_t *j = ts_load_json(path);
    cr_expect_str_eq(json_string_value(json_object_get(j, "status")), "failed");
    cr_expect(strstr(json_string_value(json_object_get(j, "error")), "No space left on device") != NULL);
    json_decref(j);
}

Test(faults, a_signal_on_a_full_disk_keeps_the_previous_record, .timeout = 60)
{
    char *d = ts_tmpdir("faults"), path[512];
    /* the crash record's temporary is /dev/full's device node (a link there is refused as
     * a link before the run starts: test_run_folder) */
    cr_assert_eq(ts_sh(NULL, 0, "mkdir -p %s/run", d), 0);
    if (ts_sh(NULL, 0, "mknod %s/run/run.json.crash c 1 7 2>/dev/null", d) != 0)
        cr_skip_test("cannot mknod a /dev/full node here (no CAP_MKNOD): the full-disk crash record is not tested");
    int rc = ts_sh(out, sizeof out, "MPX_FAULT_AT_STEP=5 build/bin/mpx run configs/toy.cfg -s train.max_steps=10 "
                   "--out %s/run 2>&1; echo rc=$?", d);
    cr_expect_eq(rc, 0);
    cr_expect(strstr(out, "rc=134"), "not ended by SIGABRT (128 + 6):\n%s", out);
    /* the crash handler ran: its write to the full disk failed, and it removed its
     * temporary (the node) instead of renaming a torn file over the record */
    struct stat st;
    snprintf(path, sizeof path, "%s/run/run.json.crash", d);
    cr_expect(lstat(path, &st) != 0 && errno == ENOENT, "%s is still there", path);
    snprintf(path, sizeof path, "%s/run/run.json", d);
    cr_assert_eq(lstat(path, &st), 0);
    cr_expect(S_ISREG(st.st_mode) && st.st_size > 100, "run.json is a whole file (%lld bytes)", (long long)st.st_size);
    json_t *j = ts_load_json(path);
    cr_expect_str_eq(json_string_value(json_object_get(j, "status")), "running", "the last record written whole");
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(j, "progress"), "step")), 5);
    json_decref(j);
}

/* A run killed by SIGKILL (as the OOM killer kills) cannot write its record: it stays
 * "running" with a dead pid. The next mpx sweep records it as killed, says so, and
 * runs it again from its last training-state checkpoint. */
Test(faults, a_sigkilled_run_is_recorded_killed_by_the_next_sweep_and_resumed, .timeout = 120)
{
    char *d = ts_tmpdir("faults-oom"), path[1024], text[1024];
    snprintf(path, sizeof path, "%s/s.cfg", d);
    snprintf(text, sizeof text, "base = \"%s/configs/toy.cfg\";\naxes = ( { key = \"run.seed\"; values = (1); } );\n",
             getenv("PWD"));
    ts_write_file(path, text);
    const char *keys = "-s train.max_steps=20 -s train.checkpoint_every=10";
    cr_assert_eq(ts_sh(out, sizeof out, "build/bin/mpx sweep %s -s 'run.output_dir=\"%s/out\"' %s --dry-run", path, d, keys), 0);
    char *at = strstr(out, d), cell[512];
    cr_assert_not_null(at, "%s", out);
    cr_assert_eq(sscanf(at, "%511s", cell), 1);
    ts_sh(NULL, 0, "MPX_FAULT_AT_STEP=15 MPX_FAULT_SIGNAL=KILL build/bin/mpx run configs/toy.cfg %s -s run.seed=1 "
          "--out %s >/dev/null 2>&1; true", keys, cell);
    char rec[600];
    snprintf(rec, sizeof rec, "%s/run.json", cell);
    json_t *j = ts_load_json(rec);
    cr_assert_str_eq(json_string_value(json_object_get(j, "status")), "running", "SIGKILL leaves no handler's record");
    json_decref(j);
    cr_assert_eq(ts_sh(out, sizeof out, "build/bin/mpx sweep %s -s 'run.output_dir=\"%s/out\"' %s 2>&1", path, d, keys), 0,
                 "%s", out);
    cr_expect(strstr(out, "its run died without finishing its record (SIGKILL: the OOM killer or kill -9): recorded "
                          "as killed; running it again") != NULL, "%s", out);
    j = ts_load_json(rec);
    cr_expect_str_eq(json_string_value(json_object_get(j, "status")), "finished");
    cr_expect_eq(json_integer_value(json_object_get(json_array_get(json_object_get(j, "resumed"), 0), "step")), 10);
    json_decref(j);
}

/* mpx sweep itself killed (SIGKILL) at one point of a sweep (the sweep's fault hook,
 * MPX_SWEEP_FAULT=POINT:K, core/sweep/sweep_fault.c), then the same command again: the
 * sweep must end as an uninterrupted one does — the same matrix, every cell's loss curve
 * bitwise, every cell finished in sweep.json — having run again only what was lost. */
static const char *const sweep_keys = "-s train.max_steps=20 -s train.checkpoint_every=10";

static char *three_seed_sweep(void)
{
    char *d = ts_tmpdir("sweep-kill"), path[1024], text[1024];
    snprintf(path, sizeof path, "%s/s.cfg", d);
    snprintf(text, sizeof text, "base = \"%s/configs/toy.cfg\";\naxes = ( { key = \"run.seed\"; values = (1, 2, 3); } );\n",
             getenv("PWD"));
    ts_write_file(path, text);
    return d;
}

static int sweep_in(const char *d, const char *env, char *buf, size_t len)
{
    return ts_sh(buf, len, "%s build/bin/mpx sweep %s/s.cfg -s 'run.output_dir=\"%s/out\"' %s 2>&1", env, d, d, sweep_keys);
}

/* What two sweeps that agree must share: the matrix (no timing metric in it), each
 * cell's folder, state and metrics.csv rows without their timing columns. */
static char *sweep_outcome(const char *d)
{
    size_t cap = 1 << 16, n;
    char *all = malloc(cap), path[1024];
    cr_assert_not_null(all);
    cr_assert_eq(ts_sh(all, cap, "build/bin/mpx matrix %s/out/s --rows run.seed --format csv "
                       "--metric final_loss,eval_loss,accuracy,skipped_steps,updates,steps", d), 0);
    snprintf(path, sizeof path, "%s/out/s/sweep.json", d);
    json_t *idx = ts_load_json(path), *c;
    json_array_foreach(json_object_get(idx, "cells"), n, c) {
        char *rows = ts_metrics_rows(json_string_value(json_object_get(c, "dir")));
        size_t used = strlen(all);
        cr_assert_lt(used + strlen(rows) + 600, cap);
        snprintf(all + used, cap - used, "%s %s\n%s", json_string_value(json_object_get(c, "folder")),
                 json_string_value(json_object_get(c, "state")), rows);
        free(rows);
    }
    cr_assert_eq(n, 3, "sweep.json lists %zu cells", n);
    json_decref(idx);
    return all;
}

/* The record of cell k (1-based) of the sweep in d, once it says finished (an orphaned
 * run finishes by itself), within a minute. */
static json_t *finished_record(const char *d, size_t k)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/out/s/sweep.json", d);
    json_t *idx = ts_load_json(path);
    snprintf(path, sizeof path, "%s/run.json",
             json_string_value(json_object_get(json_array_get(json_object_get(idx, "cells"), k - 1), "dir")));
    json_decref(idx);
    for (int i = 0; i < 600; i++) {
        json_t *r = json_load_file(path, 0, NULL);
        const char *st = json_string_value(json_object_get(r, "status"));
        if (st && strcmp(st, "running")) return r;
        json_decref(r);
        nanosleep(&(struct timespec){ 0, 100000000 }, NULL);
    }
    cr_assert_fail("%s still says running after a minute", path);
    return NULL;
}

/* Kill the sweep at `point`, rerun it, and compare with an uninterrupted sweep; the
 * rerun must run `rerun` cells. */
static char *kill_sweep_at(const char *point, int rerun, const char *said)
{
    char *clean = three_seed_sweep(), *hit = three_seed_sweep(), env[128], want[64];
    cr_assert_eq(sweep_in(clean, "", out, sizeof out), 0, "%s", out);
    char *expect = sweep_outcome(clean);
    snprintf(env, sizeof env, "MPX_SWEEP_FAULT=%s MPX_SWEEP_FAULT_STEP=15", point);
    cr_assert_eq(sweep_in(hit, env, out, sizeof out), 128 + 9, "the sweep dies on SIGKILL at %s:\n%s", point, out);
    cr_expect(strstr(out, said) != NULL, "no '%s' in\n%s", said, out);
    if (!strncmp(point, "index:", 6)) {
        /* read before the rerun: the index as the last whole write left it (none before the
         * first), cell k's record written but not yet counted in it */
        char path[1024];
        snprintf(path, sizeof path, "%s/out/s/sweep.json", hit);
        size_t k = (size_t)atoi(point + 6), n;
        json_error_t e;
        json_t *idx = json_load_file(path, 0, &e), *c;
        if (k == 0) cr_expect_null(idx, "%s exists after its first write was cut", path);
        else {
            cr_assert_not_null(idx, "%s does not parse after the kill: %s", path, e.text);
            json_array_foreach(json_object_get(idx, "cells"), n, c)
                cr_expect_eq(!strcmp(json_string_value(json_object_get(c, "state")), "finished"), n + 1 < k,
                             "cell %zu is %s in the index left by the kill at %s", n + 1,
                             json_string_value(json_object_get(c, "state")), point);
            json_decref(idx);
        }
    }
    if (!strncmp(point, "orphan:", 7)) {
        json_t *r = finished_record(hit, (size_t)atoi(point + 7));
        cr_expect_str_eq(json_string_value(json_object_get(r, "status")), "finished", "the orphaned run finishes");
        json_decref(r);
    }
    cr_assert_eq(sweep_in(hit, "", out, sizeof out), 0, "the rerun after %s:\n%s", point, out);
    snprintf(want, sizeof want, "ran %d now", rerun);
    cr_expect(strstr(out, want) != NULL, "after %s: no '%s' in\n%s", point, want, out);
    char *got = sweep_outcome(hit);
    cr_expect_str_eq(got, expect, "killed at %s, then rerun: not the uninterrupted sweep", point);
    free(got);
    free(expect);
    return hit;
}

Test(faults, a_sweep_killed_with_its_running_cell_resumes_it_from_its_checkpoint, .timeout = 120)
{
    char *d = kill_sweep_at("cell:2", 2, "dying now (SIGKILL) with its running cell");
    cr_expect(strstr(out, "2: its run died without finishing its record") != NULL, "%s", out);
    json_t *r = finished_record(d, 2);
    cr_expect_eq(json_integer_value(json_object_get(json_array_get(json_object_get(r, "resumed"), 0), "step")), 10,
                 "cell 2 continued from its step-10 checkpoint");
    json_decref(r);
}

Test(faults, a_sweep_killed_while_its_cell_goes_on_counts_the_cell_when_it_finishes, .timeout = 120)
{
    kill_sweep_at("orphan:2", 1, "(its running cell goes on)");
}

Test(faults, a_sweep_killed_after_a_record_before_its_index_runs_only_the_rest, .timeout = 120)
{
    kill_sweep_at("record:2", 1, "after a cell's record was written");
}

Test(faults, a_sweep_killed_while_writing_its_first_index_runs_every_cell, .timeout = 120)
{
    kill_sweep_at("index:0", 3, "while writing sweep.json");
}

Test(faults, a_sweep_killed_while_writing_its_index_keeps_the_previous_one, .timeout = 120)
{
    kill_sweep_at("index:2", 1, "while writing sweep.json");
}

Test(faults, a_sweep_killed_between_two_cells_runs_only_the_rest, .timeout = 120)
{
    kill_sweep_at("between:1", 2, "between two cells");
}

/* Issue 46: a cell that failed because the disk was full was "failed" and never run
 * again without --retry-failed, while a killed one was. Its record now says
 * error_kind "disk_full" (errno ENOSPC) beside the error, and a plain rerun of the
 * sweep, once the disk has room, runs it again, saying why; a cell that failed on its
 * own (here: diverged at lr 1e30) stays failed. The full disk is a /dev/full node (char
 * 1, 7) as the cell's metrics.csv, as in a_full_disk_names_the_file_and_errno. */
Test(faults, a_disk_full_cell_is_run_again_by_a_plain_rerun_and_a_failed_one_is_not, .timeout = 90)
{
    char *d = ts_tmpdir("sweep-disk"), path[1024], text[1024], cells[2][512];
    snprintf(path, sizeof path, "%s/s.cfg", d);
    snprintf(text, sizeof text, "base = \"%s/configs/toy.cfg\";\naxes = ( { key = \"optimizer.lr\"; "
             "values = (0.05, 1e30); } );\n", getenv("PWD"));
    ts_write_file(path, text);
    const char *keys = "-s train.max_steps=5 -s train.epochs=1";
    cr_assert_eq(ts_sh(out, sizeof out, "build/bin/mpx sweep %s -s 'run.output_dir=\"%s/out\"' %s --dry-run", path, d,
                       keys), 0, "%s", out);
    char *at = out;
    for (int i = 0; i < 2; i++) {
        at = strstr(at, d);
        cr_assert_not_null(at, "%s", out);
        cr_assert_eq(sscanf(at, "%511s", cells[i]), 1);
        at += strlen(cells[i]);
    }
    cr_assert_eq(ts_sh(NULL, 0, "mkdir -p %s", cells[0]), 0);
    if (ts_sh(NULL, 0, "mknod %s/metrics.csv c 1 7 2>/dev/null", cells[0]) != 0)
        cr_skip_test("cannot mknod a /dev/full node here (no CAP_MKNOD): the disk-full sweep path is not tested");
    int rc = ts_sh(out, sizeof out, "build/bin/mpx sweep %s -s 'run.output_dir=\"%s/out\"' %s 2>&1", path, d, keys);
    cr_expect_eq(rc, 1, "%s", out);
    cr_expect(strstr(out, "disk-full: ") && strstr(out, "the next mpx sweep runs it again, without --retry-failed"),
              "%s", out);
    char rec[2][600];
    for (int i = 0; i < 2; i++) snprintf(rec[i], sizeof rec[i], "%s/run.json", cells[i]);
    json_t *j = ts_load_json(rec[0]);
    cr_expect_str_eq(json_string_value(json_object_get(j, "status")), "failed");
    cr_expect_str_eq(json_string_value(json_object_get(j, "error_kind")), "disk_full");
    cr_expect_str_eq(json_string_value(json_object_get(j, "errno")), "ENOSPC");
    json_decref(j);
    char *failed_before = ts_slurp(rec[1], NULL);
    j = ts_load_json(rec[1]);
    cr_expect_str_eq(json_string_value(json_object_get(j, "status")), "failed");
    cr_expect_null(json_object_get(j, "error_kind"), "a diverged cell is not a disk failure");
    json_decref(j);
    /* the disk has room again: a plain rerun runs the disk-full cell, not the failed one */
    cr_assert_eq(ts_sh(NULL, 0, "rm %s/metrics.csv", cells[0]), 0);
    rc = ts_sh(out, sizeof out, "build/bin/mpx sweep %s -s 'run.output_dir=\"%s/out\"' %s 2>&1", path, d, keys);
    cr_expect_eq(rc, 1, "the diverged cell is still failed: %s", out);
    cr_expect(strstr(out, "its run failed because the disk was full") && strstr(out, "running it again"), "%s", out);
    cr_expect(strstr(out, "1 finished, 0 skipped, 1 failed, 0 unfinished; ran 1 now"), "%s", out);
    j = ts_load_json(rec[0]);
    cr_expect_str_eq(json_string_value(json_object_get(j, "status")), "finished");
    cr_expect_null(json_object_get(j, "error_kind"));
    json_decref(j);
    char *failed_after = ts_slurp(rec[1], NULL);
    cr_expect_str_eq(failed_after, failed_before, "the failed cell was run again");
    free(failed_before);
    free(failed_after);
}
