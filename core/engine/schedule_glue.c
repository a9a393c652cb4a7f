/* The learning-rate schedule of a run: the `scheduler` group and optimizer.lr as
 * resolved in the settings (settings.c), for the run's number of steps. */
#include "schedule_glue.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schedule.h"

/* warmup_decay_lr.total_num_steps = 0 means scheduler.total_steps (as resolved). */
static void resolve_total_num_steps(mpx_schedule_params *p)
{
    if (p->total_num_steps == 0) p->total_num_steps = p->total_steps;
}

int mpx_lr_schedule_params(const mpx_schedule_spec *sp, int64_t train_steps, const char **type,
                           mpx_schedule_params *p)
{
    *p = sp->warmup;
    *type = sp->type;
    if (!sp->ok) return -1;
    p->base_lr = sp->base_lr;
    p->total_steps = sp->total_steps > 0 ? sp->total_steps : train_steps;
    resolve_total_num_steps(p);
    return 0;
}

int mpx_lr_schedule_open(mpx_lr_schedule *sc, const mpx_session *s, int64_t total_steps, char *err, size_t errlen)
{
    memset(sc, 0, sizeof *sc);
    sc->total_steps = total_steps;
    const char *type;
    mpx_schedule_params p;
    if (mpx_lr_schedule_params(&s->set.schedule, total_steps, &type, &p)) {
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
