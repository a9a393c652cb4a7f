/* Communicators: collectives across ranks. `local` is one rank. */
#ifndef MPX_COMM_H
#define MPX_COMM_H

#include "mpx/abi.h"
#include "mpx/ops.h"

typedef enum mpx_reduce_op { MPX_SUM = 0, MPX_MAX = 1 } mpx_reduce_op;

typedef struct mpx_comm_vtable {
    uint32_t size;
    int (*create)(mpx_env *env, void **self);
    void (*destroy)(void *self);
    int (*rank)(void *self);
    int (*world)(void *self);
    int (*allreduce)(void *self, mpx_arg buf, size_t n, mpx_reduce_op op);
    /* recv gets this rank's n_per_rank slice of the reduced send (world × n_per_rank);
     * send's other slices are unspecified afterwards (comm/mpi sums in place) */
    int (*reduce_scatter)(void *self, mpx_arg send, mpx_arg recv, size_t n_per_rank);
    int (*allgather)(void *self, mpx_arg send, mpx_arg recv, size_t n_per_rank);
    int (*broadcast)(void *self, mpx_arg buf, size_t n, int root);
    int (*barrier)(void *self);
    /* host-side doubles (norms, overflow flags) */
    int (*allreduce_host)(void *self, double *vals, size_t n, mpx_reduce_op op);

    /* ABI 1.5 (optional, NULL in older plugins): end every rank of the run now, after this
     * rank failed, so that no other rank waits forever in a collective. */
    void (*abort)(void *self, int code);
} mpx_comm_vtable;

#endif
