/* Test-only precision plugin "param-fp8-test": fp32 in every dtype of its descriptor, but
 * its per-parameter hook (ABI 1.3) puts the GEMMs of layer 0's matrices in fp8-e4m3. A
 * backend without MPX_OPS_FORMATS must refuse it by parameter before anything runs. */
#include "mpx/mpx.h"

static int param_fp8_describe(mpx_env *env, mpx_precision_desc *d)
{
    (void)env;
    *d = (mpx_precision_desc){ .size = sizeof *d, .weights = MPX_F32, .gemm_in = MPX_F32, .act = MPX_F32,
                               .grads = MPX_F32, .grad_acc = MPX_DTYPE_NONE, .master = MPX_DTYPE_NONE,
                               .opt_state = MPX_F32, .comm = MPX_F32, .eval_logits = MPX_F32,
                               .islands = MPX_ISLAND_ALL, .loss_scale = "none", .grad_gemm_in = MPX_DTYPE_NONE,
                               .scaling = MPX_SCALING_CURRENT, .amax_history_len = 1, .opt_state_sq = MPX_DTYPE_NONE };
    return MPX_OK;
}

static int param_fp8_gemm(mpx_env *env, const mpx_param_info *p, int n_layers, mpx_dtype *fwd, mpx_dtype *bwd)
{
    (void)env;
    (void)n_layers;
    if (p->ndim == 2 && p->layer <= 0) *fwd = *bwd = MPX_FP8_E4M3;
    return MPX_OK;
}

static const mpx_precision_vtable param_fp8_vtable = { .size = sizeof(mpx_precision_vtable),
                                                       .describe = param_fp8_describe,
                                                       .param_gemm = param_fp8_gemm };

static const mpx_plugin_desc param_fp8_desc = {
    .abi_major = MPX_ABI_MAJOR, .abi_minor = MPX_ABI_MINOR, .size = sizeof(mpx_plugin_desc),
    .kind = MPX_KIND_PRECISION, .name = "param-fp8-test", .version = "1.0.0",
    .summary = "test-only plugin: fp32, but layer 0's GEMMs in fp8-e4m3 (ABI 1.3 param_gemm)",
    .vtable = &param_fp8_vtable,
};

MPX_PLUGIN_ENTRY { (void)host; return &param_fp8_desc; }
