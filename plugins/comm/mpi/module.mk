# comm/mpi: the only part of mpx that links MPI (OpenMPI: openmpi-bin, libopenmpi-dev).
MPI_CFLAGS := $(shell mpicc --showme:compile 2>/dev/null)
MPI_LIBS   := $(shell mpicc --showme:link 2>/dev/null)
$(BUILD)/obj/plugins/comm/mpi/%.o: EXTRA_CFLAGS += $(MPI_CFLAGS)
$(eval $(call add_plugin,comm,mpi,plugins/comm/mpi/mpi_comm.c plugins/comm/mpi/ring.c,$(MPI_LIBS)))
