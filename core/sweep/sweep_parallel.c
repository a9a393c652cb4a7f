/* mpx sweep --jobs N: up to N cells at a time on this machine, each its own `mpx run`
 * child with its own record folder and log. The cores are split between the running
 * cells through the cpu backend's thread count (only where a cell's configuration leaves
 * it at 0 = all cores; the cpu backend's results do not depend on it). A signal to the
 * sweep is passed on to the running cells, whose records then say killed; every finished
 * cell keeps its record, so a killed sweep loses at most the cells that were running. */
#define _GNU_SOURCE
#include "sweep.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int mpx_available_cores(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

int mpx_sweep_threads_override(const mpx_sweep_cell *c, int threads, char *buf, size_t len)
{
    json_t *be = json_object_get(c->effective, "backend");
    const char *plugin = json_string_value(json_object_get(be, "plugin"));
    json_t *t = json_object_get(json_object_get(be, "cpu"), "threads");
    if (!plugin || strcmp(plugin, "cpu") || !json_is_integer(t) || json_integer_value(t) != 0) return 0;
    snprintf(buf, len, "backend.cpu.threads=%d", threads < 1 ? 1 : threads);
    return 1;
}

static volatile sig_atomic_t got_signal;

static void on_signal(int sig) { got_signal = sig; }

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct slot {
    pid_t pid;
    size_t cell;
    double t0;
} slot;

/* Wait for one child of the table; its slot is freed and reported. 0, or -1 on error. */
static int reap_one(slot *slots, int jobs, int *running, mpx_cell_done_fn done, void *ctx, char *err, size_t errlen)
{
    int status;
    pid_t w = waitpid(-1, &status, 0);
    if (w < 0) {
        if (errno == EINTR) return 0;
        snprintf(err, errlen, "waitpid: %s", strerror(errno));
        return -1;
    }
    for (int k = 0; k < jobs; k++) {
        if (slots[k].pid != w) continue;
        mpx_cell_outcome oc;
        mpx_sweep_outcome(status, now_s() - slots[k].t0, &oc);
        slots[k].pid = 0;
        (*running)--;
        done(ctx, slots[k].cell, &oc);
        break;
    }
    return 0;
}

int mpx_sweep_run_parallel(const mpx_sweep *sw, const mpx_sweep_cell *cells, const int *todo, int jobs,
                           const char *const *dirs, size_t n_dirs, mpx_cell_done_fn done, void *ctx,
                           char *err, size_t errlen)
{
    slot *slots = calloc((size_t)jobs, sizeof *slots);
    if (!slots) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int threads = mpx_available_cores() / jobs, running = 0, rc = 0;
    struct sigaction sa, old[3];
    const int sigs[3] = { SIGINT, SIGTERM, SIGHUP };
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal; /* no SA_RESTART: waitpid returns on a signal */
    sigemptyset(&sa.sa_mask);
    got_signal = 0;
    for (int k = 0; k < 3; k++) sigaction(sigs[k], &sa, &old[k]);
    size_t next = 0;
    for (;;) {
        while (!got_signal && running < jobs && next < sw->n_cells) {
            size_t i = next++;
            if (!todo[i]) continue;
            char ov[64];
            const char *extra[1] = { ov };
            size_t n_extra = (size_t)mpx_sweep_threads_override(&cells[i], threads, ov, sizeof ov);
            int k = 0;
            while (slots[k].pid) k++;
            if (mpx_sweep_spawn(sw, &cells[i], extra, n_extra, dirs, n_dirs, &slots[k].pid, err, errlen)) {
                slots[k].pid = 0;
                rc = -1;
                break;
            }
            slots[k].cell = i;
            slots[k].t0 = now_s();
            running++;
            fprintf(stderr, "mpx sweep: %s: started (%d running)\n", cells[i].name, running);
        }
        if (rc || got_signal) break;
        if (!running) break;
        if (reap_one(slots, jobs, &running, done, ctx, err, errlen)) { rc = -1; break; }
    }
    if (got_signal || rc) {
        int sig = got_signal ? (int)got_signal : SIGTERM;
        for (int k = 0; k < jobs; k++) if (slots[k].pid) kill(slots[k].pid, sig);
        while (running > 0) {
            char e2[256];
            if (reap_one(slots, jobs, &running, done, ctx, e2, sizeof e2)) break;
        }
        if (!rc) rc = 1;
    }
    for (int k = 0; k < 3; k++) sigaction(sigs[k], &old[k], NULL);
    free(slots);
    return rc;
}
