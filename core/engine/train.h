/* The training loop (DESIGN, One training step) and the commands built on it. */
#ifndef MPX_TRAIN_H
#define MPX_TRAIN_H

#include <jansson.h>

#include "diagnostics.h"
#include "../record/record.h"
#include "task.h"

/* Train for the configured steps, appending a metrics row per step to `rec` and
 * filling `metrics` (losses, skipped steps, overflows, scale trace, tokens/s). */
int mpx_train(mpx_session *s, mpx_task *t, mpx_record *rec, json_t *metrics, char *err, size_t errlen);

/* mpx_train continuing from the training-state checkpoint folder `from` (train_state.h);
 * from = NULL starts afresh. */
int mpx_train_resume(mpx_session *s, mpx_task *t, mpx_record *rec, json_t *metrics, const char *from,
                     char *err, size_t errlen);

/* Number of optimizer steps the configuration asks for, given the task's data, in
 * checked arithmetic; refuses more micro-batches than the 32-bit Philox tick counts. */
int mpx_train_count_steps(const mpx_session *s, size_t n_train, int64_t *steps, char *err, size_t errlen);

/* The same, or -1 when it refuses. */
int64_t mpx_train_total_steps(const mpx_session *s, size_t n_train);

/* One optimizer step as mpx_train takes it, without records or loss-scale updates
 * (benchmarks). *skipped is set when the gradients overflowed and no update was made. */
int mpx_train_one_step(mpx_session *s, mpx_task *t, int64_t step, double lr, double scale,
                       mpx_diagnostics *diag, double *loss, int *skipped, char *err, size_t errlen);

/* DeepSpeed's construction-time optimizer step (precision.optimizer_init_step): one
 * update at `lr` on zero fp32 gradients into the master (or the weights), update
 * number 1, no write-back to the 16-bit weights. mpx_train calls it before step 0. */
int mpx_train_init_step(mpx_session *s, double lr, char *err, size_t errlen);

#endif
