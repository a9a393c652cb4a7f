/* The configuration's typed getters (declared in config.h): lookups by dotted key,
 * scalars and lists, a group's selected plugin or sub-schema, and removing a key. */
#include "config_util.h"

#include <stddef.h>
#include <stdint.h>

config_setting_t *mpx_config_lookup(const mpx_config *c, const char *dotted_key)
{
    if (!c || !dotted_key || !*dotted_key) return NULL;
    return config_lookup(c->cfg, dotted_key);
}

static int is_int(const config_setting_t *s)
{
    return config_setting_type(s) == CONFIG_TYPE_INT || config_setting_type(s) == CONFIG_TYPE_INT64;
}

static int number_of(const config_setting_t *s, double *out)
{
    if (config_setting_type(s) == CONFIG_TYPE_FLOAT) *out = config_setting_get_float(s);
    else if (is_int(s)) *out = (double)config_setting_get_int64(s);
    else return -1;
    return 0;
}

int mpx_config_get_int(const mpx_config *c, const char *key, int64_t *out)
{
    const config_setting_t *s = mpx_config_lookup(c, key);
    if (!s || !is_int(s)) return -1;
    *out = config_setting_get_int64(s);
    return 0;
}

int mpx_config_get_float(const mpx_config *c, const char *key, double *out)
{
    const config_setting_t *s = mpx_config_lookup(c, key);
    return s ? number_of(s, out) : -1;
}

int mpx_config_get_bool(const mpx_config *c, const char *key, int *out)
{
    const config_setting_t *s = mpx_config_lookup(c, key);
    if (!s || config_setting_type(s) != CONFIG_TYPE_BOOL) return -1;
    *out = config_setting_get_bool(s);
    return 0;
}

int mpx_config_get_string(const mpx_config *c, const char *key, const char **out)
{
    const config_setting_t *s = mpx_config_lookup(c, key);
    if (!s || config_setting_type(s) != CONFIG_TYPE_STRING) return -1;
    *out = config_setting_get_string(s);
    return 0;
}

static const config_setting_t *list_at(const mpx_config *c, const char *key, size_t *n)
{
    const config_setting_t *s = mpx_config_lookup(c, key);
    if (!s || !(config_setting_is_list(s) || config_setting_is_array(s))) return NULL;
    *n = (size_t)config_setting_length(s);
    return s;
}

int mpx_config_get_float_list(const mpx_config *c, const char *key, double *out, size_t cap, size_t *n)
{
    size_t len = 0;
    const config_setting_t *s = list_at(c, key, &len);
    if (!s) return -1;
    *n = len;
    for (size_t i = 0; i < len; i++) {
        double v;
        if (number_of(config_setting_get_elem(s, (unsigned)i), &v) != 0) return -1;
        if (i < cap) out[i] = v;
    }
    return len > cap ? -1 : 0;
}

int mpx_config_get_string_list(const mpx_config *c, const char *key, const char **out, size_t cap, size_t *n)
{
    size_t len = 0;
    const config_setting_t *s = list_at(c, key, &len);
    if (!s) return -1;
    *n = len;
    for (size_t i = 0; i < len; i++) {
        const config_setting_t *m = config_setting_get_elem(s, (unsigned)i);
        if (config_setting_type(m) != CONFIG_TYPE_STRING) return -1;
        if (i < cap) out[i] = config_setting_get_string(m);
    }
    return len > cap ? -1 : 0;
}

const char *mpx_config_selected(const mpx_config *c, const char *group)
{
    const mpx_group_schema *g = mpx_config_find_group(c->groups, c->n_groups, group);
    if (!g || !g->selector) return NULL;
    const config_setting_t *gs = config_setting_get_member(config_root_setting(c->cfg), group);
    const config_setting_t *s = gs ? config_setting_get_member(gs, g->selector) : NULL;
    return s && config_setting_type(s) == CONFIG_TYPE_STRING ? config_setting_get_string(s) : NULL;
}

int mpx_config_remove(mpx_config *c, const char *key)
{
    config_setting_t *m = config_lookup(c->cfg, key);
    if (!m) return 0;
    config_setting_t *parent = config_setting_parent(m);
    return parent && config_setting_remove(parent, config_setting_name(m)) == CONFIG_TRUE ? 0 : -1;
}
