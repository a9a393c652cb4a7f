/* The bottom of core/config: the configuration's struct, the error list and the helpers
 * every other file of the folder shares (config_util.c defines them). Included by
 * config_load.c (lifecycle, overrides), config_get.c (getters), config_write.c (output)
 * and the checkers' headers (config_check.h, config_check_value.h, config_literals.h,
 * config_values.h); outside the folder by the analysis (matrix.c: mpx_config_find_group).
 * It includes only config.h. Not part of the core's interface. */
#ifndef MPX_CONFIG_UTIL_H
#define MPX_CONFIG_UTIL_H

#include "config.h"

struct mpx_config {
    config_t *cfg;                 /* the effective configuration */
    config_t **retired;            /* earlier ones, kept so returned strings stay valid */
    size_t n_retired;
    char *path;
    char *include_dir;
    char **overrides;              /* "KEY=VALUE" as given */
    char **override_where;         /* "-s KEY=VALUE": hooks of the settings they made */
    size_t n_overrides;
    const mpx_group_schema *groups;
    size_t n_groups;
    mpx_schema_source src;
    int has_src;
};

/* Errors accumulate one per line into the caller's buffer; n counts them. */
typedef struct mpx_errs {
    char *buf;
    size_t cap, len;
    int n;
} mpx_errs;

void mpx_errs_add(mpx_errs *e, const char *fmt, ...) MPX_PRINTF(2, 3);

/* Hook text of settings filled from schema defaults (see mpx_config_where). */
extern const char mpx_config_default_where[];

/* Where a setting came from, for messages: its hook text ("-s KEY=VALUE", the schema
 * default), else "FILE:LINE", else where its parent came from, else the file. */
void mpx_config_where(const config_setting_t *s, const char *path, char *buf, size_t n);

/* Deep-copies `from` into `parent` under `name` (NULL inside lists), setting `hook` on
 * every new setting. Returns the copy, NULL if libconfig refused (invalid name). */
config_setting_t *mpx_config_copy_setting(config_setting_t *parent, const char *name,
                                          const config_setting_t *from, const void *hook);

/* The schema of the top-level group `name`; NULL if there is none. */
const mpx_group_schema *mpx_config_find_group(const mpx_group_schema *groups, size_t n,
                                              const char *name);
/* The options of sub-group `name` of group `g` (a plugin's or a core sub-schema's).
 * Returns 1 and sets opts/n if known, 0 if no such sub-schema or plugin exists, -1 if
 * it cannot be known (plugin group without a source). */
int mpx_config_sub_opts(const mpx_group_schema *g, const mpx_schema_source *src,
                        const char *name, const mpx_option **opts, size_t *n);

#endif
