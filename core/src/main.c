/* mpx: a plugin-based experiment runner for mixed-precision training. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "mpx/abi.h"

int mpx_squad_eval_main(int argc, char **argv); /* datasets/squad_eval_cli.c */

static const char usage[] =
    "usage: mpx COMMAND [ARGS]\n"
    "\n"
    "commands:\n"
    "  plugins [NAME | KIND/NAME]         list every plugin found (kind, name, version, summary,\n"
    "                                     load errors, shadowing), or one plugin's options\n"
    "  check CONFIG [-s KEY=VALUE]...     validate a configuration without running it; print the\n"
    "                                     effective configuration with every default filled in\n"
    "  run CONFIG [-s KEY=VALUE]...       train and evaluate; records go to\n"
    "                                     <run.output_dir>/<run.name>/ (run.json, metrics.csv)\n"
    "  eval CONFIG [-s KEY=VALUE]...      evaluate model.checkpoint without training; records go to\n"
    "                                     <run.output_dir>/<run.name>-eval/\n"
    "  squad-eval DATA.json PRED.json     the official SQuAD v1.1 EM/F1 of a predictions file\n"
    "  help                               this text\n"
    "\n"
    "options of plugins, check and run:\n"
    "  --plugin-dir DIR    search DIR for plugins first (repeatable); then $MPX_PLUGIN_PATH\n"
    "                      (colon-separated), then <bindir>/../plugins, <bindir>/../lib/mpx\n"
    "  -s KEY=VALUE        override one configuration key; VALUE is a libconfig literal\n"
    "                      (strings quoted: -s 'precision.plugin=\"fp32\"')\n"
    "\n"
    "environment:\n"
    "  MPX_FAULT_AT_STEP=N  make `mpx run` die (SIGABRT) at the start of step N, to test\n"
    "                       crash handling\n";

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
    if (!strcmp(cmd, "squad-eval")) return mpx_squad_eval_main(argc - 1, argv + 1);
    fprintf(stderr, "mpx: unknown command '%s'\n\n%s", cmd, usage);
    return 2;
}
