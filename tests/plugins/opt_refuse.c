/* Test-only optimizer "refuse" (test_update_threads): plain SGD (update = -lr * grad)
 * that fails on the pieces of one parameter (option refuse_param; -1: none), naming the
 * parameter and where in its tensor the failing piece starts. It declares
 * MPX_OPT_CONCURRENT, so that on several update threads several groups fail at once:
 * the error reported must be the first group's, whole, as on one thread.
 * Built a second time with -DOPT_REFUSE_AS_ABI_1_8 as "refuse18", which claims ABI 1.8
 * and sets the same flag bits: the host must not read MPX_OPT_CONCURRENT from it. */
#include "mpx/mpx.h"

#include <stdlib.h>

typedef struct refuse {
    int64_t param;
} refuse;

static int refuse_create(mpx_env *env, void **self)
{
    refuse *o = malloc(sizeof *o);
    if (!o) return MPX_ERR_NOMEM;
    if (env->host->opt_int(env, "refuse_param", &o->param)) { free(o); return MPX_ERR; }
    *self = o;
    return MPX_OK;
}

static void refuse_destroy(void *self) { free(self); }
static int refuse_n_state(void *self) { (void)self; return 0; }
static const char *refuse_state_name(void *self, int i) { (void)self; (void)i; return NULL; }

static int refuse_step(void *self, mpx_env *env, const mpx_opt_step *s)
{
    const refuse *o = self;
    for (size_t k = 0; k < s->n_pieces; k++) {
        const mpx_piece *pc = &s->pieces[k];
        if ((int64_t)pc->param == o->param)
            return MPX_FAIL(env, "refusing parameter %zu from element %zu of its tensor", pc->param, pc->tensor_offset);
        for (size_t i = 0; i < pc->len; i++) s->update[pc->offset + i] = (float)-s->lr * s->grad[pc->offset + i];
        MPX_TRY(env->host->apply_update(env, pc, s->update));
    }
    return MPX_OK;
}

static const mpx_option refuse_options[] = {
    { "refuse_param", MPX_OPT_INT, "-1", -1.0, 1e9, NULL, "the parameter whose pieces fail; -1: none", 0 },
};

static const mpx_optimizer_vtable refuse_vtable = {
    .size = sizeof(mpx_optimizer_vtable),
    .create = refuse_create,
    .destroy = refuse_destroy,
    .n_state = refuse_n_state,
    .state_name = refuse_state_name,
    .step = refuse_step,
    .flags = MPX_OPT_ELEMENTWISE | MPX_OPT_CONCURRENT,
};

static const mpx_plugin_desc refuse_desc = {
#ifdef OPT_REFUSE_AS_ABI_1_8
    .abi_major = MPX_ABI_MAJOR, .abi_minor = 8, .size = sizeof(mpx_plugin_desc),
    .name = "refuse18",
#else
    MPX_DESC_HEADER,
    .name = "refuse",
#endif
    .kind = MPX_KIND_OPTIMIZER,
    .version = "1.0.0",
    .summary = "test only: SGD that fails on one parameter's pieces",
    .options = refuse_options,
    .n_options = MPX_COUNT(refuse_options),
    .vtable = &refuse_vtable,
};

MPX_PLUGIN_ENTRY { (void)host; return &refuse_desc; }
