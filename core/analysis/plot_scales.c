#include "plot_scales.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Field i of a CSV line (no quoting in diagnostics.csv) into buf; -1 when absent. */
static int csv_field(const char *line, int i, char *buf, size_t len)
{
    const char *p = line;
    for (int k = 0; k < i; k++) {
        p = strchr(p, ',');
        if (!p) return -1;
        p++;
    }
    size_t n = strcspn(p, ",\r\n");
    if (n >= len) n = len - 1;
    memcpy(buf, p, n);
    buf[n] = 0;
    return 0;
}

static int column_index(const char *header, const char *name)
{
    char f[64];
    for (int i = 0; csv_field(header, i, f, sizeof f) == 0; i++)
        if (!strcmp(f, name)) return i;
    return -1;
}

static double number(const char *line, int i)
{
    char f[64], *end;
    if (i < 0 || csv_field(line, i, f, sizeof f) || !f[0]) return NAN;
    double v = strtod(f, &end);
    return *end ? NAN : v;
}

/* The line titled `title` among this run's (from index `first`: two runs may share a label). */
static mpx_scale_line *line_for(mpx_plot_scales *ps, size_t first, const char *title)
{
    for (size_t i = first; i < ps->n; i++)
        if (!strcmp(ps->l[i].title, title)) return &ps->l[i];
    if (ps->n == ps->cap) {
        size_t cap = ps->cap ? 2 * ps->cap : 8;
        mpx_scale_line *g = realloc(ps->l, cap * sizeof *g);
        if (!g) return NULL;
        ps->l = g;
        ps->cap = cap;
    }
    mpx_scale_line *l = &ps->l[ps->n++];
    memset(l, 0, sizeof *l);
    snprintf(l->title, sizeof l->title, "%s", title);
    return l;
}

static int append(mpx_scale_line *l, double step, double mn, double mx)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        double *s = realloc(l->step, cap * sizeof *s), *a, *b;
        if (!s) return -1;
        l->step = s;
        if (!(a = realloc(l->min, cap * sizeof *a))) return -1;
        l->min = a;
        if (!(b = realloc(l->max, cap * sizeof *b))) return -1;
        l->max = b;
        l->cap = cap;
    }
    l->step[l->n] = step;
    l->min[l->n] = mn;
    l->max[l->n] = mx;
    l->n++;
    return 0;
}

int mpx_plot_scales_add(mpx_plot_scales *ps, const char *dir, const char *label, char *err, size_t errlen)
{
    return mpx_plot_group_columns_add(ps, dir, label, "scale_min", "scale_max", err, errlen);
}

int mpx_plot_group_columns_add(mpx_plot_scales *ps, const char *dir, const char *label, const char *col_min,
                               const char *col_max, char *err, size_t errlen)
{
    char path[PATH_MAX + 32], line[4096];
    snprintf(path, sizeof path, "%s/diagnostics.csv", dir);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    if (!fgets(line, sizeof line, f)) { fclose(f); return 0; }
    int c_step = column_index(line, "step"), c_group = column_index(line, "group");
    int c_min = column_index(line, col_min), c_max = column_index(line, col_max);
    int rc = 0;
    size_t first = ps->n;
    while (c_step >= 0 && c_group >= 0 && c_min >= 0 && c_max >= 0 && !rc && fgets(line, sizeof line, f)) {
        if (!strchr(line, '\n')) break;   /* a torn last line */
        double step = number(line, c_step), mn = number(line, c_min), mx = number(line, c_max);
        char group[64], title[300];
        if (isnan(step) || (isnan(mn) && isnan(mx)) || csv_field(line, c_group, group, sizeof group)) continue;
        snprintf(title, sizeof title, "%s: %s", label, group);
        mpx_scale_line *l = line_for(ps, first, title);
        if (!l || append(l, step, mn, mx)) {
            snprintf(err, errlen, "out of memory reading %s", path);
            rc = -1;
        }
    }
    fclose(f);
    return rc;
}

int mpx_plot_scales_write(const mpx_plot_scales *ps, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    for (size_t i = 0; i < ps->n; i++) {
        const mpx_scale_line *l = &ps->l[i];
        const double *cols[2] = { l->min, l->max };
        mpx_gnuplot_block(f, l->title, l->step, l->n, cols, 2);
    }
    return fclose(f) == 0 ? 0 : -1;
}

void mpx_gnuplot_block(FILE *f, const char *title, const double *step, size_t n, const double *const *cols, int n_cols)
{
    fprintf(f, "# %s\n", title);
    for (size_t k = 0; k < n; k++) {
        fprintf(f, "%.17g", step[k]);
        for (int c = 0; c < n_cols; c++) {
            if (isnan(cols[c][k])) fputs("\tNaN", f);
            else fprintf(f, "\t%.9g", cols[c][k]);
        }
        fputc('\n', f);
    }
    fputs("\n\n", f); /* the end of a gnuplot data block (its index) */
}

void mpx_gnuplot_quoted(FILE *f, const char *s)
{
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'') fputc('\'', f);
        fputc(*s, f);
    }
    fputc('\'', f);
}

void mpx_plot_scales_panel(FILE *f, const mpx_plot_scales *ps, const char *data)
{
    fputs("set ylabel 'GEMM-input scale (max solid, min dashed)'\nset logscale y 2\n"
          "set key outside right top vertical\nset xlabel 'step'\nplot ", f);
    for (size_t i = 0; i < ps->n; i++) {
        fprintf(f, "%s", i ? ", \\\n     " : "");
        mpx_gnuplot_quoted(f, data);
        fprintf(f, " index %zu using 1:3 with linespoints linetype %zu linewidth 1.5 title ", i, i + 1);
        mpx_gnuplot_quoted(f, ps->l[i].title);
        fputs(", \\\n     ", f);
        mpx_gnuplot_quoted(f, data);
        fprintf(f, " index %zu using 1:2 with lines linetype %zu dashtype 2 notitle", i, i + 1);
    }
    fputc('\n', f);
}

void mpx_plot_scales_free(mpx_plot_scales *ps)
{
    for (size_t i = 0; i < ps->n; i++) {
        free(ps->l[i].step);
        free(ps->l[i].min);
        free(ps->l[i].max);
    }
    free(ps->l);
    memset(ps, 0, sizeof *ps);
}
