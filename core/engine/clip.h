/* Gradient clipping by global L2 norm, as torch.nn.utils.clip_grad_norm_:
 *   norm = sqrt(sum over all gradients of g²)   (fp32 partials, double total)
 *   coef = max_norm / (norm + 1e-6); the gradients are scaled by coef when coef < 1.
 * DeepSpeed does the same (runtime/utils.py clip_grad_norm_ and the bf16 optimizer's
 * clip_tensors_by_global_norm: same eps, scale only when coef < 1; its fp16 optimizer
 * folds the same factor into the unscale). torch always multiplies by min(coef, 1),
 * which leaves the gradients unchanged when coef >= 1: the results agree.
 * Each rank passes its own buffers; `reduce` sums the squared norm across ranks
 * (host->allreduce_sum; NULL = one rank). Give a reduce only when the ranks hold
 * disjoint shards: replicated gradients would be counted once per rank. */
#ifndef MPX_CLIP_H
#define MPX_CLIP_H

#include "mpx/abi.h"
#include "mpx/ops.h"

#define MPX_CLIP_EPS 1e-6

typedef int (*mpx_reduce_sum_fn)(mpx_env *env, double *vals, size_t n);

/* One gradient buffer: n elements of g (backend memory when ops is given). */
typedef struct mpx_grad_buf {
    mpx_arg g;
    size_t n;
} mpx_grad_buf;

/* The global L2 norm of the buffers. With ops (and its backend `be`) the squares are
 * summed by ops->sum_squares; with ops NULL, in plain C over host fp32 memory.
 * Returns 0, or -1 with the reason in err. */
int mpx_grad_norm(const mpx_ops *ops, void *be, const mpx_grad_buf *bufs, size_t n_bufs,
                  mpx_reduce_sum_fn reduce, mpx_env *env, double *norm, char *err, size_t err_len);

/* Computes the global norm (returned in *norm, before clipping) and, when max_norm > 0
 * and max_norm / (norm + 1e-6) < 1, scales every buffer by that coefficient (ops->scale,
 * or plain C with ops NULL). *coef (may be NULL) gets the factor applied, 1 if none.
 * A non-finite norm is returned unclipped: the caller decides (skip the step). */
int mpx_clip_grad_norm(const mpx_ops *ops, void *be, const mpx_grad_buf *bufs, size_t n_bufs,
                       double max_norm, mpx_reduce_sum_fn reduce, mpx_env *env,
                       double *norm, double *coef, char *err, size_t err_len);

/* The clipping coefficient alone: 1 when clipping is off (max_norm <= 0), the norm is
 * not finite or max_norm / (norm + 1e-6) >= 1 (nothing to scale: returns 0); else that
 * quotient (returns 1: scale the gradients by (float)*coef). */
int mpx_clip_coef(double max_norm, double norm, double *coef);

/* The clipping half alone, given the global norm: scales the buffers by
 * max_norm / (norm + 1e-6) when that is below 1 (*coef, may be NULL, gets the factor). */
int mpx_clip_by_norm(const mpx_ops *ops, void *be, const mpx_grad_buf *bufs, size_t n_bufs,
                     double max_norm, double norm, double *coef, char *err, size_t err_len);

#endif
