# Sweeps and their read-outs: mpx sweep (cells as child processes, resumable records),
# mpx matrix (tables over seeds), mpx diff (runs or sweeps), mpx plot (gnuplot).
LIB_SRCS += core/src/sweep.c core/src/sweep_plan.c core/src/plugin_names.c core/src/sweep_record.c core/src/sweep_exec.c core/src/sweep_fault.c \
            core/src/sweep_read.c core/src/cmd_sweep.c \
            core/src/sweep_parallel.c core/src/sweep_slurm.c core/src/sweep_slurm_query.c \
            core/src/sweep_status.c core/src/cmd_sweep_slurm.c \
            core/src/matrix.c core/src/matrix_render.c core/src/cmd_matrix.c core/src/paired.c core/src/cmd_paired.c \
            core/src/diff.c core/src/diff_sweep.c core/src/cmd_diff.c \
            core/src/plot.c core/src/plot_scales.c core/src/cmd_plot.c
$(eval $(call add_test,test_sweep,tests/test_sweep.c $(TEST_SHELL),))
$(eval $(call add_test,test_sweep_slurm,tests/test_sweep_slurm.c $(TEST_SHELL),))
$(eval $(call add_test,test_matrix,tests/test_matrix.c $(TEST_SHELL),))
$(eval $(call add_test,test_paired,tests/test_paired.c $(TEST_SHELL),))
$(eval $(call add_test,test_diff,tests/test_diff.c $(TEST_SHELL),))
$(eval $(call add_test,test_plot,tests/test_plot.c $(TEST_SHELL),))
