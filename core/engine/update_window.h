/* The optimizer update window by window (train.update_chunk): the fp32 gradient the
 * optimizer reads and the fp32 update it writes exist for one window of the shard at a
 * time, not for the whole model, so that their size is bounded by the chunk (pure-bf16:
 * 8 bytes per parameter for the process, docs/PRECISION-POLICIES.md).
 *
 * A window is a contiguous range [base, base + len) of this rank's slice, len <= the
 * chunk; the shard's pieces are cut at window edges (a cut piece keeps its tensor,
 * site and weight decay, its tensor_offset says where it starts in the tensor, so
 * stochastic rounding draws what the whole tensor draws). Per window: the gradient
 * (cast from the 16-bit reduced slice when there is no whole fp32 copy, clipped by the
 * global coefficient), the optimizer's step over the window's pieces, the master
 * write-back, the diagnostics' stalls and ratios. The global norm is taken first, over
 * the reduced slice itself. Every value is bitwise the whole-shard path's
 * (tests/test_update_window.c). Used only when the optimizer declares
 * MPX_OPT_ELEMENTWISE (ABI 1.6); LAMB and older optimizers take the whole shard. */
#ifndef MPX_UPDATE_WINDOW_H
#define MPX_UPDATE_WINDOW_H

#include <stddef.h>

#include "mpx/optimizer.h"
#include "session_types.h"


/* After the state is allocated: decides whether the step goes window by window and
 * allocates s->grad32 (the whole fp32 gradient, or NULL), s->update and the window
 * gradient, counted as scratch; starts the update threads (train.update_threads).
 * 0, or -1 with err. */
int mpx_update_plan_make(mpx_session *s, char *err, size_t errlen);
void mpx_update_plan_free(mpx_update_plan *u);

/* The elements of fp32 scratch the update takes for n_owned owned elements: the
 * gradient (0 when the grads or accumulator are fp32 already) and the update buffer.
 * The memory plan asks this before anything is allocated. */
void mpx_update_buffer_elems(const mpx_session *s, size_t n_owned, size_t *grad, size_t *update);

/* The bytes of the core's fp32 step buffers as allocated (gradient copy or window,
 * update). */
size_t mpx_update_buffer_bytes(const mpx_session *s);

/* Without a whole fp32 gradient (s->grad32 NULL: 16-bit grads, no loss scaling), the
 * global norm over the reduced slice itself (the squares of its exact fp32 values, as
 * the backend sums them for the fp32 copy) and the clip coefficient (*coef < 1: scale
 * each window by it; else 1). */
int mpx_update_norm(mpx_session *s, double clip, double *norm, double *coef, char *err, size_t errlen);

/* Every window: its gradient (a slice of s->grad32, or cast from the reduced slice and
 * scaled by coef when coef < 1), the optimizer's step, the master write-back, the
 * diagnostics' stalls and ratios. The weights are not gathered (the caller's). */
int mpx_update_windows(mpx_session *s, double coef, int64_t update_no, double lr, mpx_diagnostics *diag,
                       char *err, size_t errlen);

/* The zero-gradient optimizer step (mpx_train_init_step) window by window. */
int mpx_update_windows_zero_grad(mpx_session *s, double lr, char *err, size_t errlen);

/* The fp32 master into the 16-bit weights over [base, base + len) of the slice whose
 * pieces (offsets relative to base) are given; `update` is len fp32 of scratch
 * (stochastic rounding). */
int mpx_write_back_master(mpx_session *s, size_t base, size_t len, const mpx_piece *pieces, size_t n_pieces,
                          float *update);

#endif
