/* mpx plot: two toy runs drawn to SVG (parsed enough to find the root element, its
 * closing tag and one legend entry per run) and to PNG (magic bytes); without gnuplot
 * the error says what to install. */
#include <criterion/criterion.h>
#include <limits.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "../core/analysis/sweep_read.h"
#include "support/shell.h"

static const char *two_runs(void)
{
    static char dir[64];
    snprintf(dir, sizeof dir, "%s", ts_tmpdir("plot"));
    for (int i = 0; i < 2; i++)
        cr_assert_eq(ts_sh(NULL, 0, "build/bin/mpx run configs/toy.cfg -s train.epochs=1 -s 'run.name=\"%s\"' "
                        "-s optimizer.lr=%s --out %s/%s >/dev/null 2>&1", i ? "beta_run" : "alpha_run",
                        i ? "0.1" : "0.05", dir, i ? "b" : "a"), 0);
    return dir;
}

/* Skip the XML declaration, comments and doctype; the first element must be <svg. */
static const char *root_element(const char *s)
{
    for (;;) {
        s += strspn(s, " \t\r\n");
        if (!strncmp(s, "<?", 2)) s = strstr(s, "?>") + 2;
        else if (!strncmp(s, "<!--", 4)) s = strstr(s, "-->") + 3;
        else if (!strncmp(s, "<!", 2)) s = strchr(s, '>') + 1;
        else return s;
    }
}

Test(plot, svg_with_one_legend_entry_per_run)
{
    const char *dir = two_runs();
    char svg[256], out[4096];
    snprintf(svg, sizeof svg, "%s/curves.svg", dir);
    cr_assert_eq(ts_sh(out, sizeof out, "build/bin/mpx plot %s/a %s/b -o %s 2>&1", dir, dir, svg), 0, "%s", out);
    size_t n;
    char *text = ts_slurp(svg, &n);
    const char *root = root_element(text);
    cr_expect(!strncmp(root, "<svg", 4) && (root[4] == ' ' || root[4] == '\n'), "root: %.40s", root);
    cr_expect(strstr(root, "xmlns=\"http://www.w3.org/2000/svg\""), "no SVG namespace");
    const char *end = text + n;
    while (end > text && strchr(" \t\r\n", end[-1])) end--;
    cr_expect(end - text > 6 && !strncmp(end - 6, "</svg>", 6), "does not end with </svg>");
    cr_expect(strstr(text, ">alpha_run<") && strstr(text, ">beta_run<"), "legend entries missing");
    cr_expect(strstr(text, ">loss scale<") && strstr(text, ">learning rate<"), "panels missing");
    free(text);
}

Test(plot, png_magic)
{
    const char *dir = two_runs();
    char png[256], out[4096];
    snprintf(png, sizeof png, "%s/curves.png", dir);
    cr_assert_eq(ts_sh(out, sizeof out, "build/bin/mpx plot %s/a -o %s 2>&1", dir, png), 0, "%s", out);
    size_t n;
    char *bytes = ts_slurp(png, &n);
    cr_expect(n > 8 && !memcmp(bytes, "\x89PNG\r\n\x1a\n", 8), "not a PNG");
    free(bytes);
}

Test(plot, errors_are_clear)
{
    const char *dir = two_runs();
    char out[4096], mpx[PATH_MAX];
    cr_assert_not_null(realpath("build/bin/mpx", mpx));
    cr_expect_eq(ts_sh(out, sizeof out, "env -u MPX_GNUPLOT PATH=/nonexistent %s plot %s/a -o %s/x.svg 2>&1",
                    mpx, dir, dir), 2);
    cr_expect(strstr(out, "gnuplot not found") && strstr(out, "gnuplot-nox"), "%s", out);
    cr_expect_eq(ts_sh(out, sizeof out, "build/bin/mpx plot %s/a -o %s/x.pdf 2>&1", dir, dir), 2);
    cr_expect(strstr(out, ".svg or .png"), "%s", out);
}

/* --smooth N: the loss drawn is the trailing mean of the last N steps (hand-computed for
 * losses 1..10 and N = 3), the other panels untouched (an lr and a loss scale that change
 * every step come out as written). A stand-in gnuplot keeps the data
 * file the real one would draw from. */
Test(plot, smooth_draws_the_trailing_mean)
{
    char *dir = ts_tmpdir("plot-smooth"), path[PATH_MAX], out[4096];
    snprintf(path, sizeof path, "%s/r", dir);
    cr_assert_eq(ts_sh(NULL, 0, "mkdir -p %s", path), 0);
    snprintf(path, sizeof path, "%s/r/run.json", dir);
    ts_write_file(path, "{\"status\": \"finished\", \"config\": {\"effective\": {\"run\": {\"name\": \"r\"}}}}\n");
    snprintf(path, sizeof path, "%s/r/metrics.csv", dir);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fputs("step,loss,lr,grad_norm,loss_scale,skipped,tokens_per_s,elapsed_s\n", f);
    /* lr and the loss scale change every step: smoothing them too would move them */
    for (int i = 0; i < 10; i++) fprintf(f, "%d,%d,%g,1,%d,0,1,1\n", i, i + 1, 0.125 * (i + 1), 1 << i);
    fclose(f);
    snprintf(path, sizeof path, "%s/fake-gnuplot", dir);
    char script[2048];
    snprintf(script, sizeof script, "#!/bin/sh\ncp \"$(grep -o \"/tmp/mpx-plot-[^/']*/curves.tsv\" \"$1\" | head -1)\" "
             "%s/data.tsv\nprintf x > %s/x.png\n", dir, dir);
    ts_write_file(path, script);
    cr_assert_eq(ts_sh(out, sizeof out, "chmod +x %s && MPX_GNUPLOT=%s build/bin/mpx plot %s/r -o %s/x.png --smooth 3 2>&1",
                       path, path, dir, dir), 0, "%s", out);
    snprintf(path, sizeof path, "%s/data.tsv", dir);
    char *data = ts_slurp(path, NULL);
    const double want[10] = { 1, 1.5, 2, 3, 4, 5, 6, 7, 8, 9 };
    const char *line = strchr(data, '\n') + 1; /* after "# r" */
    for (int i = 0; i < 10; i++) {
        double step, loss, scale, lr;
        cr_assert_eq(sscanf(line, "%lf\t%lf\t%lf\t%lf", &step, &loss, &scale, &lr), 4, "%s", line);
        cr_expect(step == i && loss == want[i] && scale == (double)(1 << i) && lr == 0.125 * (i + 1), "row %d: %s", i,
                  line);
        line = strchr(line, '\n') + 1;
    }
    free(data);
    cr_expect_eq(ts_sh(out, sizeof out, "build/bin/mpx plot %s/r -o %s/y.png --smooth 0 2>&1", dir, dir), 2);
    ts_sh(NULL, 0, "rm -rf %s", dir);
}

/* A run folder `name` under dir with 4 steps of metrics and the diagnostics.csv `diag`
 * (NULL: none). */
static void fake_run(const char *dir, const char *name, const char *diag)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    cr_assert_eq(ts_sh(NULL, 0, "mkdir -p %s", path), 0);
    snprintf(path, sizeof path, "%s/%s/run.json", dir, name);
    char json[256];
    snprintf(json, sizeof json, "{\"status\": \"finished\", \"config\": {\"effective\": {\"run\": {\"name\": \"%s\"}}}}\n", name);
    ts_write_file(path, json);
    snprintf(path, sizeof path, "%s/%s/metrics.csv", dir, name);
    ts_write_file(path, "step,loss,lr,grad_norm,loss_scale,skipped,tokens_per_s,elapsed_s\n"
                        "0,4,0.1,1,1,0,1,1\n1,3,0.1,1,1,0,1,1\n2,2,0.1,1,1,0,1,1\n3,1,0.1,1,1,0,1,1\n");
    if (!diag) return;
    snprintf(path, sizeof path, "%s/%s/diagnostics.csv", dir, name);
    ts_write_file(path, diag);
}

/* The scale-trace panel (diagnostics.csv's scale_min / scale_max, ABI 1.8): drawn when a
 * run has the columns, one line per group with its values as written (a group without
 * scales, e.g. MX's, and a torn last line left out); a run whose diagnostics.csv is older
 * (7 columns) or absent adds no line, and alone gives the three panels as before. */
Test(plot, scale_trace_panel_when_the_columns_exist)
{
    char *dir = ts_tmpdir("plot-scales"), path[PATH_MAX], out[4096];
    fake_run(dir, "new", "step,group,grad_nonzero,underflow_frac,updated,stalled_frac,median_update_ratio,"
                         "gemm_in_nonzero,gemm_saturated_frac,gemm_flushed_frac,scale_min,scale_max\n"
                         "0,attention,10,0,10,0,0.1,100,0,0.5,1,1\n"
                         "0,norm,10,0,10,0,0.1,,,,,\n"
                         "2,attention,10,0,10,0,0.1,100,0.01,0,0.25,4096\n"
                         "2,no_weight,,,,,,50,0,0,8,8\n"
                         "3,attention,10,0,10,0,0.1,100,0,0,2,");   /* torn: no newline */
    fake_run(dir, "old", "step,group,grad_nonzero,underflow_frac,updated,stalled_frac,median_update_ratio\n"
                         "0,attention,10,0,10,0,0.1\n");
    fake_run(dir, "none", NULL);
    snprintf(path, sizeof path, "%s/fake-gnuplot", dir);
    char script[2048];
    snprintf(script, sizeof script, "#!/bin/sh\ncp \"$1\" %s/plot.gp\nd=$(grep -o \"/tmp/mpx-plot-[^/']*/scales.tsv\" \"$1\" | head -1)\n"
             "[ -n \"$d\" ] && cp \"$d\" %s/scales.tsv\nprintf x > %s/x.png\n", dir, dir, dir);
    ts_write_file(path, script);
    cr_assert_eq(ts_sh(out, sizeof out, "chmod +x %s && MPX_GNUPLOT=%s build/bin/mpx plot %s/new %s/old %s/none -o %s/x.png 2>&1",
                       path, path, dir, dir, dir, dir), 0, "%s", out);
    snprintf(path, sizeof path, "%s/plot.gp", dir);
    char *gp = ts_slurp(path, NULL);
    cr_expect(strstr(gp, "set multiplot layout 4,1"), "no 4th panel:\n%s", gp);
    cr_expect(strstr(gp, "GEMM-input scale"), "no scale panel label");
    cr_expect(strstr(gp, "'new: attention'") && strstr(gp, "'new: no_weight'"), "line titles missing:\n%s", gp);
    cr_expect(!strstr(gp, "'new: norm'") && !strstr(gp, "'old:") && !strstr(gp, "'none:"), "lines without scales:\n%s", gp);
    free(gp);
    snprintf(path, sizeof path, "%s/scales.tsv", dir);
    char *tsv = ts_slurp(path, NULL);
    cr_expect_str_eq(tsv, "# new: attention\n0\t1\t1\n2\t0.25\t4096\n\n\n# new: no_weight\n2\t8\t8\n\n\n");
    free(tsv);
    /* the older run alone: three panels, no scale data */
    cr_assert_eq(ts_sh(out, sizeof out, "rm -f %s/scales.tsv && MPX_GNUPLOT=%s/fake-gnuplot build/bin/mpx plot %s/old -o %s/x.png 2>&1",
                       dir, dir, dir, dir), 0, "%s", out);
    snprintf(path, sizeof path, "%s/plot.gp", dir);
    gp = ts_slurp(path, NULL);
    cr_expect(strstr(gp, "set multiplot layout 3,1") && !strstr(gp, "scales.tsv"), "older run:\n%s", gp);
    free(gp);
    ts_sh(NULL, 0, "rm -rf %s", dir);
}

/* A sweep index whose cell for this folder has no name string (a hand-edited or damaged
 * sweep.json): the legend falls back to run.name instead of printf's "(null)" (found
 * reading sweep_read.c for make fuzz's fuzz_records; %s of NULL is undefined). */
Test(plot, a_cell_without_a_name_string_is_labelled_by_run_name)
{
    const char *dir = ts_tmpdir("plot-label");
    char path[PATH_MAX], run[PATH_MAX], label[256];
    snprintf(path, sizeof path, "%s/sweep.json", dir);
    ts_write_file(path, "{\"cells\": [{\"folder\": \"a\", \"name\": 7}]}");
    snprintf(run, sizeof run, "%s/a", dir);
    cr_assert_eq(ts_sh(NULL, 0, "mkdir -p %s", run), 0);
    json_t *rec = json_pack("{s:{s:{s:{s:s}}}}", "config", "effective", "run", "name", "alpha_run");
    cr_assert_str_eq(mpx_run_label(run, rec, label, sizeof label), "alpha_run");
    /* and the index is read: a cell with its name string is labelled by it */
    ts_write_file(path, "{\"cells\": [{\"folder\": \"a\", \"name\": \"cell_a\"}]}");
    cr_expect_str_eq(mpx_run_label(run, rec, label, sizeof label), "cell_a");
    json_decref(rec);
}

/* Cells of different sweeps share names (protocol A's fp32 and B8's fp32 are both
 * "fp32_1"; the lp-grads and fixed sweeps both have "bf16-master_1"): a repeated label gets
 * the folders above its run, one level at a time until it is unique; a unique one stays
 * as it is; a path with nothing above the run adds the folder in brackets. Written out by
 * hand for each case (before: two legend entries "bf16-master_1"). */
typedef struct alike { int before; char label[256]; const char *dir; } alike;

Test(plot, repeated_labels_get_their_sweep_folders)
{
    static const struct { const char *dir, *label, *want; } c[] = {
        { "results/r/ranks8/fp32/fp32_1-ff", "fp32_1", "ranks8/fp32/fp32_1" },
        { "results/r/ranks8-full/fp32/fp32_1-65/", "fp32_1", "ranks8-full/fp32/fp32_1" },
        { "results/r/ranks8/fixed/bf16-master_1-47", "bf16-master_1", "fixed/bf16-master_1" },
        { "results/r/ranks8/lp-grads/bf16-master_1-aa", "bf16-master_1", "lp-grads/bf16-master_1" },
        { "results/r/ranks8/lp-grads/bf16-master_2-06", "bf16-master_2", "bf16-master_2" },
        { "a", "same", "same (a)" },
        { "./b", "same", "same (./b)" },
    };
    enum { N = sizeof c / sizeof *c };
    alike runs[N];
    for (size_t i = 0; i < N; i++) {
        runs[i].before = (int)i;
        snprintf(runs[i].label, sizeof runs[i].label, "%s", c[i].label);
        runs[i].dir = c[i].dir;
    }
    cr_assert_eq(mpx_run_labels_distinct(runs, N, sizeof *runs, offsetof(alike, label),
                                         offsetof(alike, dir), sizeof runs[0].label), 0);
    for (size_t i = 0; i < N; i++) {
        cr_expect_str_eq(runs[i].label, c[i].want, "%s", c[i].dir);
        cr_expect_eq(runs[i].before, (int)i, "the field before the label was written over");
    }
}

/* The same through mpx plot: two toy runs named alike in two folders are two entries. */
Test(plot, two_runs_named_alike_are_two_legend_entries)
{
    const char *dir = ts_tmpdir("plot-alike");
    char svg[PATH_MAX], out[4096];
    for (int i = 0; i < 2; i++)
        cr_assert_eq(ts_sh(NULL, 0, "build/bin/mpx run configs/toy.cfg -s train.epochs=1 -s 'run.name=\"alike_run\"' "
                        "--out %s/%s/r >/dev/null 2>&1", dir, i ? "fixed" : "lp"), 0);
    snprintf(svg, sizeof svg, "%s/curves.svg", dir);
    /* lp/r named twice is drawn once (it would be "alike_run (DIR)" twice otherwise) */
    cr_assert_eq(ts_sh(out, sizeof out, "build/bin/mpx plot %s/lp/r %s/fixed/r %s/lp/r -o %s 2>&1", dir, dir, dir, svg),
                 0, "%s", out);
    char *text = ts_slurp(svg, NULL);
    cr_expect(strstr(text, ">lp/alike_run<") && strstr(text, ">fixed/alike_run<"), "legend entries not told apart");
    cr_expect_null(strstr(text, "alike_run ("), "a run named twice was drawn twice");
    free(text);
    ts_sh(NULL, 0, "rm -rf %s", dir);
}
