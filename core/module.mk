# The core: the mpx binary (CLI) over libmpx.a (session, loader, host, records, loop).
# A record's git_commit: HEAD, with "-dirty" when the sources that go into the binaries
# (core/, plugins/, the makefiles) differ from it, a new file there included (a plugin
# added in the tree; git's ignored files are not). The stamp file is rewritten only when
# that changes, and provenance.o is rebuilt when the stamp is (a commit, a checkout, an
# edit or its revert), so a binary never carries the commit of an older build.
GIT_COMMIT := $(shell git rev-parse --verify -q HEAD 2>/dev/null || echo unknown)$(shell \
    git rev-parse --verify -q HEAD >/dev/null 2>&1 && test -n "`git status --porcelain -- core plugins Makefile 2>/dev/null`" && echo -dirty)
$(BUILD)/git-commit.txt: mpx-git-stamp
	@mkdir -p $(@D); echo '$(GIT_COMMIT)' | cmp -s - $@ || echo '$(GIT_COMMIT)' > $@
.PHONY: mpx-git-stamp
$(BUILD)/obj/core/src/provenance.o: EXTRA_CFLAGS += -DMPX_GIT_COMMIT='"$(GIT_COMMIT)"'
$(BUILD)/obj/core/src/provenance.o: $(BUILD)/git-commit.txt
LIB_SRCS += core/src/registry.c core/src/host.c core/src/session.c core/src/shard.c core/src/weight_gather.c core/src/precision_keys.c \
            core/src/record.c core/src/notes.c core/src/loss_scaler.c core/src/task_toy.c core/src/task_squad.c core/src/length_group.c core/src/train.c core/src/train_state.c core/src/nonfinite.c core/src/memory_plan.c \
            core/src/schedule_glue.c core/src/provenance.c core/src/cli.c core/src/cmd_plugins.c \
            core/src/cmd_check.c core/src/compat.c core/src/check_report.c core/src/cmd_run.c core/src/launch.c core/src/diagnostics.c \
            core/src/format_table.c core/src/scaling.c core/src/update_window.c core/src/opt_threads.c core/src/thread_pool.c
CORE_SRCS += core/src/main.c

# make install PREFIX=...: the binary, the plugins (lib/mpx), the ABI headers and mpx.pc,
# so a plugin can be built out of tree: cc -shared -fPIC $(pkg-config --cflags mpx) ...
install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/mpx $(DESTDIR)$(PREFIX)/include/mpx \
	           $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/share/mpx
	install -m 755 $(BUILD)/bin/mpx $(DESTDIR)$(PREFIX)/bin/mpx
	install -m 755 $(PLUGINS) $(DESTDIR)$(PREFIX)/lib/mpx/
	install -m 644 core/include/mpx/*.h $(DESTDIR)$(PREFIX)/include/mpx/
	install -m 644 core/plugin.map $(DESTDIR)$(PREFIX)/share/mpx/plugin.map
	sed -e 's|@PREFIX@|$(PREFIX)|g' core/mpx.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/mpx.pc
