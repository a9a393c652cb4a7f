/* The core's loss scaler, configured by the policy's preset (precision.loss_scale) and
 * the precision group's overrides (DESIGN, One training step, item 5). */
#ifndef MPX_LOSS_SCALER_H
#define MPX_LOSS_SCALER_H

#include <stdint.h>
#include <stddef.h>

#include "config.h"

typedef struct mpx_loss_scaler {
    char preset[40];
    int dynamic;
    double scale, min_scale;
    int64_t window;          /* clean steps before the scale grows */
    int hysteresis, hysteresis_left;
    int stop_at_min;         /* an overflow at the minimum stops the run */
    int64_t clean_steps;
    int64_t overflows;
} mpx_loss_scaler;

int mpx_scaler_init(mpx_loss_scaler *ls, const char *preset, const mpx_config *cfg, char *err, size_t errlen);

/* After a step's overflow check. *skip = 1 when the step must be skipped. Returns
 * non-zero (with err naming the step) when the preset stops the run. */
int mpx_scaler_update(mpx_loss_scaler *ls, int overflow, int64_t step, int *skip, char *err, size_t errlen);

#endif
