/* The training loop (DESIGN, One training step) and the commands built on it. */
#ifndef MPX_TRAIN_H
#define MPX_TRAIN_H

#include <jansson.h>

#include "diagnostics.h"
#include "../record/record.h"
#include "task.h"
#include "train_step.h"

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


#endif
