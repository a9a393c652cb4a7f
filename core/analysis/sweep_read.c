#include "sweep_read.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../record/record.h"

json_t *mpx_run_load(const char *dir, char *err, size_t errlen)
{
    char path[PATH_MAX + 16];
    json_error_t e;
    snprintf(path, sizeof path, "%s/run.json", dir);
    json_t *j = json_load_file(path, 0, &e);
    if (!j) {
        if (access(path, F_OK) != 0) snprintf(err, errlen, "%s: no such file (not a run folder)", path);
        else snprintf(err, errlen, "%s:%d:%d: %s", path, e.line, e.column, e.text);
        return NULL;
    }
    if (!json_is_object(j)) {
        snprintf(err, errlen, "%s: not a JSON object", path);
        json_decref(j);
        return NULL;
    }
    return j;
}

int mpx_is_run_dir(const char *dir)
{
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/run.json", dir);
    return access(path, F_OK) == 0;
}

json_t *mpx_json_path(json_t *root, const char *dotted)
{
    char part[256];
    const char *p = dotted;
    json_t *v = root;
    while (v && *p) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        if (n >= sizeof part) return NULL;
        memcpy(part, p, n);
        part[n] = 0;
        char *end;
        unsigned long i = strtoul(part, &end, 10);
        /* an array's element by its index (metrics.replica_divergence.rel_l2.3: rank 3's) */
        v = json_is_array(v) && n && !*end ? json_array_get(v, i) : json_object_get(v, part);
        p += n + (dot ? 1 : 0);
    }
    return v;
}

json_t *mpx_run_config_value(json_t *run, const char *key)
{
    json_t *v = mpx_json_path(json_object_get(json_object_get(run, "config"), "effective"), key);
    if (!v) v = json_object_get(json_object_get(json_object_get(run, "cell"), "axes"), key);
    return v;
}

int mpx_run_metric(json_t *run, const char *name, double *out)
{
    json_t *m = json_object_get(run, "metrics"), *v = json_object_get(m, name);
    /* records from before final_loss_mean carry the losses it is computed from */
    if (!v && !strcmp(name, "final_loss_mean")) return mpx_tail_loss_mean(json_object_get(m, "losses"), out);
    if (!v) v = mpx_json_path(run, name);
    if (!v) v = mpx_json_path(m, name);   /* a path inside metrics: replica_divergence.rel_l2.3 */
    const char *last = strrchr(name, '.');
    if (!v && last && (!strcmp(last, ".max") || !strcmp(last, ".min") || !strcmp(last, ".mean"))) {
        /* an array of numbers reduced (per-rank values: replica_divergence.max_abs.max) */
        char parent[512];
        snprintf(parent, sizeof parent, "%.*s", (int)(last - name), name);
        json_t *a = mpx_json_path(run, parent);
        if (!a) a = mpx_json_path(m, parent);
        size_t n = json_array_size(a), k;
        if (!n) return -1;
        double acc = last[2] == 'a' ? -INFINITY : last[2] == 'i' ? INFINITY : 0;
        for (k = 0; k < n; k++) {
            json_t *x = json_array_get(a, k);
            if (!json_is_number(x)) return -1;
            double d = json_number_value(x);
            acc = last[2] == 'a' ? fmax(acc, d) : last[2] == 'i' ? fmin(acc, d) : acc + d / (double)n;
        }
        *out = acc;
        return 0;
    }
    if (json_is_number(v)) { *out = json_number_value(v); return 0; }
    if (json_is_boolean(v)) { *out = json_is_true(v); return 0; }
    return -1;
}

/* Index of `column` in the header line, or -1. */
static int column_index(char *header, const char *column)
{
    header[strcspn(header, "\r\n")] = 0;
    int i = 0;
    for (char *tok = header, *next; tok; tok = next, i++) {
        next = strchr(tok, ',');
        if (next) *next++ = 0;
        if (!strcmp(tok, column)) return i;
    }
    return -1;
}

/* Field `col` of a CSV line (NaN when empty or absent). */
static double field(const char *line, int col)
{
    for (int i = 0; i < col; i++) {
        line = strchr(line, ',');
        if (!line) return NAN;
        line++;
    }
    if (*line == ',' || *line == '\n' || !*line) return NAN;
    return strtod(line, NULL);
}

static int push(double **a, double **b, size_t *n, size_t *cap, double x, double y)
{
    if (*n == *cap) {
        size_t c = *cap ? 2 * *cap : 1024;
        double *na = realloc(*a, c * sizeof *na);
        if (!na) return -1;
        *a = na;
        double *nb = realloc(*b, c * sizeof *nb);
        if (!nb) return -1;
        *b = nb;
        *cap = c;
    }
    (*a)[*n] = x;
    (*b)[*n] = y;
    (*n)++;
    return 0;
}

int mpx_run_column(const char *dir, const char *column, double **steps, double **vals, size_t *n,
                   char *err, size_t errlen)
{
    char path[PATH_MAX + 16], line[8192];
    snprintf(path, sizeof path, "%s/metrics.csv", dir);
    *steps = *vals = NULL;
    *n = 0;
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    int col = fgets(line, sizeof line, f) ? column_index(line, column) : -1;
    if (col < 0) {
        snprintf(err, errlen, "%s: no column '%s' in the header", path, column);
        fclose(f);
        return -1;
    }
    size_t cap = 0;
    int rc = 0;
    while (fgets(line, sizeof line, f)) {
        if (!strchr(line, '\n')) break; /* a torn last line */
        if (push(steps, vals, n, &cap, field(line, 0), field(line, col))) {
            snprintf(err, errlen, "out of memory reading %s", path);
            rc = -1;
            break;
        }
    }
    fclose(f);
    return rc;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int mpx_list_runs(const char *dir, char ***out, size_t *n, char *err, size_t errlen)
{
    DIR *d = opendir(dir);
    *out = NULL;
    *n = 0;
    if (!d) {
        snprintf(err, errlen, "%s: %s", dir, strerror(errno));
        return -1;
    }
    size_t cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char sub[PATH_MAX];
        if (snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name) >= (int)sizeof sub || !mpx_is_run_dir(sub)) continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            char **grown = realloc(*out, cap * sizeof *grown);
            if (!grown) break;
            *out = grown;
        }
        (*out)[(*n)++] = strdup(sub);
    }
    closedir(d);
    if (*n) qsort(*out, *n, sizeof **out, cmp_str);
    return 0;
}

void mpx_free_list(char **list, size_t n)
{
    for (size_t i = 0; i < n; i++) free(list[i]);
    free(list);
}

void mpx_json_flatten(json_t *obj, const char *prefix, json_t *out)
{
    const char *k;
    json_t *v;
    json_object_foreach(obj, k, v) {
        char key[512];
        snprintf(key, sizeof key, "%s%s%s", prefix, prefix[0] ? "." : "", k);
        if (json_is_object(v) && json_object_size(v)) mpx_json_flatten(v, key, out);
        else json_object_set(out, key, v);
    }
}

/* The cell name that <dir>/../sweep.json gives this folder, if any. */
static const char *name_from_index(const char *dir, char *buf, size_t len)
{
    char parent[PATH_MAX], path[PATH_MAX + 16];
    snprintf(parent, sizeof parent, "%s", dir);
    size_t l = strlen(parent);
    while (l > 1 && parent[l - 1] == '/') parent[--l] = 0;
    char *slash = strrchr(parent, '/');
    const char *folder = slash ? slash + 1 : parent;
    snprintf(path, sizeof path, "%.*s/sweep.json", slash ? (int)(slash - parent) : 1, slash ? parent : ".");
    json_t *idx = json_load_file(path, 0, NULL), *c;
    size_t i;
    const char *found = NULL;
    json_array_foreach(json_object_get(idx, "cells"), i, c) {
        const char *f = json_string_value(json_object_get(c, "folder"));
        const char *name = json_string_value(json_object_get(c, "name"));
        if (f && name && !strcmp(f, folder)) {   /* a cell without a name string: not its name */
            snprintf(buf, len, "%s", name);
            found = buf;
            break;
        }
    }
    json_decref(idx);
    return found;
}

const char *mpx_run_label(const char *dir, json_t *run, char *buf, size_t len)
{
    const char *name = json_string_value(json_object_get(json_object_get(run, "cell"), "name"));
    if (name) { snprintf(buf, len, "%s", name); return buf; }
    if (name_from_index(dir, buf, len)) return buf;
    name = json_string_value(mpx_run_config_value(run, "run.name"));
    if (name) { snprintf(buf, len, "%s", name); return buf; }
    const char *slash = strrchr(dir, '/');
    snprintf(buf, len, "%s", slash && slash[1] ? slash + 1 : dir);
    return buf;
}

/* The last k folder names of dir's parent, joined by '/', then '/' and label; -1 when the
 * parent has fewer than k names. */
static int prefixed_label(const char *dir, const char *label, int k, char *out, size_t len)
{
    size_t end = strlen(dir);
    while (end > 1 && dir[end - 1] == '/') end--;
    while (end > 0 && dir[end - 1] != '/') end--;   /* drop the run folder's own name */
    while (end > 0 && dir[end - 1] == '/') end--;
    size_t start = end;
    for (int i = 0; i < k; i++) {
        if (start == 0) return -1;
        if (i) while (start > 0 && dir[start - 1] == '/') start--;
        if (start == 0) return -1;
        while (start > 0 && dir[start - 1] != '/') start--;
    }
    if (end - start == 1 && dir[start] == '.') return -1;   /* "./run": nothing to add */
    snprintf(out, len, "%.*s/%s", (int)(end - start), dir + start, label);
    return 0;
}

static char *label_of(void *runs, size_t i, size_t stride, size_t at) { return (char *)runs + i * stride + at; }

static const char *dir_of(void *runs, size_t i, size_t stride, size_t at)
{
    const char *d;
    memcpy(&d, (char *)runs + i * stride + at, sizeof d);
    return d ? d : "";
}

int mpx_run_labels_distinct(void *runs, size_t n, size_t stride, size_t label_at, size_t dir_at, size_t cap)
{
    char *base = calloc(n ? n : 1, cap), *repeats = calloc(n ? n : 1, 1);
    if (!base || !repeats) { free(base); free(repeats); return -1; }
    for (size_t i = 0; i < n; i++) memcpy(base + i * cap, label_of(runs, i, stride, label_at), cap);
    for (int k = 1; k <= 16; k++) {
        int any = 0;
        for (size_t i = 0; i < n; i++) {
            repeats[i] = 0;
            for (size_t j = 0; j < n && !repeats[i]; j++)
                repeats[i] = j != i && !strcmp(label_of(runs, j, stride, label_at), label_of(runs, i, stride, label_at));
            any |= repeats[i];
        }
        if (!any) break;
        for (size_t i = 0; i < n; i++) {
            if (!repeats[i]) continue;
            const char *b = base + i * cap, *dir = dir_of(runs, i, stride, dir_at);
            char *label = label_of(runs, i, stride, label_at);
            if (prefixed_label(dir, b, k, label, cap) != 0 || k == 16) snprintf(label, cap, "%s (%s)", b, dir);
        }
    }
    free(base);
    free(repeats);
    return 0;
}

const char *mpx_json_text(json_t *v, char *buf, size_t len)
{
    if (json_is_string(v)) snprintf(buf, len, "%s", json_string_value(v));
    else if (json_is_integer(v)) snprintf(buf, len, "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v)) snprintf(buf, len, "%.6g", json_real_value(v));
    else if (json_is_true(v)) snprintf(buf, len, "true");
    else if (json_is_false(v)) snprintf(buf, len, "false");
    else if (!v || json_is_null(v)) snprintf(buf, len, "-");
    else {
        char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        snprintf(buf, len, "%s", t ? t : "?");
        free(t);
    }
    return buf;
}
