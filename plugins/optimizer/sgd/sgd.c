/* optimizer/sgd: torch.optim.SGD semantics.
 *   d = g + wd * p
 *   momentum: buf = d on the first step, else momentum * buf + (1 - dampening) * d;
 *             d = nesterov ? d + momentum * buf : buf
 *   update = -lr * d
 * The weight decay of each piece comes resolved from the host (0 for no-decay tensors). */
#include "../common/opt_common.h"

#include <stdlib.h>

typedef struct sgd {
    float momentum, dampening, one_minus_dampening; /* rounded once from double */
    int nesterov;
} sgd;

static int sgd_create(mpx_env *env, void **self)
{
    double momentum, dampening;
    int nesterov;
    MPX_TRY(env->host->opt_float(env, "momentum", &momentum));
    MPX_TRY(env->host->opt_float(env, "dampening", &dampening));
    MPX_TRY(env->host->opt_bool(env, "nesterov", &nesterov));
    /* torch refuses the same combination: Nesterov needs a plain momentum buffer. */
    if (nesterov && (momentum <= 0.0 || dampening != 0.0))
        return MPX_FAIL(env, "nesterov needs momentum > 0 and dampening = 0 "
                        "(momentum = %g, dampening = %g)", momentum, dampening);
    sgd *o = calloc(1, sizeof *o);
    if (!o) { (void)MPX_FAIL(env, "out of memory"); return MPX_ERR_NOMEM; }
    o->momentum = (float)momentum;
    o->dampening = (float)dampening;
    o->one_minus_dampening = (float)(1.0 - dampening);
    o->nesterov = nesterov;
    *self = o;
    return MPX_OK;
}

static void sgd_destroy(void *self) { free(self); }

static int sgd_n_state(void *self) { return ((sgd *)self)->momentum != 0.0f ? 1 : 0; }

static const char *sgd_state_name(void *self, int i)
{
    (void)self;
    return i == 0 ? "momentum_buffer" : NULL;
}

/* One chunk: update[0..n) from grad, param and (when momentum is on) the buffer. */
static void sgd_chunk(const sgd *o, const mpx_opt_step *s, const mpx_piece *pc, size_t off, size_t n)
{
    float p[OPTC_CHUNK], buf[OPTC_CHUNK], d[OPTC_CHUNK];
    const float *g = s->grad + off;
    const float wd = pc->weight_decay, neg_lr = (float)-s->lr;
    const int first = s->step == 1;
    if (wd != 0.0f) optc_load(s->param, off, n, p);
    for (size_t i = 0; i < n; i++) d[i] = wd != 0.0f ? g[i] + wd * p[i] : g[i];
    if (o->momentum != 0.0f) {
        if (!first) optc_load(s->state[0], off, n, buf);
        for (size_t i = 0; i < n; i++) {
            buf[i] = first ? d[i] : o->momentum * buf[i] + o->one_minus_dampening * d[i];
            d[i] = o->nesterov ? d[i] + o->momentum * buf[i] : buf[i];
        }
        optc_store(buf, s->state[0], off, n);
    }
    for (size_t i = 0; i < n; i++) s->update[off + i] = neg_lr * d[i];
}

static int sgd_step(void *self, mpx_env *env, const mpx_opt_step *s)
{
    const sgd *o = self;
    MPX_TRY(optc_check_step(env, s, sgd_n_state(self)));
    optc_device dev;
    MPX_TRY(optc_device_get(env, &dev));
    for (size_t k = 0; k < s->n_pieces; k++) {
        const mpx_piece *pc = &s->pieces[k];
        if (dev.on) {
            mpx_fused_update f = optc_fused_piece(MPX_FUSED_SGD, s, pc);
            f.neg_lr = (float)-s->lr;
            f.momentum = o->momentum;
            f.one_minus_dampening = o->one_minus_dampening;
            f.nesterov = o->nesterov;
            f.first_step = s->step == 1;
            MPX_TRY(optc_fused_apply(env, &dev, s, &f, pc));
            continue;
        }
        for (size_t done = 0; done < pc->len; done += OPTC_CHUNK) {
            size_t n = pc->len - done < OPTC_CHUNK ? pc->len - done : OPTC_CHUNK;
            sgd_chunk(o, s, pc, pc->offset + done, n);
        }
        MPX_TRY(env->host->apply_update(env, pc, s->update));
    }
    return MPX_OK;
}

static const mpx_option sgd_options[] = {
    { "momentum", MPX_OPT_FLOAT, "0.0", 0.0, 1.0, NULL, "momentum factor (torch.optim.SGD momentum)", 0 },
    { "dampening", MPX_OPT_FLOAT, "0.0", 0.0, 1.0, NULL, "dampening of the momentum buffer after the first step", 0 },
    { "nesterov", MPX_OPT_BOOL, "false", MPX_NO_RANGE, NULL, "Nesterov momentum (needs momentum > 0, dampening = 0)", 0 },
    { "weight_decay", MPX_OPT_FLOAT, "0.0", 0.0, 1e9, NULL, "L2 penalty added to the gradient (0 on no-decay tensors)", 0 },
};

static const mpx_optimizer_vtable sgd_vtable = {
    .size = sizeof(mpx_optimizer_vtable),
    .create = sgd_create,
    .destroy = sgd_destroy,
    .n_state = sgd_n_state,
    .state_name = sgd_state_name,
    .step = sgd_step,
    .flags = MPX_OPT_ELEMENTWISE | MPX_OPT_CONCURRENT,
};

static const mpx_plugin_desc sgd_desc = {
    MPX_DESC_HEADER,
    .kind = MPX_KIND_OPTIMIZER,
    .name = "sgd",
    .version = "1.0.0",
    .summary = "SGD with momentum, dampening, Nesterov and L2 weight decay (torch.optim.SGD)",
    .options = sgd_options,
    .n_options = MPX_COUNT(sgd_options),
    .vtable = &sgd_vtable,
};

MPX_PLUGIN_ENTRY { (void)host; return &sgd_desc; }
