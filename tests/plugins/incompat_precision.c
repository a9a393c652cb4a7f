/* Test-only precision plugin "incompat-test": fp32 everywhere, but declares that it
 * cannot be combined with optimizer/sgd, so a sweep must record its cells with sgd as
 * skipped, with this reason. */
#include "mpx/mpx.h"

static int incompat_describe(mpx_env *env, mpx_precision_desc *d)
{
    (void)env;
    *d = (mpx_precision_desc){ .size = sizeof *d, .weights = MPX_F32, .gemm_in = MPX_F32, .act = MPX_F32,
                               .grads = MPX_F32, .grad_acc = MPX_DTYPE_NONE, .master = MPX_DTYPE_NONE,
                               .opt_state = MPX_F32, .comm = MPX_F32, .eval_logits = MPX_F32,
                               .islands = MPX_ISLAND_ALL, .loss_scale = "none" };
    return MPX_OK;
}

static const mpx_precision_vtable incompat_vtable = { .size = sizeof(mpx_precision_vtable),
                                                      .describe = incompat_describe };

static const mpx_incompat incompat_list[] = {
    { "optimizer/sgd", "test plugin: momentum SGD is declared unsupported" },
};

static const mpx_plugin_desc incompat_desc = {
    .abi_major = MPX_ABI_MAJOR, .abi_minor = MPX_ABI_MINOR, .size = sizeof(mpx_plugin_desc),
    .kind = MPX_KIND_PRECISION, .name = "incompat-test", .version = "1.0.0",
    .summary = "test-only plugin declaring an incompatibility (sweep tests)",
    .incompat = incompat_list, .n_incompat = 1, .vtable = &incompat_vtable,
};

MPX_PLUGIN_ENTRY { (void)host; return &incompat_desc; }
