/* Sweeps (DESIGN, Config / Records): a sweep file names a base configuration (relative to
 * the sweep file's folder) and axes; the cells are the cross product of the axes' values.
 *
 *   name = "toy";                               (optional; default: the file's base name)
 *   base = "../toy.cfg";
 *   set = ("train.epochs=2");                   (optional: overrides of every cell)
 *   axes = ( { key = "optimizer.lr"; values = (0.05, 0.1); },
 *            { key = "run.seed";     values = (1, 2, 3); } );
 *
 * Each cell is the base plus the user's -s, then the file's `set`, then one `-s KEY=VALUE`
 * per axis (the value rendered as a libconfig literal). Its record folder is
 * <run.output_dir>/<sweep name>/<readable>-<hash>: the readable part joins the axis
 * values, the hash is the first 8 hex digits of the sha256 of what the cell's
 * configuration sets (schema defaults left out, run.output_dir blanked,
 * train.checkpoint_every left out: see sweep_plan.c). */
#ifndef MPX_SWEEP_H
#define MPX_SWEEP_H

#include <jansson.h>
#include <limits.h>
#include <stddef.h>
#include <sys/types.h>

#include "../engine/session.h"

typedef struct mpx_sweep_axis {
    char *key;
    size_t n;
    char **literal;   /* libconfig literals: "\"fp32\"", "1", "0.05" */
    char **label;     /* for names and listings: fp32, 1, 0.05 */
    json_t **value;   /* for records */
} mpx_sweep_axis;

/* What each array task asks Slurm for (the sweep file's `slurm` group; sweep_slurm.c). */
typedef struct mpx_slurm_resources {
    int cpus;             /* --cpus-per-task (per rank) */
    int gpus;             /* --gpus-per-task (per rank); 0: none asked */
    char memory[32];      /* --mem (per node), e.g. "8G" */
    char time[32];        /* --time, e.g. "04:00:00" */
    char partition[128];  /* --partition; "": the cluster's default */
    char mpi[32];         /* how a multi-rank cell starts its ranks: srun --mpi=MPI, or "mpirun" */
} mpx_slurm_resources;

typedef struct mpx_sweep {
    char *file;       /* the sweep file as given */
    char *name;
    char *base;       /* resolved against the sweep file's folder */
    mpx_sweep_axis *axes;
    size_t n_axes;
    char **set;       /* the file's fixed overrides, "KEY=VALUE" */
    size_t n_set;
    size_t n_cells;
    mpx_slurm_resources slurm;
} mpx_sweep;

/* Parse and check a sweep file; errors name FILE:LINE and the key. */
int mpx_sweep_load(mpx_sweep *sw, const char *path, char *err, size_t errlen);
void mpx_sweep_free(mpx_sweep *sw);
/* The `slurm` group of a sweep file (NULL: absent), defaults filled in; errors name FILE:LINE. */
struct config_setting_t;
int mpx_sweep_load_slurm(mpx_slurm_resources *r, const struct config_setting_t *g, const char *file,
                         char *err, size_t errlen);

/* Value index of every axis for cell `cell` (the last axis varies fastest). */
void mpx_sweep_cell_index(const mpx_sweep *sw, size_t cell, size_t *idx);

/* ---- planning (sweep_plan.c) ------------------------------------------------------ */

typedef enum mpx_cell_plan {
    MPX_PLAN_RUN,     /* every plugin installed and compatible */
    MPX_PLAN_SKIP,    /* a plugin not installed, or a declared incompatibility */
    MPX_PLAN_BAD,     /* any other configuration error */
} mpx_cell_plan;

/* What the cell's run.json says. */
typedef enum mpx_rec_state {
    MPX_REC_NONE, MPX_REC_FINISHED, MPX_REC_SKIPPED, MPX_REC_FAILED, MPX_REC_KILLED,
    MPX_REC_RUNNING,  /* its process is alive */
    MPX_REC_STALE,    /* says running, but its process is gone */
    MPX_REC_UNREADABLE,
    MPX_REC_DISK_FULL, /* failed for want of disk space (run.json's error_kind "disk_full"):
                        * not the cell's fault, so run again as a killed cell is */
} mpx_rec_state;

typedef struct mpx_sweep_cell {
    size_t index;
    char name[256];          /* readable: fp32_1 */
    char id[32];             /* 8 hex digits */
    char dir[PATH_MAX];      /* the record folder */
    char **overrides;        /* user -s, then one per axis; "KEY=LITERAL" */
    size_t n_overrides;
    json_t *axes;            /* {KEY: value} */
    json_t *effective;       /* effective config (NULL when it could not be loaded) */
    mpx_cell_plan plan;
    char why[4096];          /* skip reason or configuration error */
    mpx_rec_state rec;
    char rec_why[4096];      /* the record's reason / error */
} mpx_sweep_cell;

/* Plan every cell: effective configuration, folder, plan and record state. `s` is an
 * opened (not configured) session: its registry answers "installed?". Returns -1 (err
 * set) only when the base itself cannot be read. */
int mpx_sweep_plan(const mpx_sweep *sw, mpx_session *s, const char *const *user_ov, size_t n_user,
                   mpx_sweep_cell *cells, char *err, size_t errlen);
void mpx_sweep_cells_free(mpx_sweep_cell *cells, size_t n);

/* ---- records (sweep_record.c) ----------------------------------------------------- */

/* Read <dir>/run.json: its state, and its reason/error into why. */
mpx_rec_state mpx_sweep_read_state(const char *dir, char *why, size_t len);

/* How far a cell's training is, from the last complete row of <dir>/metrics.csv (step
 * counted from 0, loss, elapsed_s, which goes on across a resume) and, when p->total is
 * not yet known (<= 0), progress.total_steps of <dir>/run.json. 0, or -1 with *p's step
 * fields untouched when there is no row yet. */
typedef struct mpx_cell_progress {
    long step, total;
    double loss, elapsed_s;
} mpx_cell_progress;
int mpx_sweep_read_progress(const char *dir, mpx_cell_progress *p);
/* Seconds of training left at the rate so far (0 when the total is unknown or reached). */
double mpx_cell_progress_eta(const mpx_cell_progress *p);
/* For --status: "step 257 of 3049 (8 %), loss 3.1250, 3 min 57 s in, about 43 min of
 * training left" (running), or "stopped at step 257 of 3049" (running = 0); "" when
 * <dir> has no metrics row yet. */
void mpx_sweep_progress_text(const char *dir, int running, char *out, size_t len);
/* Write <cell dir>/run.json for a cell that never ran: status "skipped" (reason) or
 * "failed" (error), with its axis values and what is known of its configuration. */
int mpx_sweep_write_unrun(const mpx_sweep *sw, const mpx_sweep_cell *c, const char *status);

/* A record left "running" by a process that is gone (SIGKILL: the OOM killer, kill -9):
 * rewritten as "killed" with the reason, before the cell runs again. */
int mpx_sweep_mark_killed(const char *dir);
/* <output_dir>/<name>/sweep.json: the axes and every cell with its folder and state. */
int mpx_sweep_write_index(const mpx_sweep *sw, const char *sweep_dir, const mpx_sweep_cell *cells,
                          const char *const *states, const char *const *user_ov, size_t n_user);
const char *mpx_rec_state_name(mpx_rec_state st);

/* ---- running one cell (sweep_exec.c) ---------------------------------------------- */

typedef struct mpx_cell_outcome {
    int exit_code;       /* or -1 when killed by a signal */
    int signal;
    int interrupted;     /* the sweep got SIGINT/SIGTERM/SIGHUP while the cell ran (passed on to it) */
    double seconds;
} mpx_cell_outcome;

/* Run `mpx run BASE -s ... --out DIR [--plugin-dir ...]` as a child of /proc/self/exe,
 * its output into DIR/mpx.log. On a terminal, show a progress line prefixed `label`
 * (cell i/n, step, loss, ETA) read from the child's metrics.csv. `nth` counts the cells
 * this sweep has run, this one included (for the fault hook). */
int mpx_sweep_exec(const mpx_sweep *sw, const mpx_sweep_cell *c, const char *const *plugin_dirs,
                   size_t n_dirs, const char *label, int tty, size_t nth, mpx_cell_outcome *out,
                   char *err, size_t errlen);

/* ---- the sweep's own fault hook (sweep_fault.c; tests) ----------------------------- */

/* MPX_SWEEP_FAULT=POINT:K: is this POINT of the K-th cell run (K = nth) the fault? Points:
 *   cell     during the cell: its run stops itself at the start of step MPX_SWEEP_FAULT_STEP
 *            (default 1; MPX_FAULT_SIGNAL=STOP), then the sweep kills it and itself
 *            (as kill -9 of the process group, or the machine going away)
 *   orphan   the same, but the sweep alone dies: its run goes on and finishes by itself
 *   record   after the run exited with its record written, before the sweep reads it
 *   index    while writing sweep.json after cell K (K = 0: the first write, before any
 *            cell): the real writer's temporary, cut to half, is left as sweep.json.tmp.PID
 *            and sweep.json is the previous one
 *   between  after sweep.json is written for cell K, before the next cell starts */
int mpx_sweep_fault_at(const char *point, size_t k);
long long mpx_sweep_fault_step(void);
/* Die on SIGKILL now, saying so on stderr. */
void mpx_sweep_fault_die(const char *what);
/* Make the next write of a sweep.json die on SIGKILL before its rename, its temporary
 * (written by mpx_write_json_atomic) cut to half. */
void mpx_sweep_fault_arm_index(void);

/* The child's argv (NULL-terminated, malloc'd array; the strings belong to the sweep, the
 * cell and the caller): mpx run BASE -s OV... -s EXTRA... --out DIR [--plugin-dir D]...
 * `extra` are executor-chosen overrides that do not change what a cell computes (its
 * thread count), so they are not part of the cell's hash. */
char **mpx_sweep_child_argv(const mpx_sweep *sw, const mpx_sweep_cell *c, const char *const *extra, size_t n_extra,
                            const char *const *dirs, size_t n_dirs);
/* Start that child without waiting, its output into DIR/mpx.log. */
int mpx_sweep_spawn(const mpx_sweep *sw, const mpx_sweep_cell *c, const char *const *extra, size_t n_extra,
                    const char *const *plugin_dirs, size_t n_dirs, pid_t *pid, char *err, size_t errlen);
/* A waitpid status as an outcome. */
void mpx_sweep_outcome(int status, double seconds, mpx_cell_outcome *out);

/* ---- cells in parallel on one machine (sweep_parallel.c) -------------------------- */

/* Cores this process may run on (its affinity mask). */
int mpx_available_cores(void);
/* "backend.cpu.threads=T" into buf when the cell runs the cpu backend with threads left at
 * 0 (all cores); returns 1 then, 0 when the cell's thread count is not the executor's. */
int mpx_sweep_threads_override(const mpx_sweep_cell *c, int threads, char *buf, size_t len);

/* Called as each child exits, with the cell's index. */
typedef void (*mpx_cell_done_fn)(void *ctx, size_t cell, const mpx_cell_outcome *oc);
/* Run the cells with todo[i] set, `jobs` at a time, the cores split between them.
 * 0 when every cell ran, 1 when a signal (SIGINT, SIGTERM, SIGHUP) stopped the sweep (it
 * is passed on to the running cells, which are waited for), -1 on error (err set). */
int mpx_sweep_run_parallel(const mpx_sweep *sw, const mpx_sweep_cell *cells, const int *todo, int jobs,
                           const char *const *dirs, size_t n_dirs, mpx_cell_done_fn done, void *ctx,
                           char *err, size_t errlen);

#endif
