/* A minimal precision plugin for loader tests; each including file sets the ABI
 * version, name and version string it claims. */
#include "mpx/mpx.h"

static int fake_describe(mpx_env *env, mpx_precision_desc *d)
{
    (void)env;
    *d = (mpx_precision_desc){ .size = sizeof *d, .weights = MPX_F32, .gemm_in = MPX_F32, .act = MPX_F32,
                               .grads = MPX_F32, .grad_acc = MPX_DTYPE_NONE, .master = MPX_DTYPE_NONE,
                               .opt_state = MPX_F32, .comm = MPX_F32, .eval_logits = MPX_F32,
                               .islands = MPX_ISLAND_ALL, .loss_scale = "none" };
    return MPX_OK;
}

static const mpx_precision_vtable fake_vtable = { .size = sizeof(mpx_precision_vtable), .describe = fake_describe };

static const mpx_plugin_desc fake_desc = {
    .abi_major = FAKE_MAJOR, .abi_minor = FAKE_MINOR, .size = sizeof(mpx_plugin_desc),
    .kind = MPX_KIND_PRECISION, .name = FAKE_NAME, .version = FAKE_VERSION,
    .summary = "test-only plugin for the loader tests", .vtable = &fake_vtable,
};

MPX_PLUGIN_ENTRY { (void)host; return &fake_desc; }
