#include "thread_pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

struct mpx_pool {
    int n_workers;
    pthread_t *workers;
    pthread_mutex_t mu;
    pthread_cond_t posted, finished;
    unsigned long job;     /* bumped per job: a worker waits for a value it has not seen */
    int stop;
    int taking;            /* the current job still admits workers */
    int inside;            /* workers that joined the current job and have not left it */
    mpx_task_fn fn;
    void *ctx;
    size_t n;
    atomic_size_t cursor;
};

static void take_tasks(mpx_pool *p)
{
    for (size_t t; (t = atomic_fetch_add(&p->cursor, 1)) < p->n;) p->fn(p->ctx, t);
}

static void *work(void *arg)
{
    mpx_pool *p = arg;
    unsigned long seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->job == seen) pthread_cond_wait(&p->posted, &p->mu);
        if (p->stop) break;
        seen = p->job;
        if (!p->taking) continue;  /* woke after the caller had taken every task */
        p->inside++;
        pthread_mutex_unlock(&p->mu);
        take_tasks(p);
        pthread_mutex_lock(&p->mu);
        if (--p->inside == 0) pthread_cond_signal(&p->finished);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

mpx_pool *mpx_pool_create(int threads)
{
    mpx_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    if (threads > 1 && !(p->workers = calloc((size_t)threads - 1, sizeof *p->workers))) {
        free(p);
        return NULL;
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->posted, NULL);
    pthread_cond_init(&p->finished, NULL);
    atomic_init(&p->cursor, 0);
    while (p->n_workers < threads - 1 && pthread_create(&p->workers[p->n_workers], NULL, work, p) == 0)
        p->n_workers++;
    return p;
}

void mpx_pool_destroy(mpx_pool *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->posted);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_workers; i++) pthread_join(p->workers[i], NULL);
    pthread_cond_destroy(&p->finished);
    pthread_cond_destroy(&p->posted);
    pthread_mutex_destroy(&p->mu);
    free(p->workers);
    free(p);
}

int mpx_pool_threads(const mpx_pool *p) { return p ? p->n_workers + 1 : 1; }

void mpx_pool_run(mpx_pool *p, size_t n, mpx_task_fn fn, void *ctx)
{
    if (!p || p->n_workers == 0 || n < 2) {
        for (size_t t = 0; t < n; t++) fn(ctx, t);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    atomic_store(&p->cursor, 0);
    p->taking = 1;
    p->job++;
    pthread_cond_broadcast(&p->posted);
    pthread_mutex_unlock(&p->mu);
    take_tasks(p);
    pthread_mutex_lock(&p->mu);
    p->taking = 0;
    while (p->inside > 0) pthread_cond_wait(&p->finished, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
