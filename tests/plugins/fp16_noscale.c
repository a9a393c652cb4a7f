/* precision/fp16-noscale — the worked example of docs/PRECISION-POLICIES.md, and a
 * test-only plugin (built to build/test-plugins/, never installed).
 *
 * DeepSpeed's fp16 policy with the loss scaler switched off: the whole model in fp16,
 * fp32 master weights and Adam moments, but gradients written to fp16 unscaled, so small
 * ones underflow to zero. Its diagnostics show that underflow; fp16-scaled's show less. */
#include <mpx/mpx.h>

static int noscale_describe(mpx_env *env, mpx_precision_desc *d)
{
    (void)env;
    *d = (mpx_precision_desc){
        .size = sizeof *d,
        .weights = MPX_F16, .gemm_in = MPX_F16, .act = MPX_F16, .grads = MPX_F16,
        .grad_acc = MPX_DTYPE_NONE, .master = MPX_F32, .opt_state = MPX_F32,
        .comm = MPX_F16, .eval_logits = MPX_F16,
        .islands = 0,                 /* whole-model cast, as DeepSpeed */
        .loss_scale = "none",         /* the one difference from fp16-scaled */
        .rounding = MPX_ROUND_NEAREST,
    };
    return MPX_OK;
}

static const mpx_precision_vtable noscale_vtable = {
    .size = sizeof(mpx_precision_vtable),
    .describe = noscale_describe,
};

static const mpx_plugin_desc noscale_desc = {
    .abi_major = MPX_ABI_MAJOR, .abi_minor = MPX_ABI_MINOR, .size = sizeof(mpx_plugin_desc),
    .kind = MPX_KIND_PRECISION,
    .name = "fp16-noscale",
    .version = "1.0.0",
    .summary = "fp16 weights and grads with fp32 master, no loss scaling (gradients underflow)",
    .vtable = &noscale_vtable,
};

MPX_PLUGIN_ENTRY { (void)host; return &noscale_desc; }
