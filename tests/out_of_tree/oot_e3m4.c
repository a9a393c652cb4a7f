/* precision/oot-e3m4 — a custom ExMy policy built OUT OF TREE against an installed mpx
 * (pkg-config; tests/out_of_tree/build.sh), the worked example of "Writing a format and a
 * recipe" in docs/PRECISION-POLICIES.md. The install test builds it, lists it and runs it
 * in a sweep beside fp32; no file of mpx is changed for it.
 *
 * It declares two number formats by their parameters, and mpx builds their converters:
 *   e3m4      sign, 3 exponent bits (bias 3), 4 mantissa bits, subnormals, IEEE inf/NaN
 *             (ml_dtypes' float8_e3m4: largest 15.5) — stored in 1 byte;
 *   e3m4-ftz  the same without subnormals (flushed to zero), saturating.
 * Every GEMM input, forward and backward, is rounded to e3m4 after per-tensor current
 * scaling (scale = (15.5 / amax) / 2^margin, computed from the tensor at hand); the
 * activations are stored in e3m4-ftz (unscaled: option `act`, default bf16 storage);
 * weights and gradients bf16, fp32 master and optimizer state, fp32 islands for
 * layernorm, softmax, loss and residual adds.
 *
 * It includes only <mpx/mpx.h>: nothing from the mpx source tree. */
#include <string.h>

#include <mpx/mpx.h>

static const mpx_format e3m4_formats[] = {
    { .size = sizeof(mpx_format), .name = "e3m4", .exp_bits = 3, .man_bits = 4, .subnormals = 1,
      .special = MPX_FMT_IEEE, .bias = 3, .saturate = 0, .storage_bytes = 1 },
    { .size = sizeof(mpx_format), .name = "e3m4-ftz", .exp_bits = 3, .man_bits = 4, .subnormals = 0,
      .special = MPX_FMT_IEEE, .bias = 3, .saturate = 1, .storage_bytes = 1 },
};

static const mpx_option e3m4_options[] = {
    { "margin", MPX_OPT_INT, "0", 0, 8, NULL, "current scaling: scale = (15.5 / amax) / 2^margin", 0 },
    { "act", MPX_OPT_CHOICE, "\"bf16\"", MPX_NO_RANGE, "bf16|e3m4-ftz", "storage of the activations", 0 },
};

static int e3m4_describe(mpx_env *env, mpx_precision_desc *d)
{
    int64_t margin = 0;
    const char *act = "bf16";
    MPX_TRY(env->host->opt_int(env, "margin", &margin));
    MPX_TRY(env->host->opt_string(env, "act", &act));
    mpx_dtype e3m4, act_t;
    /* the host gave our formats their dtypes before calling describe */
    MPX_TRY(env->host->dtype_by_name(env, "e3m4", &e3m4));
    MPX_TRY(env->host->dtype_by_name(env, act, &act_t));
    *d = (mpx_precision_desc){
        .size = sizeof *d, .weights = MPX_BF16, .gemm_in = e3m4, .act = act_t, .grads = MPX_BF16,
        .grad_acc = MPX_F32, .master = MPX_F32, .opt_state = MPX_F32, .comm = MPX_BF16,
        .eval_logits = MPX_F32, .loss_scale = "none", .rounding = MPX_ROUND_NEAREST,
        .islands = MPX_ISLAND_LAYERNORM | MPX_ISLAND_SOFTMAX | MPX_ISLAND_LOSS | MPX_ISLAND_RESIDUAL,
        .grad_gemm_in = e3m4, .scaling = MPX_SCALING_CURRENT, .margin = (int32_t)margin,
    };
    return MPX_OK;
}

static const mpx_precision_vtable e3m4_vtable = {
    .size = sizeof(mpx_precision_vtable), .describe = e3m4_describe,
    .formats = e3m4_formats, .n_formats = MPX_COUNT(e3m4_formats),
};

static const mpx_plugin_desc e3m4_desc = {
    MPX_DESC_HEADER, .kind = MPX_KIND_PRECISION, .name = "oot-e3m4", .version = "1.0.0",
    .summary = "out-of-tree example: its own E3M4 formats, current scaling of every GEMM input",
    .options = e3m4_options, .n_options = MPX_COUNT(e3m4_options), .vtable = &e3m4_vtable,
};

MPX_PLUGIN_ENTRY { (void)host; return &e3m4_desc; }
