# mpx — the one build entry. Each folder adds itself through a module.mk fragment
# (see the helper functions below); this file holds only the shared rules.
#
#   make            build/bin/mpx and build/plugins/*.so
#   make test       build everything, the test-only plugins and the Criterion suites, run them
#   make run        the main job (see README)
#   make bench      speed figures (not tests)
#   make data       SQuAD v1.1 into datasets/data/
#   make model      the default checkpoint into models/checkpoints/minilm-l6/
#   make install    PREFIX=/usr/local

CC       ?= cc
PREFIX   ?= /usr/local
BUILD    := build
PKGS     := libconfig jansson libutf8proc
CSTD     := -std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE
WARN     := -Wall -Wextra -Werror -Wno-unused-parameter
OPT      ?= -O2 -g
CFLAGS   += $(CSTD) $(WARN) $(OPT) -fPIC -Icore/include -MMD -MP
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS))
PKG_LIBS   := $(shell pkg-config --libs $(PKGS))
BLAS_CFLAGS := $(shell pkg-config --cflags openblas)
BLAS_LIBS   := $(shell pkg-config --libs openblas)
CRITERION_LIBS := $(shell pkg-config --libs criterion)
PLUGIN_CFLAGS := -fvisibility=hidden
PLUGIN_LDFLAGS = -shared -Wl,--version-script=core/plugin.map -Wl,--no-undefined

# A stand-alone host for single-plugin unit tests (tests/support/test_host.h).
TEST_SUPPORT := tests/support/test_host.c
# Running build/bin/mpx from a suite (tests/support/shell.h).
TEST_SHELL := tests/support/shell.c

# Filled by the module.mk fragments.
PLUGINS      :=
TEST_PLUGINS :=
TESTS        :=
CORE_SRCS    :=
LIB_SRCS     :=
BENCHES      :=

.PHONY: all test test-build run bench data model install clean
all:

# $(call add_plugin,KIND,NAME,SOURCES,EXTRA_LIBS) builds build/plugins/KIND-NAME.so
define add_plugin
PLUGINS += $(BUILD)/plugins/$(1)-$(2).so
$(BUILD)/plugins/$(1)-$(2).so: $(patsubst %.c,$(BUILD)/obj/%.o,$(3)) core/plugin.map
	@mkdir -p $$(@D)
	$$(CC) $(PLUGIN_LDFLAGS) -o $$@ $$(filter %.o,$$^) $(4) -lm
endef

# $(call add_test_plugin,FILE_STEM,SOURCES,EXTRA_LIBS) builds build/test-plugins/FILE_STEM.so
define add_test_plugin
TEST_PLUGINS += $(BUILD)/test-plugins/$(1).so
$(BUILD)/test-plugins/$(1).so: $(patsubst %.c,$(BUILD)/obj/%.o,$(2)) core/plugin.map
	@mkdir -p $$(@D)
	$$(CC) $(PLUGIN_LDFLAGS) -o $$@ $$(filter %.o,$$^) $(3) -lm
endef

# $(call add_test,NAME,SOURCES,EXTRA_LIBS) builds build/tests/NAME linked with libmpx.a
define add_test
TESTS += $(BUILD)/tests/$(1)
$(BUILD)/tests/$(1): $(patsubst %.c,$(BUILD)/obj/%.o,$(2)) $(BUILD)/lib/libmpx.a
	@mkdir -p $$(@D)
	$$(CC) -o $$@ $$(filter %.o,$$^) $(BUILD)/lib/libmpx.a $(3) $(CRITERION_LIBS) $(PKG_LIBS) -ldl -lm -lpthread
endef

include $(sort $(wildcard core/*.mk core/*/module.mk datasets/*.mk plugins/*/*/module.mk models/*/module.mk tests/*.mk))

# Plugin objects are compiled with hidden visibility; everything else is not.
$(BUILD)/obj/plugins/%.o $(BUILD)/obj/models/%.o $(BUILD)/obj/tests/plugins/%.o: CFLAGS += $(PLUGIN_CFLAGS)
$(BUILD)/obj/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(PKG_CFLAGS) $(EXTRA_CFLAGS) -c $< -o $@

$(BUILD)/lib/libmpx.a: $(patsubst %.c,$(BUILD)/obj/%.o,$(LIB_SRCS))
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/bin/mpx: $(patsubst %.c,$(BUILD)/obj/%.o,$(CORE_SRCS)) $(BUILD)/lib/libmpx.a
	@mkdir -p $(@D)
	$(CC) -rdynamic -o $@ $(filter %.o,$^) $(BUILD)/lib/libmpx.a $(PKG_LIBS) -ldl -lm -lpthread

all: $(BUILD)/bin/mpx $(PLUGINS)

# The core's layering first (core/README.md: each folder includes only folders below it).
test: all $(TEST_PLUGINS) $(TESTS) $(BENCHES)
	@bash tests/check-layers.sh && bash tests/check-layers.sh --self-test
	@bash tests/run-tests.sh $(TESTS)

# The suites built but not run (tests/sanitize.sh runs them outside make). `make test`
# builds the benches too (not run): their code follows the core's, and did not build
# for two sessions once when nothing compiled it.
test-build: all $(TEST_PLUGINS) $(TESTS)
	@printf '%s\n' $(TESTS) > $(BUILD)/tests.list

bench: all $(BENCHES)
	@bash tests/run-bench.sh

# The main job on embedded defaults: the five precision policies on a SQuAD slice with
# MiniLM-L6 (configs/sweeps/quick.cfg), its matrix, a loss plot and the HTML report
# (runs/quick/report.html, its path printed last). Resumable.
run: all
	@mkdir -p $(BUILD) && date +%s.%N > $(BUILD)/run.started
	$(MAKE) --no-print-directory data
	$(MAKE) --no-print-directory model
	$(BUILD)/bin/mpx sweep configs/sweeps/quick.cfg
	@echo
	@echo "== this run: runs/quick (MiniLM-L6, 81 steps, 200 dev questions; EM/F1 differences at this scale are noise) =="
	$(BUILD)/bin/mpx matrix runs/quick --rows precision.plugin \
	    --metric exact_match,f1,skipped_steps,overflow_count,memory.bytes_per_param
	$(BUILD)/bin/mpx matrix runs/quick --rows precision.plugin --metric metrics.diagnostics.ffn.stalled_frac,metrics.diagnostics.attention.stalled_frac,metrics.diagnostics.attention.underflow_frac
	$(BUILD)/bin/mpx plot runs/quick -o runs/quick/loss.svg
	@echo "plot: runs/quick/loss.svg"
	@echo
	@echo "== the committed study: results/bingbert-repro (protocol A: MiniLM-L6, 3,049 steps, 2,000 dev questions; docs/STUDY.md), not re-run here =="
	$(BUILD)/bin/mpx matrix results/bingbert-repro/main --rows precision.plugin --metric exact_match,f1,final_loss_mean --paired fp32
	@awk -v t0="$$(cat $(BUILD)/run.started)" -v t1="$$(date +%s.%N)" \
	    'BEGIN { s = t1 - t0; printf "make run: wall time %d min %04.1f s (this invocation; finished cells are not re-run)\n", s / 60, s - 60 * int(s / 60) }'
	@rm -f $(BUILD)/run.started
	@echo
	@echo "== the report: open it in a browser (one file, nothing from a network) =="
	@$(BUILD)/bin/mpx report runs/quick -o runs/quick/report.html --base fp32

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
