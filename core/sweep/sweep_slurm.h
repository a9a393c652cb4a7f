/* The Slurm executor of mpx sweep: the job-array script and its submission
 * (sweep_slurm.c), and what Slurm says of the submitted cells (sweep_slurm_query.c). */
#ifndef MPX_SWEEP_SLURM_H
#define MPX_SWEEP_SLURM_H

#include <stdio.h>

#include "sweep.h"

/* The job script for the cells with todo[i] set (array index = cell index). */
int mpx_slurm_script(FILE *f, const mpx_sweep *sw, const mpx_sweep_cell *cells, const int *todo,
                     const char *const *dirs, size_t n_dirs, const char *sweep_dir, char *err, size_t errlen);

/* Write the script to <sweep_dir>/slurm/submit-*.sh, `sbatch --parsable [ARGS] SCRIPT`
 * (ARGS split by the shell), and append the submission to <sweep_dir>/slurm.json. */
int mpx_slurm_submit(const mpx_sweep *sw, const mpx_sweep_cell *cells, const int *todo, const char *const *dirs,
                     size_t n_dirs, const char *sbatch_args, const char *sweep_dir, char *job_id, size_t idlen,
                     char *err, size_t errlen);

typedef enum mpx_slurm_state {
    MPX_SLURM_NONE,       /* never submitted */
    MPX_SLURM_UNKNOWN,    /* submitted, but Slurm no longer knows the task (or cannot be asked) */
    MPX_SLURM_PENDING, MPX_SLURM_RUNNING, MPX_SLURM_COMPLETED,
    MPX_SLURM_FAILED,     /* FAILED, TIMEOUT, OUT_OF_MEMORY, NODE_FAIL, BOOT_FAIL, DEADLINE */
    MPX_SLURM_PREEMPTED, MPX_SLURM_CANCELLED,
} mpx_slurm_state;

typedef struct mpx_slurm_cell {
    mpx_slurm_state state;
    char task[64];     /* JOBID_INDEX */
    char raw[160];     /* Slurm's own words: "PENDING (Resources)", "TIMEOUT exit 0:15" */
} mpx_slurm_cell;

/* Every cell's array task from the latest submission in <sweep_dir>/slurm.json that holds
 * it, and its state from squeue, then sacct (scontrol where accounting is off). Returns
 * the number of submissions found (0: the sweep never went through Slurm). */
int mpx_slurm_query(const char *sweep_dir, size_t n_cells, mpx_slurm_cell *out);

/* Is the task still queued or running (so it must not be submitted again)? */
int mpx_slurm_active(mpx_slurm_state st);
const char *mpx_slurm_state_name(mpx_slurm_state st);

#endif
