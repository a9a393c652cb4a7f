/* What Slurm says of a sweep's array tasks: <sweep>/slurm.json maps cells to JOBID_INDEX;
 * squeue gives the queued and running ones, sacct the ended ones (where accounting is
 * off, as on a test cluster, scontrol, while the controller still remembers the job). The
 * records stay the source of truth for results: Slurm only says whether a cell is still
 * queued or running, and why an ended one stopped. */
#include "sweep_slurm.h"
#include "../record/fsutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *mpx_slurm_state_name(mpx_slurm_state st)
{
    static const char *const names[] = { "none", "unknown", "pending", "running", "completed", "failed",
                                         "preempted", "cancelled" };
    return (unsigned)st < sizeof names / sizeof *names ? names[st] : "?";
}

int mpx_slurm_active(mpx_slurm_state st) { return st == MPX_SLURM_PENDING || st == MPX_SLURM_RUNNING; }

/* Slurm's job state word (JOB_STATE_STRING) as ours. */
static mpx_slurm_state classify(const char *word)
{
    static const char *const pending[] = { "PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", NULL };
    static const char *const running[] = { "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "STAGE_OUT",
                                           "SIGNALING", "RESIZING", NULL };
    for (int i = 0; pending[i]; i++) if (!strcmp(word, pending[i])) return MPX_SLURM_PENDING;
    for (int i = 0; running[i]; i++) if (!strcmp(word, running[i])) return MPX_SLURM_RUNNING;
    if (!strcmp(word, "COMPLETED")) return MPX_SLURM_COMPLETED;
    if (!strcmp(word, "PREEMPTED")) return MPX_SLURM_PREEMPTED;
    if (!strcmp(word, "CANCELLED")) return MPX_SLURM_CANCELLED;
    return MPX_SLURM_FAILED; /* FAILED, TIMEOUT, OUT_OF_MEMORY, NODE_FAIL, BOOT_FAIL, DEADLINE */
}

typedef struct query {
    mpx_slurm_cell *cells;
    size_t n;
    const char *job;
} query;

/* The cell of "JOBID_INDEX" in this job, if it is one of ours and still unknown. */
static mpx_slurm_cell *cell_of(query *q, const char *job, const char *index)
{
    char *end;
    unsigned long i = strtoul(index, &end, 10);
    if (end == index || (*end && *end != '|' && *end != ' ') || i >= q->n || strcmp(job, q->job)) return NULL;
    mpx_slurm_cell *c = &q->cells[i];
    char task[64];
    snprintf(task, sizeof task, "%s_%lu", job, i);
    return strcmp(c->task, task) || c->state != MPX_SLURM_UNKNOWN ? NULL : c;
}

/* One task's state: the first word of `state`, with the reason and exit code in raw. */
static void set_state(mpx_slurm_cell *c, const char *state, const char *reason, const char *exit_code)
{
    char word[64];
    snprintf(word, sizeof word, "%.*s", (int)strcspn(state, " |\n"), state);
    c->state = classify(word);
    int has_reason = reason && reason[0] && strcmp(reason, "None");
    int has_exit = exit_code && exit_code[0] && c->state != MPX_SLURM_PENDING && c->state != MPX_SLURM_RUNNING;
    snprintf(c->raw, sizeof c->raw, "%s%s%s%s%s%s", word, has_reason ? " (" : "", has_reason ? reason : "",
             has_reason ? ")" : "", has_exit ? " exit " : "", has_exit ? exit_code : "");
}

/* "12_3|PENDING|Resources" (squeue) or "12_3|FAILED|1:0|None" (sacct). */
static void pipe_line(query *q, char *line, int with_exit)
{
    char *f[4] = { NULL };
    int n = 0;
    for (char *p = line; n < 4; n++) {
        f[n] = p;
        p = strchr(p, '|');
        if (!p) { n++; break; }
        *p++ = 0;
    }
    if (n < 3 || !strchr(f[0], '_')) return;
    *strchr(f[0], '_') = 0;
    mpx_slurm_cell *c = cell_of(q, f[0], f[0] + strlen(f[0]) + 1);
    if (c) set_state(c, f[1], with_exit ? (n > 3 ? f[3] : NULL) : f[2], with_exit ? f[2] : NULL);
}

/* The value of KEY= in one `scontrol -o show job` line ("" when absent). */
static void field(const char *line, const char *key, char *out, size_t len)
{
    char pat[64];
    snprintf(pat, sizeof pat, " %s=", key);
    const char *p = strstr(line, pat); /* never the first field: JobId= comes first */
    out[0] = 0;
    if (p) snprintf(out, len, "%.*s", (int)strcspn(p + strlen(pat), " \n"), p + strlen(pat));
}

static void scontrol_line(query *q, const char *line)
{
    char job[64], index[64], state[64], reason[128], exit_code[32];
    field(line, "ArrayJobId", job, sizeof job);
    field(line, "ArrayTaskId", index, sizeof index);
    field(line, "JobState", state, sizeof state);
    field(line, "Reason", reason, sizeof reason);
    field(line, "ExitCode", exit_code, sizeof exit_code);
    mpx_slurm_cell *c = cell_of(q, job, index);
    if (c) set_state(c, state, reason, exit_code);
}

/* Runs argv (no shell, stderr dropped), each output line to the parser; the wait status,
 * or -1 when it could not start. */
static int each_line(char *const argv[], query *q, int kind)
{
    size_t cap = (size_t)1 << 20;   /* an array's lines are ~60 bytes a task */
    char *out = malloc(cap);
    int st = -1;
    if (!out || mpx_run_capture(argv, 0, out, cap, &st) != 0) {
        free(out);
        return -1;
    }
    for (char *line = out, *next; *line; line = next) {
        next = line + strcspn(line, "\n");
        if (*next) *next++ = 0;
        if (kind == 2) scontrol_line(q, line);
        else pipe_line(q, line, kind);
    }
    free(out);
    return st;
}

static int unknown_left(const query *q)
{
    char prefix[80];
    snprintf(prefix, sizeof prefix, "%s_", q->job);
    for (size_t i = 0; i < q->n; i++)
        if (q->cells[i].state == MPX_SLURM_UNKNOWN && !strncmp(q->cells[i].task, prefix, strlen(prefix))) return 1;
    return 0;
}

static void query_job(query *q)
{
    char job[64];
    snprintf(job, sizeof job, "%s", q->job);
    char *squeue[] = { "squeue", "-h", "-r", "-j", job, "-o", "%i|%T|%r", NULL };
    char *sacct[] = { "sacct", "-n", "-P", "-X", "-j", job, "-o", "JobID,State,ExitCode,Reason", NULL };
    char *scontrol[] = { "scontrol", "-o", "show", "job", job, NULL };
    each_line(squeue, q, 0);
    if (!unknown_left(q)) return;
    if (each_line(sacct, q, 1) == 0 || !unknown_left(q)) return;
    each_line(scontrol, q, 2);
}

/* A job id as slurm.json holds it: digits only (it goes into a command line). */
static int plain_job_id(const char *s)
{
    if (!s || !s[0] || strlen(s) > 32) return 0;
    for (; *s; s++) if (*s < '0' || *s > '9') return 0;
    return 1;
}

int mpx_slurm_query(const char *sweep_dir, size_t n_cells, mpx_slurm_cell *out)
{
    char path[PATH_MAX + 16];
    memset(out, 0, n_cells * sizeof *out);
    snprintf(path, sizeof path, "%s/slurm.json", sweep_dir);
    if (access(path, F_OK) != 0) return 0;
    json_t *j = json_load_file(path, 0, NULL);
    json_t *subs = json_object_get(j, "submissions"), *s, *c;
    size_t k, m, n_subs = 0;
    json_array_foreach(subs, k, s) {
        const char *job = json_string_value(json_object_get(s, "job_id"));
        if (!plain_job_id(job)) continue;
        n_subs++;
        json_array_foreach(json_object_get(s, "cells"), m, c) {
            json_int_t i = json_integer_value(json_object_get(c, "index"));
            if (i < 0 || (size_t)i >= n_cells) continue;
            snprintf(out[i].task, sizeof out[i].task, "%s_%lld", job, (long long)i);
            out[i].state = MPX_SLURM_UNKNOWN;
        }
    }
    /* one query per job that still holds a cell */
    json_array_foreach(subs, k, s) {
        const char *job = json_string_value(json_object_get(s, "job_id"));
        if (!plain_job_id(job)) continue;
        query q = { out, n_cells, job };
        if (unknown_left(&q)) query_job(&q);
    }
    json_decref(j);
    return (int)n_subs;
}
