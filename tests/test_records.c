/* Run records: a finished toy run, a run that fails at run time, and a run killed by the
 * fault hook all leave a parseable run.json that says what happened, and a readable
 * metrics.csv. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "support/keep.h"
#include "support/shell.h"

static char *tmp_dir(void)
{
    char *d = ts_keep(strdup("/tmp/mpx-records-XXXXXX"));
    cr_assert_not_null(mkdtemp(d));
    return d;
}

/* Runs the toy config with extra arguments; returns the raw wait status. */
static int run_toy(const char *out, const char *env, const char *extra)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s build/bin/mpx run configs/toy.cfg -s 'run.output_dir=\"%s\"' %s >/dev/null 2>&1",
             env, out, extra);
    return system(cmd);
}

static json_t *load_record(const char *out)
{
    char path[512];
    snprintf(path, sizeof path, "%s/toy/run.json", out);
    return ts_load_json(path);
}

/* Rows of metrics.csv: every complete line has as many fields as the header. */
static int csv_rows(const char *out, double *first_loss, double *last_loss)
{
    char path[512], line[4096];
    snprintf(path, sizeof path, "%s/toy/metrics.csv", out);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "no %s", path);
    cr_assert_not_null(fgets(line, sizeof line, f));
    cr_assert(strncmp(line, "step,loss,lr", 12) == 0, "header: %s", line);
    int fields = 1;
    for (char *p = line; *p; p++) fields += *p == ',';
    int rows = 0;
    while (fgets(line, sizeof line, f)) {
        if (!strchr(line, '\n')) break; /* a torn last line is tolerated */
        int n = 1;
        for (char *p = line; *p; p++) n += *p == ',';
        cr_assert_eq(n, fields, "row %d: %s", rows, line);
        double step, loss;
        cr_assert_eq(sscanf(line, "%lf,%lf", &step, &loss), 2, "%s", line);
        cr_assert_eq((int)step, rows);
        if (rows == 0) *first_loss = loss;
        *last_loss = loss;
        rows++;
    }
    fclose(f);
    return rows;
}

/* The mean of the last `last` losses of metrics.csv; returns how many it took. */
static int csv_tail_mean(const char *out, int last, double *mean)
{
    char path[512], line[4096];
    snprintf(path, sizeof path, "%s/toy/metrics.csv", out);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "no %s", path);
    cr_assert_not_null(fgets(line, sizeof line, f));
    static double loss[1 << 16];
    int n = 0;
    while (n < (1 << 16) && fgets(line, sizeof line, f)) {
        double step;
        cr_assert_eq(sscanf(line, "%lf,%lf", &step, &loss[n]), 2, "%s", line);
        n++;
    }
    fclose(f);
    int from = n > last ? n - last : 0;
    double sum = 0;
    for (int i = from; i < n; i++) sum += loss[i];
    *mean = sum / (n - from);
    return n - from;
}

Test(records, finished_toy_run_learns)
{
    char *out = tmp_dir();
    int st = run_toy(out, "", "");
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
    json_t *j = load_record(out);
    cr_expect_str_eq(json_string_value(json_object_get(j, "status")), "finished");
    cr_expect(json_is_null(json_object_get(j, "error")));
    json_t *m = json_object_get(j, "metrics");
    double first = json_real_value(json_object_get(m, "first_loss"));
    double final = json_real_value(json_object_get(m, "final_loss"));
    cr_expect_lt(final, 0.5 * first, "loss %g -> %g", first, final);
    cr_expect_gt(json_real_value(json_object_get(m, "accuracy")), 50.0); /* chance: 12.5 */
    double f = 0, l = 0;
    int rows = csv_rows(out, &f, &l);
    cr_expect_eq(rows, json_integer_value(json_object_get(m, "steps")));
    cr_expect_lt(l, f);
    /* final_loss_mean: the mean of the last 200 steps' losses (all when fewer), here from
     * metrics.csv's column (9 significant digits) */
    double tail = 0;
    int used = csv_tail_mean(out, 200, &tail);
    cr_expect_eq(used, rows < 200 ? rows : 200);
    double mean = json_real_value(json_object_get(m, "final_loss_mean"));
    cr_expect(fabs(mean - tail) <= 1e-7 * fabs(tail), "final_loss_mean %.17g, metrics.csv's last %d: %.17g", mean,
              used, tail);
    cr_expect_neq(mean, final, "one step's loss is not the mean of %d", used);
    /* every effective key is recorded, defaults included */
    json_t *eff = json_object_get(json_object_get(j, "config"), "effective");
    cr_expect(json_is_number(json_object_get(json_object_get(json_object_get(eff, "optimizer"), "sgd"), "dampening")));
    json_decref(j);
}

Test(records, notes_are_kept_in_the_record)
{
    /* a note printed on stderr (a no_decay pattern that matches nothing) is in run.json too */
    char *out = tmp_dir();
    int st = run_toy(out, "", "-s 'optimizer.no_decay=[\"bias\", \"zzz\"]'");
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
    json_t *j = load_record(out), *notes = json_object_get(j, "notes");
    cr_assert(json_is_array(notes), "no notes in run.json");
    cr_expect_eq(json_array_size(notes), 1);
    cr_expect_str_eq(json_string_value(json_array_get(notes, 0)), "optimizer.no_decay: \"zzz\" matches no parameter");
    json_decref(j);
    /* a run killed on a signal keeps them too (the record written before the first step) */
    char *killed = tmp_dir();
    st = run_toy(killed, "MPX_FAULT_AT_STEP=3", "-s 'optimizer.no_decay=[\"zzz\"]'");
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 128 + 6, "status %d", st);
    j = load_record(killed);
    cr_expect_str_eq(json_string_value(json_object_get(j, "status")), "killed");
    notes = json_object_get(j, "notes");
    cr_expect(json_is_array(notes) && json_array_size(notes) == 1, "notes of the killed run");
    cr_expect_str_eq(json_string_value(json_array_get(notes, 0)), "optimizer.no_decay: \"zzz\" matches no parameter");
    json_decref(j);
    /* and a run with nothing to say has no "notes" */
    char *quiet = tmp_dir();
    st = run_toy(quiet, "", "");
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
    j = load_record(quiet);
    cr_expect_null(json_object_get(j, "notes"));
    json_decref(j);
}

/* The data's notes come after the record is opened (the SQuAD task cuts two questions of
 * tiny_squad): the record is synced before the first step, so a run killed there has them. */
Test(records, data_notes_reach_a_run_killed_before_its_first_step)
{
    char *out = tmp_dir(), cmd[1024];
    snprintf(cmd, sizeof cmd, "MPX_FAULT_AT_STEP=0 build/bin/mpx run configs/tiny_squad.cfg --out %s/run >/dev/null 2>&1",
             out);
    int st = system(cmd);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 128 + 6, "status %d", st);
    char path[512];
    snprintf(path, sizeof path, "%s/run/run.json", out);
    json_t *j = ts_load_json(path), *notes = json_object_get(j, "notes");
    cr_expect_str_eq(json_string_value(json_object_get(j, "status")), "killed");
    cr_assert(json_is_array(notes) && json_array_size(notes) >= 1, "no notes in the killed run's record");
    cr_expect(strstr(json_string_value(json_array_get(notes, 0)), "questions cut to 16 query sub-tokens"), "%s",
              json_string_value(json_array_get(notes, 0)));
    json_decref(j);
}

Test(records, a_run_that_fails_says_why)
{
    char *out = tmp_dir();
    int st = run_toy(out, "", "-s train.batch_size=600");
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1, "status %d", st);
    json_t *j = load_record(out);
    cr_expect_str_eq(json_string_value(json_object_get(j, "status")), "failed");
    const char *err = json_string_value(json_object_get(j, "error"));
    cr_assert_not_null(err);
    cr_expect(strstr(err, "train.batch_size 600: the toy task takes at most 512 rows"), "%s", err);
    json_decref(j);
}

Test(records, fault_hook_leaves_a_killed_record_and_readable_metrics)
{
    char *out = tmp_dir();
    int st = run_toy(out, "MPX_FAULT_AT_STEP=7", "");
    /* system() runs the shell, which reports the child's death as 128 + signal */
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 128 + 6, "status %d", st);
    json_t *j = load_record(out);
    cr_expect_str_eq(json_string_value(json_object_get(j, "status")), "killed");
    cr_expect_eq(json_integer_value(json_object_get(j, "signal")), 6);
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(j, "progress"), "step")), 7);
    double f = 0, l = 0;
    cr_expect_eq(csv_rows(out, &f, &l), 7);
    /* nothing half-written is left beside the record (mpx.lock is the folder lock: its pid) */
    char cmd[512];
    snprintf(cmd, sizeof cmd, "ls %s/toy | grep -v -x -e run.json -e metrics.csv -e diagnostics.csv -e mpx.lock", out);
    FILE *p = popen(cmd, "r");
    char extra[256] = "";
    cr_expect_null(fgets(extra, sizeof extra, p), "left over: %s", extra);
    pclose(p);
    json_decref(j);
}
