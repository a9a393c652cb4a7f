/* mpx plugins [NAME | KIND/NAME] */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "compat.h"
#include "session.h"

static const char plugins_usage[] =
    "usage: mpx plugins [--plugin-dir DIR]... [NAME | KIND/NAME | --compat]\n"
    "  without NAME: every plugin found, with load errors and shadowing\n"
    "  with NAME: that plugin's options (key, type, default, range or choices, help)\n"
    "  --compat: which installed plugins combine, a table per pair of kinds, from the\n"
    "  plugins' own declarations (the checks of `mpx check`); exit 0\n";

static const char *type_name(mpx_opt_type t)
{
    static const char *names[] = { "bool", "int", "float", "string", "choice", "float list", "string list" };
    return (unsigned)t < sizeof names / sizeof *names ? names[t] : "?";
}

static void list_all(const mpx_registry *r)
{
    printf("%-10s %-20s %-8s %s\n", "KIND", "NAME", "VERSION", "SUMMARY");
    for (int k = 0; k < MPX_KIND_COUNT; k++) {
        size_t n = mpx_registry_count(r, (mpx_kind)k);
        for (size_t i = 0; i < n; i++) {
            const mpx_plugin_rec *p = mpx_registry_get(r, (mpx_kind)k, i);
            printf("%-10s %-20s %-8s %s\n", mpx_kind_name((mpx_kind)k), p->desc.name, p->desc.version,
                   p->desc.summary);
        }
    }
    int header = 0;
    for (size_t i = 0; i < r->n; i++) {
        const mpx_plugin_rec *p = &r->recs[i];
        if (!p->error) continue;
        if (!header++) printf("\nload errors:\n");
        printf("  %s: %s\n", p->path, p->error);
    }
    header = 0;
    for (size_t i = 0; i < r->n; i++) {
        const mpx_plugin_rec *p = &r->recs[i];
        if (p->shadowed_by < 0) continue;
        if (!header++) printf("\nshadowed:\n");
        printf("  %s/%s %s (%s) is shadowed by %s (%s)\n", mpx_kind_name(p->desc.kind), p->desc.name,
               p->desc.version, p->path, r->recs[p->shadowed_by].desc.version, r->recs[p->shadowed_by].path);
    }
    char dirs[4096];
    printf("\nsearched: %s\n", mpx_registry_dirs_text(r, dirs, sizeof dirs));
}

static void show_one(const mpx_plugin_rec *p)
{
    const mpx_plugin_desc *d = &p->desc;
    printf("%s/%s %s — %s\n  file: %s\n", mpx_kind_name(d->kind), d->name, d->version, d->summary, p->path);
    if (!d->n_options) printf("  options: none\n");
    else printf("  options (in %s.%s = { ... }):\n", mpx_kind_name(d->kind), d->name);
    for (size_t i = 0; i < d->n_options; i++) {
        const mpx_option *o = &d->options[i];
        printf("    %-22s %-11s default %-14s", o->key, type_name(o->type), o->def ? o->def : "(required)");
        if (o->type == MPX_OPT_CHOICE && o->choices) printf(" one of %s", o->choices);
        else if (o->min <= o->max) printf(" in [%g, %g]", o->min, o->max);
        if (o->list_len) printf(" (%d items)", o->list_len);
        printf("\n      %s\n", o->help ? o->help : "");
    }
    for (size_t i = 0; i < d->n_incompat; i++)
        printf("  incompatible with %s: %s\n", d->incompat[i].other, d->incompat[i].reason);
}

int mpx_cmd_plugins(int argc, char **argv)
{
    int compat = 0;
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--compat")) {
            compat = 1;
            memmove(argv + i, argv + i + 1, (size_t)(argc - i - 1) * sizeof *argv);
            argc--;
            break;
        }
    mpx_cli c;
    int rc = mpx_cli_parse(&c, argc, argv, plugins_usage);
    if (rc) return rc == 1 ? 0 : rc;
    mpx_session s;
    if (mpx_session_open(&s, c.plugin_dirs, c.n_plugin_dirs)) {
        fprintf(stderr, "mpx: cannot scan plugin folders\n");
        return 1;
    }
    if (compat) {
        rc = c.n_positional ? 2 : mpx_compat_print(&s, stdout) ? 1 : 0;
        if (c.n_positional) fprintf(stderr, "mpx plugins: --compat takes no NAME\n");
        mpx_session_close(&s);
        return rc;
    }
    if (c.n_positional == 0) {
        list_all(&s.reg);
        mpx_session_close(&s);
        return 0;
    }
    char name[128];
    int kind;
    if (mpx_parse_plugin_ref(c.positional[0], &kind, name, sizeof name)) {
        fprintf(stderr, "mpx: '%s' is not NAME or KIND/NAME (kinds: precision, optimizer, zero, model, backend, comm)\n",
                c.positional[0]);
        mpx_session_close(&s);
        return 2;
    }
    const mpx_plugin_rec *found[MPX_KIND_COUNT];
    int n = 0;
    for (int k = 0; k < MPX_KIND_COUNT; k++) {
        if (kind >= 0 && k != kind) continue;
        const mpx_plugin_rec *p = mpx_registry_find(&s.reg, (mpx_kind)k, name);
        if (p) found[n++] = p;
    }
    if (n == 1) show_one(found[0]);
    else if (n == 0) fprintf(stderr, "mpx: no plugin '%s' found (see `mpx plugins`)\n", c.positional[0]);
    else {
        fprintf(stderr, "mpx: '%s' is ambiguous:", name);
        for (int i = 0; i < n; i++) fprintf(stderr, " %s/%s", mpx_kind_name(found[i]->desc.kind), name);
        fprintf(stderr, " — say KIND/NAME\n");
    }
    mpx_session_close(&s);
    return n == 1 ? 0 : 1;
}
