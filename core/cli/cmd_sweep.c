/* mpx sweep SWEEP.cfg [--dry-run] [--retry-failed] [--jobs N | --executor slurm [--sbatch-args ARGS] | --status]
 *           [-s KEY=VALUE]... [--plugin-dir DIR]... */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "cmd_sweep_slurm.h"
#include "../record/fsutil.h"
#include "../record/record.h"
#include "../sweep/sweep.h"

static const char sweep_usage[] =
    "usage: mpx sweep SWEEP.cfg [--dry-run] [--retry-failed] [--max-cells N] [-s KEY=VALUE]... [--ranks N]\n"
    "                 [--plugin-dir DIR]... [--jobs N | --executor local|slurm [--sbatch-args 'ARGS'] | --status]\n"
    "  runs every cell of the sweep (the cross product of its axes) that has no finished\n"
    "  record yet, each in its own process, into <run.output_dir>/<name>/<cell>-<hash>/;\n"
    "  a cell whose plugin is a built-in one not built here or declared incompatible is\n"
    "  recorded as skipped; a plugin name mpx does not know is an error before any cell (a\n"
    "  plugin of your own: --plugin-dir DIR or $MPX_PLUGIN_PATH). A finished cell is not run\n"
    "  again, even after its plugin was rebuilt at another version.\n"
    "  Killed and unfinished cells are run again (from their train_state checkpoint when\n"
    "  they have one), and so are cells that failed because the disk was full (ENOSPC or\n"
    "  EDQUOT: run.json's error_kind \"disk_full\"); other failed ones only with --retry-failed.\n"
    "  -s applies to every cell, before the axes (give the same -s when resuming).\n"    "  --ranks N is -s run.ranks=N: every cell runs N data-parallel ranks (docs/RANKS.md);\n"
    "  a run.ranks axis or set entry wins over it.\n"
    "  --max-cells N runs at most N cells, in order, then stops (a long study in parts).\n"
    "  --dry-run lists the cells and their state (todo, finished, skipped, failed, running)\n"
    "  without running or writing anything, and exits 0. Otherwise writes <name>/sweep.json;\n"
    "  exit 0 when every cell is finished or skipped, 1 otherwise, 2 on usage or sweep-file\n"
    "  errors.\n"
    "  --jobs N runs N cells at a time on this machine, the cores split between them.\n"
    "  --executor slurm submits those cells as one Slurm job array (resources from the sweep\n"
    "  file's slurm group, docs/CONFIG.md; a cell with run.ranks > 1 runs through\n"
    "  srun --mpi=pmix, or slurm.mpi's plugin; --sbatch-args adds sbatch options, split at\n"
    "  blanks (no shell);\n"
    "  --dry-run prints the job script)\n"
    "  and returns (exit 0 once submitted); cells Slurm still holds queued or running are not\n"
    "  submitted again.\n"
    "  --status lists every cell's state from its record and from Slurm, and how far a running\n"
    "  or interrupted cell trained (its step, and for a running one the time left at its rate\n"
    "  so far); exit 0 when every cell is finished or skipped, 1 otherwise.\n";

typedef struct sweep_opts {
    int dry_run, retry_failed, status, slurm, jobs;
    long max_cells; /* 0: all */
    const char *sbatch_args;
    mpx_cli cli;
} sweep_opts;

/* The value of an option that takes one, or NULL (usage printed). */
static const char *option_value(int argc, char **argv, int *i)
{
    if (*i + 1 < argc) return argv[++*i];
    fprintf(stderr, "mpx sweep: %s needs a value\n%s", argv[*i], sweep_usage);
    return NULL;
}

/* --jobs, --executor, --sbatch-args, --status; 1 when argv[*i] was one, -1 on a bad value. */
static int parse_executor(sweep_opts *o, int argc, char **argv, int *i)
{
    const char *a = argv[*i], *v;
    if (!strcmp(a, "--status")) { o->status = 1; return 1; }
    if (strcmp(a, "--jobs") && strcmp(a, "--executor") && strcmp(a, "--sbatch-args")) return 0;
    if (!(v = option_value(argc, argv, i))) return -1;
    if (!strcmp(a, "--sbatch-args")) { o->sbatch_args = v; return 1; }
    if (!strcmp(a, "--executor")) {
        if (strcmp(v, "slurm") && strcmp(v, "local")) {
            fprintf(stderr, "mpx sweep: --executor %s: expected local or slurm\n", v);
            return -1;
        }
        o->slurm = !strcmp(v, "slurm");
        return 1;
    }
    char *end;
    long n = strtol(v, &end, 10);
    if (*end || n < 1 || n > 1024) {
        fprintf(stderr, "mpx sweep: --jobs %s: expected a whole number in [1, 1024]\n", v);
        return -1;
    }
    o->jobs = (int)n;
    return 1;
}

static int parse(sweep_opts *o, int argc, char **argv)
{
    char *rest[512];
    int n = 0;
    memset(o, 0, sizeof *o);
    o->jobs = 1;
    for (int i = 0; i < argc && n < 512; i++) {
        int ex = parse_executor(o, argc, argv, &i);
        if (ex < 0) return 2;
        if (ex) continue;
        if (!strcmp(argv[i], "--dry-run")) o->dry_run = 1;
        else if (!strcmp(argv[i], "--retry-failed")) o->retry_failed = 1;
        else if (!strcmp(argv[i], "--max-cells") && i + 1 < argc) {
            char *end;
            o->max_cells = strtol(argv[++i], &end, 10);
            if (*end || end == argv[i] || o->max_cells < 1) {
                fprintf(stderr, "mpx sweep: --max-cells %s: a positive integer\n", argv[i]);
                return 2;
            }
        }
        else rest[n++] = argv[i];
    }
    int rc = mpx_cli_parse(&o->cli, n, rest, sweep_usage);
    if (rc) return rc;
    if (o->cli.out_dir || o->cli.resume_dir || o->cli.n_positional != 1) {
        fputs(sweep_usage, stderr);
        return 2;
    }
    if ((o->slurm && o->jobs > 1) || (o->status && (o->slurm || o->jobs > 1)) || (o->sbatch_args && !o->slurm)) {
        fprintf(stderr, "mpx sweep: --jobs, --executor slurm and --status exclude each other, and --sbatch-args "
                        "needs --executor slurm\n");
        return 2;
    }
    if (o->status) o->dry_run = 1; /* --status writes nothing */
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
    if (c->rec == MPX_REC_DISK_FULL && !o->dry_run)   /* the disk's failure, not the cell's */
        fprintf(stderr, "mpx sweep: %s: its run failed because the disk was full (%s); running it again, as a "
                "killed cell\n", c->name, c->rec_why);
    if (c->rec == MPX_REC_STALE && !o->dry_run) {
        int marked = mpx_sweep_mark_killed(c->dir) == 0;
        fprintf(stderr, "mpx sweep: %s: its run died without finishing its record (SIGKILL: the OOM killer or "
                "kill -9)%s; running it again\n", c->name, marked ? ": recorded as killed" : "");
        if (marked) c->rec = MPX_REC_KILLED;
    }
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
    case MPX_REC_DISK_FULL: return "disk-full";
    default: break;
    }
    if (oc->signal) snprintf(c->why, sizeof c->why, "mpx run died on signal %d before its record was complete "
                             "(see %.3000s/mpx.log)", oc->signal, c->dir);
    else snprintf(c->why, sizeof c->why, "mpx run exited with %d and left no finished record (see %.3000s/mpx.log)",
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
    else if (c->rec == MPX_REC_DISK_FULL)
        fprintf(stderr, "mpx sweep: [%zu/%zu] %s: disk-full: %s (not the cell's fault: the next mpx sweep runs it "
                "again, without --retry-failed)\n", k, m, c->name, why);
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
        if (mpx_sweep_exec(sw, c, o->cli.plugin_dirs, o->cli.n_plugin_dirs, label, tty, k, &oc, err, sizeof err)) {
            fprintf(stderr, "mpx sweep: %s: %s\n", c->name, err);
            return -1;
        }
        if (mpx_sweep_fault_at("record", k)) mpx_sweep_fault_die("after a cell's record was written");
        (*ran)++;
        states[i] = after_run(sw, c, &oc);
        report_cell(k, m, c, states[i], &oc);
        if (mpx_sweep_fault_at("index", k)) mpx_sweep_fault_arm_index();
        mpx_sweep_write_index(sw, sweep_dir, cells, states, uov, o->cli.n_overrides);
        if (mpx_sweep_fault_at("between", k)) mpx_sweep_fault_die("between two cells");
        if (oc.interrupted || oc.signal == SIGINT || oc.signal == SIGTERM || oc.signal == SIGHUP) {
            fprintf(stderr, "mpx sweep: interrupted; run the same command again to resume\n");
            return -1;
        }
    }
    return 0;
}

typedef struct parallel_ctx {
    const sweep_opts *o;
    const mpx_sweep *sw;
    mpx_sweep_cell *cells;
    const char **states;
    const char *sweep_dir;
    size_t k, m, *ran;
} parallel_ctx;

static void parallel_done(void *ctx, size_t i, const mpx_cell_outcome *oc)
{
    parallel_ctx *p = ctx;
    mpx_sweep_cell *c = &p->cells[i];
    c->why[0] = 0;
    (*p->ran)++;
    p->states[i] = after_run(p->sw, c, oc);
    report_cell(++p->k, p->m, c, p->states[i], oc);
    mpx_sweep_write_index(p->sw, p->sweep_dir, p->cells, p->states, p->o->cli.overrides, p->o->cli.n_overrides);
}

static int run_cells_parallel(const sweep_opts *o, const mpx_sweep *sw, mpx_sweep_cell *cells, const char **states,
                              const int *todo, const char *sweep_dir, size_t *ran)
{
    char err[1024];
    parallel_ctx p = { o, sw, cells, states, sweep_dir, 0, 0, ran };
    for (size_t i = 0; i < sw->n_cells; i++) p.m += (size_t)todo[i];
    int rc = mpx_sweep_run_parallel(sw, cells, todo, o->jobs, o->cli.plugin_dirs, o->cli.n_plugin_dirs,
                                    parallel_done, &p, err, sizeof err);
    if (rc < 0) fprintf(stderr, "mpx sweep: %s\n", err);
    if (rc > 0) fprintf(stderr, "mpx sweep: interrupted; run the same command again to resume\n");
    return rc ? -1 : 0;
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
    char sweep_dir[PATH_MAX];
    snprintf(sweep_dir, sizeof sweep_dir, "%s", cells[0].dir);
    *strrchr(sweep_dir, '/') = 0;
    /* one sweep at a time in its folder: the lock before any record is read or written
     * (each cell's mpx run takes its own folder's) */
    if (!o->dry_run && !o->status &&
        (mpx_mkdirs(sweep_dir) != 0 || mpx_lock_folder(sweep_dir, err, sizeof err) < 0)) {
        fprintf(stderr, "mpx sweep: %s\n", err[0] ? err : strerror(errno));
        rc = 1;   /* not a usage error: the cells are not finished */
        goto out;
    }
    long left = o->max_cells > 0 ? o->max_cells : (long)sw->n_cells;
    for (size_t i = 0; i < sw->n_cells; i++) {
        todo[i] = decide(o, sw, &cells[i], &states[i]);
        if (todo[i] && !o->dry_run && !o->status && left-- <= 0) todo[i] = 0; /* --max-cells: later */
    }
    if (o->status) {
        rc = mpx_sweep_status_cmd(sw, cells, sweep_dir);
        goto out;
    }
    if (o->slurm) {
        mpx_sweep_slurm_opts so = { o->dry_run, o->sbatch_args, o->cli.plugin_dirs, o->cli.n_plugin_dirs,
                                    o->cli.overrides, o->cli.n_overrides };
        rc = mpx_sweep_slurm(sw, cells, states, todo, &so, sweep_dir);
        goto out;
    }
    if (o->dry_run) {
        list_cells(sw, cells, states);
        rc = 0;
        goto out;
    }
    for (size_t i = 0; i < sw->n_cells; i++)
        if (!strcmp(states[i], "skipped") || (!todo[i] && !strcmp(states[i], "failed")))
            fprintf(stderr, "mpx sweep: %s: %s: %s\n", cells[i].name, states[i],
                    cells[i].why[0] ? cells[i].why : cells[i].rec_why);
    if (mpx_sweep_fault_at("index", 0)) mpx_sweep_fault_arm_index();
    if (mpx_sweep_write_index(sw, sweep_dir, cells, states, o->cli.overrides, o->cli.n_overrides)) {
        fprintf(stderr, "mpx sweep: cannot write %s/sweep.json\n", sweep_dir);
        goto out;
    }
    size_t ran = 0;
    int interrupted = o->jobs > 1 ? run_cells_parallel(o, sw, cells, states, todo, sweep_dir, &ran)
                                  : run_cells(o, sw, cells, states, todo, sweep_dir, &ran);
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
