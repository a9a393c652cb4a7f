/* Validation of a configuration tree against the core's group schemas and the installed
 * plugins' option schemas: unknown keys (with did-you-mean), types, ranges, choices,
 * list lengths, plugin and sub-schema selection; converts integers given for float keys
 * and fills in defaults, so the tree becomes the effective configuration. */
#include "config_internal.h"
#include "suggest.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#define WHERE_LEN 512
#define TEXT_LEN 512

typedef struct check_ctx {
    const char *path;
    const mpx_schema_source *src; /* NULL: plugins unknown */
    mpx_errs *e;
} check_ctx;

static const char *kind_name(int kind)
{
    static const char *const names[MPX_KIND_COUNT] = {
        "precision", "optimizer", "zero", "model", "backend", "comm",
    };
    return kind >= 0 && kind < MPX_KIND_COUNT ? names[kind] : "unknown";
}

static void where(const check_ctx *x, const config_setting_t *s, char *buf)
{
    mpx_config_where(s, x->path, buf, WHERE_LEN);
}

/* "train.max_steps": the setting's full dotted path ("betas[1]" inside lists). */
static void full_path(const config_setting_t *s, char *buf, size_t n)
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
static void describe(const config_setting_t *s, char *buf, size_t n)
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
    full_path(s, key, sizeof key);
    describe(s, given, sizeof given);
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
    full_path(s, key, sizeof key);
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
        full_path(s, key, sizeof key);
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
    full_path(s, key, sizeof key);
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
        full_path(s, key, sizeof key);
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
        full_path(s, key, sizeof key);
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

static void check_value(const check_ctx *x, const mpx_option *o, config_setting_t *s)
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

static const mpx_option *find_opt(const mpx_option *opts, size_t n, const char *key)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(opts[i].key, key) == 0) return &opts[i];
    return NULL;
}

static const char *type_name(mpx_opt_type t)
{
    switch (t) {
    case MPX_OPT_BOOL: return "boolean";
    case MPX_OPT_INT: return "integer";
    case MPX_OPT_FLOAT: return "number";
    case MPX_OPT_STRING: return "string";
    case MPX_OPT_CHOICE: return "choice";
    case MPX_OPT_FLOAT_LIST: return "list of numbers";
    case MPX_OPT_STRING_LIST: return "list of strings";
    default: return "unknown type";
    }
}

/* Adds every option absent from group `s`, from its default; a required one (no
 * default) is an error citing where the group is. */
static void fill_defaults(const check_ctx *x, config_setting_t *s, const mpx_option *opts, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const mpx_option *o = &opts[i];
        if (config_setting_get_member(s, o->key)) continue;
        char w[WHERE_LEN], key[TEXT_LEN];
        full_path(s, key, sizeof key);
        if (!o->def) {
            where(x, s, w);
            mpx_errs_add(x->e, "%s: missing required key '%s.%s' (%s: %s)", w, key, o->key,
                         type_name(o->type), o->help ? o->help : "");
            continue;
        }
        config_t tmp;
        config_init(&tmp);
        size_t len = strlen(o->def) + 8;
        char *text = malloc(len);
        if (text) snprintf(text, len, "x = %s;", o->def);
        const config_setting_t *v = NULL;
        if (text && config_read_string(&tmp, text))
            v = config_setting_get_member(config_root_setting(&tmp), "x");
        config_setting_t *added = v ? mpx_config_copy_setting(s, o->key, v, mpx_config_default_where) : NULL;
        if (added) check_value(x, o, added);
        else mpx_errs_add(x->e, "schema bug: the default of '%s.%s' is not a libconfig literal: %s",
                          key, o->key, o->def);
        free(text);
        config_destroy(&tmp);
    }
}

/* ---- Names valid at a place, for messages and suggestions ------------------------- */

static size_t sub_count(const check_ctx *x, const mpx_group_schema *g)
{
    if (g->plugin_kind < 0) return g->n_subs;
    return x->src ? x->src->count(x->src->ctx, (mpx_kind)g->plugin_kind) : 0;
}

static const char *sub_name(const check_ctx *x, const mpx_group_schema *g, size_t i)
{
    if (g->plugin_kind < 0) return g->subs[i].name;
    const mpx_plugin_desc *d = x->src->get(x->src->ctx, (mpx_kind)g->plugin_kind, i);
    return d ? d->name : NULL;
}

/* "installed optimizer plugins: adam, sgd" / "scheduler types: constant, ..." */
static void list_subs(const check_ctx *x, const mpx_group_schema *g, char *buf, size_t n)
{
    int w = g->plugin_kind >= 0
                ? snprintf(buf, n, "installed %s plugins:", kind_name(g->plugin_kind))
                : snprintf(buf, n, "%s %ss:", g->name, g->selector ? g->selector : "sub-group");
    size_t count = sub_count(x, g);
    for (size_t i = 0; i < count && w > 0 && (size_t)w < n; i++)
        w += snprintf(buf + w, n - (size_t)w, "%s %s", i ? "," : "", sub_name(x, g, i));
    if (count == 0 && w > 0 && (size_t)w < n) snprintf(buf + w, n - (size_t)w, " none");
}

static void offer_subs(const check_ctx *x, const mpx_group_schema *g, mpx_suggester *sg)
{
    size_t count = sub_count(x, g);
    for (size_t i = 0; i < count; i++) mpx_suggest_offer(sg, sub_name(x, g, i));
}

static const char *mean_prefix(const char *best)
{
    return best ? " — did you mean '" : "";
}

static const char *mean_suffix(const char *best)
{
    return best ? "'?" : "";
}

/* ---- Groups -------------------------------------------------------------------------- */

static void unknown_key(const check_ctx *x, const config_setting_t *m, const char *where_in,
                        const char *best)
{
    char w[WHERE_LEN];
    where(x, m, w);
    mpx_errs_add(x->e, "%s: unknown key '%s' %s%s%s%s", w, config_setting_name(m), where_in,
                 mean_prefix(best), best ? best : "", mean_suffix(best));
}

/* A sub-group's (or plugin's) members against its options, then its defaults. */
static void check_members(const check_ctx *x, config_setting_t *s, const mpx_option *opts, size_t n)
{
    char key[TEXT_LEN], in[TEXT_LEN + 16];
    full_path(s, key, sizeof key);
    snprintf(in, sizeof in, "in group '%s'", key);
    for (int i = 0; i < config_setting_length(s); i++) {
        config_setting_t *m = config_setting_get_elem(s, (unsigned)i);
        const mpx_option *o = find_opt(opts, n, config_setting_name(m));
        if (o) { check_value(x, o, m); continue; }
        mpx_suggester sg;
        mpx_suggest_init(&sg, config_setting_name(m));
        for (size_t k = 0; k < n; k++) mpx_suggest_offer(&sg, opts[k].key);
        unknown_key(x, m, in, mpx_suggest_best(&sg));
    }
    fill_defaults(x, s, opts, n);
}

/* A member of a group that is neither a core key nor a known sub-group. */
static void unknown_in_group(const check_ctx *x, const mpx_group_schema *g, const config_setting_t *m)
{
    mpx_suggester sg;
    mpx_suggest_init(&sg, config_setting_name(m));
    if (config_setting_is_group(m)) offer_subs(x, g, &sg);
    for (size_t k = 0; k < g->n_opts; k++) mpx_suggest_offer(&sg, g->opts[k].key);
    if (!config_setting_is_group(m)) offer_subs(x, g, &sg);
    const char *best = mpx_suggest_best(&sg);
    if (!config_setting_is_group(m) || (g->plugin_kind < 0 && g->n_subs == 0)) {
        char in[TEXT_LEN];
        snprintf(in, sizeof in, "in group '%s'", g->name);
        unknown_key(x, m, in, best);
        return;
    }
    char w[WHERE_LEN], subs[TEXT_LEN];
    where(x, m, w);
    list_subs(x, g, subs, sizeof subs);
    mpx_errs_add(x->e, "%s: unknown sub-group '%s.%s': it names no %s (%s)%s%s%s", w, g->name,
                 config_setting_name(m),
                 g->plugin_kind >= 0 ? "installed plugin of that kind" : "known sub-group",
                 subs, mean_prefix(best), best ? best : "", mean_suffix(best));
}

static void check_group_member(const check_ctx *x, const mpx_group_schema *g, config_setting_t *m)
{
    const char *name = config_setting_name(m);
    const mpx_option *o = find_opt(g->opts, g->n_opts, name);
    if (o) { check_value(x, o, m); return; }
    const mpx_option *opts = NULL;
    size_t n = 0;
    int known = mpx_config_sub_opts(g, x->src, name, &opts, &n);
    if (known == 0 || (known < 0 && !config_setting_is_group(m))) {
        unknown_in_group(x, g, m);
        return;
    }
    if (!config_setting_is_group(m)) {
        char w[WHERE_LEN], given[TEXT_LEN];
        where(x, m, w);
        describe(m, given, sizeof given);
        mpx_errs_add(x->e, "%s: '%s.%s' must be a group { ... } of %s's options, got %s", w,
                     g->name, name, name, given);
        return;
    }
    if (known > 0) check_members(x, m, opts, n);
}

/* The selector names an existing plugin / sub-schema, whose sub-group is created with
 * its defaults when absent. */
static void check_selection(const check_ctx *x, const mpx_group_schema *g, config_setting_t *s)
{
    config_setting_t *sel = config_setting_get_member(s, g->selector);
    if (!sel || config_setting_type(sel) != CONFIG_TYPE_STRING) return; /* already reported */
    const char *name = config_setting_get_string(sel);
    const mpx_option *opts = NULL;
    size_t n = 0;
    int known = mpx_config_sub_opts(g, x->src, name, &opts, &n);
    if (known < 0) return;
    char w[WHERE_LEN];
    where(x, sel, w);
    if (known == 0) {
        char subs[TEXT_LEN];
        list_subs(x, g, subs, sizeof subs);
        mpx_suggester sg;
        mpx_suggest_init(&sg, name);
        offer_subs(x, g, &sg);
        const char *best = mpx_suggest_best(&sg);
        if (config_setting_get_hook(sel) == mpx_config_default_where) {
            mpx_errs_add(x->e, "%s: '%s.%s' is not set and its default \"%s\" is not installed (%s)",
                         x->path ? x->path : "config", g->name, g->selector, name, subs);
            return;
        }
        mpx_errs_add(x->e, "%s: '%s.%s' = \"%s\": no such %s (%s)%s%s%s", w, g->name,
                     g->selector, name,
                     g->plugin_kind >= 0 ? "plugin is installed" : g->selector, subs,
                     mean_prefix(best), best ? best : "", mean_suffix(best));
        return;
    }
    if (config_setting_get_member(s, name)) return; /* checked with the other members */
    config_setting_t *sub = config_setting_add(s, name, CONFIG_TYPE_GROUP);
    if (!sub) {
        mpx_errs_add(x->e, "%s: '%s.%s' = \"%s\" cannot name a sub-group", w, g->name, g->selector, name);
        return;
    }
    /* Problems in the new sub-group (a required option) cite what selected it. */
    if (config_setting_get_hook(sel) != mpx_config_default_where)
        config_setting_set_hook(sub, config_setting_get_hook(sel));
    sub->line = sel->line;
    sub->file = sel->file;
    check_members(x, sub, opts, n);
}

static void check_group(const check_ctx *x, const mpx_group_schema *g, config_setting_t *s)
{
    for (int i = 0; i < config_setting_length(s); i++)
        check_group_member(x, g, config_setting_get_elem(s, (unsigned)i));
    fill_defaults(x, s, g->opts, g->n_opts);
    if (g->selector) check_selection(x, g, s);
}

static void unknown_group(const check_ctx *x, const mpx_group_schema *groups, size_t n,
                          const config_setting_t *m)
{
    mpx_suggester sg;
    mpx_suggest_init(&sg, config_setting_name(m));
    for (size_t k = 0; k < n; k++) mpx_suggest_offer(&sg, groups[k].name);
    const char *best = mpx_suggest_best(&sg);
    char w[WHERE_LEN], names[TEXT_LEN];
    int len = 0;
    names[0] = '\0';
    for (size_t k = 0; k < n && len >= 0 && (size_t)len < sizeof names; k++)
        len += snprintf(names + len, sizeof names - (size_t)len, "%s%s", k ? ", " : "", groups[k].name);
    where(x, m, w);
    mpx_errs_add(x->e, "%s: unknown key '%s' at the top level%s%s%s (groups: %s)", w,
                 config_setting_name(m), mean_prefix(best), best ? best : "", mean_suffix(best), names);
}

int mpx_config_check(config_t *cfg, const char *path, const mpx_group_schema *groups,
                     size_t n_groups, const mpx_schema_source *src, mpx_errs *e)
{
    check_ctx x = { path, src, e };
    int before = e->n;
    config_setting_t *root = config_root_setting(cfg);
    for (int i = 0; i < config_setting_length(root); i++) {
        const config_setting_t *m = config_setting_get_elem(root, (unsigned)i);
        if (!mpx_config_find_group(groups, n_groups, config_setting_name(m)))
            unknown_group(&x, groups, n_groups, m);
    }
    for (size_t k = 0; k < n_groups; k++) {
        const mpx_group_schema *g = &groups[k];
        config_setting_t *s = config_setting_get_member(root, g->name);
        if (!s) {
            s = config_setting_add(root, g->name, CONFIG_TYPE_GROUP);
            if (!s) { mpx_errs_add(e, "schema bug: '%s' is not a valid group name", g->name); continue; }
        }
        if (!config_setting_is_group(s)) {
            char w[WHERE_LEN], given[TEXT_LEN];
            mpx_config_where(s, path, w, sizeof w);
            describe(s, given, sizeof given);
            mpx_errs_add(e, "%s: '%s' must be a group { ... } (%s), got %s", w, g->name,
                         g->help ? g->help : "", given);
            continue;
        }
        check_group(&x, g, s);
    }
    return e->n - before;
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
