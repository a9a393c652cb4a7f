# comm/nccl -> build/plugins/comm-nccl.so, built with the cuda backend (where nvcc is
# found, see plugins/backend/cuda/module.mk) and where MPI is (mpicc): NCCL for the
# collectives, MPI for the bootstrap (the unique id) and the host-side all-reduce.
NCCL_MPI_CFLAGS := $(shell mpicc --showme:compile 2>/dev/null)
NCCL_MPI_LIBS   := $(shell mpicc --showme:link 2>/dev/null)
ifeq ($(HAVE_CUDA),1)
ifneq ($(strip $(NCCL_MPI_LIBS)),)
$(BUILD)/obj/plugins/comm/nccl/%.o: EXTRA_CFLAGS += $(CUDA_CFLAGS) $(NCCL_MPI_CFLAGS)
$(eval $(call add_plugin,comm,nccl,plugins/comm/nccl/nccl_comm.c,$(CUDA_LIBS) -lnccl -lcudart $(NCCL_MPI_LIBS)))
endif
endif
