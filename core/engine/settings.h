/* The run's settings as the engine uses them: every configuration key the training step
 * and the pieces serving it read, resolved once from the configuration when the session
 * is configured (settings.c, called by mpx_session_configure). Below session.c the engine
 * reads these, never the configuration: the step looks up no key by string, and the
 * files that serve it do not include the config layer (tests/check-layers.sh checks).
 * Plain types only; included through session_types.h. */
#ifndef MPX_SETTINGS_H
#define MPX_SETTINGS_H

#include <jansson.h>
#include <stdint.h>

#include "loss_scaler.h"
#include "schedule.h"

typedef struct mpx_config mpx_config;

/* The `scheduler` group and optimizer.lr, before the run's step count is known
 * (schedule_glue.h turns it into mpx_schedule_params for a number of steps). */
typedef struct mpx_schedule_spec {
    int ok;                       /* optimizer.lr was read */
    const char *type;             /* the selected scheduler ("constant" when none) */
    double base_lr;               /* optimizer.lr */
    int64_t total_steps;          /* scheduler.total_steps (0: the run's steps) */
    mpx_schedule_params warmup;   /* warmup_proportion and the warmup_lr / warmup_decay_lr keys */
} mpx_schedule_spec;

typedef struct mpx_settings {
    /* train.* and eval.every: train_ok is 0 when one could not be read ("train:
     * incomplete configuration" where the training uses them) */
    int train_ok;
    int64_t batch, accum, epochs, max_steps, log_every, eval_every, checkpoint_every;
    double clip;
    int64_t ranks;                /* run.ranks; 1 when absent, unreadable or below 1 */
    int diagnostics;              /* train.diagnostics (0 when absent) */
    int64_t diag_every;           /* train.log_every as the diagnostics read it (0 when absent) */
    int64_t update_chunk;         /* train.update_chunk (0 when absent: the whole shard) */
    int64_t update_threads;       /* train.update_threads (0 when absent) */
    int has_backend_threads;      /* backend.<selected>.threads was read into: */
    int64_t backend_threads;
    double max_memory;            /* run.max_memory (0 when absent: the machine's memory) */
    int ds_lp_grads;              /* zero.deepspeed_bf16_reduce = "lp-grads" (DeepSpeed 0.8.0 to 0.13.2) */
    mpx_scaler_keys scaler;       /* the precision group's loss-scaler keys */
    mpx_schedule_spec schedule;
    /* the effective configuration as a training-state checkpoint keeps it: its JSON form
     * (config in state.json, the resume check) and libconfig text (config.cfg) */
    json_t *config_json;
    char *config_text;
    size_t config_text_len;
} mpx_settings;

/* Reads every setting above from cfg (the effective configuration, defaults filled).
 * Returns 0, or -1 when memory ran out (err says so). */
int mpx_settings_resolve(mpx_settings *st, const mpx_config *cfg, char *err, size_t errlen);
void mpx_settings_free(mpx_settings *st);

/* The loss-scaler keys of a configuration (those mpx_scaler_init takes). */
void mpx_scaler_keys_read(const mpx_config *cfg, mpx_scaler_keys *k);

#endif
