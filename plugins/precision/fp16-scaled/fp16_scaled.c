/* precision/fp16-scaled: DeepSpeed fp16 (FP16_Optimizer) and apex O2. The whole model is
 * cast to fp16 (layernorm and embeddings included, no fp32 islands); grads are fp16 and
 * accumulate in place; an fp32 master copy and fp32 Adam moments; dynamic loss scaling
 * as FP16_Optimizer without ZeRO (2^16, window 1000, no hysteresis). The fp32 gradient
 * the optimizer reads is a transient buffer (reported apart from model state). As
 * FP16_Optimizer: the loss is fp16 (so a scale of 2^16 overflows: an effective 2^15
 * cap), the master is cloned from the cast fp16 weights, one zero-gradient optimizer
 * step at construction, and a growth step is unscaled with the doubled scale
 * (precision.master_init, optimizer_init_step, unscale_with). */
#include "../common/policy_plugin.h"

static int fp16_describe(mpx_env *env, mpx_precision_desc *d)
{
    (void)env;
    *d = mpx_policy_all(MPX_F16);
    d->master = MPX_F32;
    d->loss_scale = "deepspeed-fp16-optimizer";
    d->upstream = MPX_UPSTREAM_MASTER_FROM_WEIGHTS | MPX_UPSTREAM_OPT_INIT_STEP | MPX_UPSTREAM_UNSCALE_UPDATED;
    return MPX_OK;
}

MPX_POLICY_PLUGIN("fp16-scaled", "1.1.0",
                  "DeepSpeed fp16: whole model in fp16, fp32 master + Adam state, dynamic loss scale",
                  fp16_describe, NULL, 0)
