/* Test-only backend "nullops": a whole vtable, and an op table whose ABI 1.0 ops are all
 * set (to one placeholder, never called) except layernorm_bwd and gelu_bwd. The loader
 * must refuse it and name exactly those two.
 * Built again by null_instance_ops.c (NULL_OPS_INSTANCE) as "nullinstance": its `ops` is
 * whole, so it loads, but the table its instance_ops hands over lacks gelu_bwd, which the
 * session must refuse when it starts, before any op is called. */
#include "mpx/mpx.h"

static void placeholder(void) {}
/* any op's type, from the placeholder: a cast through void (*)(void), never called */
#define SET(f) .f = (__typeof__(((mpx_ops *)0)->f))placeholder

#define MOST_OPS                                                                                              \
    SET(alloc), SET(free), SET(to_device), SET(to_host), SET(copy), SET(fill_zero), SET(cast), SET(add),       \
    SET(axpby), SET(scale), SET(gemm), SET(bias_add), SET(bias_grad), SET(layernorm_fwd), SET(softmax_fwd),   \
    SET(softmax_bwd), SET(gelu_fwd), SET(dropout_fwd), SET(dropout_bwd), SET(embedding_fwd),                   \
    SET(embedding_bwd), SET(cross_entropy), SET(sum_squares), SET(count_nonfinite), SET(apply_update)

#ifdef NULL_OPS_INSTANCE
#define NAME "nullinstance"
static const mpx_ops nullops_ops = { .size = sizeof(mpx_ops), MOST_OPS, SET(layernorm_bwd), SET(gelu_bwd) };
static const mpx_ops instance_table = { .size = sizeof(mpx_ops), MOST_OPS, SET(layernorm_bwd) };
static const mpx_ops *nullops_instance_ops(void *be) { (void)be; return &instance_table; }
#else
#define NAME "nullops"
static const mpx_ops nullops_ops = { .size = sizeof(mpx_ops), MOST_OPS };
#endif

static int nullops_create(mpx_env *env, void **be) { (void)env; *be = NULL; return MPX_OK; }
static void nullops_destroy(void *be) { (void)be; }
static const char *nullops_describe(void *be) { (void)be; return NAME; }

static const mpx_backend_vtable nullops_vtable = {
    .size = sizeof(mpx_backend_vtable),
    .create = nullops_create,
    .destroy = nullops_destroy,
    .ops = &nullops_ops,
    .describe = nullops_describe,
#ifdef NULL_OPS_INSTANCE
    .instance_ops = nullops_instance_ops,
#endif
};

static const mpx_plugin_desc nullops_desc = {
    MPX_DESC_HEADER,
    .kind = MPX_KIND_BACKEND,
    .name = NAME,
    .version = "1.0.0",
    .summary = "test only: a backend whose op table lacks two ops",
    .vtable = &nullops_vtable,
};

MPX_PLUGIN_ENTRY { (void)host; return &nullops_desc; }
