/* Precision policies: which dtype each piece of model state and compute uses.
 * A policy plugin fills the descriptor with its defaults; the core then applies the
 * `precision` group's core keys (islands, eval_logits, comm_dtype, loss_scale, rounding)
 * so an ablation changes one thing at a time. Models read only the effective descriptor
 * (host->precision). */
#ifndef MPX_PRECISION_H
#define MPX_PRECISION_H

#include "mpx/abi.h"
#include "mpx/ops.h"

/* fp32 islands: ops whose inputs and outputs are fp32 whatever the compute dtype. */
enum {
    MPX_ISLAND_LAYERNORM = 1u << 0,
    MPX_ISLAND_SOFTMAX = 1u << 1,
    MPX_ISLAND_LOSS = 1u << 2,
    MPX_ISLAND_RESIDUAL = 1u << 3,
    MPX_ISLAND_ALL = (1u << 4) - 1,
};

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
} mpx_precision_desc;

/* DeepSpeed's FP16_Optimizer / BF16_Optimizer details (docs/PRECISION-POLICIES.md names
 * the upstream file and version of each). */
enum {
    MPX_UPSTREAM_MASTER_FROM_WEIGHTS = 1u << 0, /* fp32 master = the cast 16-bit weights */
    MPX_UPSTREAM_OPT_INIT_STEP = 1u << 1,       /* one zero-gradient optimizer step at start */
    MPX_UPSTREAM_UNSCALE_UPDATED = 1u << 2,     /* unscale with the scale after its update */
};

/* The dtype an op's inputs/outputs use given its island bit. */
static inline mpx_dtype mpx_island_dtype(const mpx_precision_desc *d, uint32_t island)
{
    return (d->islands & island) ? MPX_F32 : d->act;
}

typedef struct mpx_precision_vtable {
    uint32_t size;
    /* Fill `out` with this policy's defaults (its own options through env). */
    int (*describe)(mpx_env *env, mpx_precision_desc *out);
} mpx_precision_vtable;

#endif
