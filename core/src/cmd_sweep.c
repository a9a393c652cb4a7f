/* mpx sweep SWEEP.cfg [--dry-run] [--retry-failed] [-s KEY=VALUE]... [--plugin-dir DIR]... */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "record.h"
#include "sweep.h"

static const char sweep_usage[] =
    "usage: mpx sweep SWEEP.cfg [--dry-run] [--retry-failed] [-s KEY=VALUE]... [--plugin-dir DIR]...\n"
    "  runs every cell of the sweep (the cross product of its axes) that has no finished\n"
    "  record yet, each in its own process, into <run.output_dir>/<name>/<cell>-<hash>/;\n"
    "  a cell whose plugin is not installed or declared incompatible is recorded as skipped.\n"
    "  Killed and unfinished cells are run again (from their train_state checkpoint when\n"
    "  they have one); failed ones only with --retry-failed.\n"
    "  -s applies to every cell, before the axes (give the same -s when resuming).\n"
    "  --dry-run lists the cells and their state (todo, finished, skipped, failed, running)\n"
    "  without running anything. Writes <name>/sweep.json. Exit 0 when every cell is\n"
    "  finished or skipped, 1 otherwise, 2 on usage or sweep-file errors.\n";

typedef struct sweep_opts {
    int dry_run, retry_failed;
    mpx_cli cli;
} sweep_opts;

static int parse(sweep_opts *o, int argc, char **argv)
{
    char *rest[512];
    int n = 0;
    memset(o, 0, sizeof *o);
    for (int i = 0; i < argc && n < 512; i++) {
        if (!strcmp(argv[i], "--dry-run")) o->dry_run = 1;
        else if (!strcmp(argv[i], "--retry-failed")) o->retry_failed = 1;
        else rest[n++] = argv[i];
    }
    int rc = mpx_cli_parse(&o->cli, n, rest, sweep_usage);
    if (rc) return rc;
    if (o->cli.out_dir || o->cli.resume_dir || o->cli.n_positional != 1) {
        fputs(sweep_usage, stderr);
        return 2;
    }
    return 0;
}

/* What to do with a cell now; its state before running is set in *state. */
static int decide(const sweep_opts *o, const mpx_sweep *sw, mpx_sweep_cell *c, const char **state)
{
    if (c->rec == MPX_REC_FINISHED) { *state = "finished"; return 0; } /* results are never overwritten */
    if (c->plan != MPX_PLAN_RUN) {
        const char *status = c->plan == MPX_PLAN_SKIP ? "skipped" : "failed";
        mpx_rec_state same = c->plan == MPX_PLAN_SKIP ? MPX_REC_SKIPPED : MPX_REC_FAILED;
        *state = status;
        if (!o->dry_run && !(c->rec == same && !strcmp(c->rec_why, c->why)) && mpx_sweep_write_unrun(sw, c, status))
            fprintf(stderr, "mpx sweep: cannot write %s/run.json\n", c->dir);
        return 0;
    }
    if (c->rec == MPX_REC_FAILED && !o->retry_failed) { *state = "failed"; return 0; }
    if (c->rec == MPX_REC_RUNNING) { *state = "running"; return 0; }
    *state = "todo";
    return 1;
}

static void list_cells(const mpx_sweep *sw, const mpx_sweep_cell *cells, const char *const *states)
{
    printf("sweep %s: %zu cells, base %s\n", sw->name, sw->n_cells, sw->base);
    for (size_t i = 0; i < sw->n_cells; i++) {
        const mpx_sweep_cell *c = &cells[i];
        printf("  %-9s %-24s %s\n", states[i], c->name, c->dir);
        const char *why = c->why[0] ? c->why : c->rec_why;
        if ((!strcmp(states[i], "skipped") || !strcmp(states[i], "failed")) && why[0])
            printf("            %s: %s\n", states[i], why);
        else if (!strcmp(states[i], "todo") && c->rec != MPX_REC_NONE)
            printf("            (its record says %s)\n", mpx_rec_state_name(c->rec));
    }
}

/* After a child exits: the state its record gives, or a failed record written for it. */
static const char *after_run(const mpx_sweep *sw, mpx_sweep_cell *c, const mpx_cell_outcome *oc)
{
    c->rec = mpx_sweep_read_state(c->dir, c->rec_why, sizeof c->rec_why);
    switch (c->rec) {
    case MPX_REC_FINISHED: return "finished";
    case MPX_REC_FAILED: return "failed";
    case MPX_REC_SKIPPED: return "skipped";
    case MPX_REC_KILLED: return "killed";
    default: break;
    }
    if (oc->signal) snprintf(c->why, sizeof c->why, "mpx run died on signal %d before its record was complete "
                             "(see %s/mpx.log)", oc->signal, c->dir);
    else snprintf(c->why, sizeof c->why, "mpx run exited with %d and left no finished record (see %s/mpx.log)",
                  oc->exit_code, c->dir);
    if (oc->signal) return "killed";
    mpx_sweep_write_unrun(sw, c, "failed");
    return "failed";
}

static void report_cell(size_t k, size_t m, const mpx_sweep_cell *c, const char *state, const mpx_cell_outcome *oc)
{
    const char *why = c->rec_why[0] ? c->rec_why : c->why;
    if (c->rec == MPX_REC_FINISHED)
        fprintf(stderr, "mpx sweep: [%zu/%zu] %s: finished in %.1f s\n", k, m, c->name, oc->seconds);
    else
        fprintf(stderr, "mpx sweep: [%zu/%zu] %s: %s: %s\n", k, m, c->name, state, why);
}

static int run_cells(const sweep_opts *o, const mpx_sweep *sw, mpx_sweep_cell *cells, const char **states,
                     const int *todo, const char *sweep_dir, size_t *ran)
{
    size_t m = 0, k = 0;
    int tty = isatty(STDERR_FILENO);
    const char *const *uov = o->cli.overrides;
    for (size_t i = 0; i < sw->n_cells; i++) m += (size_t)todo[i];
    for (size_t i = 0; i < sw->n_cells; i++) {
        if (!todo[i]) continue;
        mpx_sweep_cell *c = &cells[i];
        char label[320], err[1024];
        snprintf(label, sizeof label, "[%zu/%zu] %s", ++k, m, c->name);
        mpx_cell_outcome oc;
        c->why[0] = 0;
        if (mpx_sweep_exec(sw, c, o->cli.plugin_dirs, o->cli.n_plugin_dirs, label, tty, &oc, err, sizeof err)) {
            fprintf(stderr, "mpx sweep: %s: %s\n", c->name, err);
            return -1;
        }
        (*ran)++;
        states[i] = after_run(sw, c, &oc);
        report_cell(k, m, c, states[i], &oc);
        mpx_sweep_write_index(sw, sweep_dir, cells, states, uov, o->cli.n_overrides);
        if (oc.signal == SIGINT || oc.signal == SIGTERM || oc.signal == SIGHUP) {
            fprintf(stderr, "mpx sweep: interrupted; run the same command again to resume\n");
            return -1;
        }
    }
    return 0;
}

static int summary(const mpx_sweep *sw, const char *const *states, size_t ran, const char *sweep_dir)
{
    size_t fin = 0, skip = 0, failed = 0;
    for (size_t i = 0; i < sw->n_cells; i++) {
        fin += !strcmp(states[i], "finished");
        skip += !strcmp(states[i], "skipped");
        failed += !strcmp(states[i], "failed");
    }
    size_t other = sw->n_cells - fin - skip - failed;
    printf("sweep %s: %zu cells: %zu finished, %zu skipped, %zu failed, %zu unfinished; ran %zu now; records in %s\n",
           sw->name, sw->n_cells, fin, skip, failed, other, ran, sweep_dir);
    return fin + skip == sw->n_cells ? 0 : 1;
}

static int sweep(const sweep_opts *o, const mpx_sweep *sw, mpx_session *s)
{
    char err[8192];
    mpx_sweep_cell *cells = calloc(sw->n_cells, sizeof *cells);
    const char **states = calloc(sw->n_cells, sizeof *states);
    int *todo = calloc(sw->n_cells, sizeof *todo);
    int rc = 2;
    if (!cells || !states || !todo) {
        fprintf(stderr, "mpx sweep: out of memory\n");
        goto out;
    }
    if (mpx_sweep_plan(sw, s, o->cli.overrides, o->cli.n_overrides, cells, err, sizeof err)) {
        fprintf(stderr, "mpx sweep: %s: %s\n", sw->file, err);
        goto out;
    }
    for (size_t i = 0; i < sw->n_cells; i++) todo[i] = decide(o, sw, &cells[i], &states[i]);
    if (o->dry_run) {
        list_cells(sw, cells, states);
        rc = 0;
        goto out;
    }
    char sweep_dir[PATH_MAX];
    snprintf(sweep_dir, sizeof sweep_dir, "%s", cells[0].dir);
    *strrchr(sweep_dir, '/') = 0;
    for (size_t i = 0; i < sw->n_cells; i++)
        if (!strcmp(states[i], "skipped") || (!todo[i] && !strcmp(states[i], "failed")))
            fprintf(stderr, "mpx sweep: %s: %s: %s\n", cells[i].name, states[i],
                    cells[i].why[0] ? cells[i].why : cells[i].rec_why);
    if (mpx_sweep_write_index(sw, sweep_dir, cells, states, o->cli.overrides, o->cli.n_overrides)) {
        fprintf(stderr, "mpx sweep: cannot write %s/sweep.json\n", sweep_dir);
        goto out;
    }
    size_t ran = 0;
    int interrupted = run_cells(o, sw, cells, states, todo, sweep_dir, &ran);
    rc = summary(sw, states, ran, sweep_dir);
    if (interrupted) rc = 1;
out:
    if (cells) mpx_sweep_cells_free(cells, sw->n_cells);
    free(cells);
    free(states);
    free(todo);
    return rc;
}

int mpx_cmd_sweep(int argc, char **argv)
{
    sweep_opts o;
    int rc = parse(&o, argc, argv);
    if (rc) return rc == 1 ? 0 : rc;
    mpx_sweep sw;
    char err[4096];
    if (mpx_sweep_load(&sw, o.cli.positional[0], err, sizeof err)) {
        fprintf(stderr, "mpx sweep: %s\n", err);
        return 2;
    }
    mpx_session s;
    if (mpx_session_open(&s, o.cli.plugin_dirs, o.cli.n_plugin_dirs)) {
        fprintf(stderr, "mpx sweep: cannot scan plugin folders\n");
        mpx_sweep_free(&sw);
        return 2;
    }
    rc = sweep(&o, &sw, &s);
    mpx_session_close(&s);
    mpx_sweep_free(&sw);
    return rc;
}
