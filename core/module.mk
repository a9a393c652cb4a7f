# The core: the mpx binary (core/cli/main.c) over libmpx.a (every other file of the layers
# under core/: cli, analysis, sweep, tasks, engine, config, record; see core/README.md).
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
$(BUILD)/obj/core/record/provenance.o: EXTRA_CFLAGS += -DMPX_GIT_COMMIT='"$(GIT_COMMIT)"'
$(BUILD)/obj/core/record/provenance.o: $(BUILD)/git-commit.txt
# Each layer's folder adds its sources (core/*/module.mk); main.c alone is not in libmpx.a.
CORE_SRCS += core/cli/main.c

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
