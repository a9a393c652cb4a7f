/* mpx report's internals, shared by report.c (the page, the matrix and the runs) and
 * report_plots.c (the SVG panels, the paired comparison and the curves). Not included
 * elsewhere. */
#ifndef MPX_REPORT_PAGE_H
#define MPX_REPORT_PAGE_H


#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "../record/fsutil.h"
#include "matrix.h"
#include "paired.h"
#include "plot.h"
#include "plot_scales.h"
#include "sweep_read.h"

enum { MAX_POINTS = 200, PANEL_W = 560, PANEL_H = 220, ML = 64, MR = 12, MT = 22, MB = 30, MAX_IDS = 100 };

typedef struct rep_run {
    char *dir;
    json_t *rec;
    char label[256];
    double *step, *loss, *smooth, *scale, *lr;  /* metrics.csv; NULL when absent */
    size_t n;
} rep_run;

typedef struct rep_sweep {
    const char *path;
    char rows[256], cols[256];
    char *metrics;
    mpx_matrix m;
    int built;           /* m holds a matrix */
    char err[4096];      /* why not */
    size_t base;         /* the base row */
} rep_sweep;

typedef struct report {
    rep_run *r;
    size_t n, cap;
    rep_sweep *sw;
    size_t n_sw;
    const struct mpx_report_opts *o;   /* report.h */
    FILE *f;
    size_t base_run;     /* the run configurations are compared against */
} report;

/* text (report.c) */
void report_esc(FILE *f, const char *s);
const char *report_shown(double x, char *buf, size_t len);
/* runs (report.c) */
void report_run_link(FILE *f, const report *rp, const char *dir);
long report_run_index(const report *rp, const char *dir);
/* sections (report_plots.c) */
void report_paired_section(FILE *f, const report *rp, const rep_sweep *s, size_t k);
int report_curves_section(FILE *f, const report *rp, char *err, size_t errlen);
/* the page's CSS, and its scripts before and after the body (report_plots.c) */
extern const char report_css[], report_script_head[], report_script_tail[];

#endif
