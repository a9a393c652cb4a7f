/* Validation of a configuration tree against the core's group schemas and the installed
 * plugins' option schemas, the schema walk: top-level groups, group members, unknown
 * keys and sub-groups (with did-you-mean), plugin and sub-schema selection, required
 * keys; fills in defaults, so the tree becomes the effective configuration. Each value
 * is checked by config_check_value.c (types, ranges, choices, list lengths; integers
 * given for float keys become floats). */
#include "config_check.h"
#include "config_check_value.h"
#include "suggest.h"

#include <stdlib.h>
#include <string.h>

static const char *kind_name(int kind)
{
    static const char *const names[MPX_KIND_COUNT] = {
        "precision", "optimizer", "zero", "model", "backend", "comm",
    };
    return kind >= 0 && kind < MPX_KIND_COUNT ? names[kind] : "unknown";
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
        mpx_config_full_path(s, key, sizeof key);
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
        if (added) mpx_config_check_value(x, o, added);
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
    mpx_config_full_path(s, key, sizeof key);
    snprintf(in, sizeof in, "in group '%s'", key);
    for (int i = 0; i < config_setting_length(s); i++) {
        config_setting_t *m = config_setting_get_elem(s, (unsigned)i);
        const mpx_option *o = find_opt(opts, n, config_setting_name(m));
        if (o) { mpx_config_check_value(x, o, m); continue; }
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
    if (o) { mpx_config_check_value(x, o, m); return; }
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
        mpx_config_describe(m, given, sizeof given);
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
        char why[2048];
        const int refused = g->plugin_kind >= 0 && x->src && x->src->refused &&
                            x->src->refused(x->src->ctx, (mpx_kind)g->plugin_kind, name, why, sizeof why);
        if (config_setting_get_hook(sel) == mpx_config_default_where) {
            if (refused)
                mpx_errs_add(x->e, "%s: '%s.%s' is not set and its default \"%s\" was found but refused: %s",
                             x->path ? x->path : "config", g->name, g->selector, name, why);
            else
                mpx_errs_add(x->e, "%s: '%s.%s' is not set and its default \"%s\" is not installed (%s)",
                             x->path ? x->path : "config", g->name, g->selector, name, subs);
            return;
        }
        if (refused) {
            mpx_errs_add(x->e, "%s: '%s.%s' = \"%s\": a plugin of that name was found but refused: %s", w, g->name,
                         g->selector, name, why);
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
            mpx_config_describe(s, given, sizeof given);
            mpx_errs_add(e, "%s: '%s' must be a group { ... } (%s), got %s", w, g->name,
                         g->help ? g->help : "", given);
            continue;
        }
        check_group(&x, g, s);
    }
    return e->n - before;
}

