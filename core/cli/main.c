/* mpx: a plugin-based experiment runner for mixed-precision training. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "mpx/abi.h"

int mpx_squad_eval_main(int argc, char **argv); /* datasets/squad_eval_cli.c */

static const char usage[] =
    "usage: mpx COMMAND [ARGS]        (mpx COMMAND --help: all of a command's options)\n"
    "\n"
    "commands:\n"
    "  plugins [NAME | KIND/NAME]         list every plugin found (kind, name, version, summary,\n"
    "                                     load errors, shadowing), or one plugin's options\n"
    "  plugins --compat                   which installed plugins combine, from their declarations\n"
    "  check CONFIG [-s KEY=VALUE]...     validate a configuration without running it; print the\n"
    "                                     effective configuration with every default filled in,\n"
    "                                     the lr schedule and every learning rate that never acts\n"
    "  run CONFIG [-s KEY=VALUE]...       train and evaluate; records go to\n"
    "      [--out DIR] [--ranks N]        <run.output_dir>/<run.name>/ (run.json, metrics.csv), or\n"
    "                                     DIR; --ranks N: N data-parallel ranks through mpirun\n"
    "  run [CONFIG] --resume DIR          continue the run in DIR from its last checkpoint\n"
    "  eval CONFIG [-s KEY=VALUE]...      evaluate model.checkpoint without training; records go to\n"
    "       [--out DIR]                   <run.output_dir>/<run.name>-eval/, or DIR\n"
    "  sweep SWEEP.cfg [--dry-run]        run every cell of a sweep (cross product of its axes) that\n"
    "        [--retry-failed] [--ranks N] has no finished record, each in its own process; cells\n"
    "        [--jobs N] [--max-cells N]   whose plugins are missing or incompatible are skipped;\n"
    "        [--executor local|slurm]     --jobs N: N cells at a time; --executor slurm: the\n"
    "        [--status]                   unfinished cells as one Slurm job array; --status: each\n"
    "                                     cell's state\n"
    "  matrix DIR --rows KEY [--cols KEY] a table of run.json metrics over a sweep folder (mean\n"
    "         --metric M[,M...]           ± 95% interval over seeds); --paired ROW: each row\n"
    "         [--format md|csv|json]      against ROW on the same questions (bootstrap)\n"
    "         [--paired ROW] [--plugin-dir DIR]\n"
    "  diff A B [--tol REL] [--all]       config keys, metrics and loss curves that differ between\n"
    "                                     two runs or two sweeps (exit 0 same, 1 different)\n"
    "  paired RUN... --vs RUN...          B - A in EM/F1 on the same questions, with a seeded\n"
    "         [--resamples N] [--seed S]  bootstrap interval and each group's seed-to-seed sd\n"
    "  plot RUNS... -o FILE.svg|.png      loss, loss scale and lr against step (gnuplot; --smooth\n"
    "       [--smooth N]                  N: the loss as the mean of its last N steps)\n"
    "  report RUNS... -o FILE.html        one self-contained HTML page: the matrix of every metric,\n"
    "         [--rows KEY] [--cols KEY]   the paired comparison against --base ROW (forest plot),\n"
    "         [--base ROW] [--smooth N]   curves (SVG, legend toggles), and each run's precision,\n"
    "                                     config diff, notes, memory, provenance and wall times\n"
    "  squad-eval DATA.json PRED.json     the official SQuAD v1.1 EM/F1 of a predictions file\n"
    "             [--per-question OUT.csv]  (and each answered question's EM/F1)\n"
    "  help                               this text\n"
    "\n"
    "options of check, run, eval and sweep (--plugin-dir also of plugins):\n"
    "  --plugin-dir DIR    search DIR for plugins first (repeatable); then $MPX_PLUGIN_PATH\n"
    "                      (colon-separated), then <bindir>/../plugins, <bindir>/../lib/mpx\n"
    "  -s KEY=VALUE        override one configuration key; VALUE is a libconfig literal\n"
    "                      (strings quoted: -s 'precision.plugin=\"fp32\"')\n"
    "\n"
    "environment:\n"
    "  MPX_FAULT_AT_STEP=N  make `mpx run` die (SIGABRT) at the start of step N, to test\n"
    "                       crash handling\n"
    "  MPX_SWEEP_FAULT=POINT:K  make `mpx sweep` die (SIGKILL) at POINT (cell, orphan, record,\n"
    "                       index, between) of the K-th cell it runs, to test resuming\n"
    "  MPX_INJECT_OVERFLOW_AT_STEP=N[,M...]  put an inf into the gradients at those steps, to\n"
    "                       test loss scaling (the step is skipped and the scale lowered)\n";

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(usage, stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        fputs(usage, stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version")) {
        printf("mpx 0.1.0 (plugin ABI %d.%d)\n", MPX_ABI_MAJOR, MPX_ABI_MINOR);
        return 0;
    }
    if (!strcmp(cmd, "plugins")) return mpx_cmd_plugins(argc - 2, argv + 2);
    if (!strcmp(cmd, "check")) return mpx_cmd_check(argc - 2, argv + 2);
    if (!strcmp(cmd, "run")) return mpx_cmd_run(argc - 2, argv + 2);
    if (!strcmp(cmd, "eval")) return mpx_cmd_eval(argc - 2, argv + 2);
    if (!strcmp(cmd, "sweep")) return mpx_cmd_sweep(argc - 2, argv + 2);
    if (!strcmp(cmd, "matrix")) return mpx_cmd_matrix(argc - 2, argv + 2);
    if (!strcmp(cmd, "diff")) return mpx_cmd_diff(argc - 2, argv + 2);
    if (!strcmp(cmd, "paired")) return mpx_cmd_paired(argc - 2, argv + 2);
    if (!strcmp(cmd, "plot")) return mpx_cmd_plot(argc - 2, argv + 2);
    if (!strcmp(cmd, "report")) return mpx_cmd_report(argc - 2, argv + 2);
    if (!strcmp(cmd, "squad-eval")) {
        argv[1] = (char *)"mpx squad-eval"; /* its usage names the command so */
        return mpx_squad_eval_main(argc - 1, argv + 1);
    }
    fprintf(stderr, "mpx: unknown command '%s'\n\n%s", cmd, usage);
    return 2;
}
