/* Faults (issue 15): records are never lost. A full disk (here /dev/full behind the
 * record's files) names the file and errno; a signal arriving while the disk is full
 * used to replace a good run.json with an empty file (the crash handler renamed after
 * a short write), now the previous record stays. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "support/shell.h"

static char out[16384];

Test(faults, a_full_disk_names_the_file_and_errno, .timeout = 60)
{
    char *d = ts_tmpdir("faults"), path[512];
    cr_assert_eq(ts_sh(NULL, 0, "mkdir -p %s/run && ln -s /dev/full %s/run/metrics.csv", d, d), 0);
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
    cr_assert_eq(ts_sh(NULL, 0, "mkdir -p %s/run && ln -s /dev/full %s/run/run.json.crash", d, d), 0);
    int rc = ts_sh(out, sizeof out, "MPX_FAULT_AT_STEP=5 build/bin/mpx run configs/toy.cfg -s train.max_steps=10 "
                   "--out %s/run 2>&1; true", d);
    cr_expect_eq(rc, 0);
    snprintf(path, sizeof path, "%s/run/run.json", d);
    struct stat st;
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
