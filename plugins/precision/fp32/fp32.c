/* precision/fp32: everything in fp32, no loss scaling; the reference policy. */
#include "../common/policy_plugin.h"

static int fp32_describe(mpx_env *env, mpx_precision_desc *d)
{
    (void)env;
    *d = mpx_policy_all(MPX_F32);
    d->islands = MPX_ISLAND_ALL;
    return MPX_OK;
}

MPX_POLICY_PLUGIN("fp32", "1.0.0", "fp32 weights, activations, grads and optimizer state; no loss scaling",
                  fp32_describe, NULL, 0)
