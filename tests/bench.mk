# Benchmarks of whole training steps (figures, not tests): make bench runs build/bench/*.
# bench_step links OpenBLAS directly for its sgemm "ceiling" column.
BENCHES += $(BUILD)/bench/bench_step
$(BUILD)/obj/tests/bench_step.o: EXTRA_CFLAGS += $(BLAS_CFLAGS)
$(BUILD)/bench/bench_step: $(BUILD)/obj/tests/bench_step.o $(BUILD)/obj/tests/bench_profile.o $(BUILD)/lib/libmpx.a $(PLUGINS)
	@mkdir -p $(@D)
	$(CC) -rdynamic -o $@ $(filter %.o,$^) $(BUILD)/lib/libmpx.a $(BLAS_LIBS) $(PKG_LIBS) -ldl -lm -lpthread
# bench_padding: exact token counts with and without data.squad.group_by_length
BENCHES += $(BUILD)/bench/bench_padding
$(BUILD)/bench/bench_padding: $(BUILD)/obj/tests/bench_padding.o $(BUILD)/lib/libmpx.a
	@mkdir -p $(@D)
	$(CC) -o $@ $(filter %.o,$^) $(BUILD)/lib/libmpx.a $(PKG_LIBS) -ldl -lm -lpthread
# bench_ranks: MiniLM step time at 1 and 2 ranks (comm/mpi) and the scaling efficiency.
BENCHES += $(BUILD)/bench/bench_ranks
$(BUILD)/bench/bench_ranks: tests/bench_ranks.sh $(BUILD)/bin/mpx $(PLUGINS)
	@mkdir -p $(@D)
	cp tests/bench_ranks.sh $@ && chmod +x $@
# bench_memory: counted bytes and peak RSS per parameter of a bert-base-shaped step, by policy
BENCHES += $(BUILD)/bench/bench_memory
$(BUILD)/bench/bench_memory: $(BUILD)/obj/tests/bench_memory.o $(BUILD)/lib/libmpx.a $(PLUGINS)
	@mkdir -p $(@D)
	$(CC) -o $@ $(filter %.o,$^) $(BUILD)/lib/libmpx.a $(PKG_LIBS) -ldl -lm -lpthread
