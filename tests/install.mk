# make install PREFIX=<temporary folder> and an out-of-tree plugin built against it
# (tests/out_of_tree/build.sh), listed and run by the installed mpx (issue 9).
$(eval $(call add_test,test_install,tests/test_install.c $(TEST_SHELL),))
# it installs what `make all` built: the binary and every plugin
$(BUILD)/tests/test_install: $(BUILD)/bin/mpx $(PLUGINS)
