# core/sweep: mpx sweep's file, plan, records and executors (cells as child processes,
# --jobs, Slurm), resumable, with fault points for the tests (README.md here).
LIB_SRCS += $(wildcard core/sweep/*.c)
$(eval $(call add_test,test_sweep,tests/test_sweep.c $(TEST_SHELL),))
$(eval $(call add_test,test_sweep_slurm,tests/test_sweep_slurm.c $(TEST_SHELL),))
