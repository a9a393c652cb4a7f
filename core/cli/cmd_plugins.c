/* mpx plugins [NAME | KIND/NAME] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "compat.h"
#include "../engine/session.h"

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

/* Configures s from a configuration that selects only `kind`'s plugin `name` (every other
 * key its default), through a temporary file. 0, or -1 with err set. */
static int configure_one(mpx_session *s, const char *kind, const char *name, char *err, size_t errlen)
{
    char path[] = "/tmp/mpx-plugins-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return snprintf(err, errlen, "cannot make a temporary configuration in /tmp"), -1;
    FILE *f = fdopen(fd, "w");
    if (!f) {
        close(fd);
        unlink(path);
        return snprintf(err, errlen, "cannot write %s", path), -1;
    }
    fprintf(f, "%s = { plugin = \"%s\"; };\n", kind, name);
    int rc = fclose(f) ? (snprintf(err, errlen, "cannot write %s", path), -1)
                       : mpx_session_configure(s, path, NULL, 0, err, errlen);
    unlink(path);
    return rc ? -1 : 0;
}

/* A precision policy: the formats it declares and, with its defaults, every dtype and
 * the scaling recipe (what `mpx check` prints for a config that only selects it). */
static void show_policy(mpx_session *s, const mpx_plugin_rec *p)
{
    const mpx_precision_vtable *vt = &p->vt.precision;
    char buf[512];
    if (vt->size >= offsetof(mpx_precision_vtable, n_formats) + sizeof vt->n_formats && vt->n_formats) {
        printf("  formats it declares:\n");
        for (size_t i = 0; i < vt->n_formats; i++) {
            mpx_format_describe(&vt->formats[i], buf, sizeof buf);
            printf("    %-14s %s\n", vt->formats[i].name ? vt->formats[i].name : "?", buf);
        }
    }
    char err[4096];
    if (configure_one(s, "precision", p->desc.name, err, sizeof err) || mpx_session_precision(s, err, sizeof err)) {
        printf("  with its defaults: cannot describe (%s)\n", err);
        return;
    }
    const mpx_precision_desc *d = &s->prec;
    const mpx_format_table *t = &s->fmts;
    char ost[256];
    mpx_opt_state_describe(t, d, ost, sizeof ost);
    printf("  with its defaults: weights %s, GEMM inputs %s (backward %s), activations %s, grads %s,\n"
           "    grad accumulator %s, master %s, optimizer state %s, communication %s, eval logits %s;\n"
           "    loss scale \"%s\"\n",
           mpx_dtype_label(t, d->weights), mpx_dtype_label(t, d->gemm_in), mpx_dtype_label(t, mpx_grad_gemm_dtype(d)),
           mpx_dtype_label(t, d->act), mpx_dtype_label(t, d->grads),
           d->grad_acc == MPX_DTYPE_NONE ? "(the grads)" : mpx_dtype_label(t, d->grad_acc),
           d->master == MPX_DTYPE_NONE ? "none" : mpx_dtype_label(t, d->master), ost,
           mpx_dtype_label(t, d->comm), mpx_dtype_label(t, d->eval_logits), d->loss_scale ? d->loss_scale : "none");
    mpx_scaling_describe(d, buf, sizeof buf);
    printf("  scaling of 8-bit GEMM inputs: %s\n", buf);
    const mpx_dtype used[] = { d->weights, d->gemm_in, mpx_grad_gemm_dtype(d), d->act, d->grads, d->opt_state, d->opt_state_sq, d->comm };
    int shown[MPX_FORMAT_END] = { 0 };
    for (size_t i = 0; i < MPX_COUNT(used); i++) {
        const mpx_format *fm = mpx_format_of(t, used[i]);
        if (!fm || shown[used[i]]++) continue;
        mpx_format_describe(fm, buf, sizeof buf);
        printf("    %-14s %s\n", fm->name, buf);
    }
}

/* A backend: created with its defaults on this machine, its own line of what runs (the
 * cpu backend's kernels, AMX or not; a GPU's name), as run.json records it. */
static void show_backend(mpx_session *s, const mpx_plugin_rec *p)
{
    char err[4096];
    if (configure_one(s, "backend", p->desc.name, err, sizeof err) || mpx_session_start_backend(s, err, sizeof err))
        printf("  on this machine, with its defaults: cannot start (%s)\n", err);
    else printf("  on this machine, with its defaults: %s\n", p->vt.backend.describe(s->be));
}

static void show_one(mpx_session *s, const mpx_plugin_rec *p)
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
    if (d->kind == MPX_KIND_PRECISION) show_policy(s, p);
    if (d->kind == MPX_KIND_BACKEND) show_backend(s, p);
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
    if (n == 1) show_one(&s, found[0]);
    else if (n == 0) fprintf(stderr, "mpx: no plugin '%s' found (see `mpx plugins`)\n", c.positional[0]);
    else {
        fprintf(stderr, "mpx: '%s' is ambiguous:", name);
        for (int i = 0; i < n; i++) fprintf(stderr, " %s/%s", mpx_kind_name(found[i]->desc.kind), name);
        fprintf(stderr, " — say KIND/NAME\n");
    }
    mpx_session_close(&s);
    return n == 1 ? 0 : 1;
}
