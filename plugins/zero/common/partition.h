/* What the partitioned ZeRO stages share: the partition of a flat buffer into `world`
 * equal slices (the core pads the buffers to a multiple of the world size, so the
 * slices are the chunks of comm's ring: an all-reduce and a reduce-scatter then sum
 * every element in the same order) and the all-gather of the updated weights. */
#ifndef MPX_ZERO_PARTITION_H
#define MPX_ZERO_PARTITION_H

#include <stdlib.h>

#include "mpx/mpx.h"

typedef struct zero_part { mpx_env *env; int stage; } zero_part;

static inline int zero_part_create(mpx_env *env, int stage, void **self)
{
    zero_part *z = calloc(1, sizeof *z);
    if (!z) return MPX_ERR_NOMEM;
    z->env = env;
    z->stage = stage;
    *self = z;
    return MPX_OK;
}

static inline void zero_part_destroy(void *self) { free(self); }
static inline int zero_part_stage(void *self) { return ((zero_part *)self)->stage; }

static inline int zero_part_owned_range(void *self, size_t numel, int rank, int world,
                                        size_t *begin, size_t *end)
{
    zero_part *z = self;
    if (world < 1 || rank < 0 || rank >= world)
        return MPX_FAIL(z->env, "zero/stage%d: rank %d of a world of %d", z->stage, rank, world);
    size_t chunk = (numel + (size_t)world - 1) / (size_t)world, b = (size_t)rank * chunk;
    *begin = b < numel ? b : numel;
    *end = b + chunk < numel ? b + chunk : numel;
    return MPX_OK;
}

/* The slice of this rank, checked to be one of `world` equal slices. */
static inline int zero_part_slice(zero_part *z, void *comm, const mpx_comm_vtable *cv, size_t numel,
                                  size_t *per_rank, int *rank)
{
    int world = cv->world(comm);
    *rank = cv->rank(comm);
    if (world < 1 || numel % (size_t)world)
        return MPX_FAIL(z->env, "zero/stage%d: %zu elements do not split into %d equal slices "
                        "(the host pads the flat buffers to a multiple of the world size)", z->stage, numel, world);
    *per_rank = numel / (size_t)world;
    return MPX_OK;
}

/* Step 8: each rank updated its slice of the weights; gather them all. */
static inline int zero_part_gather_weights(void *self, void *comm, const mpx_comm_vtable *cv,
                                           mpx_arg weights, size_t numel)
{
    zero_part *z = self;
    size_t per;
    int rank;
    MPX_TRY(zero_part_slice(z, comm, cv, numel, &per, &rank));
    mpx_arg mine = mpx_at(weights, (size_t)rank * per);
    return cv->allgather(comm, mine, weights, per);
}

/* Stages 2 and 3: the gradients are reduce-scattered; the reduced slice lands in place,
 * at this rank's offset of `grads`. */
static inline int zero_part_reduce_scatter(void *self, void *comm, const mpx_comm_vtable *cv, mpx_arg grads,
                                           size_t numel)
{
    size_t per;
    int rank;
    MPX_TRY(zero_part_slice(self, comm, cv, numel, &per, &rank));
    return cv->reduce_scatter(comm, grads, mpx_at(grads, (size_t)rank * per), per);
}

#define ZERO_PART_VTABLE(CREATE, REDUCE)                                                        \
    {                                                                                   \
          .size = sizeof(mpx_zero_vtable), .create = CREATE, .destroy = zero_part_destroy,                  \
        .stage = zero_part_stage, .owned_range = zero_part_owned_range,                 \
        .reduce_grads = REDUCE, .gather_weights = zero_part_gather_weights,             \
    }

#endif
