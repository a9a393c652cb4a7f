# Test-only plugins for the loader tests: built to build/test-plugins/, never build/plugins/.
$(foreach p,bad_major newer_minor shadow_v1 shadow_v2 dup_a dup_b null_step null_sgd null_ops null_instance_ops,$(eval $(call add_test_plugin,$(p),tests/plugins/$(p).c,)))
TEST_PLUGINS += $(BUILD)/test-plugins/no_entry.so
$(BUILD)/test-plugins/no_entry.so: $(BUILD)/obj/tests/plugins/no_entry.o
	@mkdir -p $(@D)
	$(CC) -shared -o $@ $<

# The cpu backend declaring ABI 1.0 with the 1.0 op table (ABI 1.4 appended flags and
# fused_update to mpx_ops): an older backend the core must still load and run. Only
# cpu_backend.c differs; the other objects are the cpu backend's own.
TEST_PLUGINS += $(BUILD)/test-plugins/backend-cpu-abi10.so
$(BUILD)/obj/tests/abi10/cpu_backend.o: plugins/backend/cpu/cpu_backend.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(PLUGIN_CFLAGS) $(PKG_CFLAGS) $(BLAS_CFLAGS) -O3 -DMPX_CPU_AS_ABI_1_0 -c $< -o $@
$(BUILD)/test-plugins/backend-cpu-abi10.so: $(BUILD)/obj/tests/abi10/cpu_backend.o \
        $(patsubst %.c,$(BUILD)/obj/%.o,$(filter-out %/cpu_backend.c,$(CPU_BACKEND_SRCS))) core/plugin.map
	@mkdir -p $(@D)
	$(CC) $(PLUGIN_LDFLAGS) -o $@ $(filter %.o,$^) $(BLAS_LIBS) -lmvec -lpthread -lm

# The cpu backend without MPX_OPS_FORMATS (as backend/cuda): named cpu-noformats, the
# refusal of a policy in a number format is tested on it without a GPU.
TEST_PLUGINS += $(BUILD)/test-plugins/backend-cpu-noformats.so
$(BUILD)/obj/tests/noformats/cpu_backend.o: plugins/backend/cpu/cpu_backend.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(PLUGIN_CFLAGS) $(PKG_CFLAGS) $(BLAS_CFLAGS) -O3 -DMPX_CPU_NO_FORMATS -c $< -o $@
$(BUILD)/test-plugins/backend-cpu-noformats.so: $(BUILD)/obj/tests/noformats/cpu_backend.o \
        $(patsubst %.c,$(BUILD)/obj/%.o,$(filter-out %/cpu_backend.c,$(CPU_BACKEND_SRCS))) core/plugin.map
	@mkdir -p $(@D)
	$(CC) $(PLUGIN_LDFLAGS) -o $@ $(filter %.o,$^) $(BLAS_LIBS) -lmvec -lpthread -lm

# The cpu backend with four ops one ulp off (MPX_CPU_FAULTY): the cuda suites' harness
# run against it must fail (tests/test_cuda_bounds.c).
TEST_PLUGINS += $(BUILD)/test-plugins/backend-cpu-faulty.so
$(BUILD)/obj/tests/faulty/cpu_backend.o: plugins/backend/cpu/cpu_backend.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(PLUGIN_CFLAGS) $(PKG_CFLAGS) $(BLAS_CFLAGS) -O3 -DMPX_CPU_FAULTY -c $< -o $@
$(BUILD)/test-plugins/backend-cpu-faulty.so: $(BUILD)/obj/tests/faulty/cpu_backend.o \
        $(patsubst %.c,$(BUILD)/obj/%.o,$(filter-out %/cpu_backend.c,$(CPU_BACKEND_SRCS))) core/plugin.map
	@mkdir -p $(@D)
	$(CC) $(PLUGIN_LDFLAGS) -o $@ $(filter %.o,$^) $(BLAS_LIBS) -lmvec -lpthread -lm

# The toy model declaring ABI 1.0 with the 1.0 model vtable (ABI 1.7 appended
# set_weight_gather): it must still load and train, and zero/stage3 must refuse it.
TEST_PLUGINS += $(BUILD)/test-plugins/model-toy-abi10.so
$(BUILD)/obj/tests/abi10/toy.o: models/toy/toy.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(PLUGIN_CFLAGS) $(PKG_CFLAGS) -DMPX_TOY_AS_ABI_1_0 -c $< -o $@
$(BUILD)/test-plugins/model-toy-abi10.so: $(BUILD)/obj/tests/abi10/toy.o core/plugin.map
	@mkdir -p $(@D)
	$(CC) $(PLUGIN_LDFLAGS) -o $@ $(filter %.o,$^) -lm
