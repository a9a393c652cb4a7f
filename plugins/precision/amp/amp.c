/* precision/amp: PyTorch autocast / apex O1. Weights, grads and optimizer state stay
 * fp32; GEMM inputs are rounded to fp16 (or bf16) and multiplied with fp32 accumulation;
 * GEMM outputs, GELU and dropout are fp16; layernorm, softmax, loss and residual adds
 * run in fp32 (autocast's fp32 list). Dynamic loss scaling as torch.cuda.amp.GradScaler
 * (no scaling with bf16, as PyTorch recommends). */
#include <string.h>

#include "../common/policy_plugin.h"

static const mpx_option amp_options[] = {
    { "dtype", MPX_OPT_CHOICE, "\"fp16\"", MPX_NO_RANGE, "fp16|bf16",
      "low-precision dtype of GEMM inputs and activations (autocast's dtype)", 0 },
};

static int amp_describe(mpx_env *env, mpx_precision_desc *d)
{
    const char *dtype = "fp16";
    MPX_TRY(env->host->opt_string(env, "dtype", &dtype));
    mpx_dtype low = strcmp(dtype, "bf16") == 0 ? MPX_BF16 : MPX_F16;
    *d = mpx_policy_all(MPX_F32);
    d->gemm_in = low;
    d->act = low;
    d->eval_logits = low; /* qa_outputs is a linear: autocast returns its logits in low */
    d->islands = MPX_ISLAND_LAYERNORM | MPX_ISLAND_SOFTMAX | MPX_ISLAND_LOSS | MPX_ISLAND_RESIDUAL;
    d->loss_scale = low == MPX_F16 ? "pytorch" : "none";
    return MPX_OK;
}

MPX_POLICY_PLUGIN("amp", "1.0.0",
                  "autocast (apex O1): fp32 weights, fp16 GEMMs and activations, fp32 islands, GradScaler",
                  amp_describe, amp_options, MPX_COUNT(amp_options))
