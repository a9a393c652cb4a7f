/* test-only precision plugin "abi10-bf16" as a plugin built against the ABI 1.0 headers
 * looks to the core: it claims minor 0, its precision vtable stops before the 1.2
 * `formats` fields, and its descriptor's size before the 1.1 `upstream` field and the 1.2
 * scaling fields, which it never writes. The core must load it and run it as before
 * (test_fp8_policies). */
#include <stddef.h>

#include "mpx/mpx.h"

#define DESC_SIZE_1_0 offsetof(mpx_precision_desc, upstream)
#define VTABLE_SIZE_1_0 offsetof(mpx_precision_vtable, formats)

static int abi10_describe(mpx_env *env, mpx_precision_desc *d)
{
    (void)env;
    d->size = DESC_SIZE_1_0;
    d->weights = d->gemm_in = d->act = d->grads = d->comm = d->eval_logits = MPX_BF16;
    d->grad_acc = MPX_F32;
    d->master = MPX_F32;
    d->opt_state = MPX_F32;
    d->islands = 0;
    d->loss_scale = "none";
    d->rounding = MPX_ROUND_NEAREST;
    return MPX_OK;
}

static const mpx_precision_vtable abi10_vtable = { .size = VTABLE_SIZE_1_0, .describe = abi10_describe };

static const mpx_plugin_desc abi10_desc = {
    .abi_major = 1, .abi_minor = 0, .size = sizeof(mpx_plugin_desc),
    .kind = MPX_KIND_PRECISION, .name = "abi10-bf16", .version = "1.0.0",
    .summary = "test-only: a bf16-master policy as an ABI 1.0 plugin presents itself", .vtable = &abi10_vtable,
};

MPX_PLUGIN_ENTRY { (void)host; return &abi10_desc; }
