/* Comparing two sweeps: cells paired by their axis values, each pair diffed as runs. */
#include "diff.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "sweep_read.h"

typedef struct side {
    const char *root;
    char **dirs;
    size_t n;
    json_t **recs;
    char **sig;     /* the axis values as compact JSON */
} side;

static void add_axes_of(const char *root, json_t *keys)
{
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/sweep.json", root);
    json_t *idx = json_load_file(path, 0, NULL), *ax;
    size_t i;
    json_array_foreach(json_object_get(idx, "axes"), i, ax) {
        const char *k = json_string_value(json_object_get(ax, "key"));
        if (k && json_array_size(keys) < 64) {
            size_t j;
            json_t *e;
            int have = 0;
            json_array_foreach(keys, j, e) have |= !strcmp(json_string_value(e), k);
            if (!have) json_array_append_new(keys, json_string(k));
        }
    }
    json_decref(idx);
}

/* Without sweep.json: the configuration keys whose values vary across the cells. */
static void add_varying(const side *s, json_t *keys)
{
    json_t *first = json_object();
    if (s->n) mpx_json_flatten(json_object_get(json_object_get(s->recs[0], "config"), "effective"), "", first);
    for (size_t r = 1; r < s->n; r++) {
        json_t *flat = json_object();
        mpx_json_flatten(json_object_get(json_object_get(s->recs[r], "config"), "effective"), "", flat);
        const char *k;
        json_t *v;
        json_object_foreach(first, k, v) {
            if (!strcmp(k, "run.output_dir") || !strcmp(k, "run.name")) continue;
            json_t *w = json_object_get(flat, k);
            size_t j;
            json_t *e;
            int have = 0;
            json_array_foreach(keys, j, e) have |= !strcmp(json_string_value(e), k);
            if (!have && !(w && json_equal(v, w))) json_array_append_new(keys, json_string(k));
        }
        json_decref(flat);
    }
    json_decref(first);
}

static int load_side(side *s, const char *root, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->root = root;
    if (mpx_list_runs(root, &s->dirs, &s->n, err, errlen)) return -1;
    s->recs = calloc(s->n ? s->n : 1, sizeof *s->recs);
    s->sig = calloc(s->n ? s->n : 1, sizeof *s->sig);
    if (!s->recs || !s->sig) { snprintf(err, errlen, "out of memory"); return -1; }
    for (size_t i = 0; i < s->n; i++)
        if (!(s->recs[i] = mpx_run_load(s->dirs[i], err, errlen))) return -1;
    return 0;
}

static void sign(side *s, json_t *keys)
{
    for (size_t i = 0; i < s->n; i++) {
        json_t *vals = json_object(), *k;
        size_t j;
        json_array_foreach(keys, j, k) {
            json_t *v = mpx_run_config_value(s->recs[i], json_string_value(k));
            json_object_set(vals, json_string_value(k), v ? v : json_null());
        }
        s->sig[i] = json_dumps(vals, JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(12));
        json_decref(vals);
    }
}

static void free_side(side *s)
{
    for (size_t i = 0; i < s->n; i++) {
        if (s->recs) json_decref(s->recs[i]);
        if (s->sig) free(s->sig[i]);
    }
    free(s->recs);
    free(s->sig);
    mpx_free_list(s->dirs, s->n);
}

static size_t find_sig(const side *s, const char *sig)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->sig[i] && !strcmp(s->sig[i], sig)) return i;
    return (size_t)-1;
}

static int compare(side *a, side *b, const mpx_diff_opts *o, char *err, size_t errlen)
{
    int rc = 0;
    for (size_t i = 0; i < a->n; i++) {
        size_t j = find_sig(b, a->sig[i]);
        if (j == (size_t)-1) {
            fprintf(o->out, "only in %s: %s %s\n", a->root, a->dirs[i], a->sig[i]);
            rc = 1;
            continue;
        }
        char heading[2 * PATH_MAX + 600];
        snprintf(heading, sizeof heading, "== %s: %s vs %s", a->sig[i], a->dirs[i], b->dirs[j]);
        int d = mpx_diff_runs(a->dirs[i], b->dirs[j], o, heading, err, errlen);
        if (d < 0) return -1;
        rc |= d;
    }
    for (size_t j = 0; j < b->n; j++)
        if (find_sig(a, b->sig[j]) == (size_t)-1) {
            fprintf(o->out, "only in %s: %s %s\n", b->root, b->dirs[j], b->sig[j]);
            rc = 1;
        }
    return rc;
}

int mpx_diff_sweeps(const char *a, const char *b, const mpx_diff_opts *o, char *err, size_t errlen)
{
    side sa, sb;
    int rc = -1;
    if (load_side(&sa, a, err, errlen) | load_side(&sb, b, err, errlen)) goto out;
    if (!sa.n || !sb.n) {
        snprintf(err, errlen, "%s: no */run.json below it", sa.n ? b : a);
        goto out;
    }
    json_t *keys = json_array();
    add_axes_of(a, keys);
    add_axes_of(b, keys);
    if (!json_array_size(keys)) add_varying(&sa, keys);
    sign(&sa, keys);
    sign(&sb, keys);
    json_decref(keys);
    for (size_t i = 0; i < sa.n; i++)
        for (size_t k = 0; k < i; k++)
            if (!strcmp(sa.sig[i], sa.sig[k])) {
                snprintf(err, errlen, "%s and %s have the same axis values %s: cannot pair cells",
                         sa.dirs[k], sa.dirs[i], sa.sig[i]);
                goto out;
            }
    rc = compare(&sa, &sb, o, err, errlen);
out:
    free_side(&sa);
    free_side(&sb);
    return rc;
}
