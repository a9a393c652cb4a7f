/* Checks on values beyond the schema's types and ranges (config_values.c). Included by
 * config_load.c, which runs them after the schema check. Not part of the core's
 * interface. */
#ifndef MPX_CONFIG_VALUES_H
#define MPX_CONFIG_VALUES_H

#include "config_util.h"

/* Values the schema's types and ranges cannot express (run.name a folder name, no empty
 * or more than 64 optimizer.no_decay patterns). Returns the number of errors added. */
int mpx_config_check_values(config_t *cfg, const char *path, mpx_errs *e);

#endif
