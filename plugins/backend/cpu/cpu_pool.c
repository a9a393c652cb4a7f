/* A small persistent thread pool: the caller and threads-1 workers pull pieces of an
 * index range from a shared atomic cursor. Which thread runs a piece never matters to
 * the ops (they split work into fixed blocks), so results do not depend on scheduling.
 *
 * The caller waits only for the workers that joined the job, not for all of them: on a
 * shared machine a woken worker may wait milliseconds for a core, and by then the caller
 * has often run every piece itself. The job is open from its post until the caller has
 * run out of pieces; a worker joins (under the mutex) only while it is open, so no
 * worker touches a job after the caller returned from it. */
#include "cpu_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

struct cpu_pool {
    int n_workers;
    pthread_t *tids;
    pthread_mutex_t mu;
    pthread_cond_t start_cv, done_cv;
    unsigned long gen;     /* bumped per job; workers wait for a new value */
    int stop;
    int open;              /* the current job still takes joiners */
    int active;            /* workers that joined the current job and are inside it */
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

static void *worker(void *arg)
{
    cpu_pool *p = arg;
    unsigned long seen = 0;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (!p->stop && p->gen == seen) pthread_cond_wait(&p->start_cv, &p->mu);
        if (p->stop) { pthread_mutex_unlock(&p->mu); return NULL; }
        seen = p->gen;
        if (!p->open) { pthread_mutex_unlock(&p->mu); continue; }   /* woke too late for it */
        p->active++;
        pthread_mutex_unlock(&p->mu);
        run_pieces(p);
        pthread_mutex_lock(&p->mu);
        if (--p->active == 0) pthread_cond_signal(&p->done_cv);
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
    p->active = 0;
    p->open = 1;
    p->gen++;
    pthread_cond_broadcast(&p->start_cv);
    pthread_mutex_unlock(&p->mu);
    run_pieces(p);
    pthread_mutex_lock(&p->mu);
    p->open = 0;   /* every piece is taken: later wakers stay out */
    while (p->active > 0) pthread_cond_wait(&p->done_cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
