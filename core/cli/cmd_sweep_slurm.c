/* The Slurm side of mpx sweep: --executor slurm (submit the cells that are neither
 * finished nor still queued or running in Slurm, as one job array) and --status. */
#include "cmd_sweep_slurm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../sweep/sweep_slurm.h"
#include "../sweep/sweep_status.h"

/* The records were read before Slurm was asked: a task that ended in between has written
 * its final record by now, so read again those of the tasks Slurm says are over. */
static void reread_ended(const mpx_sweep *sw, mpx_sweep_cell *cells, const mpx_slurm_cell *sc, const char **states)
{
    for (size_t i = 0; i < sw->n_cells; i++) {
        mpx_sweep_cell *c = &cells[i];
        if (sc[i].state == MPX_SLURM_NONE || mpx_slurm_active(sc[i].state) || c->rec == MPX_REC_FINISHED) continue;
        c->rec = mpx_sweep_read_state(c->dir, c->rec_why, sizeof c->rec_why);
        if (states && c->rec == MPX_REC_FINISHED) states[i] = "finished";
    }
}

int mpx_sweep_status_cmd(const mpx_sweep *sw, mpx_sweep_cell *cells, const char *sweep_dir)
{
    mpx_slurm_cell *sc = calloc(sw->n_cells, sizeof *sc);
    if (!sc) {
        fprintf(stderr, "mpx sweep: out of memory\n");
        return 2;
    }
    int n_subs = mpx_slurm_query(sweep_dir, sw->n_cells, sc);
    reread_ended(sw, cells, sc, NULL);
    int rc = mpx_sweep_print_status(sw, cells, sc, n_subs, sweep_dir);
    free(sc);
    return rc;
}

int mpx_sweep_slurm(const mpx_sweep *sw, mpx_sweep_cell *cells, const char **states, int *todo,
                    const mpx_sweep_slurm_opts *o, const char *sweep_dir)
{
    char err[8192], job[64];
    mpx_slurm_cell *sc = calloc(sw->n_cells, sizeof *sc);
    if (!sc) {
        fprintf(stderr, "mpx sweep: out of memory\n");
        return 2;
    }
    mpx_slurm_query(sweep_dir, sw->n_cells, sc);
    reread_ended(sw, cells, sc, states);
    size_t m = 0, held = 0;
    for (size_t i = 0; i < sw->n_cells; i++) {
        if (cells[i].rec == MPX_REC_FINISHED) todo[i] = 0;
        int was = todo[i];
        todo[i] = mpx_sweep_slurm_todo(&cells[i], &sc[i], todo[i]);
        if (was && !todo[i]) {
            states[i] = sc[i].state == MPX_SLURM_PENDING ? "pending" : "running";
            held++;
        }
        if (todo[i]) states[i] = "submitted";
        m += (size_t)todo[i];
    }
    int rc = 0;
    if (!m) {
        if (o->dry_run) fprintf(stderr, "mpx sweep: no cell to submit\n");
        else printf("sweep %s: no cell to submit (%zu still queued or running in Slurm); see mpx sweep %s --status%s\n",
                    sw->name, held, sw->file, o->n_overrides ? " (with the same -s)" : "");
    } else if (o->dry_run) {
        if (mpx_slurm_script(stdout, sw, cells, todo, o->plugin_dirs, o->n_plugin_dirs, sweep_dir, err, sizeof err)) {
            fprintf(stderr, "mpx sweep: %s\n", err);
            rc = 2;
        }
    } else if (mpx_slurm_submit(sw, cells, todo, o->plugin_dirs, o->n_plugin_dirs, o->sbatch_args, sweep_dir, job,
                                sizeof job, err, sizeof err)) {
        fprintf(stderr, "mpx sweep: %s\n", err);
        rc = 2;
    } else {
        if (mpx_sweep_write_index(sw, sweep_dir, cells, states, o->overrides, o->n_overrides))
            fprintf(stderr, "mpx sweep: cannot write %s/sweep.json\n", sweep_dir);
        printf("sweep %s: submitted Slurm job %s, %zu cell%s", sw->name, job, m, m > 1 ? "s" : "");
        for (size_t i = 0, k = 0; i < sw->n_cells; i++)
            if (todo[i]) printf("%s%s", k++ ? ", " : ": ", cells[i].name);
        printf(" (%zu still queued or running); see mpx sweep %s --status%s\n", held, sw->file,
               o->n_overrides ? " (with the same -s)" : "");
    }
    free(sc);
    return rc;
}
