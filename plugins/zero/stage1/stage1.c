/* zero/stage1 (DeepSpeed ZeRO-1): the fp32 master copy and the optimizer state are
 * partitioned across ranks; every rank keeps all weights and all gradients. Gradients
 * are all-reduced; each rank updates its slice; the updated weights are all-gathered. */
#include "../common/partition.h"

static int stage1_create(mpx_env *env, void **self) { return zero_part_create(env, 1, self); }

static int stage1_reduce_grads(void *self, void *comm, const mpx_comm_vtable *cv, mpx_arg grads, size_t numel)
{
    (void)self;
    return cv->allreduce(comm, grads, numel, MPX_SUM);
}

static const mpx_zero_vtable stage1_vtable = ZERO_PART_VTABLE(stage1_create, stage1_reduce_grads);

static const mpx_plugin_desc stage1_desc = {
    MPX_DESC_HEADER,
    .kind = MPX_KIND_ZERO,
    .name = "stage1",
    .version = "1.0.0",
    .summary = "ZeRO-1: master copy and optimizer state partitioned; grads all-reduced, weights all-gathered",
    .vtable = &stage1_vtable,
};

MPX_PLUGIN_ENTRY { (void)host; return &stage1_desc; }
