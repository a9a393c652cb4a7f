/* The core's loss scaler (DESIGN, One training step, item 5), configured by the policy's
 * preset (precision.loss_scale) with each parameter overridable by the `precision`
 * group's keys. Presets, as REFERENCE describes each path:
 *   none                      scale 1
 *   static                    precision.static_loss_scale
 *   pytorch                   torch GradScaler: 65536, x2 after 2000 clean steps, x0.5 on overflow
 *   deepspeed-fp16-optimizer  FP16_Optimizer without ZeRO: 2^16, window 1000, min 1, no
 *                             hysteresis, never stops at the minimum
 *   deepspeed-zero            DynamicLossScaler(): 2^32, window 1000, hysteresis 1, stops at the minimum
 *   deepspeed-zero-keys       ZeRO with loss-scale keys: 2^16, window 1000, hysteresis 2, min 1,
 *                             stops at the minimum
 * Every overflow skips its step. */
#ifndef MPX_LOSS_SCALER_H
#define MPX_LOSS_SCALER_H

#include <stddef.h>
#include <stdint.h>


typedef enum mpx_scaler_kind {
    MPX_SCALER_FIXED = 0,      /* none, static */
    MPX_SCALER_TORCH = 1,      /* growth tracker reset on overflow */
    MPX_SCALER_DEEPSPEED = 2,  /* DynamicLossScaler: iteration-based window, hysteresis */
    MPX_SCALER_DS_FP16 = 3,    /* FP16_Optimizer._update_scale: window counted after the overflow */
} mpx_scaler_kind;

/* The precision group's keys over a preset (settings.c reads them): initial_scale_power
 * (-1 keeps the preset's), loss_scale_window, hysteresis, min_loss_scale (0 keeps the
 * preset's), static_loss_scale (the static preset's scale). */
typedef struct mpx_scaler_keys {
    int64_t power, window, hysteresis;
    double min_scale, static_scale;
} mpx_scaler_keys;

typedef struct mpx_loss_scaler {
    char preset[40];
    mpx_scaler_kind kind;
    double scale, min_scale, factor;
    int64_t window;           /* clean steps before the scale grows */
    int hysteresis;           /* overflows tolerated before a decrease (DeepSpeed delayed_shift) */
    int stop_at_min;          /* an overflow at the minimum stops the run */
    /* state */
    int64_t iter, last_overflow_iter, growth_tracker;
    int cur_hysteresis;
    int64_t overflows;
} mpx_loss_scaler;

/* Whether `name` is a loss-scale preset, and the presets' names ("none, static, ..."). */
int mpx_scaler_known(const char *name);
const char *mpx_scaler_names(void);

/* The preset's values, then the precision group's overrides (initial_scale_power,
 * loss_scale_window, hysteresis, min_loss_scale; 0 / -1 keep the preset's). keys may be
 * NULL: the preset alone. */
int mpx_scaler_init(mpx_loss_scaler *ls, const char *preset, const mpx_scaler_keys *keys, char *err, size_t errlen);

/* The loss-scale keys set in `k` that preset `name` (NULL: "none") never reads, as
 * "precision.KEY = VALUE never acts: WHY" lines into out[0..cap) (each `len` bytes; an
 * unknown preset has none). Returns how many; mpx check warns and a run notes each. */
size_t mpx_scaler_idle_keys(const char *name, const mpx_scaler_keys *k, char *out, size_t cap, size_t len);

/* After a step's overflow check. *skip = 1 when the step must be skipped. Returns
 * non-zero (err names the step and the scale) when the preset stops the run. */
int mpx_scaler_update(mpx_loss_scaler *ls, int overflow, int64_t step, int *skip, char *err, size_t errlen);

#endif
