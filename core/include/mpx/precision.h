/* Precision policies: which dtype each piece of model state and compute uses.
 * A policy plugin fills the descriptor with its defaults; the core then applies the
 * `precision` group's core keys (islands, eval_logits, comm_dtype, loss_scale, rounding)
 * so an ablation changes one thing at a time. Models read only the effective descriptor
 * (host->precision). */
#ifndef MPX_PRECISION_H
#define MPX_PRECISION_H

#include "mpx/abi.h"
#include "mpx/formats.h"
#include "mpx/ops.h"

/* fp32 islands: ops whose inputs and outputs are fp32 whatever the compute dtype. */
enum {
    MPX_ISLAND_LAYERNORM = 1u << 0,
    MPX_ISLAND_SOFTMAX = 1u << 1,
    MPX_ISLAND_LOSS = 1u << 2,
    MPX_ISLAND_RESIDUAL = 1u << 3,
    MPX_ISLAND_ALL = (1u << 4) - 1,
};

struct mpx_param_info;      /* mpx/model.h */

/* ABI 1.2: how GEMM inputs in an 8-bit format are scaled before rounding. */
typedef enum mpx_scaling {
    MPX_SCALING_NONE = 0,     /* rounded as they are (saturating) */
    MPX_SCALING_DELAYED = 1,  /* per tensor, from the amax history of earlier steps (TE DelayedScaling) */
    MPX_SCALING_CURRENT = 2,  /* per tensor, from this tensor's amax now */
    MPX_SCALING_MX = 3,       /* OCP MX v1.0: blocks of 32 along K share an E8M0 scale */
} mpx_scaling;

typedef enum mpx_amax_algo {
    MPX_AMAX_MAX = 0,         /* the largest amax in the history window */
    MPX_AMAX_MOST_RECENT = 1, /* the last step's */
} mpx_amax_algo;

typedef struct mpx_precision_desc {
    uint32_t size;
    mpx_dtype weights;     /* the copy forward/backward reads */
    mpx_dtype gemm_in;     /* GEMM inputs (rounded to this before the fp32 multiply) */
    mpx_dtype act;         /* activations: GEMM outputs, GELU, dropout, attention */
    mpx_dtype grads;       /* what backward writes */
    mpx_dtype grad_acc;    /* accumulator across micro-batches; MPX_DTYPE_NONE = grads itself */
    mpx_dtype master;      /* fp32 master copy, or MPX_DTYPE_NONE */
    mpx_dtype opt_state;   /* optimizer moments */
    mpx_dtype comm;        /* gradient reduction dtype */
    mpx_dtype eval_logits; /* start/end logits at evaluation */
    uint32_t islands;      /* MPX_ISLAND_* bits */
    const char *loss_scale;/* scaler preset: none, static, pytorch, deepspeed-fp16-optimizer, ... */
    mpx_rounding rounding; /* master/update -> weights */
    /* ABI 1.1: upstream details a policy reproduces (MPX_UPSTREAM_* bits; the core's
     * precision.master_init, optimizer_init_step and unscale_with keys override them).
     * A 1.0 policy's descriptor ends before this field: the host reads it as 0. */
    uint32_t upstream;

    /* ---- ABI 1.2. All-zero means the 1.1 behaviour, so a zero-filled descriptor (or a
     * 1.0/1.1 policy's shorter one, which the core extends with zeros) changes nothing. ---- */
    mpx_dtype grad_gemm_in;   /* inputs of the backward GEMMs when fp16, bf16 or a format;
                                 fp32 (0) or MPX_DTYPE_NONE: as gemm_in */
    mpx_scaling scaling;      /* recipe for GEMM inputs in an 8-bit format */
    int32_t amax_history_len; /* delayed: window length (0 counts as 1) */
    mpx_amax_algo amax_algo;  /* delayed: max or most_recent */
    int32_t margin;           /* delayed/current: scale = (fmt_max / amax) / 2^margin */

    /* ---- ABI 1.8 ---- */
    /* dtype of the optimizer state buffers after the first (Adam's exp_avg_sq), e.g. fp16
     * beside an fp8 exp_avg (MS-AMP O2). A policy's MPX_F32 (0, what a shorter descriptor
     * reads) or MPX_DTYPE_NONE means "as opt_state"; the effective descriptor
     * (host->precision) holds the resolved dtype, after precision.opt_state_sq. */
    mpx_dtype opt_state_sq;
} mpx_precision_desc;

/* The dtype of optimizer state buffer i in the effective descriptor. */
static inline mpx_dtype mpx_opt_state_dtype(const mpx_precision_desc *d, int i)
{
    if (i == 0 || d->size < offsetof(mpx_precision_desc, opt_state_sq) + sizeof d->opt_state_sq) return d->opt_state;
    return d->opt_state_sq == MPX_DTYPE_NONE ? d->opt_state : d->opt_state_sq;
}

/* Optimizer state in fp16 or a format is kept with a per-tensor scale (MS-AMP's
 * ScalingTensor state); fp32 and bf16 are stored as they are. */
static inline int mpx_opt_state_scaled(mpx_dtype t) { return t == MPX_F16 || mpx_dtype_is_format(t); }

/* DeepSpeed's FP16_Optimizer / BF16_Optimizer details (docs/PRECISION-POLICIES.md names
 * the upstream file and version of each). */
enum {
    MPX_UPSTREAM_MASTER_FROM_WEIGHTS = 1u << 0, /* fp32 master = the cast 16-bit weights */
    MPX_UPSTREAM_OPT_INIT_STEP = 1u << 1,       /* one zero-gradient optimizer step at start */
    MPX_UPSTREAM_UNSCALE_UPDATED = 1u << 2,     /* unscale with the scale after its update */
};

/* The compute dtype of a backward GEMM. */
static inline mpx_dtype mpx_grad_gemm_dtype(const mpx_precision_desc *d)
{
    if (d->size < offsetof(mpx_precision_desc, scaling)) return d->gemm_in;
    mpx_dtype g = d->grad_gemm_in;
    return g == MPX_F16 || g == MPX_BF16 || mpx_dtype_is_format(g) ? g : d->gemm_in;
}

/* The dtype an op's inputs/outputs use given its island bit. */
static inline mpx_dtype mpx_island_dtype(const mpx_precision_desc *d, uint32_t island)
{
    return (d->islands & island) ? MPX_F32 : d->act;
}

typedef struct mpx_precision_vtable {
    uint32_t size;
    /* Fill `out` with this policy's defaults (its own options through env). */
    int (*describe)(mpx_env *env, mpx_precision_desc *out);

    /* ---- ABI 1.2 ---- */
    /* Number formats this policy declares (mpx/formats.h): the core builds their
     * converters and gives each a dtype (host->dtype_by_name) before describe() runs. */
    const mpx_format *formats;
    size_t n_formats;

    /* ---- ABI 1.3 ---- */
    /* Optional per-tensor choice: called once per model parameter (its info, and the
     * model's number of encoder layers) with *fwd and *bwd holding the descriptor's
     * forward and backward GEMM dtypes; may set others for that parameter's GEMMs.
     * Models read the result through host->param_gemm_dtype. */
    int (*param_gemm)(mpx_env *env, const struct mpx_param_info *p, int n_layers, mpx_dtype *fwd, mpx_dtype *bwd);
} mpx_precision_vtable;

#endif
