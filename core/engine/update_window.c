#include "update_window.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clip.h"
#include "diagnostics.h"
#include "opt_threads.h"
#include "host.h"
#include "shard.h"

/* The window size: train.update_chunk elements, when the optimizer allows it
 * (MPX_OPT_ELEMENTWISE, ABI 1.6; not with scaled state) and it is below n; else n (one
 * window, the whole). */
static size_t chunk_for(const mpx_session *s, size_t n)
{
    size_t chunk = mpx_staging_elems(s, n);
    const mpx_instance *o = &s->inst[MPX_KIND_OPTIMIZER];
    const mpx_optimizer_vtable *vt = o->rec ? &o->rec->vt.optimizer : NULL;
    int elementwise = vt && o->rec->desc.abi_minor >= 6 &&
                      vt->size >= offsetof(mpx_optimizer_vtable, flags) + sizeof vt->flags &&
                      (vt->flags & MPX_OPT_ELEMENTWISE) && !mpx_session_state_scaled(s);
    return elementwise && chunk < n ? chunk : n;
}

/* Whether the reduced gradient is 16-bit and may be unscaled by a factor other than 1
 * (a loss scaler other than `none`): then the norm needs the fp32 values themselves. */
static int needs_whole_copy(const mpx_session *s, mpx_dtype reduced, int windowed)
{
    if (reduced == MPX_F32) return 0;
    const char *ls = s->prec.loss_scale ? s->prec.loss_scale : "none";
    return !windowed || strcmp(ls, "none") != 0;
}

static mpx_dtype reduced_dtype(const mpx_session *s)
{
    const mpx_precision_desc *d = &s->prec;
    int acc = d->grad_acc != MPX_DTYPE_NONE && d->grad_acc != d->grads;
    return acc ? d->grad_acc : d->grads;
}

void mpx_update_buffer_elems(const mpx_session *s, size_t n_owned, size_t *grad, size_t *update)
{
    size_t w = chunk_for(s, n_owned);
    mpx_dtype red = reduced_dtype(s);
    *update = w;
    *grad = red == MPX_F32 ? 0 : needs_whole_copy(s, red, w < n_owned) ? n_owned : w;
}

size_t mpx_update_buffer_bytes(const mpx_session *s)
{
    size_t g = s->upd.grad ? s->upd.chunk : s->grad32 && s->grad32 != mpx_shard_reduced(s).p ? s->shard_len : 0;
    return (g + (s->update ? s->upd.chunk : 0)) * sizeof(float);
}

/* Cuts the shard's pieces into windows of at most `chunk` elements (fill = 0: counts). */
static void cut(const mpx_session *s, mpx_update_plan *u, size_t chunk, int fill, size_t *n_w, size_t *n_p)
{
    size_t nw = 0, np = 0, base = 0;
    int open = 0;
    for (size_t k = 0; k < s->n_pieces; k++) {
        const mpx_piece *pc = &s->pieces[k];
        for (size_t o = 0; o < pc->len;) {
            size_t pos = pc->offset + o;
            if (open && pos >= base + chunk) open = 0;
            if (!open) {
                if (fill) u->w[nw] = (mpx_update_window){ .base = pos, .len = 0, .first = np, .n = 0 };
                base = pos;
                nw++;
                open = 1;
            }
            size_t take = pc->len - o < base + chunk - pos ? pc->len - o : base + chunk - pos;
            if (fill) {
                mpx_piece *c = &u->pieces[np];
                *c = *pc;
                c->offset = pos - base;
                c->len = take;
                c->tensor_offset = pc->tensor_offset + o;
                u->src[np] = k;
                u->src_off[np] = o;
                mpx_update_window *w = &u->w[nw - 1];
                w->n++;
                w->len = pos + take - base;
            }
            np++;
            o += take;
        }
    }
    *n_w = nw;
    *n_p = np;
}

static float *scratch(mpx_session *s, size_t n, const char *what, char *err, size_t errlen)
{
    float *p = mpx_session_alloc(s, MPX_ROLE_SCRATCH, n * sizeof(float), what);
    if (!p) snprintf(err, errlen, "out of memory for the %s (%zu bytes)", what, n * sizeof(float));
    return p;
}

int mpx_update_plan_make(mpx_session *s, char *err, size_t errlen)
{
    mpx_update_plan *u = &s->upd;
    size_t sh = s->shard_len, grad, upd;
    mpx_update_buffer_elems(s, sh, &grad, &upd);
    u->chunk = upd;
    u->on = upd < sh;
    mpx_arg red = mpx_shard_reduced(s);
    /* the optimizer reads an fp32, unscaled gradient: the reduced slice itself when it
     * is fp32, else a whole fp32 copy, or one window's */
    s->grad32 = NULL;
    if (red.t == MPX_F32) {
        s->grad32 = red.p;
    } else if (grad == sh) {
        if (!(s->grad32 = scratch(s, sh, "fp32 gradient", err, errlen))) return -1;
    } else if (!(u->grad = scratch(s, grad, "fp32 gradient (one update window)", err, errlen))) {
        return -1;
    }
    if (!(s->update = scratch(s, upd, u->on ? "optimizer update (one update window)" : "optimizer update", err, errlen)))
        return -1;
    if (mpx_opt_threads_create(s, &u->threads, err, errlen)) return -1;
    if (!u->on) return 0;
    size_t nw, np;
    cut(s, u, upd, 0, &nw, &np);
    u->w = calloc(nw ? nw : 1, sizeof *u->w);
    u->pieces = calloc(np ? np : 1, sizeof *u->pieces);
    u->src = calloc(np ? np : 1, sizeof *u->src);
    u->src_off = calloc(np ? np : 1, sizeof *u->src_off);
    if (!u->w || !u->pieces || !u->src || !u->src_off) {
        snprintf(err, errlen, "out of memory for %zu update windows", nw);
        return -1;
    }
    cut(s, u, upd, 1, &u->n_w, &np);
    return 0;
}

void mpx_update_plan_free(mpx_update_plan *u)
{
    mpx_opt_threads_free(u->threads);
    free(u->w);
    free(u->pieces);
    free(u->src);
    free(u->src_off);
    memset(u, 0, sizeof *u);
}

int mpx_update_norm(mpx_session *s, double clip, double *norm, double *coef, char *err, size_t errlen)
{
    /* as prepare_grad: each rank adds its equal slice's squares (shard.h) */
    size_t off, len;
    mpx_shard_norm_slice(s, &off, &len);
    mpx_grad_buf part = { mpx_at(mpx_shard_reduced(s), off), len };
    if (mpx_grad_norm(s->ops, s->be, &part, 1, mpx_core_host.allreduce_sum, &s->inst[MPX_KIND_COMM].env.pub,
                      norm, err, errlen))
        return -1;
    mpx_clip_coef(clip, *norm, coef);
    return 0;
}

/* The master copy into the 16-bit weights. Nearest (and Kahan, whose compensation the
 * master already is) is a cast. Stochastic rounding goes through the backend's
 * apply_update, piece by piece with the tensor's Philox site: the update
 * u = master - weights is exact in fp32 (Sterbenz: the two are within a factor of 2),
 * so weights + u is the master value, then rounded stochastically. */
int mpx_write_back_master(mpx_session *s, size_t base, size_t len, const mpx_piece *pieces, size_t n_pieces,
                          float *update)
{
    mpx_arg w = mpx_at(mpx_shard_weights(s), base), m = mpx_at(s->master, base);
    if (s->prec.rounding != MPX_ROUND_STOCHASTIC || s->weights.t == MPX_F32) return s->ops->cast(s->be, m, w, len);
    mpx_arg u = mpx_a(update, MPX_F32); /* free once the optimizer has applied it */
    if (s->ops->cast(s->be, w, u, len) || s->ops->axpby(s->be, 1.0f, m, -1.0f, u, len)) return -1;
    for (size_t i = 0; i < n_pieces; i++) {
        const mpx_piece *p = &pieces[i];
        mpx_rng rng = { s->seed, p->site, s->tick, p->tensor_offset };
        if (s->ops->apply_update(s->be, mpx_at(w, p->offset), mpx_a(NULL, s->weights.t), update + p->offset, p->len,
                                 MPX_ROUND_STOCHASTIC, rng))
            return -1;
    }
    return 0;
}

/* The optimizer over one window; apply_update indexes from the window (s->upd_base). */
static int window_step(mpx_session *s, const mpx_update_window *w, const float *grad, int64_t update_no, double lr,
                       int diag_active, char *err, size_t errlen)
{
    mpx_arg param = s->master.p ? s->master : mpx_shard_weights(s);
    mpx_opt_step st = { .size = sizeof st, .pieces = s->upd.pieces + w->first, .n_pieces = w->n, .lr = lr,
                        .step = update_no, .param = mpx_at(param, w->base), .grad = grad, .update = s->update,
                        .flags = mpx_opt_step_flags(s, diag_active) };
    for (int i = 0; i < s->n_state; i++) st.state[i] = mpx_at(s->state[i], w->base);
    if (mpx_opt_run(s, &st, w->base, err, errlen)) {
        snprintf(err + strlen(err), errlen - strlen(err), " (update window at element %zu)", w->base);
        return -1;
    }
    return 0;
}

/* The window's fp32 gradient: a slice of the whole copy, or cast from the reduced slice
 * (unscaled already: no loss scaling) and clipped. */
static const float *window_grad(mpx_session *s, const mpx_update_window *w, double coef)
{
    if (s->grad32) return s->grad32 + w->base;
    mpx_arg g = mpx_a(s->upd.grad, MPX_F32);
    if (s->ops->cast(s->be, mpx_at(mpx_shard_reduced(s), w->base), g, w->len)) return NULL;
    if (coef < 1.0 && s->ops->scale(s->be, g, (float)coef, w->len)) return NULL;
    return s->upd.grad;
}

int mpx_update_windows(mpx_session *s, double coef, int64_t update_no, double lr, mpx_diagnostics *diag,
                       char *err, size_t errlen)
{
    const mpx_update_plan *u = &s->upd;
    for (size_t k = 0; k < u->n_w; k++) {
        const mpx_update_window *w = &u->w[k];
        const float *g = window_grad(s, w, coef);
        if (!g) {
            snprintf(err, errlen, "the fp32 gradient of the update window at element %zu failed", w->base);
            return -1;
        }
        if (diag && mpx_diag_before_window(diag, s, w->base, w->len)) {
            snprintf(err, errlen, "diagnostics failed (update window at element %zu)", w->base);
            return -1;
        }
        if (window_step(s, w, g, update_no, lr, diag && diag->active, err, errlen)) return -1;
        if (s->master.p && mpx_write_back_master(s, w->base, w->len, u->pieces + w->first, w->n, s->update)) {
            snprintf(err, errlen, "writing the master weights back failed (update window at element %zu)", w->base);
            return -1;
        }
        for (size_t i = w->first; diag && i < w->first + w->n; i++)
            if (mpx_diag_piece_updates(diag, s, &s->pieces[u->src[i]], u->src_off[i], u->pieces[i].len,
                                       s->update + u->pieces[i].offset)) {
                snprintf(err, errlen, "diagnostics failed (update window at element %zu)", w->base);
                return -1;
            }
    }
    return 0;
}

int mpx_update_windows_zero_grad(mpx_session *s, double lr, char *err, size_t errlen)
{
    const mpx_update_plan *u = &s->upd;
    if (s->grad32 && s->ops->fill_zero(s->be, s->grad32, s->shard_len * sizeof(float))) {
        snprintf(err, errlen, "optimizer init step: zeroing the fp32 gradient failed");
        return -1;
    }
    for (size_t k = 0; k < u->n_w; k++) {
        const mpx_update_window *w = &u->w[k];
        const float *g = s->grad32 ? s->grad32 + w->base : u->grad;
        if (!s->grad32 && s->ops->fill_zero(s->be, u->grad, w->len * sizeof(float))) {
            snprintf(err, errlen, "optimizer init step: zeroing the fp32 gradient failed");
            return -1;
        }
        if (window_step(s, w, g, 1, lr, 0, err, errlen)) return -1;
    }
    return 0;
}
