#include "plot.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "plot_scales.h"
#include "sweep_read.h"

static const char *const series[3] = { "loss", "loss_scale", "lr" };
static const char *const ylabels[3] = { "loss", "loss scale", "learning rate" };

typedef struct curve {
    char label[256];
    char *dir;          /* the run folder */
    double *step;
    double *v[3];       /* per series, NaN where absent */
    size_t n;
} curve;

typedef struct plot {
    curve *c;
    size_t n, cap;
    size_t smooth;      /* the loss is a trailing mean over this many steps (0, 1: raw) */
    mpx_plot_scales scales; /* 8-bit GEMM-input scales per group (diagnostics.csv), a 4th panel */
} plot;

static int add_run(plot *p, const char *dir, char *err, size_t errlen)
{
    for (size_t i = 0; i < p->n; i++)
        if (!strcmp(p->c[i].dir, dir)) return 0;   /* named twice: one curve */
    json_t *rec = mpx_run_load(dir, err, errlen);
    if (!rec) return -1;
    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 8;
        curve *grown = realloc(p->c, cap * sizeof *grown);
        if (!grown) { json_decref(rec); snprintf(err, errlen, "out of memory"); return -1; }
        p->c = grown;
        p->cap = cap;
    }
    /* counted at once: what a failure below leaves allocated is freed with the plot */
    curve *c = &p->c[p->n++];
    memset(c, 0, sizeof *c);
    mpx_run_label(dir, rec, c->label, sizeof c->label);
    json_decref(rec);
    if (!(c->dir = strdup(dir))) { snprintf(err, errlen, "out of memory"); return -1; }
    if (mpx_run_column(dir, "loss", &c->step, &c->v[0], &c->n, err, errlen)) return -1;
    for (int s = 1; s < 3; s++) {
        double *steps = NULL;
        size_t n = 0;
        char ignore[256];
        c->v[s] = calloc(c->n ? c->n : 1, sizeof *c->v[s]);
        if (!c->v[s]) { snprintf(err, errlen, "out of memory"); return -1; }
        for (size_t i = 0; i < c->n; i++) c->v[s][i] = NAN;
        double *vals = NULL;
        if (mpx_run_column(dir, series[s], &steps, &vals, &n, ignore, sizeof ignore) == 0)
            for (size_t i = 0; i < n && i < c->n; i++) c->v[s][i] = vals[i];
        free(steps);
        free(vals);
    }
    return 0;
}

/* A run folder, or every run cell of a sweep folder that has a metrics.csv. */
static int add_path(plot *p, const char *path, char *err, size_t errlen)
{
    if (mpx_is_run_dir(path)) {
        char csv[PATH_MAX + 16];
        snprintf(csv, sizeof csv, "%s/metrics.csv", path);
        json_t *rec = access(csv, F_OK) ? mpx_run_load(path, err, errlen) : NULL;
        const char *status = json_string_value(json_object_get(rec, "status"));
        int skipped = status && !strcmp(status, "skipped");
        json_decref(rec);
        return skipped ? 0 : add_run(p, path, err, errlen); /* a skipped cell has no curves */
    }
    char **dirs;
    size_t n, before = p->n;
    if (mpx_list_runs(path, &dirs, &n, err, errlen)) return -1;
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        char csv[PATH_MAX + 16];
        snprintf(csv, sizeof csv, "%s/metrics.csv", dirs[i]);
        if (access(csv, F_OK) == 0) rc = add_run(p, dirs[i], err, errlen);
    }
    mpx_free_list(dirs, n);
    if (!rc && p->n == before) {
        snprintf(err, errlen, "%s: neither a run folder (run.json) nor a sweep folder with runs that have a metrics.csv", path);
        rc = -1;
    }
    return rc;
}

/* One legend entry per run, however many sweeps share a cell name; then the scale
 * traces (diagnostics.csv), titled by those labels. */
static int distinct_labels(plot *p, char *err, size_t errlen)
{
    if (mpx_run_labels_distinct(p->c, p->n, sizeof *p->c, offsetof(curve, label), offsetof(curve, dir),
                                sizeof p->c[0].label)) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < p->n; i++)
        if (mpx_plot_scales_add(&p->scales, p->c[i].dir, p->c[i].label, err, errlen)) return -1;
    return 0;
}

static int write_data(const plot *p, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    for (size_t r = 0; r < p->n; r++) { /* a gnuplot data block per run (index r) */
        const curve *c = &p->c[r];
        const double *cols[3] = { c->v[0], c->v[1], c->v[2] };
        mpx_gnuplot_block(f, c->label, c->step, c->n, cols, 3);
    }
    return fclose(f) == 0 ? 0 : -1;
}


static int has_data(const plot *p, int s, int *all_positive)
{
    int any = 0;
    *all_positive = 1;
    for (size_t r = 0; r < p->n; r++)
        for (size_t i = 0; i < p->c[r].n; i++) {
            double v = p->c[r].v[s][i];
            if (isnan(v)) continue;
            any = 1;
            if (v <= 0) *all_positive = 0;
        }
    return any;
}

static void write_panel(FILE *f, const plot *p, int s, const char *data)
{
    int positive, any = has_data(p, s, &positive);
    if (s == 0 && p->smooth > 1) fprintf(f, "set ylabel 'loss (mean of the last %zu steps)'\n", p->smooth);
    else fprintf(f, "set ylabel '%s'\n", ylabels[s]);
    if (any && positive) fprintf(f, "set logscale y %d\n", s == 1 ? 2 : 10);
    else fputs("unset logscale y\n", f);
    if (s == 0) fputs("set key outside right top vertical\n", f);
    else fputs("unset key\n", f);
    if (s == 2) fputs("set xlabel 'step'\n", f);
    if (!any) {
        fprintf(f, "set label 1 'no %s column in these runs' at graph 0.5, 0.5 center\n"
                   "set yrange [0:1]\nplot 2 notitle\nunset label 1\nset autoscale y\n", series[s]);
        return;
    }
    fputs("plot ", f);
    for (size_t r = 0; r < p->n; r++) {
        fprintf(f, "%s", r ? ", \\\n     " : "");
        mpx_gnuplot_quoted(f, data);
        fprintf(f, " index %zu using 1:%d with lines linetype %zu linewidth 1.5 title ", r, s + 2, r + 1);
        mpx_gnuplot_quoted(f, p->c[r].label);
    }
    fputc('\n', f);
}

static int write_script(const plot *p, const char *path, const char *data, const char *scales, const char *out,
                        int png)
{
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    int panels = 3 + (p->scales.n > 0);
    size_t h = (size_t)panels * 300 + (p->n > 12 ? 15 * (p->n - 12) : 0);
    if (png) fprintf(f, "set terminal pngcairo size 1000,%zu noenhanced font 'sans,10'\n", h);
    else fprintf(f, "set terminal svg size 1000,%zu noenhanced font 'sans,11' background rgb 'white'\n", h);
    fputs("set output ", f);
    mpx_gnuplot_quoted(f, out);
    fputs("\nset datafile missing 'NaN'\nset datafile separator '\\t'\nset grid\n"
          "set autoscale xfix\nset lmargin 12\nset rmargin 28\n", f);
    fprintf(f, "set multiplot layout %d,1 title 'mpx: %zu run%s'\n", panels, p->n, p->n == 1 ? "" : "s");
    for (int s = 0; s < 3; s++) write_panel(f, p, s, data);
    if (p->scales.n) mpx_plot_scales_panel(f, &p->scales, scales);
    fputs("unset multiplot\nset output\n", f);
    return fclose(f) == 0 ? 0 : -1;
}

/* $MPX_GNUPLOT, or gnuplot found on PATH; NULL when there is none. */
static const char *find_gnuplot(char *buf, size_t len)
{
    const char *env = getenv("MPX_GNUPLOT");
    if (env && env[0]) return access(env, X_OK) == 0 ? env : NULL;
    const char *path = getenv("PATH");
    if (!path) return NULL;
    for (const char *p = path; *p;) {
        const char *colon = strchr(p, ':');
        size_t n = colon ? (size_t)(colon - p) : strlen(p);
        snprintf(buf, len, "%.*s/gnuplot", (int)n, n ? p : ".");
        if (access(buf, X_OK) == 0) return buf;
        p += n + (colon ? 1 : 0);
    }
    return NULL;
}

/* Run gnuplot on the script; its messages go to log. */
static int run_gnuplot(const char *gnuplot, const char *script, const char *log, char *err, size_t errlen)
{
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) { snprintf(err, errlen, "cannot write %s: %s", log, strerror(errno)); return -1; }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) { close(fd); snprintf(err, errlen, "fork: %s", strerror(errno)); return -1; }
    if (pid == 0) {
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        execl(gnuplot, "gnuplot", script, (char *)NULL);
        _exit(127);
    }
    close(fd);
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) { snprintf(err, errlen, "waitpid: %s", strerror(errno)); return -1; }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
    char text[2048] = "";
    FILE *f = fopen(log, "r");
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    text[n] = 0;
    snprintf(err, errlen, "%s failed (status %d): %s", gnuplot, status, text);
    return -1;
}

static void free_plot(plot *p)
{
    for (size_t r = 0; r < p->n; r++) {
        free(p->c[r].step);
        free(p->c[r].dir);
        for (int s = 0; s < 3; s++) free(p->c[r].v[s]);
    }
    free(p->c);
    mpx_plot_scales_free(&p->scales);
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n > m && !strcasecmp(s + n - m, suffix);
}

void mpx_trailing_mean(const double *v, size_t n, size_t window, double *out)
{
    double sum = 0;
    size_t have = 0;
    for (size_t i = 0; i < n; i++) {
        if (isfinite(v[i])) sum += v[i], have++;
        if (i >= window && isfinite(v[i - window])) sum -= v[i - window], have--;
        out[i] = have ? sum / (double)have : NAN;
    }
}

static int smooth_loss(curve *c, size_t window)
{
    double *m = malloc((c->n ? c->n : 1) * sizeof *m);
    if (!m) return -1;
    mpx_trailing_mean(c->v[0], c->n, window, m);
    free(c->v[0]);
    c->v[0] = m;
    return 0;
}

int mpx_plot(const char *const *paths, size_t n_paths, const char *out, size_t smooth, char *err, size_t errlen)
{
    int png = ends_with(out, ".png");
    if (!png && !ends_with(out, ".svg")) {
        snprintf(err, errlen, "-o %s: the file name must end in .svg or .png", out);
        return -1;
    }
    char gp_buf[PATH_MAX];
    const char *gnuplot = find_gnuplot(gp_buf, sizeof gp_buf);
    if (!gnuplot) {
        snprintf(err, errlen, "gnuplot not found (%s); install it (Debian: apt-get install gnuplot-nox) "
                 "or set MPX_GNUPLOT to its path", getenv("MPX_GNUPLOT") ? "$MPX_GNUPLOT is not executable" : "not on PATH");
        return -1;
    }
    plot p = { 0 };
    int rc = 0;
    for (size_t i = 0; i < n_paths && !rc; i++) rc = add_path(&p, paths[i], err, errlen);
    if (!rc && !p.n) {
        snprintf(err, errlen, "nothing to draw: every run given was skipped");
        rc = -1;
    }
    if (!rc) rc = distinct_labels(&p, err, errlen);
    for (size_t i = 0; !rc && smooth > 1 && i < p.n; i++)
        if (smooth_loss(&p.c[i], smooth)) {
            snprintf(err, errlen, "out of memory");
            rc = -1;
        }
    p.smooth = smooth;
    char tmp[] = "/tmp/mpx-plot-XXXXXX", data[64], script[64], log[64], scales[64];
    if (!rc && !mkdtemp(tmp)) {
        snprintf(err, errlen, "mkdtemp: %s", strerror(errno));
        rc = -1;
    }
    if (!rc) {
        snprintf(data, sizeof data, "%s/curves.tsv", tmp);
        snprintf(script, sizeof script, "%s/plot.gp", tmp);
        snprintf(log, sizeof log, "%s/gnuplot.log", tmp);
        snprintf(scales, sizeof scales, "%s/scales.tsv", tmp);
        if (write_data(&p, data) || (p.scales.n && mpx_plot_scales_write(&p.scales, scales)) ||
            write_script(&p, script, data, scales, out, png)) {
            snprintf(err, errlen, "cannot write the plot data in %s: %s", tmp, strerror(errno));
            rc = -1;
        }
        if (!rc) rc = run_gnuplot(gnuplot, script, log, err, errlen);
        unlink(data);
        unlink(script);
        unlink(log);
        unlink(scales);
        rmdir(tmp);
    }
    struct stat st;
    if (!rc && (stat(out, &st) != 0 || st.st_size == 0)) {
        snprintf(err, errlen, "gnuplot wrote no %s", out);
        rc = -1;
    }
    free_plot(&p);
    return rc;
}
