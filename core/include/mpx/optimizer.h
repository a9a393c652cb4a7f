/* Optimizers: the update rule over the pieces of one shard.
 * The optimizer computes an fp32 *update* (the amount to add) for each piece and hands
 * it to host->apply_update, which writes it into the master copy (or the weights) with
 * the policy's rounding, so rounding has one owner. Where that rounding is a plain fp32
 * addition, the host may say so (MPX_STEP_ADD_IN_PLACE) and the optimizer adds the update
 * itself. */
#ifndef MPX_OPTIMIZER_H
#define MPX_OPTIMIZER_H

#include "mpx/abi.h"
#include "mpx/ops.h"

/* A contiguous range of one parameter tensor that this rank owns. A piece never spans
 * two tensors (LAMB needs each tensor's bounds). */
typedef struct mpx_piece {
    size_t param;          /* index in the model's parameter table */
    size_t offset;         /* element offset in the step's flat buffers */
    size_t len;            /* elements */
    size_t tensor_offset;  /* where the range starts inside its tensor */
    size_t tensor_numel;   /* the whole tensor's size */
    float weight_decay;    /* 0 for no-decay tensors */
    uint32_t site;         /* Philox site for stochastic rounding */
} mpx_piece;

#define MPX_MAX_OPT_STATE 4

typedef struct mpx_opt_step {
    uint32_t size;
    const mpx_piece *pieces;
    size_t n_pieces;
    double lr;             /* this step's learning rate (schedule applied) */
    int64_t step;          /* 1-based count of optimizer updates, this one included */
    mpx_arg param;         /* flat: fp32 master, or the weights when there is no master */
    const float *grad;     /* flat fp32 gradient: unscaled, clipped */
    mpx_arg state[MPX_MAX_OPT_STATE]; /* n_state buffers, in precision->opt_state dtype */
    float *update;         /* flat fp32 scratch the optimizer writes before apply_update */
    /* ---- ABI 1.8 (read only when `size` covers it) ----
     * For a state buffer in fp16 or a format (mpx_opt_state_scaled), one fp32 scale per
     * parameter tensor, indexed by mpx_piece.param: the buffer holds round(x * scale)
     * and x = value / scale. The optimizer sets the scale of each piece it stores (run
     * state: the host keeps and checkpoints it; 1 at the start). NULL for fp32/bf16. */
    float *state_scale[MPX_MAX_OPT_STATE];
    /* ---- ABI 1.12 (read only when `size` covers it) ----
     * MPX_STEP_* bits the host sets for this call; 0 (and every older host) grants nothing. */
    uint32_t flags;
} mpx_opt_step;

/* ABI 1.12: apply_update of every piece of this call would be a plain fp32 addition into
 * `param`: param is fp32 (the master, or fp32 weights) in host memory — or, to an
 * optimizer built for 1.18 or later, in device memory whose backend's fused_update adds in
 * place (MPX_OPS_FUSED_ADD_IN_PLACE: the optimizer then sets mpx_fused_update.add_in_place
 * and must not dereference param) —, the update is added
 * as w = w + u rounded to nearest fp32 (no compensation, no random draws), and nothing
 * reads `update` after the call (no diagnostics on this step). The optimizer may then
 * add each element's update into param itself, as the one fp32 addition of the value it
 * would have handed over, and not call apply_update for that piece: the bits are those
 * of apply_update, and the update's trip through memory (written, read back, param read
 * again) is saved. The host still owns the rounding: it grants this only where its
 * rounding is that addition. With MPX_OPT_CONCURRENT the optimizer writes only its own
 * pieces' param, and reads an element's param only before writing it. An optimizer may
 * ignore the bit (every one of minor < 12 does); adam and adamw take it. */
#define MPX_STEP_ADD_IN_PLACE 1u

typedef struct mpx_optimizer_vtable {
    uint32_t size;
    int (*create)(mpx_env *env, void **self);
    void (*destroy)(void *self);
    /* Number of state buffers the host allocates (each like param, zero-filled). */
    int (*n_state)(void *self);
    /* State buffer names for records ("exp_avg", "exp_avg_sq"). */
    const char *(*state_name)(void *self, int i);
    /* Compute each piece's update and call env->host->apply_update for it (or, where the
     * host sets MPX_STEP_ADD_IN_PLACE, add it into param directly). */
    int (*step)(void *self, mpx_env *env, const mpx_opt_step *s);

    /* ---- ABI 1.6 (read only when `size` covers it) ---- */
    /* MPX_OPT_* bits; 0 (and every older optimizer) promises nothing. */
    uint32_t flags;
} mpx_optimizer_vtable;

/* Each element's update depends only on that element's param, grad and state, the
 * piece's weight decay and the step's lr and number: no per-tensor norm, no collective.
 * The host may then call `step` several times per optimizer step, each on a window of
 * the shard with its pieces cut to it (a piece's `tensor_offset` and `len` say which
 * part of the tensor) and `grad` / `update` pointing at window-sized buffers — the
 * results are bitwise those of one call over the whole shard, and the fp32 gradient and
 * update need not exist for the whole model at once (train.update_chunk). LAMB (the
 * per-tensor trust ratio, reduced across ranks) must not set it. */
#define MPX_OPT_ELEMENTWISE 1u

/* ABI 1.9: `step` may be called from several threads at once, each call on its own
 * disjoint pieces of one window (a piece may be cut in two: its offset, len and
 * tensor_offset say which part of the tensor) with the same step otherwise, and the
 * results are bitwise those of one call over all of them. Each call writes only its
 * pieces' update and state, reads `self` only (no mutable state in it), calls no host
 * function but error, ops, precision, format, seed and apply_update, and reads a
 * piece's param only before handing that piece to apply_update (or, granted
 * MPX_STEP_ADD_IN_PLACE, writes only its own pieces' param): the host applies the
 * updates after the calls have returned (the backend's ops are not called from those
 * threads). Implies MPX_OPT_ELEMENTWISE; read only from optimizers of minor 9 or later.
 * The host uses it on host memory only, and not for optimizer state in fp16 or a format
 * (whose per-tensor scale needs the whole piece). adam, adamw and sgd declare it. */
#define MPX_OPT_CONCURRENT 2u

#endif
