# The cpu compute backend (OpenBLAS) -> build/plugins/backend-cpu.so, its tests and bench.
CPU_BACKEND_SRCS := $(addprefix plugins/backend/cpu/,cpu_backend.c cpu_pool.c cpu_convert.c \
                    cpu_elementwise.c cpu_gemm.c cpu_rows.c cpu_rows_softmax.c cpu_misc.c \
                    cpu_vecmath.c cpu_formats.c cpu_gemm_scaled.c cpu_gemm_h100.c cpu_gemm_small.c \
                    cpu_gemm_linear.c cpu_gemm_pack.c cpu_gemm_amx.c cpu_quant.c cpu_attention.c)
$(eval $(call add_plugin,backend,cpu,$(CPU_BACKEND_SRCS),$(BLAS_LIBS) -lmvec -lpthread))
# -O3: the conversion loops are written to be vectorised.
$(BUILD)/obj/plugins/backend/cpu/%.o: EXTRA_CFLAGS += $(BLAS_CFLAGS) -O3

# Tests: numerics alone; ops through the built plugin, loaded by the shared test host.
$(eval $(call add_test,test_numerics,tests/test_numerics.c))
$(BUILD)/obj/tests/test_numerics.o: EXTRA_CFLAGS += -mf16c -mavx
$(eval $(call add_test,test_cpu_ops,tests/test_cpu_ops.c tests/test_cpu_ops_ref.c $(TEST_SUPPORT)))
$(eval $(call add_test,test_cpu_ops_rows,tests/test_cpu_ops_rows.c tests/test_cpu_ops_ref.c $(TEST_SUPPORT)))
$(eval $(call add_test,test_cpu_ops_grad,tests/test_cpu_ops_grad.c tests/test_cpu_ops_ref.c $(TEST_SUPPORT)))
$(BUILD)/obj/tests/test_cpu_ops%.o: EXTRA_CFLAGS += -Itests/support
$(eval $(call add_test,test_cpu_attention,tests/test_cpu_attention.c tests/test_cpu_ops_ref.c $(TEST_SUPPORT)))
$(BUILD)/obj/tests/test_cpu_attention.o: EXTRA_CFLAGS += -Itests/support
$(BUILD)/tests/test_cpu_ops $(BUILD)/tests/test_cpu_ops_rows $(BUILD)/tests/test_cpu_ops_grad: $(BUILD)/plugins/backend-cpu.so
$(BUILD)/tests/test_cpu_attention: $(BUILD)/plugins/backend-cpu.so
# the bf16 GEMMs on AMX tiles (skipped where the CPU or the OS has none)
$(eval $(call add_test,test_cpu_amx,tests/test_cpu_amx.c tests/test_cpu_ops_ref.c $(TEST_SUPPORT) $(TEST_SHELL)))
$(BUILD)/obj/tests/test_cpu_amx.o: EXTRA_CFLAGS += -Itests/support
$(BUILD)/tests/test_cpu_amx: $(BUILD)/plugins/backend-cpu.so
# libmvec's AVX-512 exp and erfc against its AVX2 ones (cpu_vecmath.c calls either)
$(eval $(call add_test,test_mvec,tests/test_mvec.c,-lmvec))

# Bench: OpenBLAS is linked directly for the side-by-side cblas_sgemm column.
BENCHES += $(BUILD)/bench/bench_gemm
$(BUILD)/obj/tests/bench_gemm.o: EXTRA_CFLAGS += $(BLAS_CFLAGS) -Itests/support
$(BUILD)/bench/bench_gemm: $(BUILD)/obj/tests/bench_gemm.o $(patsubst %.c,$(BUILD)/obj/%.o,$(TEST_SUPPORT)) $(BUILD)/lib/libmpx.a $(BUILD)/plugins/backend-cpu.so
	@mkdir -p $(@D)
	$(CC) -o $@ $(filter %.o,$^) $(BUILD)/lib/libmpx.a $(BLAS_LIBS) $(PKG_LIBS) -ldl -lm -lpthread
# formats and scaling recipes: the core's recipe code and the backend's 8-bit GEMMs
$(eval $(call add_test,test_scaling,tests/test_scaling.c $(TEST_SUPPORT)))
$(BUILD)/obj/tests/test_scaling.o: EXTRA_CFLAGS += -Itests/support
$(BUILD)/tests/test_scaling: $(BUILD)/plugins/backend-cpu.so
# Bench: the 8-bit GEMM emulation against the fp32 and bf16 paths.
BENCHES += $(BUILD)/bench/bench_gemm_fp8
$(BUILD)/obj/tests/bench_gemm_fp8.o: EXTRA_CFLAGS += -Itests/support
$(BUILD)/bench/bench_gemm_fp8: $(BUILD)/obj/tests/bench_gemm_fp8.o $(patsubst %.c,$(BUILD)/obj/%.o,$(TEST_SUPPORT)) $(BUILD)/lib/libmpx.a $(BUILD)/plugins/backend-cpu.so
	@mkdir -p $(@D)
	$(CC) -o $@ $(filter %.o,$^) $(BUILD)/lib/libmpx.a $(PKG_LIBS) -ldl -lm -lpthread
