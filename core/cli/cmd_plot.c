/* mpx plot RUNS... -o FILE.svg|.png */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "../analysis/plot.h"

static const char plot_usage[] =
    "usage: mpx plot RUN_OR_SWEEP... -o FILE.svg|FILE.png [--smooth N]\n"
    "  one image with three panels against step: loss (top, with the legend: one entry per\n"
    "  run, named by its sweep cell or run.name, with the folders above it in front where\n"
    "  two runs' names repeat: lp-grads/bf16-master_1), loss scale, learning rate; read from\n"
    "  each run's metrics.csv (and a fourth, the 8-bit GEMM inputs' scales per group, when a\n"
    "  run's diagnostics.csv has them). A sweep folder stands for its cells. Drawn by gnuplot\n"
    "  ($MPX_GNUPLOT or gnuplot on PATH; Debian package gnuplot-nox). --smooth N draws the\n"
    "  loss as the mean of its last N steps. Exit 0, or 2 on errors.\n";

int mpx_cmd_plot(int argc, char **argv)
{
    const char *paths[256], *out = NULL;
    size_t n = 0, smooth = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { fputs(plot_usage, stdout); return 0; }
        if (!strcmp(argv[i], "-o") && i + 1 < argc) { out = argv[++i]; continue; }
        if (!strcmp(argv[i], "--smooth") && i + 1 < argc) {
            char *end;
            long v = strtol(argv[++i], &end, 10);
            if (*end || end == argv[i] || v < 1 || v > 1000000) {
                fprintf(stderr, "mpx plot: --smooth %s: a number of steps from 1 to 1000000\n", argv[i]);
                return 2;
            }
            smooth = (size_t)v;
            continue;
        }
        if (argv[i][0] == '-' || n == sizeof paths / sizeof *paths) {
            fprintf(stderr, "mpx plot: unexpected '%s'\n%s", argv[i], plot_usage);
            return 2;
        }
        paths[n++] = argv[i];
    }
    if (!n || !out) {
        fprintf(stderr, "mpx plot: needs at least one run and -o FILE\n%s", plot_usage);
        return 2;
    }
    char err[4096];
    if (mpx_plot(paths, n, out, smooth, err, sizeof err)) {
        fprintf(stderr, "mpx plot: %s\n", err);
        return 2;
    }
    fprintf(stderr, "mpx plot: wrote %s\n", out);
    return 0;
}
