# The core: the mpx binary (CLI) over libmpx.a (session, loader, host, records, loop).
GIT_COMMIT := $(shell git rev-parse --verify -q HEAD 2>/dev/null || echo unknown)
$(BUILD)/obj/core/src/provenance.o: EXTRA_CFLAGS += -DMPX_GIT_COMMIT='"$(GIT_COMMIT)"'
$(BUILD)/obj/core/src/provenance.o: $(wildcard .git/HEAD .git/refs/heads/*)
LIB_SRCS += core/src/registry.c core/src/host.c core/src/session.c core/src/precision_keys.c \
            core/src/record.c core/src/loss_scaler.c core/src/task_toy.c core/src/train.c \
            core/src/schedule_glue.c core/src/provenance.c core/src/cli.c core/src/cmd_plugins.c \
            core/src/cmd_check.c core/src/check_report.c core/src/cmd_run.c
CORE_SRCS += core/src/main.c
