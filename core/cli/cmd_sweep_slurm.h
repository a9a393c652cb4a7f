/* mpx sweep --executor slurm and --status (cmd_sweep_slurm.c). */
#ifndef MPX_CMD_SWEEP_SLURM_H
#define MPX_CMD_SWEEP_SLURM_H

#include "../sweep/sweep.h"

typedef struct mpx_sweep_slurm_opts {
    int dry_run;                   /* print the job script instead of submitting it */
    const char *sbatch_args;       /* --sbatch-args, split at blanks (no shell); NULL: none */
    const char *const *plugin_dirs;
    size_t n_plugin_dirs;
    const char *const *overrides;  /* the user's -s, for sweep.json */
    size_t n_overrides;
} mpx_sweep_slurm_opts;

/* Submit the cells with todo[i] set that Slurm does not still hold (todo and states are
 * updated). Exit code: 0 submitted or nothing to submit, 2 on an error. */
int mpx_sweep_slurm(const mpx_sweep *sw, mpx_sweep_cell *cells, const char **states, int *todo,
                    const mpx_sweep_slurm_opts *o, const char *sweep_dir);

/* mpx sweep --status: 0 when every cell is finished or skipped, 1 otherwise. */
int mpx_sweep_status_cmd(const mpx_sweep *sw, mpx_sweep_cell *cells, const char *sweep_dir);

#endif
