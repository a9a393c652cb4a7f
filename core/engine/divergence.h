/* Whether the ranks of a data-parallel run train one model (docs/RANKS.md, "Replica
 * divergence"):
 *
 *  - replica divergence: each rank's weights against rank 0's, as the largest absolute
 *    difference and the relative L2 distance ||w_r - w_0|| / ||w_0||, over the whole
 *    weights each rank holds (stages 0 to 2; at stage 3 each rank holds only its slice).
 *    0 on every rank for any correct data-parallel run, whatever the policy: every rank
 *    applies the same update to the same weights, or gathers them from their owners.
 *  - gradient divergence, under zero.deepspeed_bf16_reduce = "lp-grads" only: over the
 *    partition of the state rank r steps, the relative L2 distance between the gradient
 *    it steps on (its own, unreduced) and the mean over the ranks that the fixed
 *    DeepSpeed steps on, ||g_r - mean|| / ||mean||, before clipping.
 *
 * Both are collectives: every rank calls them at the same steps (mpx_divergence_due).
 * They read the state and write only scratch buffers: a run's results are the same with
 * or without them. */
#ifndef MPX_DIVERGENCE_H
#define MPX_DIVERGENCE_H

#include <jansson.h>
#include <stdint.h>

#include "session_types.h"

/* Whether step (0-based) of `total` measures: every train.log_every steps and the last. */
int mpx_divergence_due(const mpx_session *s, int64_t step, int64_t total);

/* The replica divergence after `steps` steps, into metrics (replica_divergence: the last
 * measurement per rank, with after_steps; replica_divergence_trace: [after_steps, largest
 * max_abs, largest rel_l2] per measurement). Nothing at one rank or at stage 3. Reads the
 * weights in chunks (two fp32 scratch chunks of 2^20 elements per rank). */
int mpx_divergence_replicas(mpx_session *s, int64_t steps, json_t *metrics, char *err, size_t errlen);

/* The gradient divergence of step `step` (0-based, as metrics.csv counts; after the
 * gradients are accumulated, before they are clipped), into metrics (grad_divergence: the
 * last measurement per rank with its step, each rank's mean over the measurements;
 * grad_divergence_trace: [step, mean over the ranks]). Nothing unless s->lp_unread. */
int mpx_divergence_grads(mpx_session *s, int64_t step, json_t *metrics, char *err, size_t errlen);

#endif
