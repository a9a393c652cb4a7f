/* Shared by the two halves of the schema check, and private to them: the schema walk
 * (config_check.c: groups, members, defaults, unknown keys) and the per-option value
 * checks (config_check_value.c: types, ranges, choices, UTF-8, lists). Included by
 * those two files only. Not part of the core's interface. */
#ifndef MPX_CONFIG_CHECK_VALUE_H
#define MPX_CONFIG_CHECK_VALUE_H

#include "config_util.h"

#define WHERE_LEN 512
#define TEXT_LEN 512

typedef struct check_ctx {
    const char *path;
    const mpx_schema_source *src; /* NULL: plugins unknown */
    mpx_errs *e;
} check_ctx;

/* Where `s` came from, for messages (mpx_config_where into a WHERE_LEN buffer). */
static inline void where(const check_ctx *x, const config_setting_t *s, char *buf)
{
    mpx_config_where(s, x->path, buf, WHERE_LEN);
}

/* "train.max_steps": the setting's full dotted path ("betas[1]" inside lists). */
void mpx_config_full_path(const config_setting_t *s, char *buf, size_t n);

/* What was given, for messages: `an integer (3)`, `a string ("x")`. */
void mpx_config_describe(const config_setting_t *s, char *buf, size_t n);

/* Checks setting `s` against option `o` (type, range, choices, UTF-8, list length and
 * items), converting an integer given for a float to a float; each problem is an error
 * added to x->e. */
void mpx_config_check_value(const check_ctx *x, const mpx_option *o, config_setting_t *s);

#endif
