# core/cli: the mpx binary's main, argument parsing and one cmd_*.c per subcommand
# (README.md here). main.c goes into build/bin/mpx (core/module.mk), the rest into libmpx.a.
LIB_SRCS += $(filter-out core/cli/main.c,$(wildcard core/cli/*.c))
