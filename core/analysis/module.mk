# core/analysis: the read-outs over records: mpx matrix (tables over seeds), paired
# statistics, mpx diff (runs or sweeps), mpx plot (gnuplot) (README.md here).
LIB_SRCS += $(wildcard core/analysis/*.c)
$(eval $(call add_test,test_matrix,tests/test_matrix.c $(TEST_SHELL),))
$(eval $(call add_test,test_paired,tests/test_paired.c $(TEST_SHELL),))
$(eval $(call add_test,test_diff,tests/test_diff.c $(TEST_SHELL),))
$(eval $(call add_test,test_plot,tests/test_plot.c $(TEST_SHELL),))
$(eval $(call add_test,test_report,tests/test_report.c $(TEST_SHELL),))
# the failed, skipped and killed cells' test uses the test plugin that refuses SGD
$(BUILD)/tests/test_report: $(BUILD)/test-plugins/incompat_precision.so
