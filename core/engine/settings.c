/* Resolves the settings (settings.h) from the effective configuration, once per
 * configured session. Each key is read as the code that used it read it before: the same
 * defaults where a key is absent and the same fallbacks. */
#include "settings.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../config/config.h"

void mpx_scaler_keys_read(const mpx_config *cfg, mpx_scaler_keys *k)
{
    *k = (mpx_scaler_keys){ .power = -1, .window = 0, .hysteresis = 0, .min_scale = 0, .static_scale = 1 };
    mpx_config_get_int(cfg, "precision.initial_scale_power", &k->power);
    mpx_config_get_int(cfg, "precision.loss_scale_window", &k->window);
    mpx_config_get_int(cfg, "precision.hysteresis", &k->hysteresis);
    mpx_config_get_float(cfg, "precision.min_loss_scale", &k->min_scale);
    mpx_config_get_float(cfg, "precision.static_loss_scale", &k->static_scale);
}

/* The warm-up keys live in the selected sub-group (warmup_lr or warmup_decay_lr). */
static void read_warmup(const mpx_config *cfg, const char *type, mpx_schedule_params *p)
{
    char key[128];
    snprintf(key, sizeof key, "scheduler.%s.warmup_min_lr", type);
    mpx_config_get_float(cfg, key, &p->warmup_min_lr);
    snprintf(key, sizeof key, "scheduler.%s.warmup_max_lr", type);
    mpx_config_get_float(cfg, key, &p->warmup_max_lr);
    snprintf(key, sizeof key, "scheduler.%s.warmup_num_steps", type);
    mpx_config_get_int(cfg, key, &p->warmup_num_steps);
    snprintf(key, sizeof key, "scheduler.%s.warmup_type", type);
    mpx_config_get_string(cfg, key, &p->warmup_type);
    snprintf(key, sizeof key, "scheduler.%s.total_num_steps", type);
    mpx_config_get_int(cfg, key, &p->total_num_steps);
}

static void read_schedule(const mpx_config *cfg, mpx_schedule_spec *sp)
{
    memset(sp, 0, sizeof *sp);
    sp->type = mpx_config_selected(cfg, "scheduler");
    if (!sp->type) sp->type = "constant";
    sp->ok = mpx_config_get_float(cfg, "optimizer.lr", &sp->base_lr) == 0;
    mpx_config_get_int(cfg, "scheduler.total_steps", &sp->total_steps);
    mpx_schedule_params *w = &sp->warmup;
    mpx_config_get_float(cfg, "scheduler.warmup_linear.warmup_proportion", &w->warmup_proportion);
    w->warmup_type = "log";
    if (strcmp(sp->type, "warmup_lr") == 0 || strcmp(sp->type, "warmup_decay_lr") == 0) read_warmup(cfg, sp->type, w);
}

static int read_train(const mpx_config *cfg, mpx_settings *st)
{
    int rc = mpx_config_get_int(cfg, "train.batch_size", &st->batch);
    rc |= mpx_config_get_int(cfg, "train.gradient_accumulation_steps", &st->accum);
    rc |= mpx_config_get_int(cfg, "train.epochs", &st->epochs);
    rc |= mpx_config_get_int(cfg, "train.max_steps", &st->max_steps);
    rc |= mpx_config_get_int(cfg, "train.log_every", &st->log_every);
    rc |= mpx_config_get_float(cfg, "train.gradient_clipping", &st->clip);
    rc |= mpx_config_get_int(cfg, "eval.every", &st->eval_every);
    st->checkpoint_every = 0;
    if (mpx_config_lookup(cfg, "train.checkpoint_every"))
        rc |= mpx_config_get_int(cfg, "train.checkpoint_every", &st->checkpoint_every);
    return rc;
}

int mpx_settings_resolve(mpx_settings *st, const mpx_config *cfg, char *err, size_t errlen)
{
    memset(st, 0, sizeof *st);
    st->train_ok = read_train(cfg, st) == 0;
    /* An epoch counts global batches: under a launch run.ranks is the launched count
     * (cmd_run.c), so `mpx check` and every rank count the same steps. */
    st->ranks = 1;
    if (mpx_config_lookup(cfg, "run.ranks") && mpx_config_get_int(cfg, "run.ranks", &st->ranks)) st->ranks = 1;
    if (st->ranks < 1) st->ranks = 1;
    mpx_config_get_bool(cfg, "train.diagnostics", &st->diagnostics);
    mpx_config_get_int(cfg, "train.log_every", &st->diag_every);
    if (mpx_config_lookup(cfg, "train.update_chunk")) mpx_config_get_int(cfg, "train.update_chunk", &st->update_chunk);
    if (mpx_config_lookup(cfg, "train.update_threads")) mpx_config_get_int(cfg, "train.update_threads", &st->update_threads);
    const char *backend = mpx_config_selected(cfg, "backend");
    if (backend) { /* "backend/cpu" names the same plugin as "cpu" */
        const char *slash = strrchr(backend, '/');
        char key[160];
        snprintf(key, sizeof key, "backend.%s.threads", slash ? slash + 1 : backend);
        st->has_backend_threads = mpx_config_lookup(cfg, key) && mpx_config_get_int(cfg, key, &st->backend_threads) == 0;
    }
    if (mpx_config_lookup(cfg, "run.max_memory")) mpx_config_get_float(cfg, "run.max_memory", &st->max_memory);
    const char *reduce = NULL;
    st->ds_lp_grads = mpx_config_get_string(cfg, "zero.deepspeed_bf16_reduce", &reduce) == 0 && reduce &&
                      strcmp(reduce, "lp-grads") == 0;
    mpx_scaler_keys_read(cfg, &st->scaler);
    read_schedule(cfg, &st->schedule);

    FILE *f = open_memstream(&st->config_text, &st->config_text_len);
    int rc = !f || mpx_config_write(cfg, f) != 0;
    if (f && fclose(f) != 0) rc = 1;
    st->config_json = mpx_config_to_json(cfg);
    if (rc || !st->config_json) {
        snprintf(err, errlen, "out of memory resolving the configuration");
        mpx_settings_free(st);
        return -1;
    }
    return 0;
}

void mpx_settings_free(mpx_settings *st)
{
    json_decref(st->config_json);
    free(st->config_text);
    memset(st, 0, sizeof *st);
}
