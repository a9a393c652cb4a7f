/* mpx diff: what differs between two runs (or the paired cells of two sweeps): the
 * configuration keys, the metrics (relative tolerance) and the loss curves (first step
 * where they part, largest gap). Timing, provenance and output paths are shown but
 * never make two runs "different". */
#ifndef MPX_DIFF_H
#define MPX_DIFF_H

#include <stdio.h>

typedef struct mpx_diff_opts {
    double tol;   /* relative; default 1e-6 */
    FILE *out;
    int show_timing; /* also print timing and other uncounted differences */
} mpx_diff_opts;

/* Returns 0 equal within tolerance, 1 different, -1 error (err set). `heading`, when
 * not NULL, is printed once before the first difference. */
int mpx_diff_runs(const char *a, const char *b, const mpx_diff_opts *o, const char *heading,
                  char *err, size_t errlen);

/* Two sweep folders: cells paired by their axis values (sweep.json axes; without one,
 * the configuration keys that vary across A's cells). */
int mpx_diff_sweeps(const char *a, const char *b, const mpx_diff_opts *o, char *err, size_t errlen);

#endif
