/* mpx matrix: the run records under a sweep folder arranged as rows x columns by two
 * configuration keys, one or more metrics per cell. Runs that fall in the same cell
 * differ only by run.seed (anything else is an error naming the key): their finished
 * values are aggregated as mean ± t(0.975, n−1)·s/√n with n. Skipped, failed and
 * unfinished runs are kept with their reason. */
#ifndef MPX_MATRIX_H
#define MPX_MATRIX_H

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>

#include "../engine/registry.h"

typedef struct mpx_stat {
    size_t n;            /* finished runs that have the metric */
    double mean, sd, ci; /* sd and ci are NaN when n < 2 */
} mpx_stat;

typedef struct mpx_matrix_run {
    char *dir;
    json_t *rec;         /* run.json */
    const char *status;  /* borrowed from rec */
    const char *why;     /* reason / error and, for an unfinished run, how far it got
                          * ("... (at step N of M)"); "" when none */
    char *why_owned;     /* why, when composed here (freed with the matrix) */
    char progress[64];   /* unfinished runs: "at step N of M" from the record, else "" */
    size_t row, col;
} mpx_matrix_run;

typedef struct mpx_matrix_cell {
    size_t *runs;        /* indices into m->runs */
    size_t n_runs, n_finished;
    mpx_stat *stats;     /* one per metric */
    double **values;     /* per metric, the finished values (NaN when absent) */
} mpx_matrix_cell;

typedef struct mpx_matrix {
    const char *row_key, *col_key;  /* col_key NULL: one column */
    char **metrics;
    size_t n_metrics;
    mpx_matrix_run *runs;
    size_t n_runs;
    json_t *rows, *cols;            /* arrays of the distinct values, in display order */
    mpx_matrix_cell *cells;         /* n_rows * n_cols, row-major */
    const mpx_registry *reg;        /* for plugin keys' defaults; NULL: core keys only */
} mpx_matrix;

/* t(0.975, df): tabulated for df = 1..30, 1.96 beyond; NaN for df = 0. */
double mpx_t975(size_t df);
/* Mean, sample sd and the 95% half-interval of the non-NaN values. */
mpx_stat mpx_stat_of(const double *v, size_t n);

/* metrics: comma-separated. reg (may be NULL: core keys only) gives the installed
 * plugins' schema defaults: a key one record lacks (written by an older mpx) matches the
 * other's value when that value is the key's default. Returns 0, or -1 with err (file,
 * key, what is wrong). */
int mpx_matrix_build(mpx_matrix *m, const char *dir, const char *row_key, const char *col_key,
                     const char *metrics, const mpx_registry *reg, char *err, size_t errlen);
void mpx_matrix_free(mpx_matrix *m);

/* The finished runs' folders of one cell (malloc'd array of borrowed strings, *n of
 * them; NULL when out of memory). */
const char **mpx_matrix_finished_dirs(const mpx_matrix *m, const mpx_matrix_cell *c, size_t *n);

/* A row or column value as `--paired ROW` and `--base ROW` name it and the paired
 * tables label it: strings without their quotes, anything else as compact JSON. */
void mpx_matrix_value_text(json_t *v, char *buf, size_t n);

/* matrix_render.c: "md", "csv" or "json" to f. */
int mpx_matrix_render(const mpx_matrix *m, const char *format, FILE *f);

#endif
