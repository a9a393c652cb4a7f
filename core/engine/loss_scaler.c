#include "loss_scaler.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct preset {
    const char *name;
    mpx_scaler_kind kind;
    int initial_power;   /* scale = 2^initial_power (fixed kinds: 1) */
    int64_t window;
    int hysteresis;
    double min_scale;
    int stop_at_min;
} preset;

static const preset presets[] = {
    { "none", MPX_SCALER_FIXED, 0, 0, 1, 1.0, 0 },
    { "static", MPX_SCALER_FIXED, 0, 0, 1, 1.0, 0 },
    { "pytorch", MPX_SCALER_TORCH, 16, 2000, 1, 0.0, 0 },
    { "deepspeed-fp16-optimizer", MPX_SCALER_DS_FP16, 16, 1000, 1, 1.0, 0 },
    { "deepspeed-zero", MPX_SCALER_DEEPSPEED, 32, 1000, 1, 1.0, 1 },
    { "deepspeed-zero-keys", MPX_SCALER_DEEPSPEED, 16, 1000, 2, 1.0, 1 },
};

int mpx_scaler_known(const char *name)
{
    for (size_t i = 0; name && i < sizeof presets / sizeof *presets; i++)
        if (strcmp(presets[i].name, name) == 0) return 1;
    return 0;
}

const char *mpx_scaler_names(void)
{
    return "none, static, pytorch, deepspeed-fp16-optimizer, deepspeed-zero, deepspeed-zero-keys";
}

static void apply_overrides(mpx_loss_scaler *ls, const mpx_scaler_keys *k)
{
    int64_t power = k->power, window = k->window, hysteresis = k->hysteresis;
    double min_scale = k->min_scale, static_scale = k->static_scale;
    if (strcmp(ls->preset, "static") == 0) ls->scale = static_scale;
    if (ls->kind == MPX_SCALER_FIXED) return;
    if (power >= 0) ls->scale = ldexp(1.0, (int)power);
    if (window > 0) ls->window = window;
    if (hysteresis > 0) ls->hysteresis = (int)hysteresis;
    if (min_scale > 0) ls->min_scale = min_scale;
}

size_t mpx_scaler_idle_keys(const char *name, const mpx_scaler_keys *k, char *out, size_t cap, size_t len)
{
    const preset *p = NULL;
    if (!name) name = "none";
    for (size_t i = 0; i < sizeof presets / sizeof *presets; i++)
        if (strcmp(presets[i].name, name) == 0) p = &presets[i];
    if (!p) return 0;
    size_t n = 0;
#define IDLE(fmt, ...) \
    do { if (n < cap) snprintf(out + n * len, len, fmt, __VA_ARGS__); n++; } while (0)
    if (strcmp(name, "static") != 0 && k->static_scale != 1.0)
        IDLE("precision.static_loss_scale = %g never acts: only loss_scale \"static\" reads it (the preset is %s)",
             k->static_scale, name);
    if (p->kind == MPX_SCALER_FIXED) {
        const char *why = "the preset keeps a fixed scale";
        if (k->power >= 0) IDLE("precision.initial_scale_power = %lld never acts: %s (%s)", (long long)k->power, why, name);
        if (k->window > 0) IDLE("precision.loss_scale_window = %lld never acts: %s (%s)", (long long)k->window, why, name);
        if (k->hysteresis > 0) IDLE("precision.hysteresis = %lld never acts: %s (%s)", (long long)k->hysteresis, why, name);
        if (k->min_scale > 0) IDLE("precision.min_loss_scale = %g never acts: %s (%s)", k->min_scale, why, name);
    } else if (p->kind != MPX_SCALER_DEEPSPEED) {
        if (k->hysteresis > 0)
            IDLE("precision.hysteresis = %lld never acts: %s halves the scale on every overflow (only deepspeed-zero "
                 "and deepspeed-zero-keys have hysteresis)", (long long)k->hysteresis, name);
        if (p->kind == MPX_SCALER_TORCH && k->min_scale > 0)
            IDLE("precision.min_loss_scale = %g never acts: pytorch's GradScaler has no floor", k->min_scale);
    }
#undef IDLE
    return n < cap ? n : cap;
}

int mpx_scaler_init(mpx_loss_scaler *ls, const char *name, const mpx_scaler_keys *keys, char *err, size_t errlen)
{
    memset(ls, 0, sizeof *ls);
    if (!name) name = "none";
    const preset *p = NULL;
    for (size_t i = 0; i < sizeof presets / sizeof *presets; i++)
        if (strcmp(presets[i].name, name) == 0) p = &presets[i];
    if (!p) {
        snprintf(err, errlen, "precision.loss_scale: unknown preset \"%s\" (%s)", name, mpx_scaler_names());
        return -1;
    }
    snprintf(ls->preset, sizeof ls->preset, "%s", p->name);
    ls->kind = p->kind;
    ls->scale = ldexp(1.0, p->initial_power);
    ls->window = p->window;
    ls->hysteresis = p->hysteresis;
    ls->min_scale = p->min_scale;
    ls->stop_at_min = p->stop_at_min;
    ls->factor = 2.0;
    if (keys) apply_overrides(ls, keys);
    ls->cur_hysteresis = ls->hysteresis;
    ls->last_overflow_iter = -1;
    return 0;
}

/* torch.cuda.amp.GradScaler.update */
static void torch_update(mpx_loss_scaler *ls, int overflow)
{
    if (overflow) {
        ls->scale *= 0.5;
        ls->growth_tracker = 0;
        return;
    }
    if (++ls->growth_tracker == ls->window) {
        ls->scale *= ls->factor;
        ls->growth_tracker = 0;
    }
}

/* DeepSpeed FP16_Optimizer._update_scale (no ZeRO): every overflow halves the scale down
 * to the minimum, never stopping; the scale doubles when the clean steps since the last
 * overflow, less one, are a positive multiple of the window. */
static void ds_fp16_update(mpx_loss_scaler *ls, int overflow)
{
    if (overflow) {
        ls->scale = fmax(ls->scale / ls->factor, ls->min_scale);
        ls->last_overflow_iter = ls->iter;
    } else {
        int64_t stable = ls->iter - ls->last_overflow_iter - 1;
        if (stable > 0 && stable % ls->window == 0) ls->scale *= ls->factor;
    }
    ls->iter++;
}

/* DeepSpeed DynamicLossScaler.update_scale (ZeRO), consecutive_hysteresis = false. */
static int deepspeed_update(mpx_loss_scaler *ls, int overflow, int64_t step, char *err, size_t errlen)
{
    if (overflow) {
        if (ls->hysteresis == 1 || ls->cur_hysteresis == 1) {
            if (ls->stop_at_min && ls->scale <= ls->min_scale) {
                snprintf(err, errlen, "step %lld: gradient overflow with the loss scale already at its minimum %g "
                         "(preset %s stops here, as DeepSpeed's \"Current loss scale already at minimum\")",
                         (long long)step, ls->min_scale, ls->preset);
                return -1;
            }
            ls->scale = fmax(ls->scale / ls->factor, ls->min_scale);
        } else {
            ls->cur_hysteresis--;
        }
        ls->last_overflow_iter = ls->iter;
    } else if ((ls->iter - ls->last_overflow_iter) % ls->window == 0) {
        ls->cur_hysteresis = ls->hysteresis; /* consecutive_hysteresis = false */
        ls->scale *= ls->factor;
    }
    ls->iter++;
    return 0;
}

int mpx_scaler_update(mpx_loss_scaler *ls, int overflow, int64_t step, int *skip, char *err, size_t errlen)
{
    *skip = overflow != 0;
    ls->overflows += overflow != 0;
    switch (ls->kind) {
    case MPX_SCALER_TORCH: torch_update(ls, overflow); return 0;
    case MPX_SCALER_DEEPSPEED: return deepspeed_update(ls, overflow, step, err, errlen);
    case MPX_SCALER_DS_FP16: ds_fp16_update(ls, overflow); return 0;
    default: return 0;
    }
}
