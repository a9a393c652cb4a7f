/* mpx diff A B [--tol REL] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "../analysis/diff.h"
#include "../analysis/sweep_read.h"

static const char diff_usage[] =
    "usage: mpx diff A B [--tol REL] [--all]\n"
    "  A and B are two run folders (holding run.json) or two sweep folders (cells paired by\n"
    "  their axis values). Prints only what differs: configuration keys (config.effective),\n"
    "  the effective precision descriptor (\"precision\" lines: dtypes, islands, loss-scale\n"
    "  preset, rounding), metrics whose relative change exceeds REL (relative, default\n"
    "  1e-6), each plugin's version (\"plugin version\" lines), and for the loss curves the\n"
    "  first step where they part by more than REL and the largest gap; all of these count.\n"
    "  Timing, the peak resident set, output paths and run.name are shown for two runs\n"
    "  (for two sweeps only with --all) but never counted: two reruns of one configuration\n"
    "  on one machine are equal.\n"
    "  Exit 0 equal within tolerance, 1 different, 2 error.\n";

int mpx_cmd_diff(int argc, char **argv)
{
    const char *ab[2] = { NULL, NULL };
    int n = 0;
    mpx_diff_opts o = { 1e-6, stdout, -1 };
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { fputs(diff_usage, stdout); return 0; }
        if (!strcmp(argv[i], "--tol") && i + 1 < argc) {
            char *end;
            o.tol = strtod(argv[++i], &end);
            if (*end || !(o.tol >= 0)) {
                fprintf(stderr, "mpx diff: --tol %s: expected a relative tolerance >= 0\n", argv[i]);
                return 2;
            }
            continue;
        }
        if (!strcmp(argv[i], "--all")) { o.show_timing = 1; continue; }
        if (argv[i][0] == '-' || n == 2) {
            fprintf(stderr, "mpx diff: unexpected '%s'\n%s", argv[i], diff_usage);
            return 2;
        }
        ab[n++] = argv[i];
    }
    if (n != 2) {
        fputs(diff_usage, stderr);
        return 2;
    }
    char err[8192];
    int runs = mpx_is_run_dir(ab[0]) + mpx_is_run_dir(ab[1]), rc;
    if (runs == 1) {
        fprintf(stderr, "mpx diff: %s is a run folder and %s is not: give two runs or two sweeps\n",
                mpx_is_run_dir(ab[0]) ? ab[0] : ab[1], mpx_is_run_dir(ab[0]) ? ab[1] : ab[0]);
        return 2;
    }
    if (o.show_timing < 0) o.show_timing = runs == 2; /* per cell of a sweep it is noise */
    rc = runs == 2 ? mpx_diff_runs(ab[0], ab[1], &o, NULL, err, sizeof err)
                   : mpx_diff_sweeps(ab[0], ab[1], &o, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "mpx diff: %s\n", err);
        return 2;
    }
    return rc;
}
