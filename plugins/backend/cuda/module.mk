# The cuda compute backend -> build/plugins/backend-cuda.so, built only where nvcc is
# found (CUDA_HOME, default /usr/local/cuda, or nvcc on PATH). The core never links CUDA:
# only this plugin (cudart, cuBLAS) and comm/nccl do. nvcc runs one file at a time (the
# objects are chained order-only) and for sm_90 (H200/H100) plus PTX, which later GPUs
# JIT-compile: CUDA_ARCH overrides, e.g. CUDA_ARCH='-gencode arch=compute_80,code=sm_80'.
CUDA_HOME ?= /usr/local/cuda
NVCC ?= $(firstword $(wildcard $(CUDA_HOME)/bin/nvcc) $(shell command -v nvcc 2>/dev/null))
ifneq ($(strip $(NVCC)),)
HAVE_CUDA := 1
CUDA_ARCH ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
# --fmad=false: a * b + c is two roundings, as the cpu backend computes it.
NVCC_FLAGS := -std=c++17 -O3 --fmad=false $(CUDA_ARCH) -Icore/include \
              -Xcompiler -fPIC,-fvisibility=hidden,-Wall,-Wextra,-Werror,-Wno-unused-parameter
CUDA_CFLAGS := -I$(CUDA_HOME)/include -DMPX_CUDA_LIB_DIR='"$(CUDA_HOME)/lib64"'
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64
CUDA_BACKEND_SRCS := plugins/backend/cuda/cuda_backend.c plugins/backend/cuda/cuda_gemm.c plugins/backend/cuda/cuda_attention.c
CUDA_KERNEL_OBJS := $(addprefix $(BUILD)/obj/plugins/backend/cuda/,cuda_elementwise.o cuda_rows.o cuda_misc.o cuda_optim.o)
# cuBLAS is opened at create (dlopen), not linked: see cuda_internal.h.
$(eval $(call add_plugin,backend,cuda,$(CUDA_BACKEND_SRCS),$(CUDA_LIBS) -lcudart -lstdc++ -ldl))
$(BUILD)/plugins/backend-cuda.so: $(CUDA_KERNEL_OBJS)
$(BUILD)/obj/plugins/backend/cuda/%.o: EXTRA_CFLAGS += $(CUDA_CFLAGS)
$(BUILD)/obj/plugins/backend/cuda/%.o: plugins/backend/cuda/%.cu
	@mkdir -p $(@D)
	$(NVCC) $(NVCC_FLAGS) -MD -MF $(@:.o=.d) -c $< -o $@
# one nvcc at a time, whatever -j says
$(BUILD)/obj/plugins/backend/cuda/cuda_rows.o: | $(BUILD)/obj/plugins/backend/cuda/cuda_elementwise.o
$(BUILD)/obj/plugins/backend/cuda/cuda_misc.o: | $(BUILD)/obj/plugins/backend/cuda/cuda_rows.o
$(BUILD)/obj/plugins/backend/cuda/cuda_optim.o: | $(BUILD)/obj/plugins/backend/cuda/cuda_misc.o
endif

# Tests: built everywhere (they load the plugin at run time) and skipped, visibly,
# without the plugin or a device.
CUDA_TEST_COMMON := tests/test_cuda_common.c $(TEST_SUPPORT)
$(eval $(call add_test,test_cuda_ops,tests/test_cuda_ops.c $(CUDA_TEST_COMMON)))
$(BUILD)/obj/tests/test_cuda_%.o: EXTRA_CFLAGS += -Itests/support
$(BUILD)/tests/test_cuda_ops: $(BUILD)/plugins/backend-cpu.so
$(eval $(call add_test,test_cuda_optim,tests/test_cuda_optim.c $(CUDA_TEST_COMMON)))
$(BUILD)/tests/test_cuda_optim: $(BUILD)/plugins/backend-cpu.so $(addprefix $(BUILD)/plugins/optimizer-,adam.so adamw.so sgd.so lamb.so)
$(eval $(call add_test,test_cuda_bert,tests/test_cuda_bert.c $(CUDA_TEST_COMMON) $(TEST_SHELL),))
# The suites' bounds checked on the CPU (no device): what passes, and which faults fail.
$(eval $(call add_test,test_cuda_bounds,tests/test_cuda_bounds.c $(CUDA_TEST_COMMON)))
# The suites' bitwise checks run against a cpu backend one ulp off (tests/plugins.mk): they must fail.
$(eval $(call add_test,test_cuda_harness,tests/test_cuda_harness.c $(TEST_SHELL),))
$(BUILD)/tests/test_cuda_harness: $(BUILD)/tests/test_cuda_ops $(BUILD)/plugins/backend-cpu.so \
    $(BUILD)/test-plugins/backend-cpu-faulty.so

# The device check's timing (make device-check; tests/device-check.sh): links cudart and
# cuBLAS itself for the GEMM ceiling, so it exists only where the backend does.
ifeq ($(HAVE_CUDA),1)
$(BUILD)/obj/tests/bench_cuda_step.o: EXTRA_CFLAGS += $(CUDA_CFLAGS)
$(BUILD)/bench/bench_cuda_step: $(BUILD)/obj/tests/bench_cuda_step.o $(BUILD)/obj/tests/bench_profile.o $(BUILD)/lib/libmpx.a $(BUILD)/plugins/backend-cuda.so
	@mkdir -p $(@D)
	$(CC) -rdynamic -o $@ $(filter %.o,$^) $(BUILD)/lib/libmpx.a $(CUDA_LIBS) -lcublas -lcudart $(PKG_LIBS) -ldl -lm -lpthread
endif

.PHONY: device-check device-study
device-check:
	@bash tests/device-check.sh
# Protocol A's main cells on the GPU (tests/device-study.sh; results/bingbert-repro/gpu/)
device-study:
	@bash tests/device-study.sh
