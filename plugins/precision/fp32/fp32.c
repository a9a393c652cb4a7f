/* precision/fp32: everything in fp32, no loss scaling; the reference policy. */
#include "mpx/mpx.h"

static int fp32_describe(mpx_env *env, mpx_precision_desc *d)
{
    (void)env;
    *d = (mpx_precision_desc){
        .size = sizeof *d,
        .weights = MPX_F32, .gemm_in = MPX_F32, .act = MPX_F32,
        .grads = MPX_F32, .grad_acc = MPX_DTYPE_NONE, .master = MPX_DTYPE_NONE,
        .opt_state = MPX_F32, .comm = MPX_F32, .eval_logits = MPX_F32,
        .islands = MPX_ISLAND_ALL, .loss_scale = "none", .rounding = MPX_ROUND_NEAREST,
    };
    return MPX_OK;
}

static const mpx_precision_vtable fp32_vtable = {
    .size = sizeof(mpx_precision_vtable),
    .describe = fp32_describe,
};

static const mpx_plugin_desc fp32_desc = {
    MPX_DESC_HEADER,
    .kind = MPX_KIND_PRECISION,
    .name = "fp32",
    .version = "1.0.0",
    .summary = "fp32 weights, activations, grads and optimizer state; no loss scaling",
    .vtable = &fp32_vtable,
};

MPX_PLUGIN_ENTRY { (void)host; return &fp32_desc; }
