/* mpx plot's scale-trace panel: the per-tensor scales applied to 8-bit GEMM inputs, per
 * parameter group, from each run's diagnostics.csv (columns group, scale_min, scale_max,
 * appended in ABI 1.8). A run whose file lacks those columns (older runs, or runs
 * without diagnostics or 8-bit GEMMs) contributes nothing, and without any such run
 * mpx plot draws its three panels as before. */
#ifndef MPX_PLOT_SCALES_H
#define MPX_PLOT_SCALES_H

#include <stddef.h>
#include <stdio.h>

typedef struct mpx_scale_line {
    char title[300];          /* "<run label>: <group>" */
    double *step, *min, *max;
    size_t n, cap;
} mpx_scale_line;

typedef struct mpx_plot_scales {
    mpx_scale_line *l;
    size_t n, cap;
} mpx_plot_scales;

/* Adds the lines of run folder `dir` (one per group with a scale). 0, or -1 with err
 * (out of memory); a missing or older file is no error. */
int mpx_plot_scales_add(mpx_plot_scales *ps, const char *dir, const char *label, char *err, size_t errlen);

/* The same for any two per-group columns of diagnostics.csv (stalled_frac and
 * underflow_frac for the report): col_min's values land in min, col_max's in max. */
int mpx_plot_group_columns_add(mpx_plot_scales *ps, const char *dir, const char *label, const char *col_min,
                               const char *col_max, char *err, size_t errlen);

/* The data: one block per line (gnuplot index), rows "step<TAB>min<TAB>max". */
int mpx_plot_scales_write(const mpx_plot_scales *ps, const char *path);

/* The panel: the largest scale of each line solid, the smallest dashed, log2 y. */
void mpx_plot_scales_panel(FILE *f, const mpx_plot_scales *ps, const char *data);

void mpx_plot_scales_free(mpx_plot_scales *ps);

/* One gnuplot data block: "# TITLE", then per row the step (%.17g) and the n_cols
 * columns' values (%.9g, NaN where absent), tab-separated, then the blank lines that
 * end the block. */
void mpx_gnuplot_block(FILE *f, const char *title, const double *step, size_t n, const double *const *cols, int n_cols);

/* A gnuplot string literal in single quotes (only '' needs doubling). */
void mpx_gnuplot_quoted(FILE *f, const char *s);

#endif
