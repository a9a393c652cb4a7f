/* mpx plot: loss, loss scale and learning rate against step, one file with three panels
 * stacked (loss on top, with the legend: one entry per run), drawn by gnuplot from a
 * data file and a script written to a temporary folder. */
#ifndef MPX_PLOT_H
#define MPX_PLOT_H

#include <stddef.h>

/* `paths`: run folders, or sweep folders (their run cells that have a metrics.csv).
 * `out` ends in .svg or .png. The gnuplot program is $MPX_GNUPLOT or `gnuplot` on PATH.
 * smooth > 1 draws the loss as its trailing mean over that many steps (noisy per-step
 * losses of small batches). Returns 0, or -1 with err. */
int mpx_plot(const char *const *paths, size_t n_paths, const char *out, size_t smooth, char *err, size_t errlen);

/* out[i]: the mean of the finite values among v[i-window+1..i] (the first ones over
 * fewer; NaN when none): a loss curve of small, noisy batches smoothed. */
void mpx_trailing_mean(const double *v, size_t n, size_t window, double *out);

#endif
