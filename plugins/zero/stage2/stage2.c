/* zero/stage2 (DeepSpeed ZeRO-2): stage 1 plus partitioned gradients. The gradients are
 * reduce-scattered: each rank keeps only the reduced slice it updates (the host copies it
 * out of the whole-model buffer backward writes, which is then a reduction bucket). */
#include "../common/partition.h"

static int stage2_create(mpx_env *env, void **self) { return zero_part_create(env, 2, self); }

static const mpx_zero_vtable stage2_vtable = ZERO_PART_VTABLE(stage2_create, zero_part_reduce_scatter);

static const mpx_plugin_desc stage2_desc = {
    MPX_DESC_HEADER,
    .kind = MPX_KIND_ZERO,
    .name = "stage2",
    .version = "1.0.0",
    .summary = "ZeRO-2: gradients, master copy and optimizer state partitioned; grads reduce-scattered",
    .vtable = &stage2_vtable,
};

MPX_PLUGIN_ENTRY { (void)host; return &stage2_desc; }
