/* optimizer/adam: DeepSpeed's config "Adam" = FusedAdam. adam_w_mode (default true)
 * decouples the weight decay as torch.optim.AdamW does; false adds it to the gradient
 * as torch.optim.Adam does. The defaults are FusedAdam's, weight_decay 0 included (a
 * DeepSpeed config that names no weight_decay trains without decay). */
#include "../common/adam_rule.h"

#include <stdlib.h>

static int adam_create(mpx_env *env, void **self)
{
    adam_rule r;
    MPX_TRY(adam_rule_read(env, 1, &r));
    adam_rule *o = malloc(sizeof *o);
    if (!o) { (void)MPX_FAIL(env, "out of memory"); return MPX_ERR_NOMEM; }
    *o = r;
    *self = o;
    return MPX_OK;
}

static void adam_destroy(void *self) { free(self); }
static int adam_n_state(void *self) { (void)self; return 2; }
static const char *adam_state_name(void *self, int i) { (void)self; return adam_rule_state_name(i); }
static int adam_step(void *self, mpx_env *env, const mpx_opt_step *s) { return adam_rule_step(self, env, s); }

static const mpx_option adam_options[] = {
    { "betas", MPX_OPT_FLOAT_LIST, "[0.9, 0.999]", 0.0, 0.999999, NULL, "coefficients of the running averages of the gradient and its square", 2 },
    { "eps", MPX_OPT_FLOAT, "1e-8", 0.0, 1.0, NULL, "added to the denominator, outside the square root", 0 },
    { "weight_decay", MPX_OPT_FLOAT, "0.0", 0.0, 1e9, NULL, "weight decay (0 on no-decay tensors); DeepSpeed FusedAdam's default is 0", 0 },
    { "adam_w_mode", MPX_OPT_BOOL, "true", MPX_NO_RANGE, NULL, "true: decoupled weight decay (AdamW); false: L2 added to the gradient (Adam)", 0 },
    { "bias_correction", MPX_OPT_BOOL, "true", MPX_NO_RANGE, NULL, "divide the moments by 1 - beta^step", 0 },
    { "anyprecision", MPX_OPT_BOOL, "false", MPX_NO_RANGE, NULL, "AnyPrecisionAdamW's arithmetic (llama-recipes): every op rounded to its tensor's dtype (moments to the state dtype, decay and update to the weights'); decoupled decay as p *= 1 - lr wd", 0 },
};

static const mpx_optimizer_vtable adam_vtable = {
    .size = sizeof(mpx_optimizer_vtable),
    .create = adam_create,
    .destroy = adam_destroy,
    .n_state = adam_n_state,
    .state_name = adam_state_name,
    .step = adam_step,
    .flags = MPX_OPT_ELEMENTWISE | MPX_OPT_CONCURRENT,
};

static const mpx_plugin_desc adam_desc = {
    MPX_DESC_HEADER,
    .kind = MPX_KIND_OPTIMIZER,
    .name = "adam",
    .version = "1.0.0",
    .summary = "DeepSpeed \"Adam\" (FusedAdam): adam_w_mode, bias_correction, betas, eps, weight decay",
    .options = adam_options,
    .n_options = MPX_COUNT(adam_options),
    .vtable = &adam_vtable,
};

MPX_PLUGIN_ENTRY { (void)host; return &adam_desc; }
