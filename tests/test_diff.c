/* mpx diff on real toy runs: a run against itself prints nothing and exits 0; a changed
 * lr is named, with the first step where the loss curves part (found here from the two
 * metrics.csv files); timing fields never change the exit code; a metric moved beyond the
 * tolerance does; two sweeps pair their cells by axis values. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "support/shell.h"

static void toy_run(const char *dir, const char *extra)
{
    cr_assert_eq(ts_sh(NULL, 0, "build/bin/mpx run configs/toy.cfg -s train.epochs=1 %s --out %s >/dev/null 2>&1",
                    extra, dir), 0, "mpx run %s", extra);
}

/* Loss column (2nd) of metrics.csv. */
static size_t losses(const char *dir, double *out, size_t cap)
{
    char path[PATH_MAX], line[4096];
    snprintf(path, sizeof path, "%s/metrics.csv", dir);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s", path);
    cr_assert_not_null(fgets(line, sizeof line, f));
    size_t n = 0;
    double step;
    while (n < cap && fgets(line, sizeof line, f) && sscanf(line, "%lf,%lf", &step, &out[n]) == 2) n++;
    fclose(f);
    return n;
}

static void edit_record(const char *from, const char *to, const char *metric, double factor)
{
    char path[PATH_MAX];
    cr_assert_eq(ts_sh(NULL, 0, "mkdir -p %s && cp %s/metrics.csv %s/", to, from, to), 0);
    snprintf(path, sizeof path, "%s/run.json", from);
    json_t *j = json_load_file(path, 0, NULL);
    cr_assert_not_null(j);
    json_t *m = json_object_get(j, "metrics");
    if (metric) json_object_set_new(m, metric, json_real(json_number_value(json_object_get(m, metric)) * factor));
    /* timing and bookkeeping: never counted */
    json_object_set_new(m, "train_seconds", json_real(123.0));
    json_object_set_new(m, "tokens_per_s", json_real(1.0));
    json_object_set_new(json_object_get(j, "memory"), "rss_peak_bytes", json_integer(1));
    json_object_set_new(j, "pid", json_integer(1));
    json_object_set_new(j, "started", json_string("1999-01-01T00:00:00Z"));
    json_object_set_new(j, "command", json_string("something else"));
    json_object_set_new(json_object_get(j, "machine"), "hostname", json_string("elsewhere"));
    snprintf(path, sizeof path, "%s/run.json", to);
    cr_assert_eq(json_dump_file(j, path, 0), 0);
    json_decref(j);
}

Test(diff, runs)
{
    char *dir = ts_tmpdir("diff"), a[PATH_MAX], b[PATH_MAX], c[PATH_MAX], d[PATH_MAX], out[1 << 16];
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(b, sizeof b, "%s/b", dir);
    toy_run(a, "");
    toy_run(b, "-s optimizer.lr=0.1");

    /* a run against itself: nothing, exit 0 */
    cr_expect_eq(ts_sh(out, sizeof out, "build/bin/mpx diff %s %s", a, a), 0);
    cr_expect_str_eq(out, "");

    /* a changed lr: named, the first divergent step, exit 1 */
    static double la[4096], lb[4096];
    size_t na = losses(a, la, 4096), nb = losses(b, lb, 4096), first = 0;
    cr_assert_eq(na, nb);
    while (first < na && fabs(la[first] - lb[first]) <= 1e-6 * fmax(fabs(la[first]), fabs(lb[first]))) first++;
    cr_assert_lt(first, na, "the curves should part");
    cr_expect_eq(ts_sh(out, sizeof out, "build/bin/mpx diff %s %s", a, b), 1);
    cr_expect(strstr(out, "config optimizer.lr: 0.05 -> 0.1 (+100%)"), "%s", out);
    char want[64];
    snprintf(want, sizeof want, "loss: first parts at step %zu ", first);
    cr_expect(strstr(out, want), "want '%s' in\n%s", want, out);
    cr_expect(!strstr(out, "config run.seed"), "%s", out);
    cr_expect(!strstr(out, "precision "), "one policy, one descriptor: %s", out);

    /* another policy: its descriptor's differences, each a line, counted */
    char e[PATH_MAX];
    snprintf(e, sizeof e, "%s/e", dir);
    toy_run(e, "-s 'precision.plugin=\"pure-bf16\"'");
    cr_expect_eq(ts_sh(out, sizeof out, "build/bin/mpx diff %s %s", a, e), 1);
    cr_expect(strstr(out, "precision weights: fp32 -> bf16\n") && strstr(out, "precision islands: [\"layernorm\""),
              "%s", out);

    /* a rerun: the same bits, other times and another peak resident set; exit 0 */
    snprintf(c, sizeof c, "%s/a-again", dir);
    toy_run(c, "");
    cr_expect_eq(ts_sh(out, sizeof out, "build/bin/mpx diff %s %s", a, c), 0, "%s", out);
    cr_expect(!strstr(out, "metric") && !strstr(out, "loss:"), "%s", out);

    /* timing, peak RSS, pid, command, machine: printed at most, exit 0 */
    snprintf(c, sizeof c, "%s/c", dir);
    edit_record(a, c, NULL, 1);
    cr_expect_eq(ts_sh(out, sizeof out, "build/bin/mpx diff %s %s", a, c), 0, "%s", out);
    cr_expect(!strstr(out, "config") && !strstr(out, "metric") && !strstr(out, "loss:"), "%s", out);
    cr_expect(strstr(out, "measured memory.rss_peak_bytes: ") && strstr(out, " -> 1 ("), "%s", out);

    /* a metric within the tolerance, then beyond it */
    edit_record(a, c, "final_loss", 1 + 1e-9);
    cr_expect_eq(ts_sh(out, sizeof out, "build/bin/mpx diff %s %s", a, c), 0, "%s", out);
    snprintf(d, sizeof d, "%s/d", dir);
    edit_record(a, d, "final_loss", 1.5);
    cr_expect_eq(ts_sh(out, sizeof out, "build/bin/mpx diff %s %s", a, d), 1);
    cr_expect(strstr(out, "metric final_loss: ") && strstr(out, "(+50%)"), "%s", out);
    cr_expect_eq(ts_sh(out, sizeof out, "build/bin/mpx diff --tol 0.6 %s %s", a, d), 0, "%s", out);

    /* errors: exit 2 */
    cr_expect_eq(ts_sh(NULL, 0, "build/bin/mpx diff %s %s/nothing-here 2>/dev/null", a, dir), 2);
}

Test(diff, sweeps_pair_cells_by_axis_values)
{
    char *dir = ts_tmpdir("diff"), out[1 << 16];
    /* two "sweeps" without sweep.json: cells paired by the keys that vary (optimizer.lr);
     * the folder names differ on purpose */
    char s1[256], s2[256], p[PATH_MAX], q[PATH_MAX];
    snprintf(s1, sizeof s1, "%s/s1", dir);
    snprintf(s2, sizeof s2, "%s/s2", dir);
    snprintf(p, sizeof p, "%s/x", s1);
    toy_run(p, "");
    snprintf(p, sizeof p, "%s/y", s1);
    toy_run(p, "-s optimizer.lr=0.1");
    snprintf(q, sizeof q, "%s/other-name", s2);
    edit_record(p, q, NULL, 1);           /* lr 0.1, same results */
    snprintf(p, sizeof p, "%s/x", s1);
    snprintf(q, sizeof q, "%s/z", s2);
    edit_record(p, q, "accuracy", 0.5);   /* lr 0.05, accuracy halved */
    cr_expect_eq(ts_sh(out, sizeof out, "build/bin/mpx diff %s %s", s1, s2), 1);
    cr_expect(strstr(out, "\"optimizer.lr\":0.05") && strstr(out, "metric accuracy:") && strstr(out, "(-50%)"), "%s", out);
    cr_expect(!strstr(out, "\"optimizer.lr\":0.1"), "the equal pair printed something:\n%s", out);
    cr_expect_eq(ts_sh(out, sizeof out, "build/bin/mpx diff %s %s", s1, s1), 0);
    cr_expect_str_eq(out, "");
}
