/* Ranks as MPI processes (DESIGN: mpx uses existing engines): the launch this process
 * is part of, and `mpx run --ranks N` starting N copies of itself through mpirun. */
#ifndef MPX_LAUNCH_H
#define MPX_LAUNCH_H

#include <stddef.h>

/* The number of ranks of the MPI launch this process belongs to (OpenMPI's mpirun:
 * OMPI_COMM_WORLD_SIZE; PMI launchers: PMI_SIZE; srun: SLURM_STEP_NUM_TASKS), and in
 * *rank this process's rank; 0 when it was not started by a launcher. */
int mpx_launch_world(int *rank);

/* Runs `mpx ARGV...` (argv as given after the subcommand, what = "run") as `ranks`
 * ranks under mpirun (oversubscribed, no binding, shared-memory transport, OpenMPI's
 * run-as-root variables set for the child only), waits, and when it failed makes the
 * record in `dir` say so with every failed rank's error (dir/rank-R.error). Returns the
 * exit code for mpx. */
int mpx_launch_ranks(int ranks, const char *what, int argc, char **argv, const char *dir);

/* A rank other than 0 leaves its error beside the record (dir/rank-R.error). */
void mpx_launch_rank_error(const char *dir, int rank, const char *msg);

#endif
