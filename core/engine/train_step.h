/* One optimizer step (train_step.c): the whole step for benchmarks and DeepSpeed's
 * initial step, and its pieces the training loop (train.c) calls between them (the
 * micro-batches, the overflow check, the update). train.h includes it. */
#ifndef MPX_TRAIN_STEP_H
#define MPX_TRAIN_STEP_H

#include <stdint.h>

#include "diagnostics.h"
#include "session_types.h"
#include "task.h"

/* The step's settings are the session's, resolved once (settings.h): the step reads
 * them, never a configuration key. */
typedef mpx_settings train_cfg;

int mpx_train_accumulate(mpx_session *s, mpx_task *t, const train_cfg *c, int64_t step, double scale,
                         mpx_diagnostics *diag, double *loss, int64_t *tokens, char *err, size_t errlen);
int mpx_train_check_overflow(mpx_session *s, int64_t step, int fused, int *overflow, double *norm, char *err,
                             size_t errlen);
int mpx_train_update(mpx_session *s, const train_cfg *c, double unscale, int64_t update_no, double lr,
                     mpx_diagnostics *diag, double *norm, char *err, size_t errlen);

/* One optimizer step as mpx_train takes it, without records or loss-scale updates
 * (benchmarks). *skipped is set when the gradients overflowed and no update was made. */
int mpx_train_one_step(mpx_session *s, mpx_task *t, int64_t step, double lr, double scale,
                       mpx_diagnostics *diag, double *loss, int *skipped, char *err, size_t errlen);

/* DeepSpeed's construction-time optimizer step (precision.optimizer_init_step): one
 * update at `lr` on zero fp32 gradients into the master (or the weights), update
 * number 1, no write-back to the 16-bit weights. mpx_train calls it before step 0. */
int mpx_train_init_step(mpx_session *s, double lr, char *err, size_t errlen);

#endif
