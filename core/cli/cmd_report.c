/* mpx report RUN_OR_SWEEP... -o FILE.html: one self-contained HTML page (report.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "../analysis/report.h"
#include "../engine/session.h"

static const char report_usage[] =
    "usage: mpx report RUN_OR_SWEEP... -o FILE.html [--rows KEY] [--cols KEY] [--metric M[,M...]]\n"
    "                  [--base ROW] [--smooth N] [--resamples N] [--plugin-dir DIR]...\n"
    "  one self-contained HTML file (inline SVG and CSS, a few lines of inline script, nothing\n"
    "  from a network) over run folders and sweep folders: per sweep folder the matrix of every\n"
    "  metric its finished runs have (or --metric), rows from sweep.json's first axis other\n"
    "  than run.seed and columns from its second (precision.plugin rows when it has none; a\n"
    "  third axis needs --rows/--cols), the same numbers `mpx matrix --format json`\n"
    "  prints, embedded as JSON; the paired comparison of each row against the base row\n"
    "  (--base ROW, default the first) on the same questions as a forest plot, with the\n"
    "  questions one run gets right and the other wrong (ids and scores); the curves (loss raw\n"
    "  and smoothed over --smooth N steps, default 20; loss scale; lr; stalled and underflow\n"
    "  fractions per group; 8-bit scales where recorded), runs toggled by the legend; and per\n"
    "  run its precision descriptor, configuration against the base run, notes, memory by role,\n"
    "  provenance and wall times. The file is written atomically, never through a link.\n"
    "  Exit 0, or 2 on errors.\n";

int mpx_cmd_report(int argc, char **argv)
{
    const char **paths = calloc((size_t)argc + 1, sizeof *paths), *out = NULL, *smooth_text = "20";
    const char *resamples_text = "10000", *plugin_dirs[16];
    size_t n = 0, n_dirs = 0;
    mpx_report_opts o = { 0 };
    int rc = 2;
    if (!paths) { fprintf(stderr, "mpx report: out of memory\n"); return 2; }
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { fputs(report_usage, stdout); rc = 0; goto out; }
        if (!strcmp(a, "--plugin-dir") && i + 1 < argc) {
            if (n_dirs == sizeof plugin_dirs / sizeof *plugin_dirs) {
                fprintf(stderr, "mpx report: at most %zu --plugin-dir\n", n_dirs);
                goto out;
            }
            plugin_dirs[n_dirs++] = argv[++i];
            continue;
        }
        const char **slot = !strcmp(a, "-o") ? &out : !strcmp(a, "--rows") ? &o.rows : !strcmp(a, "--cols") ? &o.cols
                          : !strcmp(a, "--metric") || !strcmp(a, "--metrics") ? &o.metrics
                          : !strcmp(a, "--base") ? &o.base : !strcmp(a, "--smooth") ? &smooth_text
                          : !strcmp(a, "--resamples") ? &resamples_text : NULL;
        if (slot && i + 1 < argc) { *slot = argv[++i]; continue; }
        if (slot || a[0] == '-') {
            fprintf(stderr, "mpx report: %s '%s'\n%s", slot ? "missing value after" : "unknown option", a, report_usage);
            goto out;
        }
        paths[n++] = a;
    }
    if (!n || !out) {
        fprintf(stderr, "mpx report: needs at least one run or sweep folder and -o FILE.html\n%s", report_usage);
        goto out;
    }
    if (o.cols && !o.rows) { fprintf(stderr, "mpx report: --cols needs --rows\n"); goto out; }
    char *end;
    unsigned long long smooth = strtoull(smooth_text, &end, 10);
    if (*end || end == smooth_text || smooth < 1 || smooth > 1000000) {
        fprintf(stderr, "mpx report: --smooth %s: a number of steps from 1 to 1000000\n", smooth_text);
        goto out;
    }
    unsigned long long resamples = strtoull(resamples_text, &end, 10);
    if (*end || end == resamples_text || resamples < 1 || resamples > 10000000) {
        fprintf(stderr, "mpx report: --resamples %s: an integer from 1 to 10000000\n", resamples_text);
        goto out;
    }
    o.smooth = (size_t)smooth;
    o.resamples = (size_t)resamples;
    mpx_session s;   /* the installed plugins, for option defaults older records lack */
    int have_plugins = mpx_session_open(&s, n_dirs ? plugin_dirs : NULL, n_dirs) == 0;
    o.reg = have_plugins ? &s.reg : NULL;
    char err[8192];
    int failed = mpx_report_write(paths, n, out, &o, err, sizeof err);
    if (have_plugins) mpx_session_close(&s);
    if (failed) { fprintf(stderr, "mpx report: %s\n", err); goto out; }
    printf("%s\n", out);
    rc = fflush(stdout) ? 2 : 0;
out:
    free(paths);
    return rc;
}
