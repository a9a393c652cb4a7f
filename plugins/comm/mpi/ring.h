/* The ring all-reduce and reduce-scatter of comm/mpi, with NCCL's order of summation.
 *
 * The buffer is cut into `world` chunks of `chunk` elements (the last may be shorter).
 * Chunk c's partial sum starts at rank c+1, travels c+2, c+3, ... and ends at rank c,
 * which adds its own contribution last: the order of NCCL's ring (runRing in
 * all_reduce.h: step 0 sends chunk ringIx-1, each later step receive-reduce-sends, the
 * last rank receive-reduce-copies). Every partial sum is stored in the buffer's dtype,
 * as NCCL's 16-bit kernels do, so a 16-bit all-reduce rounds once per hop. */
#ifndef MPX_COMM_MPI_RING_H
#define MPX_COMM_MPI_RING_H

#include <mpi.h>
#include <stddef.h>

#include "mpx/mpx.h"

/* Working memory for one collective: one chunk of `dtype`. */
typedef struct mpx_ring {
    MPI_Comm comm;
    int rank, world;
    void *tmp;          /* a chunk received from the left neighbour */
    size_t tmp_bytes;
} mpx_ring;

/* Reduce-scatter phase: afterwards rank r's chunk r of buf holds the reduction over all
 * ranks (other chunks hold partial sums). Returns an MPI error code. */
int mpx_ring_reduce_scatter(mpx_ring *r, void *buf, mpx_dtype t, size_t n, size_t chunk, mpx_reduce_op op);

/* All-gather phase: afterwards every chunk c of buf holds rank c's chunk c. */
int mpx_ring_allgather(mpx_ring *r, void *buf, mpx_dtype t, size_t n, size_t chunk);

/* dst[i] = dst[i] OP src[i] in fp32, rounded to t. */
void mpx_ring_reduce_into(void *dst, const void *src, mpx_dtype t, size_t n, mpx_reduce_op op);

#endif
