/* comm/local: a single rank; every collective is the identity (or a copy). */
#include <string.h>

#include <stdlib.h>

#include "mpx/mpx.h"

typedef struct local_comm {
    mpx_env *env;
    const mpx_ops *ops;
    void *be;
} local_comm;

static int local_create(mpx_env *env, void **self)
{
    local_comm *c = calloc(1, sizeof *c);
    if (!c) return MPX_ERR_NOMEM;
    c->env = env;
    c->ops = env->host->ops(env, &c->be);
    *self = c;
    return MPX_OK;
}

static void local_destroy(void *self)
{
    local_comm *c = self;
    free(c);
}

static int local_rank(void *self) { (void)self; return 0; }
static int local_world(void *self) { (void)self; return 1; }

static int local_allreduce(void *self, mpx_arg buf, size_t n, mpx_reduce_op op)
{
    (void)self; (void)buf; (void)n; (void)op;
    return MPX_OK;
}

/* With one rank, this rank's slice is the whole buffer. */
static int local_copy(void *self, mpx_arg send, mpx_arg recv, size_t n)
{
    local_comm *c = self;
    if (send.p == recv.p) return MPX_OK;
    if (send.t != recv.t) return MPX_FAIL(c->env, "comm/local: send is %s but recv is %s",
                                          mpx_dtype_name(send.t), mpx_dtype_name(recv.t));
    if (!c->ops) return MPX_FAIL(c->env, "comm/local: no backend to copy with");
    return c->ops->copy(c->be, recv.p, send.p, n * mpx_dtype_size(send.t));
}

static int local_broadcast(void *self, mpx_arg buf, size_t n, int root)
{
    (void)self; (void)buf; (void)n; (void)root;
    return MPX_OK;
}

static int local_barrier(void *self) { (void)self; return MPX_OK; }

static int local_allreduce_host(void *self, double *vals, size_t n, mpx_reduce_op op)
{
    (void)self; (void)vals; (void)n; (void)op;
    return MPX_OK;
}

static const mpx_comm_vtable local_vtable = {
    .size = sizeof(mpx_comm_vtable),
    .create = local_create, .destroy = local_destroy,
    .rank = local_rank, .world = local_world,
    .allreduce = local_allreduce, .reduce_scatter = local_copy, .allgather = local_copy,
    .broadcast = local_broadcast, .barrier = local_barrier,
    .allreduce_host = local_allreduce_host,
};

static const mpx_plugin_desc local_desc = {
    MPX_DESC_HEADER,
    .kind = MPX_KIND_COMM,
    .name = "local",
    .version = "1.0.0",
    .summary = "one rank in this process; collectives are identities",
    .vtable = &local_vtable,
};

MPX_PLUGIN_ENTRY { (void)host; return &local_desc; }
