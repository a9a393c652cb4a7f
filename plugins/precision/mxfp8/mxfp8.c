/* precision/mxfp8: OCP Microscaling MXFP8 (TE's MXFP8BlockScaling recipe): every GEMM
 * input, forward and backward, in E4M3 (option `element`) with each block of 32
 * consecutive elements along the GEMM's K dimension sharing one E8M0 scale
 * 2^(floor(log2 amax) - emax); weights, activations and gradients stored in bf16, fp32
 * gradient accumulator, master and Adam state; no loss scale (the block scales cover the
 * range). Layernorm, softmax, loss and residual adds in fp32. */
#include <string.h>

#include "../common/policy_plugin.h"

static const mpx_option mx_options[] = {
    { "element", MPX_OPT_CHOICE, "\"fp8-e4m3\"", MPX_NO_RANGE, "fp8-e4m3|fp8-e5m2|e3m2|e2m3|e2m1",
      "MX element format (MXFP8 E4M3/E5M2, MXFP6 E3M2/E2M3, MXFP4 E2M1)", 0 },
};

static int mx_describe(mpx_env *env, mpx_precision_desc *d)
{
    const char *element = "fp8-e4m3";
    MPX_TRY(env->host->opt_string(env, "element", &element));
    mpx_dtype el;
    MPX_TRY(env->host->dtype_by_name(env, element, &el));
    *d = mpx_policy_all(MPX_BF16);
    d->gemm_in = el;
    d->grad_gemm_in = el;
    d->grad_acc = MPX_F32;
    d->master = MPX_F32;
    d->eval_logits = MPX_F32;
    d->islands = MPX_ISLAND_LAYERNORM | MPX_ISLAND_SOFTMAX | MPX_ISLAND_LOSS | MPX_ISLAND_RESIDUAL;
    d->scaling = MPX_SCALING_MX;
    return MPX_OK;
}

MPX_POLICY_PLUGIN("mxfp8", "1.0.0",
                  "OCP MXFP8: E4M3 GEMM inputs in blocks of 32 with E8M0 scales, bf16 storage, fp32 master",
                  mx_describe, mx_options, MPX_COUNT(mx_options))
