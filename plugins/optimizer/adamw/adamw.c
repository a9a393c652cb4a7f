/* optimizer/adamw: torch.optim.AdamW (decoupled weight decay, bias correction, default
 * weight_decay 0.01). The same arithmetic as optimizer/adam with adam_w_mode on. */
#include "../common/adam_rule.h"

#include <stdlib.h>

static int adamw_create(mpx_env *env, void **self)
{
    adam_rule r;
    MPX_TRY(adam_rule_read(env, 0, &r));
    adam_rule *o = malloc(sizeof *o);
    if (!o) { (void)MPX_FAIL(env, "out of memory"); return MPX_ERR_NOMEM; }
    *o = r;
    *self = o;
    return MPX_OK;
}

static void adamw_destroy(void *self) { free(self); }
static int adamw_n_state(void *self) { (void)self; return 2; }
static const char *adamw_state_name(void *self, int i) { (void)self; return adam_rule_state_name(i); }
static int adamw_step(void *self, mpx_env *env, const mpx_opt_step *s) { return adam_rule_step(self, env, s); }

static const mpx_option adamw_options[] = {
    { "betas", MPX_OPT_FLOAT_LIST, "[0.9, 0.999]", 0.0, 0.999999, NULL, "coefficients of the running averages of the gradient and its square", 2 },
    { "eps", MPX_OPT_FLOAT, "1e-8", 0.0, 1.0, NULL, "added to the denominator, outside the square root", 0 },
    { "weight_decay", MPX_OPT_FLOAT, "0.01", 0.0, 1e9, NULL, "decoupled weight decay (0 on no-decay tensors)", 0 },
    { "anyprecision", MPX_OPT_BOOL, "false", MPX_NO_RANGE, NULL, "AnyPrecisionAdamW's arithmetic (llama-recipes): every op rounded to its tensor's dtype (moments to the state dtype, decay and update to the weights'); decoupled decay as p *= 1 - lr wd", 0 },
};

static const mpx_optimizer_vtable adamw_vtable = {
    .size = sizeof(mpx_optimizer_vtable),
    .create = adamw_create,
    .destroy = adamw_destroy,
    .n_state = adamw_n_state,
    .state_name = adamw_state_name,
    .step = adamw_step,
    .flags = MPX_OPT_ELEMENTWISE | MPX_OPT_CONCURRENT,
};

static const mpx_plugin_desc adamw_desc = {
    MPX_DESC_HEADER,
    .kind = MPX_KIND_OPTIMIZER,
    .name = "adamw",
    .version = "1.0.0",
    .summary = "torch.optim.AdamW: decoupled weight decay, bias correction",
    .options = adamw_options,
    .n_options = MPX_COUNT(adamw_options),
    .vtable = &adamw_vtable,
};

MPX_PLUGIN_ENTRY { (void)host; return &adamw_desc; }
