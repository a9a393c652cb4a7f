/* precision/bf16-master: DeepSpeed bf16 (BF16_Optimizer). The whole model is cast to
 * bf16 (no fp32 islands; logits straight from the bf16 model); grads are written in bf16
 * and accumulated in an fp32 buffer; fp32 master weights and Adam moments, written back
 * to bf16 with round-to-nearest; gradient communication in bf16; loss scale 1.
 * 2 + 2 + 4 + 4 + 8 = 20 bytes per parameter, as DeepSpeed's. The loss is bf16 too
 * (log-softmax and the loss scalar rounded to bf16, as PyTorch on a bf16 model). As
 * BF16_Optimizer: the master is cloned from the cast bf16 weights, and one zero-gradient
 * optimizer step at construction (precision.master_init, precision.optimizer_init_step). */
#include "../common/policy_plugin.h"

static int bf16_master_describe(mpx_env *env, mpx_precision_desc *d)
{
    (void)env;
    *d = mpx_policy_all(MPX_BF16);
    d->grad_acc = MPX_F32;
    d->master = MPX_F32;
    d->upstream = MPX_UPSTREAM_MASTER_FROM_WEIGHTS | MPX_UPSTREAM_OPT_INIT_STEP;
    return MPX_OK;
}

MPX_POLICY_PLUGIN("bf16-master", "1.1.0",
                  "DeepSpeed bf16: whole model in bf16, fp32 grad accumulator, fp32 master + Adam state",
                  bf16_master_describe, NULL, 0)
