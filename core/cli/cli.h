/* The mpx command line: one function per subcommand. */
#ifndef MPX_CLI_H
#define MPX_CLI_H

#include <stddef.h>

/* Options common to the subcommands that load plugins and a configuration. */
typedef struct mpx_cli {
    const char *plugin_dirs[16];
    size_t n_plugin_dirs;
    const char *config;           /* CONFIG argument */
    const char *overrides[256];   /* -s KEY=VALUE */
    size_t n_overrides;
    const char *out_dir;          /* --out DIR (mpx run): the record folder itself */
    const char *resume_dir;       /* --resume DIR (mpx run): continue the run in DIR */
    const char *positional[8];    /* other arguments, in order */
    char ranks_override[40];      /* --ranks N, kept as the override run.ranks=N */
    size_t n_positional;
} mpx_cli;

/* Parse argv (after the subcommand). Returns 0, or prints the problem and returns 2. */
int mpx_cli_parse(mpx_cli *c, int argc, char **argv, const char *usage);

int mpx_cmd_plugins(int argc, char **argv);
int mpx_cmd_check(int argc, char **argv);
int mpx_cmd_run(int argc, char **argv);
int mpx_cmd_sweep(int argc, char **argv);
int mpx_cmd_matrix(int argc, char **argv);
int mpx_cmd_diff(int argc, char **argv);
int mpx_cmd_paired(int argc, char **argv);
int mpx_cmd_plot(int argc, char **argv);
int mpx_cmd_report(int argc, char **argv);
int mpx_cmd_eval(int argc, char **argv);

#endif
