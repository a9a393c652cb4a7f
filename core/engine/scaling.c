/* Per-tensor scaling recipes (scaling.h). The delayed rule follows Transformer Engine's
 * transformer_engine/common/recipe/delayed_scaling.cu (amax_and_scale_update). */
#include "scaling.h"

#include "format_table.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

float mpx_delayed_update(float *hist, int len, mpx_amax_algo algo, float fmt_max, int margin, float old_scale)
{
    float last = hist[0], amax = 0.0f;
    for (int i = 0; i < len; i++) amax = fmaxf(amax, hist[i]);
    /* roll by one toward the front: hist[i] = hist[i + 1], the last slot gets hist[0];
     * then the slot the next step fills is cleared */
    memmove(hist, hist + 1, (size_t)(len - 1) * sizeof *hist);
    hist[len - 1] = last;
    hist[0] = 0.0f;
    if (algo == MPX_AMAX_MOST_RECENT) amax = last;
    float scaled_max = fmt_max * ldexpf(1.0f, -margin);
    return isfinite(amax) && amax > 0.0f ? scaled_max / amax : old_scale;
}

float mpx_current_scale(float amax, float fmt_max, int margin)
{
    float scaled_max = fmt_max * ldexpf(1.0f, -margin);
    return isfinite(amax) && amax > 0.0f ? scaled_max / amax : 1.0f;
}

void mpx_scaling_init(mpx_scaling_state *st, const mpx_precision_desc *d)
{
    memset(st, 0, sizeof *st);
    st->recipe = d->scaling;
    st->len = d->amax_history_len > 0 ? d->amax_history_len : 1;
    st->algo = d->amax_algo;
    st->margin = d->margin;
    st->trace = json_array();
}

void mpx_scaling_free(mpx_scaling_state *st)
{
    for (size_t i = 0; i < st->n; i++) free(st->e[i].hist);
    free(st->e);
    for (size_t i = 0; i < st->n_pending; i++) free(st->pending[i].hist);
    free(st->pending);
    json_decref(st->trace);
    memset(st, 0, sizeof *st);
}

static mpx_scale_entry *find(mpx_scaling_state *st, mpx_dtype t, const void *key)
{
    for (size_t i = 0; i < st->n; i++)
        if (st->e[i].key == key && st->e[i].t == t) return &st->e[i];
    return NULL;
}

int mpx_scaling_get(mpx_scaling_state *st, mpx_dtype t, const mpx_format *f, const void *key,
                    const char *name, float amax, float *scale)
{
    float fmax = mpx_fmt_max(f);
    if (st->recipe == MPX_SCALING_CURRENT) {
        *scale = mpx_current_scale(amax, fmax, st->margin);
        return 0;
    }
    if (st->recipe != MPX_SCALING_DELAYED) { *scale = 1.0f; return 0; }
    mpx_scale_entry *e = find(st, t, key);
    if (!e) {
        if (st->n == st->cap) {
            size_t cap = st->cap ? 2 * st->cap : 64;
            mpx_scale_entry *v = realloc(st->e, cap * sizeof *v);
            if (!v) return -1;
            st->e = v;
            st->cap = cap;
        }
        e = &st->e[st->n];
        memset(e, 0, sizeof *e);
        e->hist = calloc((size_t)st->len, sizeof *e->hist);
        if (!e->hist) return -1;
        st->n++;
        e->t = t;
        e->key = key;
        e->scale = 1.0f;            /* TE starts every scale at 1 */
        e->fmt_max = fmax;
        snprintf(e->name, sizeof e->name, "%s", name);
        for (size_t i = 0; i < st->n_pending; i++) {
            mpx_scale_pending *p = &st->pending[i];
            if (p->hist && p->t == t && !strcmp(p->name, e->name)) {
                e->scale = p->scale;
                e->uses = p->uses;
                memcpy(e->hist, p->hist, (size_t)st->len * sizeof *e->hist);
                free(p->hist);
                p->hist = NULL;
                break;
            }
        }
    }
    /* a NaN amax is kept (fmaxf would drop it) so the update keeps the old scale */
    e->hist[0] = isnan(amax) || isnan(e->hist[0]) ? NAN : fmaxf(e->hist[0], amax);
    e->uses++;
    *scale = e->scale;
    return 0;
}

int mpx_scaling_mark_save(const mpx_scaling_state *st, mpx_scaling_mark *m)
{
    m->n = st->n;
    m->uses = malloc((st->n ? st->n : 1) * sizeof *m->uses);
    m->amax = malloc((st->n ? st->n : 1) * sizeof *m->amax);
    if (!m->uses || !m->amax) {
        free(m->uses);
        free(m->amax);
        m->uses = NULL;
        m->amax = NULL;
        return -1;
    }
    for (size_t i = 0; i < st->n; i++) {
        m->uses[i] = st->e[i].uses;
        m->amax[i] = st->e[i].hist[0];
    }
    return 0;
}

void mpx_scaling_mark_restore(mpx_scaling_state *st, mpx_scaling_mark *m)
{
    for (size_t i = 0; i < m->n && i < st->n; i++) {
        st->e[i].uses = m->uses[i];
        st->e[i].hist[0] = m->amax[i];
    }
    for (size_t i = m->n; i < st->n; i++) free(st->e[i].hist);
    if (st->n > m->n) st->n = m->n;
    free(m->uses);
    free(m->amax);
    memset(m, 0, sizeof *m);
}

/* JSON has no NaN or inf: those become null. */
static json_t *num(float x) { return isfinite(x) ? json_real(x) : json_null(); }

void mpx_scaling_end_step(mpx_scaling_state *st)
{
    if (st->recipe != MPX_SCALING_DELAYED) return;
    st->steps++;
    json_t *row = json_array();
    json_array_append_new(row, json_integer(st->steps));
    float lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < st->n; i++) {
        mpx_scale_entry *e = &st->e[i];
        e->scale = mpx_delayed_update(e->hist, st->len, st->algo, e->fmt_max, st->margin, e->scale);
        lo = fminf(lo, e->scale);
        hi = fmaxf(hi, e->scale);
    }
    if (st->n) {
        json_array_append_new(row, num(lo));
        json_array_append_new(row, num(hi));
        json_array_append_new(st->trace, row);
    } else {
        json_decref(row);
    }
}

json_t *mpx_scaling_state_json(const mpx_scaling_state *st, const mpx_format_table *fmts)
{
    static const char *recipes[] = { "none", "delayed", "current", "mx" };
    json_t *o = json_object(), *tensors = json_array();
    json_object_set_new(o, "recipe", json_string(recipes[st->recipe & 3]));
    if (st->recipe == MPX_SCALING_DELAYED) {
        json_object_set_new(o, "amax_history_len", json_integer(st->len));
        json_object_set_new(o, "amax_compute_algo", json_string(st->algo == MPX_AMAX_MOST_RECENT ? "most_recent" : "max"));
    }
    json_object_set_new(o, "margin", json_integer(st->margin));
    for (size_t i = 0; i < st->n; i++) {
        const mpx_scale_entry *e = &st->e[i];
        json_t *h = json_array();
        for (int j = 0; j < st->len; j++) json_array_append_new(h, num(e->hist[j]));
        json_array_append_new(tensors, json_pack("{s:s, s:s, s:o, s:I, s:o}", "tensor", e->name,
                                                 "format", mpx_dtype_label(fmts, e->t), "scale", num(e->scale),
                                                 "uses", (json_int_t)e->uses, "amax_history", h));
    }
    json_object_set_new(o, "tensors", tensors);
    json_object_set_new(o, "trace_min_max", json_deep_copy(st->trace));
    return o;
}

static json_t *bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return json_sprintf("%08x", (unsigned)u);
}

static int unbits(json_t *j, float *x)
{
    const char *s = json_string_value(j);
    if (!s) return -1;
    uint32_t u = (uint32_t)strtoul(s, NULL, 16);
    memcpy(x, &u, 4);
    return 0;
}

json_t *mpx_scaling_checkpoint(const mpx_scaling_state *st)
{
    json_t *entries = json_array();
    for (size_t i = 0; i < st->n; i++) {
        const mpx_scale_entry *e = &st->e[i];
        json_t *h = json_array();
        for (int j = 0; j < st->len; j++) json_array_append_new(h, bits(e->hist[j]));
        json_array_append_new(entries, json_pack("{s:s, s:i, s:o, s:I, s:o}", "tensor", e->name, "dtype", (int)e->t,
                                                 "scale", bits(e->scale), "uses", (json_int_t)e->uses, "amax_history", h));
    }
    return json_pack("{s:i, s:I, s:o, s:O}", "amax_history_len", st->len, "steps", (json_int_t)st->steps,
                     "entries", entries, "trace", st->trace);
}

int mpx_scaling_restore(mpx_scaling_state *st, json_t *j)
{
    json_t *entries = json_object_get(j, "entries");
    if (json_integer_value(json_object_get(j, "amax_history_len")) != st->len || !json_is_array(entries)) return -1;
    size_t n = json_array_size(entries);
    st->pending = calloc(n ? n : 1, sizeof *st->pending);
    if (!st->pending) return -1;
    st->n_pending = n;
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(entries, i), *h = json_object_get(e, "amax_history");
        mpx_scale_pending *p = &st->pending[i];
        const char *name = json_string_value(json_object_get(e, "tensor"));
        if (!name || json_array_size(h) != (size_t)st->len || unbits(json_object_get(e, "scale"), &p->scale)) return -1;
        snprintf(p->name, sizeof p->name, "%s", name);
        p->t = (mpx_dtype)json_integer_value(json_object_get(e, "dtype"));
        p->uses = json_integer_value(json_object_get(e, "uses"));
        p->hist = calloc((size_t)st->len, sizeof *p->hist);
        if (!p->hist) return -1;
        for (int k = 0; k < st->len; k++)
            if (unbits(json_array_get(h, (size_t)k), &p->hist[k])) return -1;
    }
    st->steps = json_integer_value(json_object_get(j, "steps"));
    json_t *trace = json_object_get(j, "trace");
    if (json_is_array(trace)) {
        json_decref(st->trace);
        st->trace = json_deep_copy(trace);
    }
    return 0;
}
