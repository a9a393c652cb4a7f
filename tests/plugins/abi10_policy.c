/* test-only precision plugin "abi10" claiming ABI 1.0: its descriptor predates the 1.1
 * field `upstream`, which in 1.0 was tail padding. The bytes there are set to all ones,
 * as stale padding could be: the host must read them as absent (test_upstream.c). */
#include "mpx/mpx.h"

static int abi10_describe(mpx_env *env, mpx_precision_desc *d)
{
    (void)env;
    *d = (mpx_precision_desc){ .size = sizeof *d, .weights = MPX_BF16, .gemm_in = MPX_BF16, .act = MPX_BF16,
                               .grads = MPX_BF16, .grad_acc = MPX_F32, .master = MPX_F32,
                               .opt_state = MPX_F32, .comm = MPX_BF16, .eval_logits = MPX_BF16,
                               .islands = 0, .loss_scale = "none" };
    d->upstream = 0xffffffffu; /* the old padding, not a field of 1.0 */
    return MPX_OK;
}

static const mpx_precision_vtable abi10_vtable = { .size = sizeof(mpx_precision_vtable), .describe = abi10_describe };

static const mpx_plugin_desc abi10_desc = {
    .abi_major = 1, .abi_minor = 0, .size = sizeof(mpx_plugin_desc),
    .kind = MPX_KIND_PRECISION, .name = "abi10", .version = "1.0.0",
    .summary = "test-only ABI 1.0 bf16 policy (no upstream field)", .vtable = &abi10_vtable,
};

MPX_PLUGIN_ENTRY { (void)host; return &abi10_desc; }
