/* The core's small persistent thread pool (the optimizer's update on several threads,
 * opt_threads.h): created once per session, its workers sleep on a condition variable
 * between jobs. A job is n tasks; the caller and the workers take them one at a time
 * from a shared cursor, so which thread runs a task is a matter of scheduling: a job
 * must give the same result whichever thread runs which task. The caller waits only for
 * the workers that joined the job: on a loaded machine a woken worker may get a core
 * only after the caller has run every task itself. */
#ifndef MPX_THREAD_POOL_H
#define MPX_THREAD_POOL_H

#include <stddef.h>

typedef struct mpx_pool mpx_pool;
typedef void (*mpx_task_fn)(void *ctx, size_t task);

/* A pool of `threads` threads in all, the caller included (threads - 1 workers; fewer
 * when the system refuses to start one). NULL when out of memory. */
mpx_pool *mpx_pool_create(int threads);
void mpx_pool_destroy(mpx_pool *p);

/* The threads it has, the caller included. */
int mpx_pool_threads(const mpx_pool *p);

/* Runs fn(ctx, t) for every t in [0, n) and returns when all have returned. Not
 * reentrant: one job at a time, from one thread. */
void mpx_pool_run(mpx_pool *p, size_t n, mpx_task_fn fn, void *ctx);

#endif
