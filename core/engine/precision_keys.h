/* The `precision` group's core keys (islands, dtypes, scaling, loss-scale preset,
 * rounding, the DeepSpeed details) over a policy's defaults: the effective precision
 * descriptor. Session level: session.c calls it; it reads the configuration. */
#ifndef MPX_PRECISION_KEYS_H
#define MPX_PRECISION_KEYS_H

#include <stddef.h>

#include "mpx/mpx.h"
#include "format_table.h"
#include "../config/config.h"

/* Resolve the `precision` core keys over the policy's defaults. */
int mpx_precision_apply_overrides(const mpx_config *cfg, const mpx_format_table *fmts, mpx_precision_desc *d,
                                  char *err, size_t errlen);

#endif
