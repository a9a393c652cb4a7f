/* mpx matrix DIR --rows KEY [--cols KEY] --metric M[,M...] [--format md|csv|json] */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "matrix.h"

static const char matrix_usage[] =
    "usage: mpx matrix DIR --rows KEY [--cols KEY] --metric M[,M...] [--format md|csv|json]\n"
    "  a table of the run records in the sweep folder DIR (every DIR/*/run.json): one row per\n"
    "  value of the configuration key --rows, one column per value of --cols (e.g.\n"
    "  precision.plugin, zero.plugin; keys of config.effective). M is a name in run.json's\n"
    "  \"metrics\" (final_loss, exact_match, f1, skipped_steps) or a dotted path into run.json\n"
    "  (memory.bytes_per_param). Runs differing only by run.seed share a cell: mean ±\n"
    "  t(0.975, n-1)·s/√n and n. Skipped and failed runs show as such, with their reason.\n"
    "  Exit 0, or 2 on errors.\n";

int mpx_cmd_matrix(int argc, char **argv)
{
    const char *dir = NULL, *rows = NULL, *cols = NULL, *metric = NULL, *format = "md";
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char **slot = !strcmp(a, "--rows") ? &rows : !strcmp(a, "--cols") ? &cols
                          : !strcmp(a, "--metric") || !strcmp(a, "--metrics") ? &metric
                          : !strcmp(a, "--format") ? &format : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { fputs(matrix_usage, stdout); return 0; }
        if (slot && i + 1 < argc) { *slot = argv[++i]; continue; }
        if (slot || a[0] == '-' || dir) {
            fprintf(stderr, "mpx matrix: %s '%s'\n%s", slot ? "missing value after" : a[0] == '-' ? "unknown option" :
                    "one folder only, got also", a, matrix_usage);
            return 2;
        }
        dir = a;
    }
    if (!dir || !rows || !metric) {
        fprintf(stderr, "mpx matrix: needs DIR, --rows and --metric\n%s", matrix_usage);
        return 2;
    }
    if (strcmp(format, "md") && strcmp(format, "csv") && strcmp(format, "json")) {
        fprintf(stderr, "mpx matrix: --format %s: one of md, csv, json\n", format);
        return 2;
    }
    mpx_matrix m;
    char err[8192];
    if (mpx_matrix_build(&m, dir, rows, cols, metric, err, sizeof err)) {
        fprintf(stderr, "mpx matrix: %s\n", err);
        mpx_matrix_free(&m);
        return 2;
    }
    int rc = mpx_matrix_render(&m, format, stdout);
    mpx_matrix_free(&m);
    if (rc || fflush(stdout)) {
        fprintf(stderr, "mpx matrix: cannot write the table\n");
        return 2;
    }
    return 0;
}
