/* Reads the `scheduler` group (and optimizer.lr) into an mpx_schedule. */
#include "schedule_glue.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schedule.h"

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

/* warmup_decay_lr.total_num_steps = 0 means scheduler.total_steps (as resolved). */
static void resolve_total_num_steps(mpx_schedule_params *p)
{
    if (p->total_num_steps == 0) p->total_num_steps = p->total_steps;
}

int mpx_lr_schedule_params(const mpx_config *cfg, int64_t train_steps, const char **type,
                           mpx_schedule_params *p)
{
    memset(p, 0, sizeof *p);
    *type = mpx_config_selected(cfg, "scheduler");
    if (!*type) *type = "constant";
    if (mpx_config_get_float(cfg, "optimizer.lr", &p->base_lr)) return -1;
    int64_t total = 0;
    mpx_config_get_int(cfg, "scheduler.total_steps", &total);
    p->total_steps = total > 0 ? total : train_steps;
    mpx_config_get_float(cfg, "scheduler.warmup_linear.warmup_proportion", &p->warmup_proportion);
    p->warmup_type = "log";
    if (strcmp(*type, "warmup_lr") == 0 || strcmp(*type, "warmup_decay_lr") == 0) read_warmup(cfg, *type, p);
    resolve_total_num_steps(p);
    return 0;
}

int mpx_lr_schedule_open(mpx_lr_schedule *sc, const mpx_session *s, int64_t total_steps, char *err, size_t errlen)
{
    memset(sc, 0, sizeof *sc);
    sc->total_steps = total_steps;
    const char *type;
    mpx_schedule_params p;
    if (mpx_lr_schedule_params(s->cfg, total_steps, &type, &p)) {
        snprintf(err, errlen, "optimizer.lr is missing");
        return -1;
    }
    sc->base_lr = p.base_lr;
    mpx_schedule *impl = malloc(sizeof *impl);
    if (!impl) { snprintf(err, errlen, "out of memory"); return -1; }
    if (mpx_schedule_init(impl, type, &p, err, errlen)) { free(impl); return -1; }
    sc->impl = impl;
    return 0;
}

double mpx_lr_at(const mpx_lr_schedule *sc, int64_t step, int64_t updates)
{
    return mpx_schedule_lr(sc->impl, mpx_schedule_follows_updates(sc->impl) ? updates : step);
}

void mpx_lr_schedule_close(mpx_lr_schedule *sc)
{
    free(sc->impl);
    sc->impl = NULL;
}
