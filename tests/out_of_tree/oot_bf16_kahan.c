/* precision/oot-bf16-kahan — a precision policy built OUT OF TREE, against an installed
 * mpx (`make install PREFIX=...`, then pkg-config), by tests/out_of_tree/build.sh; the
 * install test (tests/test_install.c) builds it, lists it and runs it. docs/PLUGINS.md
 * walks through it.
 *
 * Pure bf16 (llama-recipes' pure_bf16 with Meta's AnyPrecisionAdamW): bf16 weights,
 * grads and optimizer state, no master copy — but Kahan-compensated updates by default
 * (a bf16 compensation buffer, 2 more bytes per parameter), so small updates are kept
 * instead of being rounded away. Its one option chooses the rounding; the core key
 * precision.rounding, when set, still wins (an ablation changes one thing at a time).
 *
 * It includes only <mpx/mpx.h>: nothing from the mpx source tree. */
#include <string.h>

#include <mpx/mpx.h>

static const mpx_option kahan_options[] = {
    { "rounding", MPX_OPT_CHOICE, "\"kahan\"", MPX_NO_RANGE, "nearest|stochastic|kahan",
      "rounding of the update into the bf16 weights (precision.rounding, when set, wins)", 0 },
};

static int kahan_describe(mpx_env *env, mpx_precision_desc *d)
{
    const char *rounding = "kahan";
    MPX_TRY(env->host->opt_string(env, "rounding", &rounding));
    mpx_rounding mode = MPX_ROUND_KAHAN;
    if (strcmp(rounding, "nearest") == 0) mode = MPX_ROUND_NEAREST;
    else if (strcmp(rounding, "stochastic") == 0) mode = MPX_ROUND_STOCHASTIC;
    else if (strcmp(rounding, "kahan") != 0)
        return MPX_FAIL(env, "rounding \"%s\" is not one of nearest, stochastic, kahan", rounding);
    *d = (mpx_precision_desc){
        .size = sizeof *d,
        .weights = MPX_BF16, .gemm_in = MPX_BF16, .act = MPX_BF16, .grads = MPX_BF16,
        .grad_acc = MPX_DTYPE_NONE,   /* grads accumulate in place, in bf16 */
        .master = MPX_DTYPE_NONE,     /* no fp32 copy: the update goes into the weights */
        .opt_state = MPX_BF16, .comm = MPX_BF16, .eval_logits = MPX_BF16,
        .islands = 0,                 /* no fp32 islands */
        .loss_scale = "none",         /* bf16 has fp32's exponent range */
        .rounding = mode,
    };
    return MPX_OK;
}

static const mpx_precision_vtable kahan_vtable = {
    .size = sizeof(mpx_precision_vtable),
    .describe = kahan_describe,
};

static const mpx_plugin_desc kahan_desc = {
    MPX_DESC_HEADER,
    .kind = MPX_KIND_PRECISION,
    .name = "oot-bf16-kahan",
    .version = "1.0.0",
    .summary = "out-of-tree example: pure bf16 (no master) with Kahan-compensated updates by default",
    .options = kahan_options,
    .n_options = MPX_COUNT(kahan_options),
    .vtable = &kahan_vtable,
};

MPX_PLUGIN_ENTRY { (void)host; return &kahan_desc; }
