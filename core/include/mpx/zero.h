/* ZeRO stages: who owns which slice of the flat model state, and the collectives around
 * the step (DESIGN, One training step, items 1, 4 and 8). */
#ifndef MPX_ZERO_H
#define MPX_ZERO_H

#include "mpx/abi.h"
#include "mpx/ops.h"
#include "mpx/comm.h"

typedef struct mpx_zero_vtable {
    uint32_t size;
    int (*create)(mpx_env *env, void **self);
    void (*destroy)(void *self);
    /* The stage number (0..3), for records and compatibility checks. */
    int (*stage)(void *self);
    /* This rank's owned element range [*begin, *end) of a flat buffer of `numel`
     * (optimizer state, master copy; grads too from stage 2). */
    int (*owned_range)(void *self, size_t numel, int rank, int world, size_t *begin, size_t *end);
    /* Step 4: reduce the flat grads across ranks in the communication dtype. */
    int (*reduce_grads)(void *self, void *comm, const mpx_comm_vtable *cv, mpx_arg grads, size_t numel);
    /* Step 8: make every rank's weights whole again after the update. */
    int (*gather_weights)(void *self, void *comm, const mpx_comm_vtable *cv, mpx_arg weights, size_t numel);
} mpx_zero_vtable;

#endif
