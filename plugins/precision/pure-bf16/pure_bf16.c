/* precision/pure-bf16: everything in bf16 — weights, grads, optimizer moments — with no
 * master copy (llama-recipes' pure_bf16, AnyPrecisionAdamW). The update is written into
 * the bf16 weights with precision.rounding: nearest (small updates stall), stochastic, or
 * kahan (a bf16 compensation buffer). 2 + 2 + 4 = 8 bytes per parameter with Adam,
 * 10 with Kahan. */
#include "../common/policy_plugin.h"

static int pure_bf16_describe(mpx_env *env, mpx_precision_desc *d)
{
    (void)env;
    *d = mpx_policy_all(MPX_BF16);
    d->opt_state = MPX_BF16;
    return MPX_OK;
}

MPX_POLICY_PLUGIN("pure-bf16", "1.0.0",
                  "bf16 weights, grads and optimizer state, no master; rounding nearest/stochastic/kahan",
                  pure_bf16_describe, NULL, 0)
