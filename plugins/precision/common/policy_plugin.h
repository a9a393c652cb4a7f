/* What every precision-policy plugin has in common: a describe() that fills the
 * descriptor, wrapped into the vtable, descriptor and entry point by one macro. */
#ifndef MPX_POLICY_PLUGIN_H
#define MPX_POLICY_PLUGIN_H

#include "mpx/mpx.h"

/* A descriptor with every field set: the policy then states only what differs. */
static inline mpx_precision_desc mpx_policy_all(mpx_dtype t)
{
    return (mpx_precision_desc){
        .size = sizeof(mpx_precision_desc),
        .weights = t, .gemm_in = t, .act = t, .grads = t, .grad_acc = MPX_DTYPE_NONE,
        .master = MPX_DTYPE_NONE, .opt_state = MPX_F32, .comm = t, .eval_logits = t,
        .islands = 0, .loss_scale = "none", .rounding = MPX_ROUND_NEAREST,
        .grad_gemm_in = MPX_DTYPE_NONE, .scaling = MPX_SCALING_NONE, .amax_history_len = 1,
        .amax_algo = MPX_AMAX_MAX, .margin = 0,
    };
}

#define MPX_POLICY_PLUGIN(NAME, VERSION, SUMMARY, DESCRIBE, OPTIONS, N_OPTIONS)        \
    MPX_POLICY_PLUGIN_FORMATS(NAME, VERSION, SUMMARY, DESCRIBE, OPTIONS, N_OPTIONS, NULL, 0)

/* The same, for a policy that declares its own number formats (mpx/formats.h). */
#define MPX_POLICY_PLUGIN_FORMATS(NAME, VERSION, SUMMARY, DESCRIBE, OPTIONS, N_OPTIONS,   \
                                  FORMATS, N_FORMATS)                                   \
    static const mpx_precision_vtable policy_vtable_ = {                                \
        .size = sizeof(mpx_precision_vtable), .describe = DESCRIBE,                     \
        .formats = FORMATS, .n_formats = N_FORMATS,                                     \
    };                                                                                  \
    static const mpx_plugin_desc policy_desc_ = {                                       \
        MPX_DESC_HEADER, .kind = MPX_KIND_PRECISION, .name = NAME, .version = VERSION,  \
        .summary = SUMMARY, .options = OPTIONS, .n_options = N_OPTIONS,                 \
        .vtable = &policy_vtable_,                                                      \
    };                                                                                  \
    MPX_PLUGIN_ENTRY { (void)host; return &policy_desc_; }

#endif
