/* The run configuration's lifecycle: reading the file, applying `-s KEY=VALUE`
 * overrides, revalidating on mpx_config_set, and typed getters. Validation lives in
 * config_check.c, output in config_write.c. */
#include "config_internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
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

/* ---- Overrides ------------------------------------------------------------------- */

static char *trim(char *s)
{
    while (isspace((unsigned char)*s)) s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
    return s;
}

/* Parses VALUE as the one setting "x" of `tmp`. */
static int parse_literal(config_t *tmp, const char *value, const char *where, mpx_errs *e)
{
    size_t n = strlen(value) + 8;
    char *text = malloc(n);
    if (!text) { mpx_errs_add(e, "%s: out of memory", where); return -1; }
    snprintf(text, n, "x = %s;", value);
    int ok = config_read_string(tmp, text);
    free(text);
    if (!ok) {
        mpx_errs_add(e, "%s: malformed value '%s' (%s; VALUE is a libconfig literal: "
                        "strings in double quotes, e.g. -s 'precision.plugin=\"amp\"')",
                     where, value, config_error_text(tmp));
        return -1;
    }
    if (config_setting_length(config_root_setting(tmp)) != 1) {
        mpx_errs_add(e, "%s: malformed value '%s' (one value expected)", where, value);
        return -1;
    }
    return 0;
}

/* Walks to the parent group of the last key component, creating missing groups. */
static config_setting_t *override_parent(config_setting_t *root, char *key, char **last,
                                         const char *where, mpx_errs *e)
{
    config_setting_t *parent = root;
    char *part = key;
    for (char *dot = strchr(part, '.'); dot; part = dot + 1, dot = strchr(part, '.')) {
        *dot = '\0';
        config_setting_t *m = *part ? config_setting_get_member(parent, part) : NULL;
        if (!m && *part) {
            m = config_setting_add(parent, part, CONFIG_TYPE_GROUP);
            if (m) config_setting_set_hook(m, (void *)where);
        }
        if (!m) {
            mpx_errs_add(e, "%s: '%s' is not a valid key name", where, part);
            return NULL;
        }
        if (!config_setting_is_group(m)) {
            mpx_errs_add(e, "%s: '%s' is a value, not a group: it cannot hold '%s'", where,
                         part, dot + 1);
            return NULL;
        }
        parent = m;
    }
    *last = part;
    return parent;
}

static int apply_override(config_t *cfg, const char *ov, const char *where, mpx_errs *e)
{
    const char *eq = strchr(ov, '=');
    if (!eq) {
        mpx_errs_add(e, "%s: expected KEY=VALUE", where);
        return -1;
    }
    char *copy = strdup(ov);
    if (!copy) { mpx_errs_add(e, "%s: out of memory", where); return -1; }
    copy[eq - ov] = '\0';
    char *key = trim(copy), *value = trim(copy + (eq - ov) + 1);
    size_t vn = strlen(value);
    if (vn > 0 && value[vn - 1] == ';') value[vn - 1] = '\0'; /* "x = 1;" habit */
    int rc = -1, errs_before = e->n;
    config_t tmp;
    config_init(&tmp);
    if (!*key) mpx_errs_add(e, "%s: empty KEY", where);
    else if (!*value) mpx_errs_add(e, "%s: empty VALUE (strings need quotes: KEY=\"\")", where);
    else if (mpx_config_scan_int_literals(value, NULL, where, key, e), e->n > errs_before) {
        /* refused: a wrapped integer */
    } else if (parse_literal(&tmp, value, where, e) == 0) {
        char *last = NULL;
        config_setting_t *parent = override_parent(config_root_setting(cfg), key, &last, where, e);
        if (parent) {
            if (config_setting_get_member(parent, last)) config_setting_remove(parent, last);
            const config_setting_t *x = config_setting_get_elem(config_root_setting(&tmp), 0);
            if (mpx_config_copy_setting(parent, last, x, where)) rc = 0;
            else mpx_errs_add(e, "%s: '%s' is not a valid key name", where, last);
        }
    }
    config_destroy(&tmp);
    free(copy);
    return rc;
}

/* ---- Building ---------------------------------------------------------------------- */

static int read_file(config_t *cfg, const mpx_config *c, mpx_errs *e)
{
    if (c->include_dir) config_set_include_dir(cfg, c->include_dir);
    if (mpx_config_scan_file_int_literals(c->path, c->include_dir, e)) return -1;
    if (config_read_file(cfg, c->path)) return 0;
    if (config_error_type(cfg) == CONFIG_ERR_FILE_IO)
        mpx_errs_add(e, "%s: cannot read the config file: %s", c->path, strerror(errno));
    else
        mpx_errs_add(e, "%s:%d: %s", config_error_file(cfg) ? config_error_file(cfg) : c->path,
                     config_error_line(cfg), config_error_text(cfg));
    return -1;
}

/* A fresh effective configuration from the file and every override so far. */
static config_t *build(const mpx_config *c, mpx_errs *e)
{
    config_t *cfg = malloc(sizeof *cfg);
    if (!cfg) { mpx_errs_add(e, "out of memory"); return NULL; }
    config_init(cfg);
    if (c->path && read_file(cfg, c, e) != 0) goto fail;
    for (size_t i = 0; i < c->n_overrides; i++)
        apply_override(cfg, c->overrides[i], c->override_where[i], e);
    if (e->n == 0)
        mpx_config_check(cfg, c->path, c->groups, c->n_groups, c->has_src ? &c->src : NULL, e);
    if (e->n == 0) mpx_config_check_values(cfg, c->path, e);
    if (e->n == 0) return cfg;
fail:
    config_destroy(cfg);
    free(cfg);
    return NULL;
}

static int push_override(mpx_config *c, const char *ov)
{
    char **o = realloc(c->overrides, (c->n_overrides + 1) * sizeof *o);
    if (!o) return -1;
    c->overrides = o;
    char **w = realloc(c->override_where, (c->n_overrides + 1) * sizeof *w);
    if (!w) return -1;
    c->override_where = w;
    size_t n = strlen(ov) + 4;
    char *s = strdup(ov), *where = malloc(n);
    if (!s || !where) { free(s); free(where); return -1; }
    snprintf(where, n, "-s %s", ov);
    c->overrides[c->n_overrides] = s;
    c->override_where[c->n_overrides] = where;
    c->n_overrides++;
    return 0;
}

static void pop_override(mpx_config *c)
{
    c->n_overrides--;
    free(c->overrides[c->n_overrides]);
    free(c->override_where[c->n_overrides]);
}

static int set_path(mpx_config *c, const char *path)
{
    if (!path) return 0;
    c->path = strdup(path);
    if (!c->path) return -1;
    /* @include resolves against the config file's folder. */
    const char *slash = strrchr(path, '/');
    c->include_dir = slash ? strndup(path, (size_t)(slash - path) + (slash == path)) : strdup(".");
    return c->include_dir ? 0 : -1;
}

int mpx_config_load(mpx_config **out, const char *path,
                    const char *const *overrides, size_t n_overrides,
                    const mpx_group_schema *groups, size_t n_groups,
                    const mpx_schema_source *src, char *err, size_t errlen)
{
    mpx_errs e = { err, errlen, 0, 0 };
    if (err && errlen) err[0] = '\0';
    *out = NULL;
    mpx_config *c = calloc(1, sizeof *c);
    if (!c || set_path(c, path) != 0) {
        mpx_config_free(c);
        mpx_errs_add(&e, "out of memory");
        return -1;
    }
    c->groups = groups;
    c->n_groups = n_groups;
    if (src) { c->src = *src; c->has_src = 1; }
    for (size_t i = 0; i < n_overrides; i++) {
        if (push_override(c, overrides[i]) != 0) {
            mpx_config_free(c);
            mpx_errs_add(&e, "out of memory");
            return -1;
        }
    }
    c->cfg = build(c, &e);
    if (!c->cfg) {
        mpx_config_free(c);
        return -1;
    }
    *out = c;
    return 0;
}

int mpx_config_set(mpx_config *c, const char *key_eq_value, char *err, size_t errlen)
{
    mpx_errs e = { err, errlen, 0, 0 };
    if (err && errlen) err[0] = '\0';
    config_t **r = realloc(c->retired, (c->n_retired + 1) * sizeof *r);
    if (!r || push_override(c, key_eq_value) != 0) {
        if (r) c->retired = r;
        mpx_errs_add(&e, "out of memory");
        return -1;
    }
    c->retired = r;
    config_t *cfg = build(c, &e);
    if (!cfg) {
        pop_override(c);
        return -1;
    }
    c->retired[c->n_retired++] = c->cfg;
    c->cfg = cfg;
    return 0;
}

static void destroy_cfg(config_t *cfg)
{
    if (!cfg) return;
    config_destroy(cfg);
    free(cfg);
}

void mpx_config_free(mpx_config *c)
{
    if (!c) return;
    destroy_cfg(c->cfg);
    for (size_t i = 0; i < c->n_retired; i++) destroy_cfg(c->retired[i]);
    free(c->retired);
    for (size_t i = 0; i < c->n_overrides; i++) {
        free(c->overrides[i]);
        free(c->override_where[i]);
    }
    free(c->overrides);
    free(c->override_where);
    free(c->path);
    free(c->include_dir);
    free(c);
}

const char *mpx_config_path(const mpx_config *c)
{
    return c->path;
}

/* ---- Getters ----------------------------------------------------------------------- */

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
