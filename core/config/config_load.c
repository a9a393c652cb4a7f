/* The run configuration's lifecycle: reading the file, applying `-s KEY=VALUE`
 * overrides, revalidating on mpx_config_set, freeing. Validation lives in
 * config_check.c (and config_literals.c, config_values.c), getters in config_get.c,
 * output in config_write.c, the shared helpers in config_util.c. */
#include "config_check.h"
#include "config_literals.h"
#include "config_util.h"
#include "config_values.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

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
    /* one literal on one line: a line break could start an `@include` that libconfig would
     * follow from the working folder (of a folder, its scanner ends the process) */
    if (strpbrk(value, "\n\r")) {
        mpx_errs_add(e, "%s: malformed value (a line break: a value is one libconfig literal on one line)", where);
        return -1;
    }
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
