#include "schedule_glue.h"

#include <stdio.h>
#include <string.h>

int mpx_lr_schedule_open(mpx_lr_schedule *sc, const mpx_session *s, int64_t total_steps, char *err, size_t errlen)
{
    memset(sc, 0, sizeof *sc);
    sc->total_steps = total_steps;
    if (mpx_config_get_float(s->cfg, "optimizer.lr", &sc->base_lr)) {
        snprintf(err, errlen, "optimizer.lr is missing");
        return -1;
    }
    const char *type = mpx_config_selected(s->cfg, "scheduler");
    if (type && strcmp(type, "constant") != 0) {
        snprintf(err, errlen, "scheduler.type \"%s\" is not available in this build", type);
        return -1;
    }
    return 0;
}

double mpx_lr_at(const mpx_lr_schedule *sc, int64_t step)
{
    (void)step;
    return sc->base_lr;
}

void mpx_lr_schedule_close(mpx_lr_schedule *sc) { (void)sc; }
