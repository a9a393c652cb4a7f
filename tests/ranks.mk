# Multi-rank suites (OpenMPI): comm/mpi's collectives and whole runs at 2 and 3 ranks.
# ranks_ring_check is a plain program the suite starts under mpirun.
RANKS_RING_CHECK := $(BUILD)/tests/bin/ranks_ring_check
$(RANKS_RING_CHECK): $(BUILD)/obj/tests/ranks_ring_check.o $(BUILD)/obj/tests/support/test_host.o $(BUILD)/lib/libmpx.a
	@mkdir -p $(@D)
	$(CC) -o $@ $(filter %.o,$^) $(BUILD)/lib/libmpx.a $(PKG_LIBS) -ldl -lm -lpthread
$(eval $(call add_test,test_ranks,tests/test_ranks.c tests/test_ranks_runs.c tests/test_ranks_deepspeed.c $(TEST_SHELL),))
$(BUILD)/tests/test_ranks: $(RANKS_RING_CHECK)
