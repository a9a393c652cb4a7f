/* Shared by the optimizer plugins (compiled into each .so): reading and writing the
 * step's flat buffers in whatever dtype they are stored in, chunk by chunk, and the
 * option and argument checks every optimizer repeats.
 *
 * The optimizers work on host-addressable memory (the CPU backend's buffers). Each
 * reads a chunk of param / state widened to fp32, computes in fp32, writes the state
 * back rounded to nearest even, and writes the fp32 update into the step's scratch. */
#ifndef MPX_OPT_COMMON_H
#define MPX_OPT_COMMON_H

#include "mpx/mpx.h"

/* Elements processed per chunk: the fp32 staging arrays live on the stack. */
#define OPTC_CHUNK 256

/* dst[0..n) = a[off..off+n) widened to fp32 (fp32, bf16 or fp16 storage; mpx/numerics.h). */
void optc_load(mpx_arg a, size_t off, size_t n, float *dst);

/* a[off..off+n) = src rounded to nearest even in a's dtype (fp32 or bf16). */
void optc_store(const float *src, mpx_arg a, size_t off, size_t n);

/* Checks what every step relies on: n_state state buffers present in fp32 or bf16, a
 * param buffer in fp32/bf16/fp16, grad and update present, step >= 1, pieces inside
 * their tensors. (The core prefixes
 * messages with the plugin's KIND/NAME.) */
int optc_check_step(mpx_env *env, const mpx_opt_step *s, int n_state);

/* Whether the host granted MPX_STEP_ADD_IN_PLACE for this call (ABI 1.12: a step struct
 * large enough to hold `flags`) and param is fp32: the update may be added into param
 * where it lies instead of handed to apply_update. */
int optc_add_in_place(const mpx_opt_step *s);

/* ---- state in fp16 or any format (ABI 1.8) ----
 * MS-AMP O2's state storage (msamp/optim/adamw.py, LBAdamW.adamw_fn with adamw.cu):
 * a buffer in fp16 or a format holds round(x * scale) with one power-of-two scale per
 * tensor (mpx_opt_step.state_scale); it is read back as code * (1 / scale). After a
 * step the scale is MS-AMP's ScalingMeta.compute_scaling_factor(amax, scale, fmt_max,
 * margin 0) of the new values' amax: 2^floor(log2(fmt_max / amax)), the old scale kept
 * when amax is 0 or not finite. fp32 and bf16 state is unscaled (scale 1). */
typedef struct optc_state {
    mpx_arg a;
    const struct mpx_format *fmt; /* for a format dtype; NULL for fp32/bf16/fp16 */
    float *scales;         /* per tensor, NULL when unscaled */
    float fmt_max;         /* largest finite value of the storage */
} optc_state;

/* Like optc_check_step, also accepting fp16 and format state with its scales (for an
 * optimizer that stores state through optc_state_*); fills st[0..n_state). */
int optc_check_step_scaled(mpx_env *env, const mpx_opt_step *s, int n_state, optc_state *st);

/* The scale piece `param` was stored with (1 when unscaled). */
float optc_state_scale(const optc_state *st, size_t param);

/* dst[0..n) = the values of st's elements [off, off + n) (code / scale). */
void optc_state_load(const optc_state *st, float inv_scale, size_t off, size_t n, float *dst);

/* st's elements [off, off + n) = src * scale, rounded to nearest even (saturating). */
void optc_state_store(const optc_state *st, float scale, const float *src, size_t off, size_t n);

/* MS-AMP's next scale for new values of largest magnitude amax. */
float optc_state_next_scale(const optc_state *st, float amax, float old);

/* ---- device memory (ABI 1.4) ----
 * A backend whose memory is not host-addressable (flags & MPX_OPS_DEVICE_MEMORY, the
 * cuda backend) runs each piece's rule through ops->fused_update, with the arithmetic of
 * the host loops; the host loops stay the path for the cpu backend. */
typedef struct optc_device {
    int on;                /* 1: use fused_update */
    int in_place;          /* on, and its fused_update adds into an fp32 param (ABI 1.18) */
    const mpx_ops *ops;
    void *be;
} optc_device;

/* Fills *d from the run's backend; fails when its memory is device memory but it has no
 * fused_update. */
int optc_device_get(mpx_env *env, optc_device *d);

/* A fused_update argument for `rule` over piece pc of step s: buffers at the piece's
 * offset, its weight decay; the rule's constants are left for the caller. */
mpx_fused_update optc_fused_piece(mpx_fused_rule rule, const mpx_opt_step *s, const mpx_piece *pc);
/* Runs f (optc_fused_run) with the update added into param in the same pass where the
 * host granted it and the backend can (ABI 1.18); else hands the update to apply_update. */
int optc_fused_apply(mpx_env *env, const optc_device *d, const mpx_opt_step *s, mpx_fused_update *f,
                     const mpx_piece *pc);

/* Runs f on the device, naming the parameter in an error. */
int optc_fused_run(mpx_env *env, const optc_device *d, mpx_fused_update *f, const mpx_piece *pc);

/* betas = [b1, b2] from the plugin's own `betas` option, each in [0, 1). */
int optc_betas(mpx_env *env, double *b1, double *b2);

/* Bias corrections 1 - beta^step (1 when disabled), computed in double. */
double optc_bias_correction(double beta, int64_t step, int enabled);

#endif
