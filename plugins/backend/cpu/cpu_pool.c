/* A small persistent thread pool: the caller and threads-1 workers pull pieces of an
 * index range from a shared atomic cursor. Which thread runs a piece never matters to
 * the ops (they split work into fixed blocks), so results do not depend on scheduling.
 *
 * The caller waits only for the workers that joined the job, not for all of them: on a
 * shared machine a woken worker may wait milliseconds for a core, and by then the caller
 * has often run every piece itself. The job is open from its post until the caller has
 * run out of pieces; a worker joins (under the mutex) only while it is open, so no
 * worker touches a job after the caller returned from it.
 *
 * Between jobs a worker first polls for the next one for up to CPU_POOL_SPIN_NS, and only
 * then sleeps on the condition variable; the caller likewise polls for the joined workers
 * to finish before it sleeps. A step posts a job every few hundred microseconds, and a
 * futex wake on a virtual machine takes tens of them: sleeping at once left a core idle
 * for that long at every op's start and end. */
#include "cpu_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#ifndef CPU_POOL_SPIN_NS
#define CPU_POOL_SPIN_NS 100000
#endif

struct cpu_pool {
    int n_workers;
    pthread_t *tids;
    pthread_mutex_t mu;
    pthread_cond_t start_cv, done_cv;
    atomic_ulong gen;      /* bumped per job (under mu); workers wait for a new value */
    int stop;
    int open;              /* the current job still takes joiners */
    atomic_int active;     /* workers that joined the current job and are inside it (changed under mu) */
    cpu_range_fn fn;
    void *ctx;
    size_t n, piece;
    atomic_size_t next;
};

static void run_pieces(cpu_pool *p)
{
    for (;;) {
        size_t b = atomic_fetch_add(&p->next, p->piece);
        if (b >= p->n) return;
        size_t e = b + p->piece < p->n ? b + p->piece : p->n;
        p->fn(p->ctx, b, e);
    }
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static long long now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* Polls until *v != unlike (returns 1) or CPU_POOL_SPIN_NS have passed (returns 0). */
static int spin_while_ulong(atomic_ulong *v, unsigned long unlike)
{
    long long t0 = now_ns();
    for (unsigned i = 1;; i++) {
        if (atomic_load(v) != unlike) return 1;
        cpu_relax();
        if ((i & 63) == 0 && now_ns() - t0 > CPU_POOL_SPIN_NS) return 0;
    }
}

static int spin_while_busy(atomic_int *active)
{
    long long t0 = now_ns();
    for (unsigned i = 1;; i++) {
        if (atomic_load(active) == 0) return 1;
        cpu_relax();
        if ((i & 63) == 0 && now_ns() - t0 > CPU_POOL_SPIN_NS) return 0;
    }
}

static void *worker(void *arg)
{
    cpu_pool *p = arg;
    unsigned long seen = 0;
    for (;;) {
        (void)spin_while_ulong(&p->gen, seen);   /* a job or a stop soon after the last one */
        pthread_mutex_lock(&p->mu);
        while (!p->stop && atomic_load(&p->gen) == seen) pthread_cond_wait(&p->start_cv, &p->mu);
        if (p->stop) { pthread_mutex_unlock(&p->mu); return NULL; }
        seen = atomic_load(&p->gen);
        if (!p->open) { pthread_mutex_unlock(&p->mu); continue; }   /* woke too late for it */
        atomic_fetch_add(&p->active, 1);
        pthread_mutex_unlock(&p->mu);
        run_pieces(p);
        pthread_mutex_lock(&p->mu);
        if (atomic_fetch_sub(&p->active, 1) == 1) pthread_cond_signal(&p->done_cv);
        pthread_mutex_unlock(&p->mu);
    }
}

cpu_pool *cpu_pool_create(int threads)
{
    cpu_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->start_cv, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    atomic_init(&p->next, 0);
    atomic_init(&p->gen, 0);
    atomic_init(&p->active, 0);
    if (threads > 1) {
        p->tids = calloc((size_t)threads - 1, sizeof *p->tids);
        if (!p->tids) { free(p); return NULL; }
        for (int i = 0; i < threads - 1; i++) {
            if (pthread_create(&p->tids[i], NULL, worker, p) != 0) break; /* fewer is fine */
            p->n_workers++;
        }
    }
    return p;
}

void cpu_pool_destroy(cpu_pool *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->start_cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_workers; i++) pthread_join(p->tids[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->start_cv);
    pthread_cond_destroy(&p->done_cv);
    free(p->tids);
    free(p);
}

void cpu_pool_run(cpu_pool *p, size_t n, size_t grain, cpu_range_fn fn, void *ctx)
{
    if (n == 0) return;
    if (grain == 0) grain = 1;
    if (!p || p->n_workers == 0 || n <= grain) { fn(ctx, 0, n); return; }
    /* about four pieces per thread balance uneven rows without much cursor traffic */
    size_t threads = (size_t)p->n_workers + 1, piece = (n + threads * 4 - 1) / (threads * 4);
    cpu_pool_run_pieces(p, n, piece < grain ? grain : piece, fn, ctx);
}

void cpu_pool_run_pieces(cpu_pool *p, size_t n, size_t piece, cpu_range_fn fn, void *ctx)
{
    if (n == 0) return;
    if (piece == 0) piece = 1;
    if (!p || p->n_workers == 0 || n <= piece) { fn(ctx, 0, n); return; }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->piece = piece;
    atomic_store(&p->next, 0);
    atomic_store(&p->active, 0);
    p->open = 1;
    atomic_fetch_add(&p->gen, 1);
    pthread_cond_broadcast(&p->start_cv);
    pthread_mutex_unlock(&p->mu);
    run_pieces(p);
    pthread_mutex_lock(&p->mu);
    p->open = 0;   /* every piece is taken: later wakers stay out */
    pthread_mutex_unlock(&p->mu);
    if (spin_while_busy(&p->active)) return;   /* the joined workers are done */
    pthread_mutex_lock(&p->mu);
    while (atomic_load(&p->active) > 0) pthread_cond_wait(&p->done_cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
