/* mpx sweep --status: every cell's state from its record and, for cells submitted to
 * Slurm, from Slurm (pending, running, preempted, cancelled, failed with Slurm's reason);
 * and which cells the Slurm executor submits again. */
#include "sweep_status.h"

#include <stdio.h>
#include <string.h>

const char *mpx_sweep_cell_status(const mpx_sweep_cell *c, const mpx_slurm_cell *sc, char *why, size_t len)
{
    why[0] = 0;
    if (c->rec == MPX_REC_FINISHED) return "finished";
    if (c->plan != MPX_PLAN_RUN) {
        snprintf(why, len, "%s", c->why);
        return c->plan == MPX_PLAN_SKIP ? "skipped" : "failed";
    }
    switch (sc->state) {
    case MPX_SLURM_PENDING:
        snprintf(why, len, "slurm %s: %s", sc->task, sc->raw);
        return "pending";
    case MPX_SLURM_RUNNING:
        snprintf(why, len, "slurm %s: %s", sc->task, sc->raw);
        return "running";
    default: break;
    }
    if (c->rec == MPX_REC_FAILED || c->rec == MPX_REC_DISK_FULL) {
        snprintf(why, len, "%s%s%s%s%s", c->rec_why, sc->raw[0] ? " (slurm " : "", sc->raw, sc->raw[0] ? ")" : "",
                 c->rec == MPX_REC_DISK_FULL ? "; the disk was full: the next mpx sweep runs it again" : "");
        return c->rec == MPX_REC_FAILED ? "failed" : "disk-full";
    }
    const char *rec = c->rec == MPX_REC_NONE ? "no record" : mpx_rec_state_name(c->rec);
    switch (sc->state) {
    case MPX_SLURM_FAILED:
        snprintf(why, len, "slurm %s: %s; its record: %s%s%s", sc->task, sc->raw, rec, c->rec_why[0] ? ": " : "",
                 c->rec_why);
        return "failed";
    case MPX_SLURM_PREEMPTED:
        snprintf(why, len, "slurm %s: %s; its record: %s", sc->task, sc->raw, rec);
        return "preempted";
    case MPX_SLURM_CANCELLED:
        snprintf(why, len, "slurm %s: %s; its record: %s", sc->task, sc->raw, rec);
        return "cancelled";
    case MPX_SLURM_UNKNOWN:
    case MPX_SLURM_COMPLETED:
        if (c->rec == MPX_REC_NONE || c->rec == MPX_REC_RUNNING) {
            snprintf(why, len, "slurm %s: %s; %s", sc->task,
                     sc->state == MPX_SLURM_COMPLETED ? "completed"
                                                      : "no longer queued (cancelled before it started, or forgotten by Slurm)",
                     c->rec == MPX_REC_NONE ? "no record" : "its record still says running");
            return c->rec == MPX_REC_NONE ? "todo" : "stale";
        }
        break;
    default: break;
    }
    snprintf(why, len, "%s", c->rec_why);
    switch (c->rec) {
    case MPX_REC_KILLED: return "killed";
    case MPX_REC_RUNNING: return "running";
    case MPX_REC_STALE: return "stale";
    case MPX_REC_UNREADABLE: return "unreadable";
    default: return "todo";
    }
}

int mpx_sweep_slurm_todo(const mpx_sweep_cell *c, const mpx_slurm_cell *sc, int decided)
{
    if (mpx_slurm_active(sc->state)) return 0;
    /* a record left "running" by a task Slurm no longer runs (killed on a node we cannot see) */
    if (c->rec == MPX_REC_RUNNING && sc->state != MPX_SLURM_NONE && c->plan == MPX_PLAN_RUN) return 1;
    return decided;
}

/* States whose cell may have trained part of the way. */
static int progress_shown(const char *st)
{
    static const char *const partial[] = { "running", "killed", "stale", "preempted", "cancelled", "disk-full" };
    for (size_t i = 0; i < sizeof partial / sizeof *partial; i++)
        if (!strcmp(st, partial[i])) return 1;
    return 0;
}

int mpx_sweep_print_status(const mpx_sweep *sw, const mpx_sweep_cell *cells, const mpx_slurm_cell *sc,
                           int n_submissions, const char *sweep_dir)
{
    size_t done = 0, count[16] = { 0 };
    static const char *const words[] = { "finished", "skipped", "failed", "pending", "running", "preempted",
                                         "cancelled", "killed", "stale", "todo", "unreadable", "disk-full" };
    const size_t n_words = sizeof words / sizeof *words;
    printf("sweep %s: %zu cells, records in %s", sw->name, sw->n_cells, sweep_dir);
    if (n_submissions) printf(" (%d Slurm submission%s, %s/slurm.json)", n_submissions, n_submissions > 1 ? "s" : "",
                              sweep_dir);
    putchar('\n');
    for (size_t i = 0; i < sw->n_cells; i++) {
        char why[8192];
        const char *st = mpx_sweep_cell_status(&cells[i], &sc[i], why, sizeof why);
        printf("  %-10s %-24s %s\n", st, cells[i].name, cells[i].dir);
        if (why[0]) printf("             %s\n", why);
        if (progress_shown(st)) {   /* how far its training got, from its metrics.csv */
            char where[256];
            mpx_sweep_progress_text(cells[i].dir, !strcmp(st, "running"), where, sizeof where);
            if (where[0]) printf("             %s\n", where);
        }
        for (size_t w = 0; w < n_words; w++) if (!strcmp(st, words[w])) count[w]++;
        done += !strcmp(st, "finished") || !strcmp(st, "skipped");
    }
    printf("sweep %s:", sw->name);
    for (size_t w = 0, first = 1; w < n_words; w++) {
        if (!count[w]) continue;
        printf("%s %zu %s", first ? "" : ",", count[w], words[w]);
        first = 0;
    }
    putchar('\n');
    return done == sw->n_cells ? 0 : 1;
}
