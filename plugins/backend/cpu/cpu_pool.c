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
 * Between jobs a worker, and the caller waiting for its joiners, spin for a short while
 * (CPU_POOL_SPIN_NS) before sleeping on a condition variable. A step posts hundreds of
 * jobs a few microseconds apart; a sleeping thread is woken by the kernel, and on a
 * virtual machine by the hypervisor, tens of microseconds later, by which time the
 * caller has taken most of a short job's pieces itself. */
#include "cpu_internal.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define POOL_RELAX() _mm_pause()
#else
#define POOL_RELAX() ((void)0)
#endif

/* How long a thread with nothing to do spins before it sleeps (nanoseconds). */
#ifndef CPU_POOL_SPIN_NS
#define CPU_POOL_SPIN_NS 100000
#endif

struct cpu_pool {
    int n_workers;
    pthread_t *tids;
    pthread_mutex_t mu;
    pthread_cond_t start_cv, done_cv;
    atomic_ulong gen;      /* bumped per job (under mu); workers wait for a new value */
    atomic_int stop;
    int open;              /* the current job still takes joiners (under mu) */
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

static double pool_now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* Every 64 pauses (a few microseconds): whether the spin has lasted CPU_POOL_SPIN_NS;
 * if not, the core goes to any other runnable thread first (another rank's, when the
 * machine is oversubscribed), as OpenBLAS's idle threads do. */
static int spin_expired(double *until)
{
    double t = pool_now_ns();
    if (*until == 0) *until = t + CPU_POOL_SPIN_NS;
    else if (t > *until) return 1;
    sched_yield();
    return 0;
}

/* Spins until *x != v (returns 1) or CPU_POOL_SPIN_NS have passed (returns 0). */
static int spin_while_ulong(atomic_ulong *x, unsigned long v, atomic_int *stop)
{
    double until = 0;
    for (unsigned i = 1;; i++) {
        if (atomic_load_explicit(x, memory_order_acquire) != v || atomic_load_explicit(stop, memory_order_relaxed))
            return 1;
        POOL_RELAX();
        if (i % 64 == 0 && spin_expired(&until)) return 0;
    }
}

static int spin_while_positive(atomic_int *x)
{
    double until = 0;
    for (unsigned i = 1;; i++) {
        if (atomic_load_explicit(x, memory_order_acquire) <= 0) return 1;
        POOL_RELAX();
        if (i % 64 == 0 && spin_expired(&until)) return 0;
    }
}

static void *worker(void *arg)
{
    cpu_pool *p = arg;
    unsigned long seen = 0;
    for (;;) {
        (void)spin_while_ulong(&p->gen, seen, &p->stop);
        pthread_mutex_lock(&p->mu);
        while (!atomic_load(&p->stop) && atomic_load(&p->gen) == seen) pthread_cond_wait(&p->start_cv, &p->mu);
        if (atomic_load(&p->stop)) { pthread_mutex_unlock(&p->mu); return NULL; }
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
    atomic_init(&p->stop, 0);
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
    atomic_store(&p->stop, 1);
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
    p->open = 1;
    atomic_fetch_add(&p->gen, 1);
    pthread_cond_broadcast(&p->start_cv);
    pthread_mutex_unlock(&p->mu);
    run_pieces(p);
    pthread_mutex_lock(&p->mu);
    p->open = 0;   /* every piece is taken: later wakers stay out */
    pthread_mutex_unlock(&p->mu);
    if (spin_while_positive(&p->active)) return;
    pthread_mutex_lock(&p->mu);
    while (atomic_load(&p->active) > 0) pthread_cond_wait(&p->done_cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
