/* The helpers every file of core/config shares (declared in config_util.h): the error
 * list, where a setting came from, deep copies of settings, and finding a group's or a
 * sub-group's schema. */
#include "config_util.h"

#include <stdarg.h>
#include <string.h>

const char mpx_config_default_where[] = "the schema default";

void mpx_errs_add(mpx_errs *e, const char *fmt, ...)
{
    e->n++;
    if (!e->buf || e->cap == 0 || e->len + 1 >= e->cap) return;
    if (e->len > 0) e->buf[e->len++] = '\n';
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(e->buf + e->len, e->cap - e->len, fmt, ap);
    va_end(ap);
    if (w < 0) w = 0;
    e->len += (size_t)w;
    if (e->len >= e->cap) e->len = e->cap - 1;
    e->buf[e->len] = '\0';
}

void mpx_config_where(const config_setting_t *s, const char *path, char *buf, size_t n)
{
    for (; s; s = config_setting_parent(s)) {
        if (config_setting_get_hook(s)) {
            snprintf(buf, n, "%s", (const char *)config_setting_get_hook(s));
            return;
        }
        if (config_setting_source_line(s) > 0) {
            const char *file = config_setting_source_file(s);
            snprintf(buf, n, "%s:%u", file ? file : (path ? path : "config"),
                     config_setting_source_line(s));
            return;
        }
    }
    snprintf(buf, n, "%s", path ? path : "config");
}

static int copy_scalar(config_setting_t *to, const config_setting_t *from)
{
    switch (config_setting_type(from)) {
    case CONFIG_TYPE_INT: return config_setting_set_int(to, config_setting_get_int(from));
    case CONFIG_TYPE_INT64: return config_setting_set_int64(to, config_setting_get_int64(from));
    case CONFIG_TYPE_FLOAT: return config_setting_set_float(to, config_setting_get_float(from));
    case CONFIG_TYPE_BOOL: return config_setting_set_bool(to, config_setting_get_bool(from));
    case CONFIG_TYPE_STRING: return config_setting_set_string(to, config_setting_get_string(from));
    default: return CONFIG_FALSE;
    }
}

config_setting_t *mpx_config_copy_setting(config_setting_t *parent, const char *name,
                                          const config_setting_t *from, const void *hook)
{
    config_setting_t *to = config_setting_add(parent, name, config_setting_type(from));
    if (!to) return NULL;
    config_setting_set_hook(to, (void *)hook);
    to->line = 0; /* a copy has no line in the file: messages cite its hook instead */
    if (!config_setting_is_aggregate(from)) return copy_scalar(to, from) ? to : NULL;
    int len = config_setting_length(from);
    for (int i = 0; i < len; i++) {
        const config_setting_t *m = config_setting_get_elem(from, (unsigned)i);
        const char *mname = config_setting_is_group(from) ? config_setting_name(m) : NULL;
        if (!mpx_config_copy_setting(to, mname, m, hook)) return NULL;
    }
    return to;
}

const mpx_group_schema *mpx_config_find_group(const mpx_group_schema *groups, size_t n,
                                              const char *name)
{
    for (size_t i = 0; name && i < n; i++)
        if (strcmp(groups[i].name, name) == 0) return &groups[i];
    return NULL;
}

int mpx_config_sub_opts(const mpx_group_schema *g, const mpx_schema_source *src,
                        const char *name, const mpx_option **opts, size_t *n)
{
    if (g->plugin_kind < 0) {
        for (size_t i = 0; i < g->n_subs; i++) {
            if (strcmp(g->subs[i].name, name) != 0) continue;
            *opts = g->subs[i].opts;
            *n = g->subs[i].n_opts;
            return 1;
        }
        return 0;
    }
    if (!src) return -1;
    size_t count = src->count(src->ctx, (mpx_kind)g->plugin_kind);
    for (size_t i = 0; i < count; i++) {
        const mpx_plugin_desc *d = src->get(src->ctx, (mpx_kind)g->plugin_kind, i);
        if (!d || strcmp(d->name, name) != 0) continue;
        *opts = d->options;
        *n = d->n_options;
        return 1;
    }
    return 0;
}
