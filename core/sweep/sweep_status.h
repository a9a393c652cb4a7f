/* A sweep cell's state from its record and from Slurm (sweep_status.c). */
#ifndef MPX_SWEEP_STATUS_H
#define MPX_SWEEP_STATUS_H

#include "sweep.h"
#include "sweep_slurm.h"

/* finished, skipped, failed, pending, running, preempted, cancelled, killed, stale, todo,
 * unreadable or disk-full; the reason (Slurm's words and the record's) into why. */
const char *mpx_sweep_cell_status(const mpx_sweep_cell *c, const mpx_slurm_cell *sc, char *why, size_t len);

/* Whether the Slurm executor submits the cell: what the serial executor would run
 * (`decided`), never a cell Slurm still holds queued or running, and also a cell whose
 * record says running while Slurm no longer runs it. */
int mpx_sweep_slurm_todo(const mpx_sweep_cell *c, const mpx_slurm_cell *sc, int decided);

/* The --status listing; 0 when every cell is finished or skipped, 1 otherwise. */
int mpx_sweep_print_status(const mpx_sweep *sw, const mpx_sweep_cell *cells, const mpx_slurm_cell *sc,
                           int n_submissions, const char *sweep_dir);

#endif
