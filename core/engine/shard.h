/* Data parallelism over ranks: which slice of the flat model state this rank owns, the
 * gradient reduction in precision.comm_dtype, and the per-rank memory table
 * (DESIGN, One training step, items 4 to 8; docs/RANKS.md).
 *
 * Batch semantics are DeepSpeed's: train.batch_size is the micro-batch of one rank
 * (train_micro_batch_size_per_gpu); the global batch of one optimizer step is
 * batch_size × gradient_accumulation_steps × ranks (train_batch_size). The global batch
 * is cut into ranks × accumulation micro-batches numbered g = rank × accumulation + micro,
 * exactly the micro-batches one rank with ranks × accumulation steps reads; micro-batch g
 * of step k draws its dropout at tick k × (accumulation × ranks) + g, so a window's draws
 * do not depend on which rank runs it, and every micro-batch's loss is scaled by
 * 1 / (accumulation × ranks) before the gradients are summed over ranks. */
#ifndef MPX_SHARD_H
#define MPX_SHARD_H

#include "session_types.h"

/* After the pieces are planned: the padded length, this rank's owned range (from the
 * zero plugin) and the optimizer pieces clipped to it (offsets relative to the slice). */
int mpx_shard_plan(mpx_session *s, char *err, size_t errlen);

/* Step 4: reduce the accumulated gradients over the ranks in precision.comm_dtype (one
 * rank: no communication, no cast). Afterwards mpx_shard_reduced() holds this rank's
 * reduced slice. Under s->lp_unread (zero.deepspeed_bf16_reduce = "lp-grads", DeepSpeed
 * 0.8.0 to 0.13.2) the 16-bit grads are all-reduced instead and nothing reads them: the
 * accumulator, and so mpx_shard_reduced(), stays this rank's own gradient. */
int mpx_shard_reduce_grads(mpx_session *s, char *err, size_t errlen);

/* This rank's reduced gradient slice (shard_len elements, the accumulator's dtype). */
mpx_arg mpx_shard_reduced(const mpx_session *s);

/* Where, inside this rank's slice, the elements lie whose squares this rank adds to the
 * global gradient norm (and whose overflow it reports): its equal slice of the padded
 * buffer, so that every element is counted once whether or not the state is
 * partitioned, in the same blocks at every stage. */
void mpx_shard_norm_slice(const mpx_session *s, size_t *off, size_t *len);

/* The fp32 master (or the weights, widened) of the whole model into dev (numel fp32,
 * backend memory) on every rank: an all-gather when the master is partitioned. Every
 * rank must call it. */
int mpx_shard_gather_fp32(mpx_session *s, void *dev, char *err, size_t errlen);

/* Every rank's counted bytes by role, rank-major (world × MPX_ROLE_COUNT doubles in
 * out), summed over the ranks so that every rank has the table. Every rank must call it. */
int mpx_shard_memory_table(mpx_session *s, double *out);

/* Ends every rank of the run (the communicator's abort) after this one failed; returns
 * when the communicator has none or there is one rank. */
void mpx_shard_abort(mpx_session *s);

#endif
