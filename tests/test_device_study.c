/* make device-study (tests/device-study.sh) is the one command a session lent a GPU runs,
 * with minutes to spare: it must not rot between such sessions. Its smoke mode runs the
 * same steps on backend/cpu, cut down (2 steps, 8 dev questions a cell): the nine cells of
 * results/bingbert-repro/gpu.cfg through `mpx sweep --jobs` (3 at a time here, 9 on the
 * device), the progress lines, and the tables from the records. Needs make data and make model (skipped, visibly,
 * without them). */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "support/shell.h"

/* Under the sanitizers (tests/sanitize.sh) each of the nine cells parses SQuAD and loads
 * MiniLM several times slower: 257-280 s on 2 cores, against about 50 s without. */
#if defined(__SANITIZE_ADDRESS__)
#define SMOKE_TIMEOUT 600
#else
#define SMOKE_TIMEOUT 300
#endif

Test(device_study, the_smoke_run_finishes_the_nine_cells_and_writes_their_tables, .timeout = SMOKE_TIMEOUT)
{
    if (access("datasets/data/train-v1.1.json", R_OK) || access("models/checkpoints/minilm-l6/model.safetensors", R_OK))
        cr_skip_test("needs make data and make model");
    static char out[1 << 16];
    int rc = ts_sh(out, sizeof out, "MPX_DEVICE_STUDY_SMOKE=1 MPX_DEVICE_STUDY_KEEP=1 MPX_DEVICE_STUDY_EVERY=5 "
                   "bash tests/device-study.sh 2>&1");
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "9 cells: 9 finished, 0 skipped, 0 failed") != NULL, "%s", out);
    const char *at = strstr(out, "smoke run on backend/cpu in ");
    cr_assert(at, "%s", out);
    char dir[512];
    cr_assert_eq(sscanf(at + strlen("smoke run on backend/cpu in "), "%511[^,]", dir), 1);
    /* the tables: one row per mode over the three seeds, and each 16-bit mode paired
     * against fp32 on the same 8 questions */
    char path[700];
    snprintf(path, sizeof path, "%s/gpu/tables.md", dir);
    char *tables = ts_slurp(path, NULL);
    cr_assert(tables, "no %s", path);
    cr_expect(strstr(tables, "| precision.plugin \\ run.seed | 1 | 2 | 3 |"), "%s", tables);
    for (int i = 0; i < 3; i++) {
        static const char *const mode[3] = { "| fp32 | ", "| fp16-scaled | ", "| bf16-master | " };
        cr_expect(strstr(tables, mode[i]), "%s: %s", mode[i], tables);
    }
    cr_expect(strstr(tables, "| fp16-scaled | 8 | ") && strstr(tables, "| bf16-master | 8 | "), "%s", tables);
    free(tables);
    /* a cell's record: the cpu backend, the cut-down data, the sweep's seed */
    snprintf(path, sizeof path, "%s/gpu/bf16-master_2-*/run.json", dir);
    char cmd[800];
    snprintf(cmd, sizeof cmd, "cat %s", path);
    rc = ts_sh(out, sizeof out, "%s", cmd);
    cr_assert_eq(rc, 0, "%s", out);
    json_error_t e;
    json_t *r = json_loads(out, 0, &e);
    cr_assert(r, "%s", e.text);
    json_t *eff = json_object_get(json_object_get(r, "config"), "effective");
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(eff, "backend"), "plugin")), "cpu");
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(json_object_get(eff, "data"), "squad"),
                                                    "dev_questions")), 8);
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(eff, "run"), "seed")), 2);
    cr_expect_str_eq(json_string_value(json_object_get(r, "status")), "finished");
    json_decref(r);
    ts_sh(NULL, 0, "rm -rf %s", dir);
}
