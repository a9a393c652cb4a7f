/* The schema check (config_check.c): a configuration tree against the core's group
 * schemas and the installed plugins' option schemas. Included by config_load.c, which
 * runs it on every build of the effective configuration. Not part of the core's
 * interface. */
#ifndef MPX_CONFIG_CHECK_H
#define MPX_CONFIG_CHECK_H

#include "config_util.h"

/* Validates the whole tree against the schemas, converting integers given for float
 * keys and filling defaults. Returns the number of errors added. */
int mpx_config_check(config_t *cfg, const char *path, const mpx_group_schema *groups,
                     size_t n_groups, const mpx_schema_source *src, mpx_errs *e);

#endif
