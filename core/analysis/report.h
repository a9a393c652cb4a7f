/* mpx report: one self-contained HTML file over run and sweep folders: the matrix of
 * every metric (cells linked to their runs, unfinished ones with their reasons, the same
 * JSON `mpx matrix --format json` prints embedded), the paired comparison against a base
 * row as a forest plot, the curves as inline SVG (runs toggled by a legend), each run's
 * precision descriptor, configuration diff, notes, memory, provenance and wall times, and
 * per pair of runs the questions one gets right and the other wrong (ids and scores). No
 * network, no gnuplot: the SVG is drawn here. */
#ifndef MPX_REPORT_H
#define MPX_REPORT_H

#include <stddef.h>

#include "../engine/registry.h"

typedef struct mpx_report_opts {
    const char *rows, *cols;  /* matrix keys; NULL: sweep.json's axes but run.seed, else precision.plugin */
    const char *metrics;      /* comma-separated; NULL: every number the finished runs' metrics hold */
    const char *base;         /* the --rows value of the base row; NULL: the first row */
    size_t smooth;            /* the smoothed loss: mean of the last `smooth` steps */
    size_t resamples;         /* paired bootstrap resamples */
    const mpx_registry *reg;  /* plugin option defaults for the matrix (may be NULL) */
} mpx_report_opts;

/* paths: run folders and sweep folders. Writes `out` atomically (a temporary file beside
 * it, never through a link, then renamed). 0, or -1 with err naming the file. */
int mpx_report_write(const char *const *paths, size_t n_paths, const char *out, const mpx_report_opts *o,
                     char *err, size_t errlen);

#endif
