#include "registry.h"
#include "vtable_check.h"

#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const kind_names[MPX_KIND_COUNT] = {
    "precision", "optimizer", "zero", "model", "backend", "comm",
};

const char *mpx_kind_name(mpx_kind k)
{
    return (unsigned)k < MPX_KIND_COUNT ? kind_names[k] : "?";
}

int mpx_kind_from_name(const char *s)
{
    for (int k = 0; k < MPX_KIND_COUNT; k++)
        if (strcmp(s, kind_names[k]) == 0) return k;
    return -1;
}

int mpx_parse_plugin_ref(const char *ref, int *kind, char *name, size_t name_len)
{
    const char *slash = strchr(ref, '/');
    *kind = -1;
    if (slash) {
        char k[32];
        size_t n = (size_t)(slash - ref);
        if (n >= sizeof k) return -1;
        memcpy(k, ref, n);
        k[n] = 0;
        *kind = mpx_kind_from_name(k);
        if (*kind < 0) return -1;
        ref = slash + 1;
    }
    if (!*ref || strlen(ref) >= name_len) return -1;
    strcpy(name, ref);
    return 0;
}

static char *xstrdup(const char *s)
{
    char *d = strdup(s);
    if (!d) abort(); /* out of memory while listing plugins: nothing sensible to do */
    return d;
}

static int push_dir(char ***dirs, size_t *n, const char *d)
{
    char **v = realloc(*dirs, (*n + 1) * sizeof *v);
    if (!v) return -1;
    v[(*n)++] = xstrdup(d);
    *dirs = v;
    return 0;
}

int mpx_registry_default_dirs(const char *const *cli_dirs, size_t n_cli, char ***dirs, size_t *n)
{
    *dirs = NULL;
    *n = 0;
    for (size_t i = 0; i < n_cli; i++)
        if (push_dir(dirs, n, cli_dirs[i])) return -1;
    const char *env = getenv("MPX_PLUGIN_PATH");
    if (env && *env) {
        char *copy = xstrdup(env), *save = NULL;
        for (char *p = strtok_r(copy, ":", &save); p; p = strtok_r(NULL, ":", &save))
            if (push_dir(dirs, n, p)) { free(copy); return -1; }
        free(copy);
    }
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            char d[PATH_MAX + 32];
            snprintf(d, sizeof d, "%s/../plugins", exe);
            if (push_dir(dirs, n, d)) return -1;
            snprintf(d, sizeof d, "%s/../lib/mpx", exe);
            if (push_dir(dirs, n, d)) return -1;
        }
    }
    return 0;
}

static mpx_plugin_rec *new_rec(mpx_registry *r, const char *path, int dir_index)
{
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 32;
        mpx_plugin_rec *v = realloc(r->recs, cap * sizeof *v);
        if (!v) abort();
        r->recs = v;
        r->cap = cap;
    }
    mpx_plugin_rec *rec = &r->recs[r->n++];
    memset(rec, 0, sizeof *rec);
    rec->path = xstrdup(path);
    rec->dir_index = dir_index;
    rec->shadowed_by = -1;
    return rec;
}

static void refuse(mpx_plugin_rec *rec, const char *fmt, ...) MPX_PRINTF(2, 3);
static void refuse(mpx_plugin_rec *rec, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    rec->error = xstrdup(buf);
    rec->loaded = 0;
}

/* The smallest descriptor the core can use: up to and including the vtable pointer. */
#define MIN_DESC_SIZE (offsetof(mpx_plugin_desc, vtable) + sizeof(void *))

static void load_one(mpx_plugin_rec *rec, const mpx_host *host)
{
    void *h = dlopen(rec->path, RTLD_NOW | RTLD_LOCAL);
    if (!h) { refuse(rec, "cannot load: %s", dlerror()); return; }
    mpx_plugin_entry_fn entry = (mpx_plugin_entry_fn)(uintptr_t)dlsym(h, MPX_PLUGIN_ENTRY_SYMBOL);
    if (!entry) {
        refuse(rec, "no symbol '%s': not an mpx plugin", MPX_PLUGIN_ENTRY_SYMBOL);
        return;
    }
    const mpx_plugin_desc *d = entry(host);
    if (!d) { refuse(rec, "%s returned no descriptor", MPX_PLUGIN_ENTRY_SYMBOL); return; }
    char theirs[32], ours[32];
    snprintf(theirs, sizeof theirs, "%u.%u", (unsigned)d->abi_major, (unsigned)d->abi_minor);
    snprintf(ours, sizeof ours, "%d.%d", MPX_ABI_MAJOR, MPX_ABI_MINOR);
    if (d->abi_major != MPX_ABI_MAJOR) {
        refuse(rec, "built for plugin ABI %s, but this mpx speaks ABI %s (another major version)", theirs, ours);
        return;
    }
    if (d->abi_minor > MPX_ABI_MINOR) {
        /* the same major lays out the descriptor's head alike: keep its kind and name, so
         * that a config naming it is told why it is refused */
        if (d->size >= MIN_DESC_SIZE) memcpy(&rec->desc, d, MIN_DESC_SIZE);
        refuse(rec, "built for plugin ABI %s, newer than this mpx's ABI %s: update mpx", theirs, ours);
        return;
    }
    if (d->size < MIN_DESC_SIZE) {
        refuse(rec, "descriptor size %u is smaller than the %zu bytes ABI %s requires",
               (unsigned)d->size, (size_t)MIN_DESC_SIZE, ours);
        return;
    }
    memcpy(&rec->desc, d, d->size < sizeof rec->desc ? d->size : sizeof rec->desc);
    if ((unsigned)rec->desc.kind >= MPX_KIND_COUNT || !rec->desc.name || !*rec->desc.name) {
        refuse(rec, "descriptor has no valid kind or name");
        return;
    }
    if (!rec->desc.version) rec->desc.version = "?";
    if (!rec->desc.summary) rec->desc.summary = "";
    const uint32_t *vsize = rec->desc.vtable;
    if (!vsize || *vsize < sizeof(uint32_t)) {
        refuse(rec, "descriptor of %s has no %s vtable", rec->desc.name, mpx_kind_name(rec->desc.kind));
        return;
    }
    memcpy(&rec->vt, vsize, *vsize < sizeof rec->vt ? *vsize : sizeof rec->vt);
    /* a NULL required entry would crash its first call: refuse the plugin, naming them */
    char names[768];
    const char *kind = mpx_kind_name(rec->desc.kind);
    if (mpx_vtable_missing(rec->desc.kind, vsize, names, sizeof names)) {
        refuse(rec, "%s/%s: its %s vtable (%u bytes) has no %s: every ABI 1.0 entry is required", kind,
               rec->desc.name, kind, (unsigned)*vsize, names);
        return;
    }
    if (rec->desc.kind == MPX_KIND_BACKEND && mpx_ops_missing(rec->vt.backend.ops, names, sizeof names)) {
        refuse(rec, "%s/%s: its op table (%u bytes) has no %s: every ABI 1.0 op is required", kind, rec->desc.name,
               (unsigned)rec->vt.backend.ops->size, names);
        return;
    }
    rec->loaded = 1;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* *.so files of one folder, sorted, so listings and duplicate reports are stable. */
static size_t list_dir(const char *dir, char ***out)
{
    *out = NULL;
    DIR *d = opendir(dir);
    if (!d) return 0;
    size_t n = 0, cap = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len < 4 || strcmp(e->d_name + len - 3, ".so") != 0) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            char **v = realloc(*out, cap * sizeof *v);
            if (!v) abort();
            *out = v;
        }
        char *p = malloc(strlen(dir) + len + 2);
        if (!p) abort();
        sprintf(p, "%s/%s", dir, e->d_name);
        (*out)[n++] = p;
    }
    closedir(d);
    qsort(*out, n, sizeof **out, cmp_str);
    return n;
}

static int same_plugin(const mpx_plugin_rec *a, const mpx_plugin_rec *b)
{
    return a->loaded && b->loaded && a->desc.kind == b->desc.kind &&
           strcmp(a->desc.name, b->desc.name) == 0;
}

/* Same folder: both refused. Earlier folder: the later one is shadowed. */
static void resolve_conflicts(mpx_registry *r)
{
    for (size_t i = 0; i < r->n; i++) {
        for (size_t j = i + 1; j < r->n; j++) {
            mpx_plugin_rec *a = &r->recs[i], *b = &r->recs[j];
            if (!same_plugin(a, b)) continue;
            if (a->dir_index == b->dir_index) {
                char what[128];
                snprintf(what, sizeof what, "%s/%s", mpx_kind_name(a->desc.kind), a->desc.name);
                char msg[PATH_MAX + 200];
                snprintf(msg, sizeof msg, "duplicate %s: also in %s (same folder; remove one)", what, b->path);
                a->error = xstrdup(msg);
                snprintf(msg, sizeof msg, "duplicate %s: also in %s (same folder; remove one)", what, a->path);
                b->error = xstrdup(msg);
            } else if (b->shadowed_by < 0 && !b->error) {
                b->shadowed_by = (int)i;
            }
        }
    }
    /* a refused duplicate is no longer loaded (kept listed with its error) */
    for (size_t i = 0; i < r->n; i++)
        if (r->recs[i].error) r->recs[i].loaded = 0;
}

int mpx_registry_scan(mpx_registry *r, char **dirs, size_t n_dirs, const mpx_host *host)
{
    memset(r, 0, sizeof *r);
    r->dirs = dirs;
    r->n_dirs = n_dirs;
    for (size_t d = 0; d < n_dirs; d++) {
        char **files;
        size_t n = list_dir(dirs[d], &files);
        for (size_t i = 0; i < n; i++) {
            /* the same file reached through two search folders is one plugin */
            char real[PATH_MAX];
            int seen = 0;
            if (realpath(files[i], real))
                for (size_t k = 0; k < r->n && !seen; k++) {
                    char other[PATH_MAX];
                    seen = realpath(r->recs[k].path, other) && strcmp(real, other) == 0;
                }
            if (!seen) load_one(new_rec(r, files[i], (int)d), host);
            free(files[i]);
        }
        free(files);
    }
    resolve_conflicts(r);
    return 0;
}

void mpx_registry_free(mpx_registry *r)
{
    for (size_t i = 0; i < r->n; i++) {
        free(r->recs[i].path);
        free(r->recs[i].error);
    }
    free(r->recs);
    for (size_t i = 0; i < r->n_dirs; i++) free(r->dirs[i]);
    free(r->dirs);
    memset(r, 0, sizeof *r);
}

static int active(const mpx_plugin_rec *rec)
{
    return rec->loaded && !rec->error && rec->shadowed_by < 0;
}

const mpx_plugin_rec *mpx_registry_find(const mpx_registry *r, mpx_kind kind, const char *name)
{
    for (size_t i = 0; i < r->n; i++)
        if (active(&r->recs[i]) && r->recs[i].desc.kind == kind && strcmp(r->recs[i].desc.name, name) == 0)
            return &r->recs[i];
    return NULL;
}

const mpx_plugin_rec *mpx_registry_refused(const mpx_registry *r, mpx_kind kind, const char *name)
{
    for (size_t i = 0; i < r->n; i++) {
        const mpx_plugin_rec *rec = &r->recs[i];
        if (rec->error && rec->desc.name && rec->desc.kind == kind && !strcmp(rec->desc.name, name)) return rec;
    }
    return NULL;
}

const char *mpx_registry_refusal(const mpx_registry *r, mpx_kind kind, const char *name, char *buf, size_t len)
{
    const mpx_plugin_rec *rec = mpx_registry_refused(r, kind, name);
    if (!rec) return NULL;
    snprintf(buf, len, "%s: %s", rec->path, rec->error);
    return buf;
}

static int by_name(const void *a, const void *b)
{
    const mpx_plugin_rec *x = *(const mpx_plugin_rec *const *)a, *y = *(const mpx_plugin_rec *const *)b;
    return strcmp(x->desc.name, y->desc.name);
}

/* Active records of a kind, sorted by name, into a caller array of r->n entries. */
static size_t collect(const mpx_registry *r, mpx_kind kind, const mpx_plugin_rec **out)
{
    size_t n = 0;
    for (size_t i = 0; i < r->n; i++)
        if (active(&r->recs[i]) && r->recs[i].desc.kind == kind) out[n++] = &r->recs[i];
    qsort(out, n, sizeof *out, by_name);
    return n;
}

size_t mpx_registry_count(const mpx_registry *r, mpx_kind kind)
{
    size_t n = 0;
    for (size_t i = 0; i < r->n; i++)
        n += active(&r->recs[i]) && r->recs[i].desc.kind == kind;
    return n;
}

const mpx_plugin_rec *mpx_registry_get(const mpx_registry *r, mpx_kind kind, size_t i)
{
    const mpx_plugin_rec *buf[256];
    if (r->n > MPX_COUNT(buf)) return NULL;
    size_t n = collect(r, kind, buf);
    return i < n ? buf[i] : NULL;
}

const char *mpx_registry_names(const mpx_registry *r, mpx_kind kind, char *buf, size_t len)
{
    size_t used = 0, n = mpx_registry_count(r, kind);
    buf[0] = 0;
    for (size_t i = 0; i < n; i++) {
        const mpx_plugin_rec *rec = mpx_registry_get(r, kind, i);
        int w = snprintf(buf + used, len - used, "%s%s", i ? ", " : "", rec->desc.name);
        if (w < 0 || (size_t)w >= len - used) break;
        used += (size_t)w;
    }
    if (!n) snprintf(buf, len, "none");
    return buf;
}

const char *mpx_registry_dirs_text(const mpx_registry *r, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = 0;
    for (size_t i = 0; i < r->n_dirs; i++) {
        int w = snprintf(buf + used, len - used, "%s%s", i ? ", " : "", r->dirs[i]);
        if (w < 0 || (size_t)w >= len - used) break;
        used += (size_t)w;
    }
    return buf;
}
