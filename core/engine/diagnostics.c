#include "diagnostics.h"
#include "host.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mpx/numerics.h"
#include "../record/fsutil.h"

#define CHUNK ((size_t)1 << 20)
#define MAX_RATIOS 65536

void mpx_diag_underflow(const float *g, size_t n, mpx_dtype t, uint64_t *nonzero, uint64_t *underflow)
{
    uint64_t nz = 0, uf = 0;
    for (size_t i = 0; i < n; i++) {
        if (g[i] == 0.0f) continue;
        nz++;
        if (t == MPX_F16) uf += mpx_round_f16(g[i]) == 0.0f;
        else if (t == MPX_BF16) uf += mpx_round_bf16(g[i]) == 0.0f;
    }
    *nonzero += nz;
    *underflow += uf;
}

void mpx_diag_underflow_fmt(const float *g, size_t n, const mpx_format *f, uint64_t *nonzero, uint64_t *underflow)
{
    uint64_t nz = 0, uf = 0;
    for (size_t i = 0; i < n; i++) {
        if (g[i] == 0.0f) continue;
        nz++;
        uf += mpx_fmt_round(f, g[i]) == 0.0f;
    }
    *nonzero += nz;
    *underflow += uf;
}

void mpx_diag_stalled(const void *before, const void *after, mpx_dtype t, const float *update, size_t n,
                      uint64_t *updated, uint64_t *stalled)
{
    size_t w = mpx_dtype_size(t);
    const unsigned char *a = before, *b = after;
    uint64_t up = 0, st = 0;
    /* bit-for-bit equal: the stored values compared as integers of their width (a memcmp
     * call per element made a diagnostics step a quarter slower than a plain step) */
#define STALLED_LOOP(T)                                                           \
    for (size_t i = 0; i < n; i++) {                                              \
        T x, y;                                                                   \
        memcpy(&x, a + i * sizeof(T), sizeof(T));                                 \
        memcpy(&y, b + i * sizeof(T), sizeof(T));                                 \
        up += update[i] != 0.0f;                                                  \
        st += (update[i] != 0.0f) & (x == y);                                     \
    }
    if (w == 4) { STALLED_LOOP(uint32_t) }
    else if (w == 2) { STALLED_LOOP(uint16_t) }
    else if (w == 1) { STALLED_LOOP(uint8_t) }
    else
        for (size_t i = 0; i < n; i++) {
            if (update[i] == 0.0f) continue;
            up++;
            st += memcmp(a + i * w, b + i * w, w) == 0;
        }
#undef STALLED_LOOP
    *updated += up;
    *stalled += st;
}

static int cmp_float(const void *x, const void *y)
{
    float a = *(const float *)x, b = *(const float *)y;
    return (a > b) - (a < b);
}

double mpx_diag_median(float *v, size_t n)
{
    if (!n) return NAN;
    qsort(v, n, sizeof *v, cmp_float);
    return n % 2 ? v[n / 2] : 0.5 * ((double)v[n / 2 - 1] + v[n / 2]);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int mpx_diag_open(mpx_diagnostics *d, mpx_session *s, const char *dir, char *err, size_t errlen)
{
    memset(d, 0, sizeof *d);
    d->enabled = s->set.diagnostics;
    d->every = s->set.diag_every;
    if (!d->enabled) return 0;
    if (d->every < 1) d->every = 1;
    mpx_instance *m = &s->inst[MPX_KIND_MODEL];
    d->group_of = malloc(s->n_params ? s->n_params : 1);
    d->h_a = malloc(CHUNK * 4);
    d->h_b = malloc(CHUNK * 4);
    d->h_c = malloc(CHUNK * 4);
    for (int g = 0; g < MPX_GROUP_COUNT; g++) d->g[g].ratios = malloc(MAX_RATIOS * sizeof(float));
    for (size_t i = 0; d->group_of && i < s->n_params; i++) {
        mpx_group g = m->rec->vt.model.param(m->self, i)->group;
        d->group_of[i] = (uint8_t)((unsigned)g < MPX_GROUP_COUNT ? g : MPX_GROUP_HEAD);
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/diagnostics.csv", dir);
    d->csv = mpx_fopen_nofollow(path, 0);
    if (!d->group_of || !d->h_a || !d->h_b || !d->h_c || !d->csv) {
        snprintf(err, errlen, "diagnostics: cannot set up (%s%s%s)", d->csv ? "out of memory" : path,
                 d->csv ? "" : ": ", d->csv ? "" : strerror(errno));
        return -1;
    }
    /* columns are only ever appended (readers of older files find the first ones) */
    fprintf(d->csv, "step,group,grad_nonzero,underflow_frac,updated,stalled_frac,median_update_ratio,"
                    "gemm_in_nonzero,gemm_saturated_frac,gemm_flushed_frac,scale_min,scale_max\n");
    fflush(d->csv);
    return 0;
}

int mpx_diag_begin_step(mpx_diagnostics *d, mpx_session *s, int64_t step, int64_t total)
{
    d->active = d->enabled && (step % d->every == 0 || step + 1 == total);
    d->shadowing = 0;
    if (!d->active) return 0;
    for (int g = 0; g < MPX_GROUP_COUNT; g++) {
        mpx_diag_group *x = &d->g[g];
        x->grad_nonzero = x->underflow = x->updated = x->stalled = 0;
        x->n_ratios = 0;
    }
    mpx_session_gemm_in_reset(s);
    const mpx_model_vtable *mv = &s->inst[MPX_KIND_MODEL].rec->vt.model;
    if (s->grads.t == MPX_F32 || mv->size < offsetof(mpx_model_vtable, set_grads) + sizeof(void *) || !mv->set_grads)
        return 0;
    double t0 = now_s();
    if (!d->shadow.p) {
        d->shadow = mpx_a(mpx_session_alloc(s, MPX_ROLE_SCRATCH, s->numel * 4, "diagnostics fp32 grads"), MPX_F32);
        if (!d->shadow.p) return -1;
    }
    int rc = mv->set_grads(s->inst[MPX_KIND_MODEL].self, d->shadow);
    d->shadowing = rc == 0;
    d->seconds += now_s() - t0;
    return rc;
}

/* Count per group over [0, numel) of an fp32 buffer in chunks. */
static int count_underflow(mpx_diagnostics *d, mpx_session *s, mpx_arg g32, mpx_dtype storage)
{
    for (size_t p = 0; p < s->n_pieces; p++) {
        const mpx_piece *pc = &s->pieces[p];
        mpx_diag_group *x = &d->g[d->group_of[pc->param]];
        for (size_t o = 0; o < pc->len; o += CHUNK) {
            size_t n = pc->len - o < CHUNK ? pc->len - o : CHUNK;
            /* pieces are indexed from this rank's slice of the whole-model buffers */
            if (s->ops->to_host(s->be, d->h_a, mpx_at(g32, s->shard_begin + pc->offset + o).p, n * 4)) return -1;
            const mpx_format *f = mpx_format_of(&s->fmts, storage);
            if (f) mpx_diag_underflow_fmt(d->h_a, n, f, &x->grad_nonzero, &x->underflow);
            else mpx_diag_underflow(d->h_a, n, storage, &x->grad_nonzero, &x->underflow);
        }
    }
    return 0;
}

int mpx_diag_after_backward(mpx_diagnostics *d, mpx_session *s, int64_t micro, int64_t n_micro)
{
    if (!d->shadowing) return 0;
    int last = micro + 1 == n_micro;
    if (!s->grad_acc.p && !last) return 0; /* grads accumulate in place: round once at the end */
    double t0 = now_s();
    int rc = count_underflow(d, s, d->shadow, s->grads.t);
    if (!rc) rc = s->ops->cast(s->be, d->shadow, s->grads, s->numel);
    if (!rc && last) {
        const mpx_instance *m = &s->inst[MPX_KIND_MODEL];
        rc = m->rec->vt.model.set_grads(m->self, s->grads);
        d->shadowing = 0;
    }
    d->seconds += now_s() - t0;
    return rc;
}

int mpx_diag_before_update(mpx_diagnostics *d, mpx_session *s)
{
    if (!d->active) return 0;
    double t0 = now_s();
    /* fp32 grads were not shadowed: their non-zero count, no underflow */
    if (s->grads.t == MPX_F32 && count_underflow(d, s, s->grad_acc.p ? s->grad_acc : s->grads, MPX_F32))
        return -1;
    int rc = 0;
    if (!s->upd.on) { /* the windowed step keeps one window's (mpx_diag_before_window) */
        /* this rank's weights: all of them, or at stage 3 its slice (s->weights_len) */
        size_t bytes = (s->weights_len < s->numel_pad ? s->weights_len : s->numel) * mpx_dtype_size(s->weights.t);
        if (!d->wprev && !(d->wprev = mpx_session_alloc(s, MPX_ROLE_SCRATCH, bytes, "diagnostics weights"))) return -1;
        d->wprev_at = s->weights_base;
        rc = s->ops->copy(s->be, d->wprev, s->weights.p, bytes);
    }
    d->seconds += now_s() - t0;
    return rc;
}

int mpx_diag_before_window(mpx_diagnostics *d, mpx_session *s, size_t base, size_t len)
{
    if (!d->active) return 0;
    double t0 = now_s();
    size_t ws = mpx_dtype_size(s->weights.t);
    if (!d->wprev &&
        !(d->wprev = mpx_session_alloc(s, MPX_ROLE_SCRATCH, s->upd.chunk * ws, "diagnostics weights (one update window)")))
        return -1;
    d->wprev_at = s->shard_begin + base;
    int rc = s->ops->copy(s->be, d->wprev, mpx_at(s->weights, d->wprev_at - s->weights_base).p, len * ws);
    d->seconds += now_s() - t0;
    return rc;
}

/* Stalls and update ratios of elements [from, from + len) of a piece, chunk by chunk;
 * the sample for the median is every stride-th element of the whole piece. */
static int piece_updates(mpx_diagnostics *d, mpx_session *s, const mpx_piece *pc, size_t from, size_t len,
                         const float *update)
{
    mpx_diag_group *x = &d->g[d->group_of[pc->param]];
    mpx_dtype wt = s->weights.t;
    size_t ws = mpx_dtype_size(wt);
    const mpx_format *wf = mpx_format_of(&s->fmts, wt);
    size_t stride = pc->len / MAX_RATIOS + 1; /* sample for the median */
    for (size_t o = from; o < from + len; o += CHUNK) {
        size_t n = from + len - o < CHUNK ? from + len - o : CHUNK;
        size_t w = s->shard_begin + pc->offset + o;
        if (s->ops->to_host(s->be, d->h_a, mpx_at(mpx_a(d->wprev, wt), w - d->wprev_at).p, n * ws) ||
            s->ops->to_host(s->be, d->h_b, mpx_at(s->weights, w - s->weights_base).p, n * ws) ||
            s->ops->to_host(s->be, d->h_c, update + (o - from), n * 4))
            return -1;
        mpx_diag_stalled(d->h_a, d->h_b, wt, d->h_c, n, &x->updated, &x->stalled);
        for (size_t i = (stride - (o % stride)) % stride; i < n && x->n_ratios < MAX_RATIOS; i += stride) {
            const void *wp = (const char *)d->h_a + i * ws;
            float w = wf ? mpx_fmt_decode(wf, ws == 1 ? *(const uint8_t *)wp : *(const uint16_t *)wp)
                    : wt == MPX_F32 ? *(const float *)wp
                    : wt == MPX_BF16 ? mpx_bf16_to_f32(*(const uint16_t *)wp) : mpx_f16_to_f32(*(const uint16_t *)wp);
            if (w != 0.0f) x->ratios[x->n_ratios++] = fabsf(d->h_c[i]) / fabsf(w);
        }
    }
    return 0;
}

int mpx_diag_piece_updates(mpx_diagnostics *d, mpx_session *s, const mpx_piece *pc, size_t from, size_t len,
                           const float *update)
{
    if (!d->active) return 0;
    double t0 = now_s();
    int rc = piece_updates(d, s, pc, from, len, update);
    d->seconds += now_s() - t0;
    return rc;
}

static double frac(uint64_t a, uint64_t b) { return b ? (double)a / (double)b : NAN; }

static void field(FILE *f, double v)
{
    fputc(',', f);
    if (!isnan(v)) fprintf(f, "%.6g", v);
}

/* The 8-bit GEMM-input columns of one row; all empty when the group had none. */
static void gemm_in_fields(mpx_diagnostics *d, const struct mpx_gemm_in_group *q, int g)
{
    if (!q->n) { fputs(",,,,,", d->csv); return; }
    fprintf(d->csv, ",%llu", (unsigned long long)q->nonzero);
    double sat = frac(q->saturated, q->nonzero), fl = frac(q->flushed, q->nonzero);
    field(d->csv, sat);
    field(d->csv, fl);
    field(d->csv, q->scale_min);
    field(d->csv, q->scale_max);
    mpx_diag_gemm *x = &d->gemm[g];
    if (!isnan(sat)) { x->sum_saturated += sat; x->sum_flushed += fl; x->n_steps++; }
}

int mpx_diag_end_step(mpx_diagnostics *d, mpx_session *s, int64_t step, int updated)
{
    if (!d->active) return 0;
    double t0 = now_s();
    for (size_t p = 0; updated && !s->upd.on && p < s->n_pieces; p++) { /* windowed: counted per window */
        const mpx_piece *pc = &s->pieces[p];
        if (piece_updates(d, s, pc, 0, pc->len, s->update + pc->offset)) return -1;
    }
    for (int g = 0; g < MPX_GROUP_COUNT; g++) {
        mpx_diag_group *x = &d->g[g];
        if (!x->grad_nonzero && !x->updated && !x->n_ratios) {
            int present = 0;
            for (size_t i = 0; i < s->n_params; i++) present |= d->group_of[i] == g;
            if (!present) continue;
        }
        double uf = frac(x->underflow, x->grad_nonzero), st = frac(x->stalled, x->updated);
        double med = mpx_diag_median(x->ratios, x->n_ratios);
        fprintf(d->csv, "%lld,%s,%llu,", (long long)step, mpx_group_name((mpx_group)g),
                (unsigned long long)x->grad_nonzero);
        if (!isnan(uf)) fprintf(d->csv, "%.6g", uf);
        fprintf(d->csv, ",%llu,", (unsigned long long)x->updated);
        if (!isnan(st)) fprintf(d->csv, "%.6g", st);
        fputc(',', d->csv);
        if (!isnan(med)) fprintf(d->csv, "%.6g", med);
        gemm_in_fields(d, &s->gemm_in[g], g);
        fputc('\n', d->csv);
        if (!isnan(uf)) { x->sum_underflow += uf; x->n_steps_u++; }
        if (!isnan(st)) { x->sum_stalled += st; x->n_steps_s++; }
        if (!isnan(med)) { x->sum_ratio += med; x->n_steps_r++; }
    }
    /* GEMMs with no weight operand (attention's scores and context) */
    if (s->gemm_in[MPX_GROUP_COUNT].n) {
        fprintf(d->csv, "%lld,%s,,,,,", (long long)step, MPX_DIAG_NO_WEIGHT);
        gemm_in_fields(d, &s->gemm_in[MPX_GROUP_COUNT], MPX_GROUP_COUNT);
        fputc('\n', d->csv);
    }
    fflush(d->csv);
    d->active = 0;
    d->seconds += now_s() - t0;
    return 0;
}

static json_t *mean_or_null(double sum, int64_t n) { return n ? json_real(sum / (double)n) : json_null(); }

void mpx_diag_summary(mpx_diagnostics *d, json_t *metrics)
{
    if (!d->enabled) return;
    json_t *o = json_object();
    for (int g = 0; g <= MPX_GROUP_COUNT; g++) {
        mpx_diag_group *x = g < MPX_GROUP_COUNT ? &d->g[g] : NULL;
        const mpx_diag_gemm *q = &d->gemm[g];
        if ((!x || (!x->n_steps_u && !x->n_steps_s && !x->n_steps_r)) && !q->n_steps) continue;
        json_t *row = x ? json_pack("{s:o, s:o, s:o}", "underflow_frac", mean_or_null(x->sum_underflow, x->n_steps_u),
                                    "stalled_frac", mean_or_null(x->sum_stalled, x->n_steps_s),
                                    "median_update_ratio", mean_or_null(x->sum_ratio, x->n_steps_r))
                        : json_object();
        if (q->n_steps) {
            json_object_set_new(row, "gemm_saturated_frac", mean_or_null(q->sum_saturated, q->n_steps));
            json_object_set_new(row, "gemm_flushed_frac", mean_or_null(q->sum_flushed, q->n_steps));
        }
        json_object_set_new(o, g < MPX_GROUP_COUNT ? mpx_group_name((mpx_group)g) : MPX_DIAG_NO_WEIGHT, row);
    }
    json_object_set_new(metrics, "diagnostics", o);
    json_object_set_new(metrics, "diagnostics_seconds", json_real(d->seconds));
}

void mpx_diag_close(mpx_diagnostics *d, mpx_session *s)
{
    (void)s;
    if (d->csv) fclose(d->csv);
    free(d->group_of);
    free(d->h_a);
    free(d->h_b);
    free(d->h_c);
    for (int g = 0; g < MPX_GROUP_COUNT; g++) free(d->g[g].ratios);
    memset(d, 0, sizeof *d);
}
