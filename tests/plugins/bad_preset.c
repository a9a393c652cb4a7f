/* A policy whose descriptor names a loss-scale preset that does not exist (test_loss_scaler):
 * `mpx check` must refuse it and name the plugin, not the config key it never set. */
#include <mpx/mpx.h>

static int bad_describe(mpx_env *env, mpx_precision_desc *d)
{
    (void)env;
    *d = (mpx_precision_desc){
        .size = sizeof *d,
        .weights = MPX_F16, .gemm_in = MPX_F16, .act = MPX_F16, .grads = MPX_F16,
        .grad_acc = MPX_DTYPE_NONE, .master = MPX_F32, .opt_state = MPX_F32,
        .comm = MPX_F16, .eval_logits = MPX_F16,
        .loss_scale = "dynamic",   /* not a preset: "pytorch" is what was meant */
        .rounding = MPX_ROUND_NEAREST,
    };
    return MPX_OK;
}

static const mpx_precision_vtable bad_vtable = {
    .size = sizeof(mpx_precision_vtable),
    .describe = bad_describe,
};

static const mpx_plugin_desc bad_desc = {
    .abi_major = MPX_ABI_MAJOR, .abi_minor = MPX_ABI_MINOR, .size = sizeof(mpx_plugin_desc),
    .kind = MPX_KIND_PRECISION,
    .name = "bad-preset",
    .version = "1.0.0",
    .summary = "test only: a descriptor with an unknown loss-scale preset",
    .vtable = &bad_vtable,
};

MPX_PLUGIN_ENTRY { (void)host; return &bad_desc; }
