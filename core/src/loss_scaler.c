#include "loss_scaler.h"

#include <stdio.h>
#include <string.h>

int mpx_scaler_init(mpx_loss_scaler *ls, const char *preset, const mpx_config *cfg, char *err, size_t errlen)
{
    memset(ls, 0, sizeof *ls);
    snprintf(ls->preset, sizeof ls->preset, "%s", preset ? preset : "none");
    ls->scale = 1.0;
    ls->min_scale = 1.0;
    if (strcmp(ls->preset, "none") == 0) return 0;
    if (strcmp(ls->preset, "static") == 0) {
        mpx_config_get_float(cfg, "precision.static_loss_scale", &ls->scale);
        return 0;
    }
    snprintf(err, errlen, "precision.loss_scale: preset \"%s\" is not implemented yet", ls->preset);
    return -1;
}

int mpx_scaler_update(mpx_loss_scaler *ls, int overflow, int64_t step, int *skip, char *err, size_t errlen)
{
    *skip = 0;
    if (!overflow) { ls->clean_steps++; return 0; }
    ls->overflows++;
    *skip = 1;
    if (!ls->dynamic) {
        snprintf(err, errlen, "step %lld: non-finite gradients with loss scale \"%s\" (%g): "
                 "the run cannot go on", (long long)step, ls->preset, ls->scale);
        return -1;
    }
    return 0;
}
