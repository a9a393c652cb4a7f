/* Learning-rate schedules (scheduler.type) and what `mpx check` shows about them.
 *
 *   constant         lr = optimizer.lr
 *   warmup_linear    BingBertSquad: lr = optimizer.lr * f(x), x = step / total_steps,
 *                    f(x) = x / w for x < w, else 1 - x (w = warmup_proportion). The
 *                    script sets it before each update from the 0-based update count, so
 *                    the first update runs at lr 0, and past x = 1 the lr is negative.
 *   warmup_lr        DeepSpeed WarmupLR: min + (max - min) * gamma(i), gamma(i) =
 *                    log(i + 1) / log(n) (log) or i / n (linear) for i < n, else 1;
 *                    n = max(2, warmup_num_steps).
 *   warmup_decay_lr  DeepSpeed WarmupDecayLR: as warmup_lr during warm-up, then
 *                    gamma(i) = max(0, (T - i) / max(1, T - n)), T = total_num_steps.
 * DeepSpeed steps its scheduler after each optimizer update, and (since v0.15.3) its
 * constructor sets warmup_min_lr: update k (0-based) runs at iteration i = max(0, k - 1).
 * The DeepSpeed schedules replace optimizer.lr: it never acts under them. */
#ifndef MPX_SCHEDULE_H
#define MPX_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>

typedef enum mpx_schedule_type {
    MPX_SCHED_CONSTANT = 0,
    MPX_SCHED_WARMUP_LINEAR = 1,
    MPX_SCHED_WARMUP_LR = 2,
    MPX_SCHED_WARMUP_DECAY_LR = 3,
} mpx_schedule_type;

typedef enum mpx_warmup_type {
    MPX_WARMUP_LOG = 0,
    MPX_WARMUP_LINEAR = 1,
} mpx_warmup_type;

/* The config values a schedule reads (the caller fills those of the selected type). */
typedef struct mpx_schedule_params {
    double base_lr;             /* optimizer.lr: constant, warmup_linear */
    int64_t total_steps;        /* scheduler.total_steps, resolved (> 0): warmup_linear's t_total */
    double warmup_proportion;   /* scheduler.warmup_linear.warmup_proportion */
    double warmup_min_lr;       /* scheduler.warmup_lr / warmup_decay_lr. ... */
    double warmup_max_lr;
    int64_t warmup_num_steps;
    const char *warmup_type;    /* "log" or "linear" */
    int64_t total_num_steps;    /* scheduler.warmup_decay_lr.total_num_steps */
} mpx_schedule_params;

typedef struct mpx_schedule {
    mpx_schedule_type type;
    mpx_warmup_type warmup;
    double base_lr, warmup_proportion, min_lr, max_lr, inv_log_warmup;
    int64_t total_steps, warmup_steps, total_num_steps;
} mpx_schedule;

/* type: "constant", "warmup_linear", "warmup_lr" or "warmup_decay_lr". Returns 0, or -1
 * with the reason (naming the scheduler key) in err. */
int mpx_schedule_init(mpx_schedule *s, const char *type, const mpx_schedule_params *p,
                      char *err, size_t err_len);

/* The lr of optimizer update `step` (0-based: the first update is step 0). */
double mpx_schedule_lr(const mpx_schedule *s, int64_t step);

/* 1 when the schedule advances by optimizer updates (DeepSpeed's warmup_lr and
 * warmup_decay_lr: its engine does not step the scheduler on an overflowed step), 0 when
 * by loop steps whether or not they update (constant, warmup_linear). */
int mpx_schedule_follows_updates(const mpx_schedule *s);

/* Over updates 0 .. n_steps - 1. */
typedef struct mpx_schedule_summary {
    int64_t n_steps;
    double first_lr;            /* at step 0 */
    double peak_lr;             /* the largest lr, first reached at peak_step */
    int64_t peak_step;
    int64_t first_negative_step;/* -1 if the lr never goes below 0 */
    double first_negative_lr;
    int64_t n_negative;         /* updates with lr < 0 */
    double last_lr;             /* at step n_steps - 1 */
} mpx_schedule_summary;

/* Returns 0, or -1 when n_steps < 1. */
int mpx_schedule_summarize(const mpx_schedule *s, int64_t n_steps, mpx_schedule_summary *out);

/* An lr-valued key that never acts under the selected schedule, and why. */
typedef struct mpx_idle_lr_key {
    const char *key;            /* points into the caller's `present` array */
    const char *why;
} mpx_idle_lr_key;

/* Given the selected scheduler.type and the keys present in the effective config
 * (full dotted names), lists the lr-valued keys that never act: optimizer.lr under
 * warmup_lr / warmup_decay_lr, and warmup_min_lr / warmup_max_lr of the scheduler
 * sub-groups that are not selected. Writes at most `cap` entries; returns how many
 * there are (possibly > cap). */
size_t mpx_schedule_idle_lr_keys(const char *type, const char *const *present, size_t n_present,
                                 mpx_idle_lr_key *out, size_t cap);

#endif
