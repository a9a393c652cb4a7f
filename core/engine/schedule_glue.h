/* The learning rate of every step, from the `scheduler` group and optimizer.lr. */
#ifndef MPX_SCHEDULE_GLUE_H
#define MPX_SCHEDULE_GLUE_H

#include <stdint.h>

#include "schedule.h"
#include "session_types.h"

typedef struct mpx_lr_schedule {
    double base_lr;
    int64_t total_steps;
    void *impl;
} mpx_lr_schedule;

/* The schedule parameters of the settings' schedule (settings.h) for `train_steps`
 * optimizer steps; -1 when optimizer.lr was missing. */
int mpx_lr_schedule_params(const mpx_schedule_spec *spec, int64_t train_steps, const char **type,
                           mpx_schedule_params *p);

int mpx_lr_schedule_open(mpx_lr_schedule *sc, const mpx_session *s, int64_t total_steps, char *err, size_t errlen);
/* The lr of loop step `step` after `updates` optimizer updates (skipped steps not
 * counted): DeepSpeed's engine steps warmup_lr / warmup_decay_lr only after an update
 * (engine.py: an overflowed step does not call lr_scheduler.step()), so those follow
 * `updates`; constant and warmup_linear (BingBertSquad's global_step) follow `step`. */
double mpx_lr_at(const mpx_lr_schedule *sc, int64_t step, int64_t updates);
void mpx_lr_schedule_close(mpx_lr_schedule *sc);

#endif
