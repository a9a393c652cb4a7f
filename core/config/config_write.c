/* The effective configuration as libconfig text (for `mpx check` and the run folder)
 * and as JSON (for run.json). Both list groups and keys in schema order, then anything
 * else (sub-groups) in the order the file gave them. */
#include "config_util.h"

#include <stdlib.h>
#include <string.h>

static size_t depth_of(const config_setting_t *s)
{
    size_t d = 0;
    for (; config_setting_parent(s); s = config_setting_parent(s)) d++;
    return d;
}

/* The schema's key order for the members of group `s`, if it has one. */
static const mpx_option *schema_opts(const mpx_config *c, const config_setting_t *s, size_t *n)
{
    size_t d = depth_of(s);
    const config_setting_t *top = d == 1 ? s : d == 2 ? config_setting_parent(s) : NULL;
    const mpx_group_schema *g = top ? mpx_config_find_group(c->groups, c->n_groups, config_setting_name(top)) : NULL;
    if (!g) return NULL;
    if (d == 1) { *n = g->n_opts; return g->opts; }
    const mpx_option *opts = NULL;
    return mpx_config_sub_opts(g, c->has_src ? &c->src : NULL, config_setting_name(s), &opts, n) > 0 ? opts : NULL;
}

static int place(config_setting_t **out, size_t *k, const config_setting_t *s, const char *name)
{
    config_setting_t *m = config_setting_get_member(s, name);
    if (!m) return 0;
    for (size_t i = 0; i < *k; i++) if (out[i] == m) return 0;
    out[(*k)++] = m;
    return 1;
}

/* Children of `s` in output order; the caller frees the array. */
static config_setting_t **ordered_children(const mpx_config *c, const config_setting_t *s, size_t *n)
{
    size_t len = (size_t)config_setting_length(s), k = 0;
    config_setting_t **out = calloc(len ? len : 1, sizeof *out);
    if (!out) return NULL;
    if (config_setting_is_group(s)) {
        if (config_setting_is_root(s)) {
            for (size_t i = 0; i < c->n_groups; i++) place(out, &k, s, c->groups[i].name);
        } else {
            size_t no = 0;
            const mpx_option *opts = schema_opts(c, s, &no);
            for (size_t i = 0; opts && i < no; i++) place(out, &k, s, opts[i].key);
        }
    }
    for (size_t i = 0; i < len; i++) {
        config_setting_t *m = config_setting_get_elem(s, (unsigned)i);
        size_t j = 0;
        while (j < k && out[j] != m) j++;
        if (j == k) out[k++] = m;
    }
    *n = k;
    return out;
}

/* ---- libconfig text -------------------------------------------------------------------- */

/* The shortest text that reads back as the same double, always with a '.' or an
 * exponent so libconfig reads a float, not an integer. */
static void format_float(double v, char *buf, size_t n)
{
    for (int prec = 6; prec <= 17; prec++) {
        snprintf(buf, n, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    if (!strpbrk(buf, ".eEn")) strncat(buf, ".0", n - strlen(buf) - 1);
}

static void write_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch == '\n') fputs("\\n", f);
        else if (ch == '\t') fputs("\\t", f);
        else if (ch == '\r') fputs("\\r", f);
        else if (ch < 0x20) fprintf(f, "\\x%02x", ch);
        else fputc(ch, f);
    }
    fputc('"', f);
}

static int write_value(const mpx_config *c, FILE *f, const config_setting_t *s, int indent);

static int write_children(const mpx_config *c, FILE *f, const config_setting_t *s, int indent)
{
    size_t n = 0;
    config_setting_t **kids = ordered_children(c, s, &n);
    if (!kids) return -1;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (config_setting_is_group(s)) {
            fprintf(f, "%*s%s = ", indent, "", config_setting_name(kids[i]));
            rc = write_value(c, f, kids[i], indent);
            fputs(";\n", f);
        } else {
            if (i) fputs(", ", f);
            rc = write_value(c, f, kids[i], indent);
        }
    }
    free(kids);
    return rc;
}

static int write_value(const mpx_config *c, FILE *f, const config_setting_t *s, int indent)
{
    char num[64];
    switch (config_setting_type(s)) {
    case CONFIG_TYPE_INT: fprintf(f, "%d", config_setting_get_int(s)); return 0;
    case CONFIG_TYPE_INT64: fprintf(f, "%lldL", config_setting_get_int64(s)); return 0;
    case CONFIG_TYPE_FLOAT:
        format_float(config_setting_get_float(s), num, sizeof num);
        fputs(num, f);
        return 0;
    case CONFIG_TYPE_BOOL: fputs(config_setting_get_bool(s) ? "true" : "false", f); return 0;
    case CONFIG_TYPE_STRING: write_string(f, config_setting_get_string(s)); return 0;
    case CONFIG_TYPE_GROUP: {
        fputs("{\n", f);
        int rc = write_children(c, f, s, indent + 2);
        fprintf(f, "%*s}", indent, "");
        return rc;
    }
    case CONFIG_TYPE_ARRAY:
    case CONFIG_TYPE_LIST: {
        int list = config_setting_is_list(s);
        fputs(list ? "( " : "[ ", f);
        int rc = write_children(c, f, s, indent);
        fputs(list ? " )" : " ]", f);
        return rc;
    }
    default: return -1;
    }
}

/* Whether `s` holds anything the file or an override set (not filled from a default). */
static int is_requested(const config_setting_t *s)
{
    if (config_setting_get_hook(s) == mpx_config_default_where) return 0;
    if (!config_setting_is_group(s)) return 1;
    for (int i = 0; i < config_setting_length(s); i++)
        if (is_requested(config_setting_get_elem(s, (unsigned)i))) return 1;
    return 0;
}

static int write_requested_children(const mpx_config *c, FILE *f, const config_setting_t *s, int indent)
{
    size_t n = 0;
    config_setting_t **kids = ordered_children(c, s, &n);
    if (!kids) return -1;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (!is_requested(kids[i])) continue;
        fprintf(f, "%*s%s = ", indent, "", config_setting_name(kids[i]));
        if (config_setting_is_group(kids[i])) {
            fputs("{\n", f);
            rc = write_requested_children(c, f, kids[i], indent + 2);
            fprintf(f, "%*s}", indent, "");
        } else {
            rc = write_value(c, f, kids[i], indent);
        }
        fputs(";\n", f);
    }
    free(kids);
    return rc;
}

int mpx_config_write_requested(const mpx_config *c, FILE *f)
{
    if (write_requested_children(c, f, config_root_setting(c->cfg), 0) != 0) return -1;
    return ferror(f) ? -1 : 0;
}

int mpx_config_write(const mpx_config *c, FILE *f)
{
    if (write_children(c, f, config_root_setting(c->cfg), 0) != 0) return -1;
    return ferror(f) ? -1 : 0;
}

/* ---- JSON ---------------------------------------------------------------------------- */

static json_t *to_json(const mpx_config *c, const config_setting_t *s);

static json_t *aggregate_json(const mpx_config *c, const config_setting_t *s)
{
    int group = config_setting_is_group(s);
    json_t *out = group ? json_object() : json_array();
    size_t n = 0;
    config_setting_t **kids = out ? ordered_children(c, s, &n) : NULL;
    if (!kids) { json_decref(out); return NULL; }
    for (size_t i = 0; i < n; i++) {
        json_t *v = to_json(c, kids[i]);
        int rc = !v ? -1
                 : group ? json_object_set_new(out, config_setting_name(kids[i]), v)
                         : json_array_append_new(out, v);
        if (rc != 0) { json_decref(out); out = NULL; break; }
    }
    free(kids);
    return out;
}

static json_t *to_json(const mpx_config *c, const config_setting_t *s)
{
    switch (config_setting_type(s)) {
    case CONFIG_TYPE_INT:
    case CONFIG_TYPE_INT64: return json_integer((json_int_t)config_setting_get_int64(s));
    case CONFIG_TYPE_FLOAT: return json_real(config_setting_get_float(s));
    case CONFIG_TYPE_BOOL: return json_boolean(config_setting_get_bool(s));
    case CONFIG_TYPE_STRING: return json_string(config_setting_get_string(s));
    case CONFIG_TYPE_GROUP:
    case CONFIG_TYPE_ARRAY:
    case CONFIG_TYPE_LIST: return aggregate_json(c, s);
    default: return NULL;
    }
}

json_t *mpx_config_to_json(const mpx_config *c)
{
    return to_json(c, config_root_setting(c->cfg));
}
