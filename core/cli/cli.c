#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int mpx_cli_parse(mpx_cli *c, int argc, char **argv, const char *usage)
{
    memset(c, 0, sizeof *c);
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage, stdout);
            return 1;
        }
        if (!strcmp(a, "--plugin-dir") || !strcmp(a, "-s")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "mpx: %s needs a value\n%s", a, usage);
                return 2;
            }
            const char *v = argv[++i];
            if (a[1] == 's') {
                if (!strchr(v, '=')) {
                    fprintf(stderr, "mpx: -s %s: expected KEY=VALUE\n", v);
                    return 2;
                }
                if (c->n_overrides == sizeof c->overrides / sizeof *c->overrides) {
                    fprintf(stderr, "mpx: too many -s overrides\n");
                    return 2;
                }
                c->overrides[c->n_overrides++] = v;
            } else {
                if (c->n_plugin_dirs == sizeof c->plugin_dirs / sizeof *c->plugin_dirs) {
                    fprintf(stderr, "mpx: too many --plugin-dir\n");
                    return 2;
                }
                c->plugin_dirs[c->n_plugin_dirs++] = v;
            }
            continue;
        }
        if (!strcmp(a, "--ranks")) {
            char *end = NULL;
            long v = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : 0;
            if (i + 1 >= argc || *end || v < 1 || v > 4096) {
                fprintf(stderr, "mpx: --ranks needs a number of ranks from 1 to 4096\n%s", usage);
                return 2;
            }
            i++;
            if (c->n_overrides == sizeof c->overrides / sizeof *c->overrides) {
                fprintf(stderr, "mpx: too many -s overrides\n");
                return 2;
            }
            snprintf(c->ranks_override, sizeof c->ranks_override, "run.ranks=%ld", v);
            c->overrides[c->n_overrides++] = c->ranks_override;
            continue;
        }
        if (!strcmp(a, "--out") || !strcmp(a, "--resume")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "mpx: %s needs a folder\n%s", a, usage);
                return 2;
            }
            if (a[2] == 'o') c->out_dir = argv[++i];
            else c->resume_dir = argv[++i];
            continue;
        }
        if (a[0] == '-' && a[1]) {
            fprintf(stderr, "mpx: unknown option '%s'\n%s", a, usage);
            return 2;
        }
        if (c->n_positional == sizeof c->positional / sizeof *c->positional) {
            fprintf(stderr, "mpx: too many arguments\n%s", usage);
            return 2;
        }
        c->positional[c->n_positional++] = a;
    }
    return 0;
}
