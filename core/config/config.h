/* The run configuration: a libconfig file plus `-s KEY=VALUE` overrides, validated
 * strictly against the core's group schemas and the installed plugins' option schemas,
 * with every default filled in (the "effective" configuration).
 *
 * Layout (DESIGN "Config"): the top level holds exactly the schema's groups. A group
 * holds the core's keys (`opts`), its selector key and sub-groups: one per plugin of
 * the group's kind (plugin groups) or one per core sub-schema (`subs`). All present
 * sub-groups are validated; only the selected one is used; the selected one is created
 * with its defaults when absent.
 *
 * Errors name the place ("FILE:LINE" or "-s KEY=VALUE"), the full dotted key, what was
 * given and what is allowed; several problems are reported together, one per line. */
#ifndef MPX_CONFIG_H
#define MPX_CONFIG_H

#include <stdint.h>
#include <stdio.h>

#include <jansson.h>
#include <libconfig.h>

#include "mpx/abi.h"

typedef struct mpx_subschema {
    const char *name;
    const mpx_option *opts;
    size_t n_opts;
} mpx_subschema;

typedef struct mpx_group_schema {
    const char *name;            /* "train" */
    const char *help;
    /* The core's own keys of this group. The selector, when there is one, is one of
     * them (a STRING option): its default names the default plugin / sub-schema. */
    const mpx_option *opts;
    size_t n_opts;
    const char *selector;        /* "plugin" (plugin kind groups), "type"/"task" (core sub-schemas), or NULL */
    int plugin_kind;             /* mpx_kind when sub-groups are plugins' schemas, else -1 */
    const mpx_subschema *subs;   /* core-defined sub-schemas when plugin_kind < 0 */
    size_t n_subs;
} mpx_group_schema;

/* What plugins exist (from the loader): for sub-group validation and 'did you mean'.
 * A NULL source means "plugins unknown": plugin selectors are then only type-checked
 * and plugin sub-groups are kept unvalidated. */
typedef struct mpx_schema_source {
    void *ctx;
    size_t (*count)(void *ctx, mpx_kind kind);
    const mpx_plugin_desc *(*get)(void *ctx, mpx_kind kind, size_t i);
    /* Optional (NULL: none): why a plugin file that declared this kind and name was refused
     * (its path and the loader's reason), or NULL; named where a selector finds no plugin. */
    const char *(*refused)(void *ctx, mpx_kind kind, const char *name, char *buf, size_t len);
} mpx_schema_source;

typedef struct mpx_config mpx_config;

/* Reads `path` (NULL: an empty configuration), applies the overrides in order
 * ("KEY=VALUE", VALUE a libconfig literal), validates and fills defaults. The schema
 * arrays and `src` must outlive the returned configuration. On failure *out is NULL. */
int mpx_config_load(mpx_config **out, const char *path,
                    const char *const *overrides, size_t n_overrides,
                    const mpx_group_schema *groups, size_t n_groups,
                    const mpx_schema_source *src, char *err, size_t errlen);
void mpx_config_free(mpx_config *c);

/* NULL if absent. The setting is valid until the next mpx_config_set or the free. */
config_setting_t *mpx_config_lookup(const mpx_config *c, const char *dotted_key);

/* Typed getters: non-zero when the key is absent or of another type. Strings stay
 * valid until mpx_config_free (mpx_config_set keeps earlier values alive). */
int mpx_config_get_int(const mpx_config *c, const char *key, int64_t *out);
int mpx_config_get_float(const mpx_config *c, const char *key, double *out); /* accepts int */
int mpx_config_get_bool(const mpx_config *c, const char *key, int *out);
int mpx_config_get_string(const mpx_config *c, const char *key, const char **out);
/* Lists: *n gets the length; non-zero when it exceeds cap (nothing beyond cap written). */
int mpx_config_get_float_list(const mpx_config *c, const char *key, double *out, size_t cap, size_t *n);
int mpx_config_get_string_list(const mpx_config *c, const char *key, const char **out, size_t cap, size_t *n);

/* The value of the group's selector, e.g. "sgd" for "optimizer"; NULL if none. */
const char *mpx_config_selected(const mpx_config *c, const char *group);

/* The effective configuration in libconfig syntax (groups in schema order, keys in
 * schema order, every default present); reads back to the same values. */
int mpx_config_write(const mpx_config *c, FILE *f);
/* The same as JSON (new reference; NULL on allocation failure): for run.json. */
json_t *mpx_config_to_json(const mpx_config *c);
/* Only what the file and the overrides set, defaults left out (values as effective, in
 * schema order): text that does not change when a new key with a default is added. */
int mpx_config_write_requested(const mpx_config *c, FILE *f);

/* Drops KEY (a dotted path) from the configuration; 0 also when it is absent. For
 * hashing only: the configuration is no longer valid against its schema after it. */
int mpx_config_remove(mpx_config *c, const char *key);

/* One more override, validated with all the others; on failure the configuration is
 * left as it was. */
int mpx_config_set(mpx_config *c, const char *key_eq_value, char *err, size_t errlen);

const char *mpx_config_path(const mpx_config *c); /* NULL when loaded without a file */

#endif
