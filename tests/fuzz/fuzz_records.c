/* Run records as mpx matrix, mpx diff, mpx paired and mpx plot read them. The input is a
 * sweep folder of two runs, a and b, one section per file:
 *     --- NAME\n<the file's bytes, up to the next line that starts a section>
 * NAME one of `files` below (a file without a section is absent; an unknown NAME's section
 * is dropped), or "args": the --rows key, the --cols key ("-" for none) and the metrics,
 * separated by spaces. gnuplot is left out: plot.c reads a run in static functions, so
 * plot_run below does what its add_run does. */
#include <math.h>
#include <string.h>

#include "../../core/analysis/diff.h"
#include "../../core/analysis/matrix.h"
#include "../../core/analysis/paired.h"
#include "../../core/analysis/plot_scales.h"
#include "../../core/analysis/sweep_read.h"
#include "fuzz_input.h"

static const char *const files[] = {
    "sweep.json",
    "a/run.json", "a/metrics.csv", "a/diagnostics.csv", "a/question_scores.csv",
    "b/run.json", "b/metrics.csv", "b/diagnostics.csv", "b/question_scores.csv",
};
#define N_FILES (sizeof files / sizeof *files)
#define ARGS N_FILES   /* the section index of "args" */

typedef struct section {
    const uint8_t *p;
    size_t n;
    int present;
} section;

static FILE *null_out;
static char sweep[128], run_a[160], run_b[160];

/* A section's header at in[at]: its index (ARGS for "args"), -1 for an unknown name, -2
 * when the line is no header; *end is where its content starts. */
static int header_at(const uint8_t *in, size_t size, size_t at, size_t *end)
{
    if (size - at < 4 || memcmp(in + at, "--- ", 4)) return -2;
    const uint8_t *name = in + at + 4, *nl = memchr(name, '\n', size - at - 4);
    if (!nl) return -2;
    size_t len = (size_t)(nl - name);
    *end = (size_t)(nl - in) + 1;
    for (size_t i = 0; i < N_FILES; i++)
        if (strlen(files[i]) == len && !memcmp(name, files[i], len)) return (int)i;
    return len == 4 && !memcmp(name, "args", 4) ? (int)ARGS : -1;
}

static void split(const uint8_t *in, size_t size, section *sec)
{
    int cur = -1;
    size_t start = 0, at = 0, end;
    while (at < size) {
        int h = header_at(in, size, at, &end);
        if (h != -2) {
            if (cur >= 0) sec[cur] = (section){ in + start, at - start, 1 };
            cur = h;
            start = at = end;
            continue;
        }
        const uint8_t *nl = memchr(in + at, '\n', size - at);
        at = nl ? (size_t)(nl - in) + 1 : size;
    }
    if (cur >= 0) sec[cur] = (section){ in + start, size - start, 1 };
}

static void setup(void)
{
    snprintf(sweep, sizeof sweep, "%s/s", fuzz_dir());
    snprintf(run_a, sizeof run_a, "%s/a", sweep);
    snprintf(run_b, sizeof run_b, "%s/b", sweep);
    if (mkdir_p(sweep) || mkdir_p(run_a) || mkdir_p(run_b) || !(null_out = fopen("/dev/null", "w"))) abort();
}

/* What mpx plot reads of one run: its label, the loss, loss-scale and lr columns of
 * metrics.csv, the 8-bit scales of diagnostics.csv; written as gnuplot data to nowhere. */
static void plot_run(const char *dir, mpx_plot_scales *ps)
{
    static const char *const series[3] = { "loss", "loss_scale", "lr" };
    char err[4096], label[256];
    json_t *rec = mpx_run_load(dir, err, sizeof err);
    if (!rec) return;
    mpx_run_label(dir, rec, label, sizeof label);
    json_decref(rec);
    double *step = NULL, *v[3] = { NULL, NULL, NULL };
    size_t n = 0;
    if (mpx_run_column(dir, series[0], &step, &v[0], &n, err, sizeof err) == 0 &&
        mpx_plot_scales_add(ps, dir, label, err, sizeof err) == 0) {
        for (int s = 1; s < 3; s++) {
            double *st = NULL, *vals = NULL;
            size_t m = 0;
            if (!(v[s] = calloc(n ? n : 1, sizeof *v[s]))) abort();
            for (size_t i = 0; i < n; i++) v[s][i] = NAN;
            if (mpx_run_column(dir, series[s], &st, &vals, &m, err, sizeof err) == 0)
                for (size_t i = 0; i < m && i < n; i++) v[s][i] = vals[i];
            free(st);
            free(vals);
        }
        const double *cols[3] = { v[0], v[1], v[2] };
        mpx_gnuplot_block(null_out, label, step, n, cols, 3);
        mpx_gnuplot_quoted(null_out, label);
    }
    free(step);
    for (int s = 0; s < 3; s++) free(v[s]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!null_out) setup();
    section sec[N_FILES + 1];
    memset(sec, 0, sizeof sec);
    split(data, size, sec);
    for (size_t i = 0; i < N_FILES; i++) {
        char name[64];
        snprintf(name, sizeof name, "s/%s", files[i]);
        if (sec[i].present) fuzz_file(name, sec[i].p, sec[i].n);
        else {
            char path[256];
            snprintf(path, sizeof path, "%s/%s", fuzz_dir(), name);
            unlink(path);
        }
    }
    /* the arguments: a line of words, as a shell would pass them (no NUL, no newline) */
    char args[512] = "", *save = NULL;
    size_t an = sec[ARGS].n < sizeof args - 1 ? sec[ARGS].n : sizeof args - 1;
    memcpy(args, sec[ARGS].p ? (const char *)sec[ARGS].p : "", an);
    args[an] = 0;
    args[strcspn(args, "\n")] = 0;
    const char *row = strtok_r(args, " ", &save), *col = row ? strtok_r(NULL, " ", &save) : NULL;
    const char *metrics = col ? strtok_r(NULL, " ", &save) : NULL;
    if (!row) row = "precision.plugin";
    if (col && !strcmp(col, "-")) col = NULL;
    if (!metrics) metrics = "final_loss";

    char err[8192];
    /* mpx matrix s --rows ROW [--cols COL] --metric METRICS, in each format */
    mpx_matrix m;
    if (mpx_matrix_build(&m, sweep, row, col, metrics, NULL, err, sizeof err) == 0) {
        mpx_matrix_render(&m, "md", null_out);
        mpx_matrix_render(&m, "csv", null_out);
        mpx_matrix_render(&m, "json", null_out);
    }
    mpx_matrix_free(&m);

    /* mpx diff a b (with the timing lines), and a sweep against itself */
    mpx_diff_opts o = { 1e-6, null_out, 1 };
    mpx_diff_runs(run_a, run_b, &o, NULL, err, sizeof err);
    o.show_timing = 0;
    mpx_diff_sweeps(sweep, sweep, &o, err, sizeof err);

    /* mpx paired a b, and a,b against b (then also the interval over seeds) */
    const char *ab[2] = { run_a, run_b };
    mpx_paired_result pr;
    for (size_t n_a = 1; n_a <= 2; n_a++)
        if (mpx_paired_compare(ab, n_a, ab + 1, 1, 16, 1, &pr, err, sizeof err) == 0) {
            mpx_paired_print_md(&pr, "a", "b", null_out);
            mpx_paired_print_build_note(&pr, "fuzz", null_out);
        }

    /* mpx plot a b */
    mpx_plot_scales ps = { 0 };
    plot_run(run_a, &ps);
    plot_run(run_b, &ps);
    mpx_plot_scales_write(&ps, "/dev/null");
    if (ps.n) mpx_plot_scales_panel(null_out, &ps, "scales.tsv");
    mpx_plot_scales_free(&ps);
    return 0;
}
