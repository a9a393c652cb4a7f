/* precision/fp8-delayed: Transformer Engine's fp8 recipe (DelayedScaling, format HYBRID):
 * every GEMM input of the forward pass in OCP E4M3 and of the backward pass in E5M2,
 * each tensor scaled by (fp8_max / amax) / 2^margin with amax taken over a window of
 * earlier steps (history length 1024 and algorithm "max" by default, as TE); fp32
 * master weights and Adam state (option `optimizer_state` = "ms-amp-o2": MS-AMP O2's
 * E4M3 first moment and fp16 second moment, per-tensor scaled). Storage (option `storage`): "fp8" keeps the weights
 * and activations in E4M3 and the gradients in E5M2 (1 byte each, unscaled: the loss
 * scaler scales the gradients), with an fp32 gradient accumulator; "bf16" keeps them in
 * bf16 as TE does (only the GEMM inputs are fp8). Layernorm, softmax, loss and residual
 * adds run in fp32, as TE leaves them to the framework. */
#include <string.h>

#include "../common/policy_plugin.h"

static const mpx_option fp8_options[] = {
    { "storage", MPX_OPT_CHOICE, "\"fp8\"", MPX_NO_RANGE, "fp8|bf16",
      "fp8: weights/activations E4M3, grads E5M2 in 1 byte each; bf16: all three in bf16", 0 },
    { "amax_history_len", MPX_OPT_INT, "1024", 1, 100000, NULL, "DelayedScaling.amax_history_len", 0 },
    { "amax_compute_algo", MPX_OPT_CHOICE, "\"max\"", MPX_NO_RANGE, "max|most_recent",
      "DelayedScaling.amax_compute_algo", 0 },
    { "margin", MPX_OPT_INT, "0", 0, 64, NULL, "DelayedScaling.margin: scale = (fp8_max / amax) / 2^margin", 0 },
    { "optimizer_state", MPX_OPT_CHOICE, "\"fp32\"", MPX_NO_RANGE, "fp32|ms-amp-o2",
      "fp32: Adam moments in fp32; ms-amp-o2: MS-AMP O2's, exp_avg in E4M3 and exp_avg_sq in fp16, each with a per-tensor scale", 0 },
    { "bf16_layers", MPX_OPT_CHOICE, "\"first_last\"", MPX_NO_RANGE, "first_last|none",
      "first_last: the first and last encoder layers and the output head compute their GEMMs in bf16", 0 },
};

static int fp8_describe(mpx_env *env, mpx_precision_desc *d)
{
    const char *storage = "fp8", *algo = "max", *opt = "fp32";
    int64_t len = 1024, margin = 0;
    MPX_TRY(env->host->opt_string(env, "storage", &storage));
    MPX_TRY(env->host->opt_string(env, "amax_compute_algo", &algo));
    MPX_TRY(env->host->opt_int(env, "amax_history_len", &len));
    MPX_TRY(env->host->opt_int(env, "margin", &margin));
    MPX_TRY(env->host->opt_string(env, "optimizer_state", &opt));
    int fp8 = strcmp(storage, "fp8") == 0;
    *d = mpx_policy_all(fp8 ? MPX_FP8_E4M3 : MPX_BF16);
    d->gemm_in = MPX_FP8_E4M3;
    d->grad_gemm_in = MPX_FP8_E5M2;
    d->grads = fp8 ? MPX_FP8_E5M2 : MPX_BF16;
    d->comm = d->grads;
    d->grad_acc = MPX_F32;
    d->master = MPX_F32;
    d->eval_logits = MPX_F32;
    d->islands = MPX_ISLAND_LAYERNORM | MPX_ISLAND_SOFTMAX | MPX_ISLAND_LOSS | MPX_ISLAND_RESIDUAL;
    d->loss_scale = fp8 ? "pytorch" : "none";
    d->scaling = MPX_SCALING_DELAYED;
    d->amax_history_len = (int32_t)len;
    d->amax_algo = strcmp(algo, "most_recent") == 0 ? MPX_AMAX_MOST_RECENT : MPX_AMAX_MAX;
    d->margin = (int32_t)margin;
    if (strcmp(opt, "ms-amp-o2") == 0) { /* msamp/__init__.py, opt_level O2 */
        d->opt_state = MPX_FP8_E4M3;
        d->opt_state_sq = MPX_F16;
    }
    return MPX_OK;
}

/* The per-tensor choice (ABI 1.3): bf16 GEMMs for the first and last encoder layers and
 * the head (embeddings have no GEMM), as fp8 recipes commonly keep them. */
static int fp8_param_gemm(mpx_env *env, const mpx_param_info *p, int n_layers, mpx_dtype *fwd, mpx_dtype *bwd)
{
    const char *which = "first_last";
    MPX_TRY(env->host->opt_string(env, "bf16_layers", &which));
    if (strcmp(which, "first_last") != 0) return MPX_OK;
    if (p->group == MPX_GROUP_HEAD || p->group == MPX_GROUP_EMBEDDING || p->layer == 0 || p->layer == n_layers - 1)
        *fwd = *bwd = MPX_BF16;
    return MPX_OK;
}

static const mpx_precision_vtable policy_vtable_ = {
    .size = sizeof(mpx_precision_vtable), .describe = fp8_describe, .param_gemm = fp8_param_gemm,
};

static const mpx_plugin_desc policy_desc_ = {
    MPX_DESC_HEADER, .kind = MPX_KIND_PRECISION, .name = "fp8-delayed", .version = "1.2.0",
    .summary = "Transformer Engine fp8 (HYBRID, delayed scaling): E4M3 forward / E5M2 backward GEMMs, "
               "bf16 first/last layers, fp32 master",
    .options = fp8_options, .n_options = MPX_COUNT(fp8_options), .vtable = &policy_vtable_,
};

MPX_PLUGIN_ENTRY { (void)host; return &policy_desc_; }
