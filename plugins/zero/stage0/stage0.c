/* zero/stage0: no partitioning. Every rank holds all weights, grads, master and
 * optimizer state; grads are all-reduced (DeepSpeed's data parallelism without ZeRO). */
#include <stdlib.h>

#include "mpx/mpx.h"

typedef struct stage0 { mpx_env *env; } stage0;

static int stage0_create(mpx_env *env, void **self)
{
    stage0 *z = calloc(1, sizeof *z);
    if (!z) return MPX_ERR_NOMEM;
    z->env = env;
    *self = z;
    return MPX_OK;
}

static void stage0_destroy(void *self)
{
    stage0 *z = self;
    free(z);
}

static int stage0_stage(void *self) { (void)self; return 0; }

static int stage0_owned_range(void *self, size_t numel, int rank, int world,
                              size_t *begin, size_t *end)
{
    (void)self; (void)rank; (void)world;
    *begin = 0;
    *end = numel;
    return MPX_OK;
}

static int stage0_reduce_grads(void *self, void *comm, const mpx_comm_vtable *cv,
                               mpx_arg grads, size_t numel)
{
    (void)self;
    return cv->allreduce(comm, grads, numel, MPX_SUM);
}

static int stage0_gather_weights(void *self, void *comm, const mpx_comm_vtable *cv,
                                 mpx_arg weights, size_t numel)
{
    (void)self; (void)comm; (void)cv; (void)weights; (void)numel;
    return MPX_OK; /* every rank updated all weights */
}

static const mpx_zero_vtable stage0_vtable = {
    .size = sizeof(mpx_zero_vtable),
    .create = stage0_create, .destroy = stage0_destroy, .stage = stage0_stage,
    .owned_range = stage0_owned_range, .reduce_grads = stage0_reduce_grads,
    .gather_weights = stage0_gather_weights,
};

static const mpx_plugin_desc stage0_desc = {
    MPX_DESC_HEADER,
    .kind = MPX_KIND_ZERO,
    .name = "stage0",
    .version = "1.0.0",
    .summary = "no partitioning: all state on every rank, grads all-reduced",
    .vtable = &stage0_vtable,
};

MPX_PLUGIN_ENTRY { (void)host; return &stage0_desc; }
