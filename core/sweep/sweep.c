/* The sweep file: its name, base and axes, and the values rendered as libconfig
 * literals (for -s), labels (for names) and JSON (for records). */
#include "sweep.h"

#include "../config/config_literals.h"

#include <libconfig.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *xstrdup(const char *s)
{
    char *d = malloc(strlen(s) + 1);
    if (d) strcpy(d, s);
    return d;
}

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

/* The shortest "%.Ng" that reads back to the same double, kept a float literal. */
static void render_float(double v, char *buf, size_t len)
{
    for (int prec = 6; prec <= 17; prec++) {
        snprintf(buf, len, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    if (!strpbrk(buf, ".eEn")) strncat(buf, ".0", len - strlen(buf) - 1);
}

/* A libconfig string literal: quotes and backslashes escaped. */
static char *render_string(const char *s)
{
    size_t n = strlen(s);
    char *out = malloc(2 * n + 3), *p = out;
    if (!out) return NULL;
    *p++ = '"';
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') *p++ = '\\';
        if (*s == '\n') { *p++ = '\\'; *p++ = 'n'; continue; }
        *p++ = *s;
    }
    *p++ = '"';
    *p = 0;
    return out;
}

/* Fill literal/label/value of item i of an axis from a libconfig scalar. */
static int render_value(mpx_sweep_axis *a, size_t i, const config_setting_t *v, const char *file,
                        char *err, size_t errlen)
{
    char buf[64];
    switch (config_setting_type(v)) {
    case CONFIG_TYPE_STRING:
        a->literal[i] = render_string(config_setting_get_string(v));
        a->label[i] = xstrdup(config_setting_get_string(v));
        a->value[i] = json_string(config_setting_get_string(v));
        break;
    case CONFIG_TYPE_INT:
    case CONFIG_TYPE_INT64:
        snprintf(buf, sizeof buf, "%lld", (long long)config_setting_get_int64(v));
        a->literal[i] = xstrdup(buf);
        a->label[i] = xstrdup(buf);
        a->value[i] = json_integer((json_int_t)config_setting_get_int64(v));
        break;
    case CONFIG_TYPE_FLOAT:
        if (!isfinite(config_setting_get_float(v)))
            return fail(err, errlen, "%s:%d: axes: '%s': value %zu is not finite", file,
                        config_setting_source_line(v), a->key, i + 1);
        render_float(config_setting_get_float(v), buf, sizeof buf);
        a->literal[i] = xstrdup(buf);
        snprintf(buf, sizeof buf, "%.6g", config_setting_get_float(v));
        a->label[i] = xstrdup(buf);
        a->value[i] = json_real(config_setting_get_float(v));
        break;
    case CONFIG_TYPE_BOOL:
        a->literal[i] = xstrdup(config_setting_get_bool(v) ? "true" : "false");
        a->label[i] = xstrdup(a->literal[i]);
        a->value[i] = json_boolean(config_setting_get_bool(v));
        break;
    default:
        return fail(err, errlen, "%s:%d: axes: '%s': value %zu must be a string, number or "
                    "boolean (lists and groups cannot be swept)", file,
                    config_setting_source_line(v), a->key, i + 1);
    }
    if (!a->literal[i] || !a->label[i] || !a->value[i]) return fail(err, errlen, "out of memory");
    return 0;
}

#define MAX_CELLS 100000

static int by_text(const void *x, const void *y)
{
    const char *const *a = x, *const *b = y;
    int c = strcmp(a[0], b[0]);
    return c ? c : (a[1] > b[1]) - (a[1] < b[1]);
}

/* A value listed twice, found by sorting the values' canonical JSON (n log n: an axis of
 * 10^5 values is checked at once, not in 10^10 comparisons). */
static int duplicate_value(const mpx_sweep_axis *a, const char *file, int line, char *err, size_t errlen)
{
    /* pairs (canonical text, the literal it came from) */
    const char **pairs = calloc(2 * a->n, sizeof *pairs);
    int rc = pairs ? 0 : fail(err, errlen, "out of memory");
    for (size_t i = 0; !rc && i < a->n; i++) {
        pairs[2 * i] = json_dumps(a->value[i], JSON_ENCODE_ANY | JSON_COMPACT | JSON_SORT_KEYS);
        pairs[2 * i + 1] = a->literal[i];
        if (!pairs[2 * i]) rc = fail(err, errlen, "out of memory");
    }
    if (!rc) qsort(pairs, a->n, 2 * sizeof *pairs, by_text);
    for (size_t i = 1; !rc && i < a->n; i++)
        if (!strcmp(pairs[2 * i], pairs[2 * i - 2]))
            rc = fail(err, errlen, "%s:%d: axes: '%s' lists the value %s twice", file, line, a->key, pairs[2 * i + 1]);
    for (size_t i = 0; pairs && i < a->n; i++) free((void *)pairs[2 * i]);
    free(pairs);
    return rc;
}

static int load_axis(mpx_sweep_axis *a, const config_setting_t *g, const char *file, char *err, size_t errlen)
{
    int line = config_setting_source_line(g);
    if (!config_setting_is_group(g))
        return fail(err, errlen, "%s:%d: axes: each axis is a group { key = \"...\"; values = (...); }", file, line);
    for (int i = 0; i < config_setting_length(g); i++) {
        const char *m = config_setting_name(config_setting_get_elem(g, (unsigned)i));
        if (strcmp(m, "key") && strcmp(m, "values"))
            return fail(err, errlen, "%s:%d: axes: unknown key '%s' in an axis (allowed: key, values)", file, line, m);
    }
    const char *key;
    if (!config_setting_lookup_string(g, "key", &key))
        return fail(err, errlen, "%s:%d: axes: an axis needs key = \"GROUP.KEY\" (a string)", file, line);
    if (!strchr(key, '.'))
        return fail(err, errlen, "%s:%d: axes: key '%s' is not a dotted configuration key (e.g. run.seed)", file, line, key);
    a->key = xstrdup(key);
    config_setting_t *vals = config_setting_get_member(g, "values");
    if (!vals || !(config_setting_is_list(vals) || config_setting_is_array(vals)) || config_setting_length(vals) == 0)
        return fail(err, errlen, "%s:%d: axes: '%s' needs values = (...) with at least one value", file, line, key);
    a->n = (size_t)config_setting_length(vals);
    if (a->n > MAX_CELLS)   /* before anything is rendered or compared */
        return fail(err, errlen, "%s:%d: axes: '%s' lists %zu values: a sweep has at most %d cells", file, line, key,
                    a->n, MAX_CELLS);
    a->literal = calloc(a->n, sizeof *a->literal);
    a->label = calloc(a->n, sizeof *a->label);
    a->value = calloc(a->n, sizeof *a->value);
    if (!a->key || !a->literal || !a->label || !a->value) return fail(err, errlen, "out of memory");
    for (size_t i = 0; i < a->n; i++)
        if (render_value(a, i, config_setting_get_elem(vals, (unsigned)i), file, err, errlen)) return -1;
    return duplicate_value(a, file, line, err, errlen);
}

/* The file's base name without its extension. */
static char *default_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    char *name = xstrdup(slash ? slash + 1 : path);
    char *dot = name ? strrchr(name, '.') : NULL;
    if (dot && dot != name) *dot = 0;
    return name;
}

static char *resolve_base(const char *sweep_path, const char *base)
{
    if (base[0] == '/') return xstrdup(base);
    const char *slash = strrchr(sweep_path, '/');
    size_t dir = slash ? (size_t)(slash - sweep_path) + 1 : 0;
    char *out = malloc(dir + strlen(base) + 1);
    if (!out) return NULL;
    memcpy(out, sweep_path, dir);
    strcpy(out + dir, base);
    return out;
}

static int check_name(const char *name, const char *file, char *err, size_t errlen)
{
    if (!name[0] || !strcmp(name, ".") || !strcmp(name, ".."))
        return fail(err, errlen, "%s: name '%s' cannot be a folder name", file, name);
    if (strlen(name) > 200)   /* + the cell's "-<hash>" under it; a folder name holds 255 bytes */
        return fail(err, errlen, "%s: name is %zu bytes: at most 200 (it names a folder)", file, strlen(name));
    for (const char *p = name; *p; p++) {
        if (*p == '/')
            return fail(err, errlen, "%s: name '%s' must not contain '/' (it names one folder)", file, name);
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            return fail(err, errlen, "%s: name holds a control character (byte 0x%02x): it names a folder", file,
                        (unsigned)(unsigned char)*p);
    }
    return 0;
}

static int load_top(mpx_sweep *sw, config_t *cf, const char *path, char *err, size_t errlen)
{
    config_setting_t *root = config_root_setting(cf);
    for (int i = 0; i < config_setting_length(root); i++) {
        config_setting_t *m = config_setting_get_elem(root, (unsigned)i);
        const char *k = config_setting_name(m);
        if (strcmp(k, "name") && strcmp(k, "base") && strcmp(k, "axes") && strcmp(k, "slurm") && strcmp(k, "set"))
            return fail(err, errlen, "%s:%d: unknown key '%s' (a sweep file holds name, base, set, axes and slurm)",
                        path, config_setting_source_line(m), k);
    }
    config_setting_t *set = config_lookup(cf, "set");
    if (set) {
        int line = config_setting_source_line(set);
        if (!(config_setting_is_list(set) || config_setting_is_array(set)))
            return fail(err, errlen, "%s:%d: set: a list of \"KEY=VALUE\" strings, e.g. set = (\"train.epochs=0\");", path, line);
        sw->n_set = (size_t)config_setting_length(set);
        if (!(sw->set = calloc(sw->n_set + 1, sizeof *sw->set))) return fail(err, errlen, "out of memory");
        for (size_t i = 0; i < sw->n_set; i++) {
            const char *v = config_setting_get_string_elem(set, (int)i);
            const char *eq = v ? strchr(v, '=') : NULL;
            if (!eq || eq == v || !memchr(v, '.', (size_t)(eq - v)))
                return fail(err, errlen, "%s:%d: set: item %zu is not \"GROUP.KEY=VALUE\" (a string)", path, line, i + 1);
            if (!(sw->set[i] = xstrdup(v))) return fail(err, errlen, "out of memory");
        }
    }
    const char *s;
    if (!config_lookup_string(cf, "base", &s))
        return fail(err, errlen, "%s: needs base = \"CONFIG.cfg\" (a string, relative to the sweep file)", path);
    sw->base = resolve_base(path, s);
    sw->name = config_lookup_string(cf, "name", &s) ? xstrdup(s) : default_name(path);
    if (!sw->base || !sw->name) return fail(err, errlen, "out of memory");
    if (check_name(sw->name, path, err, errlen)) return -1;
    if (mpx_sweep_load_slurm(&sw->slurm, config_lookup(cf, "slurm"), path, err, errlen)) return -1;
    config_setting_t *axes = config_lookup(cf, "axes");
    if (!axes || !(config_setting_is_list(axes) || config_setting_is_array(axes)) || config_setting_length(axes) == 0)
        return fail(err, errlen, "%s: needs axes = ( { key = \"...\"; values = (...); }, ... ) with at least one axis", path);
    sw->n_axes = (size_t)config_setting_length(axes);
    sw->axes = calloc(sw->n_axes, sizeof *sw->axes);
    if (!sw->axes) return fail(err, errlen, "out of memory");
    sw->n_cells = 1;
    for (size_t i = 0; i < sw->n_axes; i++) {
        if (load_axis(&sw->axes[i], config_setting_get_elem(axes, (unsigned)i), path, err, errlen)) return -1;
        for (size_t j = 0; j < i; j++)
            if (!strcmp(sw->axes[i].key, sw->axes[j].key))
                return fail(err, errlen, "%s: axes: '%s' is swept twice", path, sw->axes[i].key);
        if (sw->axes[i].n && sw->n_cells > MAX_CELLS / sw->axes[i].n)
            return fail(err, errlen, "%s: more than %d cells is too many", path, MAX_CELLS);
        sw->n_cells *= sw->axes[i].n;
    }
    return 0;
}

int mpx_sweep_load(mpx_sweep *sw, const char *path, char *err, size_t errlen)
{
    memset(sw, 0, sizeof *sw);
    sw->file = xstrdup(path);
    config_t cf;
    config_init(&cf);
    int rc;
    mpx_errs wide = { err, errlen, 0, 0 };
    err[0] = 0;
    if (mpx_config_scan_file_int_literals(path, NULL, &wide)) {
        rc = -1;
    } else if (!config_read_file(&cf, path)) {
        if (config_error_type(&cf) == CONFIG_ERR_FILE_IO)
            rc = fail(err, errlen, "%s: cannot read the sweep file", path);
        else
            rc = fail(err, errlen, "%s:%d: %s", path, config_error_line(&cf), config_error_text(&cf));
    } else {
        rc = load_top(sw, &cf, path, err, errlen);
    }
    config_destroy(&cf);
    if (rc) mpx_sweep_free(sw);
    return rc;
}

void mpx_sweep_free(mpx_sweep *sw)
{
    for (size_t i = 0; sw->set && i < sw->n_set; i++) free(sw->set[i]);
    free(sw->set);
    for (size_t i = 0; i < sw->n_axes; i++) {
        mpx_sweep_axis *a = &sw->axes[i];
        for (size_t j = 0; j < a->n; j++) {
            if (a->literal) free(a->literal[j]);
            if (a->label) free(a->label[j]);
            if (a->value) json_decref(a->value[j]);
        }
        free(a->literal);
        free(a->label);
        free(a->value);
        free(a->key);
    }
    free(sw->axes);
    free(sw->file);
    free(sw->name);
    free(sw->base);
    memset(sw, 0, sizeof *sw);
}

void mpx_sweep_cell_index(const mpx_sweep *sw, size_t cell, size_t *idx)
{
    for (size_t i = sw->n_axes; i-- > 0;) {
        idx[i] = cell % sw->axes[i].n;
        cell /= sw->axes[i].n;
    }
}
