/* zero/stage3 (DeepSpeed ZeRO-3): stage 2 plus partitioned weights. Each rank holds only
 * its slice of the 16-bit (or fp32) weights; the host gathers a layer's parameters just
 * in time for its forward and again for its backward, and releases them after, through
 * the model's set_weight_gather hook (ABI 1.7, mpx/model.h). Gradients are
 * reduce-scattered as at stage 2; after the update each rank's slice of the weights is
 * already where it lives, so nothing is gathered at the end of the step. A model without
 * the hook is refused by the host (it would read weights it does not have). */
#include "../common/partition.h"

static int stage3_create(mpx_env *env, void **self) { return zero_part_create(env, 3, self); }

static int stage3_keep_weights(void *self, void *comm, const mpx_comm_vtable *cv, mpx_arg weights, size_t numel)
{
    (void)self; (void)comm; (void)cv; (void)weights; (void)numel;
    return MPX_OK; /* the weights stay partitioned: the next forward gathers them */
}

static const mpx_zero_vtable stage3_vtable = {
    .size = sizeof(mpx_zero_vtable), .create = stage3_create, .destroy = zero_part_destroy,
    .stage = zero_part_stage, .owned_range = zero_part_owned_range,
    .reduce_grads = zero_part_reduce_scatter, .gather_weights = stage3_keep_weights,
};

static const mpx_incompat stage3_incompat[] = {
    { "precision/fp8-delayed", "delayed scaling keys each tensor's amax history by the tensor's address, and "
                               "stage 3 gathers every layer into the same reused buffer" },
};

static const mpx_plugin_desc stage3_desc = {
    MPX_DESC_HEADER,
    .kind = MPX_KIND_ZERO,
    .name = "stage3",
    .version = "1.0.0",
    .summary = "ZeRO-3: weights, gradients, master copy and optimizer state partitioned; "
               "each layer's weights gathered for its forward and backward",
    .incompat = stage3_incompat,
    .n_incompat = MPX_COUNT(stage3_incompat),
    .vtable = &stage3_vtable,
};

MPX_PLUGIN_ENTRY { (void)host; return &stage3_desc; }
