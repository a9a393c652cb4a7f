/* Building the matrix: load the runs, place them by their row/column values, check
 * that runs sharing a cell differ only by seed, and aggregate each metric. */
#include "matrix.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../config/config_util.h"
#include "../config/core_schema.h"
#include "../engine/registry.h"
#include "sweep_read.h"

/* Student's t, two-sided 95% (the 0.975 quantile), df = 1..30. */
static const double t975[31] = {
    NAN,       12.706205, 4.302653, 3.182446, 2.776445, 2.570582, 2.446912, 2.364624,
    2.306004,  2.262157,  2.228139, 2.200985, 2.178813, 2.160369, 2.144787, 2.131450,
    2.119905,  2.109816,  2.100922, 2.093024, 2.085963, 2.079614, 2.073873, 2.068658,
    2.063899,  2.059539,  2.055529, 2.051831, 2.048407, 2.045230, 2.042272,
};

double mpx_t975(size_t df)
{
    return df < 31 ? t975[df] : 1.96;
}

mpx_stat mpx_stat_of(const double *v, size_t n)
{
    mpx_stat s = { 0, NAN, NAN, NAN };
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        if (!isnan(v[i])) { sum += v[i]; s.n++; }
    if (!s.n) return s;
    s.mean = sum / (double)s.n;
    if (s.n < 2) return s;
    double ss = 0;
    for (size_t i = 0; i < n; i++)
        if (!isnan(v[i])) ss += (v[i] - s.mean) * (v[i] - s.mean);
    s.sd = sqrt(ss / (double)(s.n - 1));
    s.ci = mpx_t975(s.n - 1) * s.sd / sqrt((double)s.n);
    return s;
}

/* ---- placing runs -------------------------------------------------------------------- */

static int cmp_json(const void *a, const void *b)
{
    json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
    if (json_is_number(x) && json_is_number(y)) {
        double d = json_number_value(x) - json_number_value(y);
        return d < 0 ? -1 : d > 0;
    }
    if (json_is_number(x) != json_is_number(y)) return json_is_number(x) ? -1 : 1;
    char bx[256], by[256];
    return strcmp(mpx_json_text(x, bx, sizeof bx), mpx_json_text(y, by, sizeof by));
}

static size_t index_of(json_t *arr, json_t *v)
{
    size_t i;
    json_t *e;
    json_array_foreach(arr, i, e) if (json_equal(e, v)) return i;
    return (size_t)-1;
}

/* Distinct values of `key` over the runs: the sweep's axis order first (when the key is
 * an axis of DIR/sweep.json), then the rest sorted. */
static json_t *distinct(const mpx_matrix *m, const char *key, json_t *const *vals, json_t *index)
{
    json_t *out = json_array(), *ax, *rest = json_array();
    size_t i;
    json_array_foreach(json_object_get(index, "axes"), i, ax) {
        const char *k = json_string_value(json_object_get(ax, "key"));
        if (!k || strcmp(k, key)) continue;
        json_t *v;
        size_t j;
        json_array_foreach(json_object_get(ax, "values"), j, v) {
            for (size_t r = 0; r < m->n_runs; r++)
                if (json_equal(vals[r], v) && index_of(out, v) == (size_t)-1) json_array_append(out, v);
        }
    }
    for (size_t r = 0; r < m->n_runs; r++)
        if (index_of(out, vals[r]) == (size_t)-1 && index_of(rest, vals[r]) == (size_t)-1)
            json_array_append(rest, vals[r]);
    size_t n = json_array_size(rest);
    json_t **tmp = calloc(n ? n : 1, sizeof *tmp);
    for (size_t k = 0; tmp && k < n; k++) tmp[k] = json_array_get(rest, k);
    if (tmp && n) qsort(tmp, n, sizeof *tmp, cmp_json);
    for (size_t k = 0; tmp && k < n; k++) json_array_append(out, tmp[k]);
    free(tmp);
    json_decref(rest);
    return out;
}

static int load_runs(mpx_matrix *m, const char *dir, char *err, size_t errlen)
{
    char **dirs;
    size_t n;
    if (mpx_list_runs(dir, &dirs, &n, err, errlen)) return -1;
    if (!n) {
        snprintf(err, errlen, "%s: no */run.json below it (expected a sweep folder)", dir);
        free(dirs);
        return -1;
    }
    m->runs = calloc(n, sizeof *m->runs);
    if (!m->runs) { mpx_free_list(dirs, n); snprintf(err, errlen, "out of memory"); return -1; }
    for (size_t i = 0; i < n; i++) {
        mpx_matrix_run *r = &m->runs[m->n_runs];
        r->dir = dirs[i];
        dirs[i] = NULL;
        m->n_runs++;
        if (!(r->rec = mpx_run_load(r->dir, err, errlen))) { mpx_free_list(dirs, n); return -1; }
        r->status = json_string_value(json_object_get(r->rec, "status"));
        if (!r->status) r->status = "unknown";
        const char *why = json_string_value(json_object_get(r->rec, "reason"));
        if (!why) why = json_string_value(json_object_get(r->rec, "error"));
        r->why = why ? why : "";
        json_t *pg = json_object_get(r->rec, "progress");
        if (strcmp(r->status, "finished") && json_is_integer(json_object_get(pg, "step")))
            snprintf(r->progress, sizeof r->progress, "at step %lld of %lld",
                     (long long)json_integer_value(json_object_get(pg, "step")),
                     (long long)json_integer_value(json_object_get(pg, "total_steps")));
        /* how far an unfinished run got, beside its reason (a killed run always has one) */
        if (r->progress[0] && !why) {
            r->why = r->progress;
        } else if (r->progress[0]) {
            size_t len = strlen(why) + strlen(r->progress) + 4;
            if (!(r->why_owned = malloc(len))) { mpx_free_list(dirs, n); snprintf(err, errlen, "out of memory"); return -1; }
            snprintf(r->why_owned, len, "%s (%s)", why, r->progress);
            r->why = r->why_owned;
        }
    }
    mpx_free_list(dirs, n);
    return 0;
}

/* The value shown for such a key: one shared string, borrowed as key_values' other values
 * are (the tables print strings without their quotes). */
static json_t *not_applicable(void)
{
    static json_t *na;
    if (!na) na = json_string("\u2014");
    return na;
}

/* Whether `key` is an option of a plugin the run did not select: "KIND.NAME.option" where
 * the record's KIND.plugin names another plugin (a precision policy's own option, in a row
 * of fp32 runs). */
static int other_plugins_key(json_t *rec, const char *key)
{
    const char *dot = strchr(key, '.'), *dot2 = dot ? strchr(dot + 1, '.') : NULL;
    if (!dot2 || (size_t)(dot - key) > 64) return 0;
    char sel[80];
    snprintf(sel, sizeof sel, "%.*s.plugin", (int)(dot - key), key);
    json_t *chosen = mpx_run_config_value(rec, sel);
    const char *name = json_string_value(chosen);
    return name && (strlen(name) != (size_t)(dot2 - dot - 1) || strncmp(name, dot + 1, (size_t)(dot2 - dot - 1)));
}

/* The value of `key` for every run ("—" where it is an option of a plugin the run did not
 * select); an error names the first run lacking it otherwise. */
static json_t **key_values(const mpx_matrix *m, const char *key, char *err, size_t errlen)
{
    json_t **v = calloc(m->n_runs, sizeof *v);
    if (!v) { snprintf(err, errlen, "out of memory"); return NULL; }
    for (size_t r = 0; r < m->n_runs; r++) {
        v[r] = key ? mpx_run_config_value(m->runs[r].rec, key) : json_null();
        if (!v[r] && other_plugins_key(m->runs[r].rec, key)) v[r] = not_applicable();
        if (!v[r]) {
            snprintf(err, errlen, "%s/run.json: no configuration key '%s' in config.effective "
                     "(keys are dotted, e.g. precision.plugin)", m->runs[r].dir, key);
            free(v);
            return NULL;
        }
    }
    return v;
}

/* The configuration of a finished run without the keys that may differ within a cell. */
static json_t *identity(json_t *rec)
{
    json_t *flat = json_object();
    mpx_json_flatten(json_object_get(json_object_get(rec, "config"), "effective"), "", flat);
    json_object_del(flat, "run.seed");
    json_object_del(flat, "run.name");
    json_object_del(flat, "run.output_dir");
    /* set by the sweep executors to split the cores (--jobs, Slurm); the cpu backend's
     * results do not depend on it (plugins/backend/cpu/cpu_internal.h, test_cpu_ops) */
    json_object_del(flat, "backend.cpu.threads");
    /* how often the training state is saved, and the optimizer's update window: results
     * are bitwise the same either way (tests/test_resume.c, tests/test_update_window.c) */
    json_object_del(flat, "train.checkpoint_every");
    json_object_del(flat, "train.update_chunk");
    /* the optimizer's threads: bitwise the same for any count (tests/test_update_threads.c) */
    json_object_del(flat, "train.update_threads");
    return flat;
}

/* The schema default of a dotted key ("train.update_chunk", "data.squad.group_by_length",
 * "optimizer.adam.anyprecision": a plugin's key when reg has that plugin), a libconfig
 * literal; NULL for an unknown key. */
static const char *schema_default(const mpx_registry *reg, const char *dotted)
{
    const char *dot = strchr(dotted, '.');
    if (!dot) return NULL;
    char group[64];
    size_t gl = (size_t)(dot - dotted);
    if (gl >= sizeof group) return NULL;
    memcpy(group, dotted, gl);
    group[gl] = 0;
    const mpx_group_schema *g = mpx_config_find_group(mpx_core_groups, mpx_n_core_groups, group);
    if (!g) return NULL;
    const char *rest = dot + 1, *dot2 = strchr(rest, '.');
    const mpx_option *opts = g->opts;
    size_t n = g->n_opts;
    if (dot2) { /* a sub-schema's key: the core's (data.squad.*) or a plugin's (optimizer.adam.*) */
        char sub[128];
        size_t sl = (size_t)(dot2 - rest);
        if (sl >= sizeof sub) return NULL;
        memcpy(sub, rest, sl);
        sub[sl] = 0;
        opts = NULL;
        n = 0;
        for (size_t i = 0; g->plugin_kind < 0 && i < g->n_subs; i++)
            if (!strcmp(g->subs[i].name, sub)) {
                opts = g->subs[i].opts;
                n = g->subs[i].n_opts;
            }
        const mpx_plugin_rec *p = g->plugin_kind >= 0 && reg ? mpx_registry_find(reg, (mpx_kind)g->plugin_kind, sub) : NULL;
        if (p && p->loaded) {
            opts = p->desc.options;
            n = p->desc.n_options;
        }
        rest = dot2 + 1;
    }
    for (size_t i = 0; i < n; i++)
        if (!strcmp(opts[i].key, rest)) return opts[i].def;
    return NULL;
}

/* Whether a recorded value is the schema default of its key: then a record written by
 * an mpx that did not have the key yet (the key absent) ran with the same behaviour. */
static int is_default(const mpx_registry *reg, const char *key, const json_t *v)
{
    const char *d = schema_default(reg, key);
    if (!d || !v) return 0;
    if (json_is_boolean(v)) return !strcmp(d, json_is_true(v) ? "true" : "false");
    if (json_is_string(v)) {
        size_t n = strlen(d);
        return n >= 2 && d[0] == '"' && d[n - 1] == '"' && strlen(json_string_value(v)) == n - 2 &&
               !strncmp(d + 1, json_string_value(v), n - 2);
    }
    if (json_is_number(v)) {
        char *end;
        double x = strtod(d, &end);
        return end != d && !*end && x == json_number_value(v);
    }
    return 0;
}

/* Two finished runs in one cell must differ only by seed (a key that only one of them
 * records, at its schema default, is no difference: see is_default). */
static int check_same(const mpx_matrix *m, const mpx_matrix_cell *c, char *err, size_t errlen)
{
    json_t *first = NULL;
    size_t first_run = 0;
    int rc = 0;
    for (size_t k = 0; k < c->n_runs && !rc; k++) {
        const mpx_matrix_run *r = &m->runs[c->runs[k]];
        if (strcmp(r->status, "finished")) continue;
        json_t *id = identity(r->rec);
        if (!first) { first = id; first_run = c->runs[k]; continue; }
        const char *key;
        json_t *v;
        json_object_foreach(id, key, v) {
            json_t *w = json_object_get(first, key);
            if (w ? json_equal(v, w) : is_default(m->reg, key, v)) continue;
            if (!w) {
                snprintf(err, errlen, "%s and %s fall in the same cell but only %s has the key %s (not at "
                         "its default): put it on --rows or --cols", m->runs[first_run].dir, r->dir, r->dir, key);
                rc = -1;
                break;
            }
            char a[128], b[128];
            snprintf(err, errlen, "%s and %s fall in the same cell but differ in %s (%s vs %s), "
                     "not only in run.seed: put %s on --rows or --cols", m->runs[first_run].dir, r->dir,
                     key, mpx_json_text(w, a, sizeof a), mpx_json_text(v, b, sizeof b), key);
            rc = -1;
            break;
        }
        json_object_foreach(first, key, v) {
            if (rc || json_object_get(id, key) || is_default(m->reg, key, v)) continue;
            snprintf(err, errlen, "%s and %s fall in the same cell but only %s has the key %s (not at "
                     "its default): put it on --rows or --cols", m->runs[first_run].dir, r->dir,
                     m->runs[first_run].dir, key);
            rc = -1;
        }
        json_decref(id);
    }
    json_decref(first);
    return rc;
}

static int fill_cell(const mpx_matrix *m, mpx_matrix_cell *c)
{
    c->stats = calloc(m->n_metrics, sizeof *c->stats);
    c->values = calloc(m->n_metrics, sizeof *c->values);
    if (!c->stats || !c->values) return -1;
    for (size_t k = 0; k < m->n_metrics; k++) {
        c->values[k] = calloc(c->n_runs ? c->n_runs : 1, sizeof **c->values);
        if (!c->values[k]) return -1;
        size_t n = 0;
        for (size_t i = 0; i < c->n_runs; i++) {
            const mpx_matrix_run *r = &m->runs[c->runs[i]];
            if (strcmp(r->status, "finished")) continue;
            double v;
            c->values[k][n++] = mpx_run_metric(r->rec, m->metrics[k], &v) ? NAN : v;
        }
        c->stats[k] = mpx_stat_of(c->values[k], n);
    }
    return 0;
}

static int split_metrics(mpx_matrix *m, const char *metrics, char *err, size_t errlen)
{
    char *copy = strdup(metrics), *save = NULL;
    m->metrics = calloc(strlen(metrics) / 2 + 2, sizeof *m->metrics);
    if (!copy || !m->metrics) { free(copy); snprintf(err, errlen, "out of memory"); return -1; }
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save))
        m->metrics[m->n_metrics++] = strdup(t);
    free(copy);
    if (!m->n_metrics) { snprintf(err, errlen, "--metric: no metric named"); return -1; }
    return 0;
}

/* A metric no finished run has is a typo: say what there is. */
static int check_metrics(const mpx_matrix *m, char *err, size_t errlen)
{
    for (size_t k = 0; k < m->n_metrics; k++) {
        json_t *some = NULL;
        int found = 0;
        for (size_t r = 0; r < m->n_runs && !found; r++) {
            if (strcmp(m->runs[r].status, "finished")) continue;
            double v;
            some = m->runs[r].rec;
            found = mpx_run_metric(some, m->metrics[k], &v) == 0;
        }
        if (found || !some) continue;
        char have[1024] = "";
        const char *key;
        json_t *v;
        json_object_foreach(json_object_get(some, "metrics"), key, v) {
            if (!json_is_number(v)) continue;
            size_t used = strlen(have);
            snprintf(have + used, sizeof have - used, "%s%s", used ? ", " : "", key);
        }
        snprintf(err, errlen, "--metric %s: no finished run has it (numeric metrics: %s; or a dotted "
                 "path into run.json such as memory.bytes_per_param)", m->metrics[k], have);
        return -1;
    }
    return 0;
}

static int place(mpx_matrix *m, const char *dir, char *err, size_t errlen)
{
    json_t **rv = key_values(m, m->row_key, err, errlen), **cv = rv ? key_values(m, m->col_key, err, errlen) : NULL;
    if (!rv || !cv) { free(rv); return -1; }
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/sweep.json", dir);
    json_t *index = json_load_file(path, 0, NULL);
    m->rows = distinct(m, m->row_key, rv, index);
    m->cols = distinct(m, m->col_key ? m->col_key : "", cv, index);
    json_decref(index);
    size_t nr = json_array_size(m->rows), nc = json_array_size(m->cols);
    m->cells = calloc(nr * nc, sizeof *m->cells);
    for (size_t r = 0; m->cells && r < m->n_runs; r++) {
        m->runs[r].row = index_of(m->rows, rv[r]);
        m->runs[r].col = index_of(m->cols, cv[r]);
        mpx_matrix_cell *c = &m->cells[m->runs[r].row * nc + m->runs[r].col];
        size_t *grown = realloc(c->runs, (c->n_runs + 1) * sizeof *grown);
        if (!grown) break;
        c->runs = grown;
        c->runs[c->n_runs++] = r;
        c->n_finished += !strcmp(m->runs[r].status, "finished");
    }
    free(rv);
    free(cv);
    if (!m->cells) { snprintf(err, errlen, "out of memory"); return -1; }
    return 0;
}

int mpx_matrix_build(mpx_matrix *m, const char *dir, const char *row_key, const char *col_key,
                     const char *metrics, const mpx_registry *reg, char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    m->reg = reg;
    m->row_key = row_key;
    m->col_key = col_key;
    if (split_metrics(m, metrics, err, errlen) || load_runs(m, dir, err, errlen) ||
        place(m, dir, err, errlen) || check_metrics(m, err, errlen))
        return -1;
    size_t n = json_array_size(m->rows) * json_array_size(m->cols);
    for (size_t i = 0; i < n; i++) {
        if (check_same(m, &m->cells[i], err, errlen)) return -1;
        if (fill_cell(m, &m->cells[i])) { snprintf(err, errlen, "out of memory"); return -1; }
    }
    return 0;
}

void mpx_matrix_free(mpx_matrix *m)
{
    size_t n = m->cells ? json_array_size(m->rows) * json_array_size(m->cols) : 0;
    for (size_t i = 0; i < n; i++) {
        mpx_matrix_cell *c = &m->cells[i];
        for (size_t k = 0; c->values && k < m->n_metrics; k++) free(c->values[k]);
        free(c->values);
        free(c->stats);
        free(c->runs);
    }
    free(m->cells);
    for (size_t i = 0; i < m->n_runs; i++) {
        free(m->runs[i].dir);
        free(m->runs[i].why_owned);
        json_decref(m->runs[i].rec);
    }
    free(m->runs);
    for (size_t k = 0; k < m->n_metrics; k++) free(m->metrics[k]);
    free(m->metrics);
    json_decref(m->rows);
    json_decref(m->cols);
    memset(m, 0, sizeof *m);
}

const char **mpx_matrix_finished_dirs(const mpx_matrix *m, const mpx_matrix_cell *c, size_t *n)
{
    const char **d = calloc(c->n_runs + 1, sizeof *d);
    *n = 0;
    for (size_t i = 0; d && i < c->n_runs; i++)
        if (!strcmp(m->runs[c->runs[i]].status, "finished")) d[(*n)++] = m->runs[c->runs[i]].dir;
    return d;
}

void mpx_matrix_value_text(json_t *v, char *buf, size_t n)
{
    if (json_is_string(v)) { snprintf(buf, n, "%s", json_string_value(v)); return; }
    char *t = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    snprintf(buf, n, "%s", t ? t : "?");
    free(t);
}
