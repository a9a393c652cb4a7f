/* The per-option value checks of the schema check (declared in config_check_value.h):
 * types, ranges, choices (with did-you-mean), UTF-8, list lengths and items, and the
 * texts their messages use (where, the full dotted key, what was given, what is
 * allowed). Integers given for float keys become floats here. */
#include "config_check_value.h"
#include "suggest.h"

#include <math.h>
#include <string.h>
#include <utf8proc.h>

/* "train.max_steps": the setting's full dotted path ("betas[1]" inside lists). */
void mpx_config_full_path(const config_setting_t *s, char *buf, size_t n)
{
    const config_setting_t *chain[32];
    size_t k = 0, len = 0;
    for (; s && !config_setting_is_root(s) && k < 32; s = config_setting_parent(s)) chain[k++] = s;
    buf[0] = '\0';
    while (k-- > 0) {
        char part[128];
        const char *name = config_setting_name(chain[k]);
        if (name) snprintf(part, sizeof part, "%s%s", len ? "." : "", name);
        else snprintf(part, sizeof part, "[%d]", config_setting_index(chain[k]));
        size_t pl = strlen(part);
        if (len + pl >= n) break; /* cut, but still readable */
        memcpy(buf + len, part, pl + 1);
        len += pl;
    }
}

/* What was given, for messages: `an integer (3)`, `a string ("x")`. */
void mpx_config_describe(const config_setting_t *s, char *buf, size_t n)
{
    switch (config_setting_type(s)) {
    case CONFIG_TYPE_INT: snprintf(buf, n, "an integer (%d)", config_setting_get_int(s)); break;
    case CONFIG_TYPE_INT64: snprintf(buf, n, "an integer (%lld)", config_setting_get_int64(s)); break;
    case CONFIG_TYPE_FLOAT: snprintf(buf, n, "a float (%g)", config_setting_get_float(s)); break;
    case CONFIG_TYPE_BOOL:
        snprintf(buf, n, "a boolean (%s)", config_setting_get_bool(s) ? "true" : "false");
        break;
    case CONFIG_TYPE_STRING: snprintf(buf, n, "a string (\"%.80s\")", config_setting_get_string(s)); break;
    case CONFIG_TYPE_GROUP: snprintf(buf, n, "a group"); break;
    case CONFIG_TYPE_LIST: snprintf(buf, n, "a list of %d items", config_setting_length(s)); break;
    case CONFIG_TYPE_ARRAY: snprintf(buf, n, "an array of %d items", config_setting_length(s)); break;
    default: snprintf(buf, n, "nothing"); break;
    }
}

static int has_range(const mpx_option *o)
{
    return o->min <= o->max;
}

static void range_text(const mpx_option *o, char *buf, size_t n)
{
    if (!has_range(o)) buf[0] = '\0';
    else if (isinf(o->max) && isinf(o->min)) buf[0] = '\0';
    else if (isinf(o->max)) snprintf(buf, n, " >= %g", o->min);
    else if (isinf(o->min)) snprintf(buf, n, " <= %g", o->max);
    else snprintf(buf, n, " in [%g, %g]", o->min, o->max);
}

/* What is allowed, for messages: `an integer >= 1`, `one of "a", "b"`. */
static void allowed_text(const mpx_option *o, char *buf, size_t n)
{
    char range[128];
    range_text(o, range, sizeof range);
    switch (o->type) {
    case MPX_OPT_BOOL: snprintf(buf, n, "a boolean (true or false)"); break;
    case MPX_OPT_INT: snprintf(buf, n, "an integer%s", range); break;
    case MPX_OPT_FLOAT: snprintf(buf, n, "a number%s", range); break;
    case MPX_OPT_STRING: snprintf(buf, n, "a string in double quotes"); break;
    case MPX_OPT_CHOICE: {
        int w = snprintf(buf, n, "one of");
        const char *c = o->choices ? o->choices : "";
        while (*c && w > 0 && (size_t)w < n) {
            size_t len = strcspn(c, "|");
            w += snprintf(buf + w, n - (size_t)w, "%s \"%.*s\"", w > 6 ? "," : "", (int)len, c);
            c += len + (c[len] == '|');
        }
        break;
    }
    case MPX_OPT_FLOAT_LIST:
    case MPX_OPT_STRING_LIST: {
        char len[64] = "";
        if (o->list_len > 0) snprintf(len, sizeof len, " exactly %d", o->list_len);
        snprintf(buf, n, "a list of%s %s%s, as [a, b] or (a, b)", len,
                 o->type == MPX_OPT_FLOAT_LIST ? "numbers" : "strings", range);
        break;
    }
    default: snprintf(buf, n, "nothing (unknown option type %d)", (int)o->type); break;
    }
}

static void type_error(const check_ctx *x, const mpx_option *o, const config_setting_t *s)
{
    char w[WHERE_LEN], key[TEXT_LEN], given[TEXT_LEN], allowed[TEXT_LEN];
    where(x, s, w);
    mpx_config_full_path(s, key, sizeof key);
    mpx_config_describe(s, given, sizeof given);
    allowed_text(o, allowed, sizeof allowed);
    mpx_errs_add(x->e, "%s: '%s' must be %s, got %s", w, key, allowed, given);
}

static int is_int(const config_setting_t *s)
{
    return config_setting_type(s) == CONFIG_TYPE_INT || config_setting_type(s) == CONFIG_TYPE_INT64;
}

/* An integer given for a float key becomes a float in the effective configuration, so
 * every later lookup sees one type. libconfig refuses set_float on an int setting
 * without auto-conversion, so the type is reset first (the struct is public in 1.5). */
static void to_float(config_setting_t *s)
{
    double v = (double)config_setting_get_int64(s);
    s->type = CONFIG_TYPE_NONE;
    config_setting_set_float(s, v);
}

static void check_range(const check_ctx *x, const mpx_option *o, const config_setting_t *s, double v)
{
    if (!has_range(o) || (v >= o->min && v <= o->max)) return;
    char w[WHERE_LEN], key[TEXT_LEN], range[128];
    where(x, s, w);
    mpx_config_full_path(s, key, sizeof key);
    range_text(o, range, sizeof range);
    mpx_errs_add(x->e, "%s: '%s' = %g is out of range: it must be%s", w, key, v, range);
}

/* A number where `o` wants one (INT: integers only), converting ints for FLOAT. */
static void check_number(const check_ctx *x, const mpx_option *o, config_setting_t *s, int want_int)
{
    if (want_int && !is_int(s)) { type_error(x, o, s); return; }
    if (!want_int && is_int(s)) to_float(s);
    if (!want_int && config_setting_type(s) != CONFIG_TYPE_FLOAT) { type_error(x, o, s); return; }
    double v = want_int ? (double)config_setting_get_int64(s) : config_setting_get_float(s);
    if (!isfinite(v)) { /* 1e400 reads as inf and would pass an unbounded range */
        char w[WHERE_LEN], key[TEXT_LEN];
        where(x, s, w);
        mpx_config_full_path(s, key, sizeof key);
        mpx_errs_add(x->e, "%s: '%s' = %g is not a finite number", w, key, v);
        return;
    }
    check_range(x, o, s, v);
}

static int choice_ok(const char *choices, const char *v)
{
    size_t vn = strlen(v);
    for (const char *c = choices ? choices : ""; *c;) {
        size_t len = strcspn(c, "|");
        if (len == vn && strncmp(c, v, len) == 0) return 1;
        c += len + (c[len] == '|');
    }
    return 0;
}

static void check_choice(const check_ctx *x, const mpx_option *o, const config_setting_t *s)
{
    if (config_setting_type(s) != CONFIG_TYPE_STRING) { type_error(x, o, s); return; }
    const char *v = config_setting_get_string(s);
    if (choice_ok(o->choices, v)) return;
    char w[WHERE_LEN], key[TEXT_LEN], allowed[TEXT_LEN], names[TEXT_LEN];
    where(x, s, w);
    mpx_config_full_path(s, key, sizeof key);
    allowed_text(o, allowed, sizeof allowed);
    /* The suggester keeps pointers: split the choices into a NUL-separated copy. */
    snprintf(names, sizeof names, "%s", o->choices ? o->choices : "");
    mpx_suggester sg;
    mpx_suggest_init(&sg, v);
    for (char *c = names; *c;) {
        size_t len = strcspn(c, "|");
        int more = c[len] == '|';
        c[len] = '\0';
        mpx_suggest_offer(&sg, c);
        c += len + more;
    }
    const char *best = mpx_suggest_best(&sg);
    mpx_errs_add(x->e, "%s: '%s' = \"%s\" is not allowed: it must be %s%s%s%s", w, key, v,
                 allowed, best ? " — did you mean '" : "", best ? best : "", best ? "'?" : "");
}

/* A string must be UTF-8: it goes into run.json, which holds nothing else. */
static void check_utf8(const check_ctx *x, const config_setting_t *s)
{
    const utf8proc_uint8_t *p = (const utf8proc_uint8_t *)config_setting_get_string(s);
    utf8proc_int32_t c;
    utf8proc_ssize_t n = 1;
    while (p && *p && (n = utf8proc_iterate(p, -1, &c)) > 0) p += n;
    if (p && *p) {
        char w[WHERE_LEN], key[TEXT_LEN];
        where(x, s, w);
        mpx_config_full_path(s, key, sizeof key);
        mpx_errs_add(x->e, "%s: '%s' is not UTF-8 text (byte %zu; run.json records UTF-8 only)", w, key,
                     (size_t)(p - (const utf8proc_uint8_t *)config_setting_get_string(s)));
    }
}

static void check_list(const check_ctx *x, const mpx_option *o, config_setting_t *s)
{
    if (!config_setting_is_list(s) && !config_setting_is_array(s)) { type_error(x, o, s); return; }
    int n = config_setting_length(s);
    if (o->list_len > 0 && n != o->list_len) {
        char w[WHERE_LEN], key[TEXT_LEN], allowed[TEXT_LEN];
        where(x, s, w);
        mpx_config_full_path(s, key, sizeof key);
        allowed_text(o, allowed, sizeof allowed);
        mpx_errs_add(x->e, "%s: '%s' has %d items: it must be %s", w, key, n, allowed);
        return;
    }
    for (int i = 0; i < n; i++) {
        config_setting_t *item = config_setting_get_elem(s, (unsigned)i);
        /* Items are checked as the scalar option they hold, for plain messages. */
        mpx_option scalar = *o;
        scalar.type = o->type == MPX_OPT_STRING_LIST ? MPX_OPT_STRING : MPX_OPT_FLOAT;
        if (scalar.type == MPX_OPT_STRING) {
            if (config_setting_type(item) != CONFIG_TYPE_STRING) type_error(x, &scalar, item);
            else check_utf8(x, item);
        } else {
            check_number(x, &scalar, item, 0);
        }
    }
}

void mpx_config_check_value(const check_ctx *x, const mpx_option *o, config_setting_t *s)
{
    switch (o->type) {
    case MPX_OPT_BOOL:
        if (config_setting_type(s) != CONFIG_TYPE_BOOL) type_error(x, o, s);
        break;
    case MPX_OPT_INT: check_number(x, o, s, 1); break;
    case MPX_OPT_FLOAT: check_number(x, o, s, 0); break;
    case MPX_OPT_STRING:
        if (config_setting_type(s) != CONFIG_TYPE_STRING) type_error(x, o, s);
        else check_utf8(x, s);
        break;
    case MPX_OPT_CHOICE: check_choice(x, o, s); break;
    case MPX_OPT_FLOAT_LIST:
    case MPX_OPT_STRING_LIST: check_list(x, o, s); break;
    default: type_error(x, o, s); break;
    }
}
