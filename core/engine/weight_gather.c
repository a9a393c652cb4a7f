#include "weight_gather.h"
#include "host.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

static mpx_env *model_env(mpx_session *s) { return &s->inst[MPX_KIND_MODEL].env.pub; }
static void release_buf(mpx_session *s, mpx_arg *b)
{
    if (b->p) mpx_core_host.release(&s->inst[MPX_KIND_BACKEND].env.pub, b->p);
    b->p = NULL;
}

/* The range's part held by each rank, copied in by its owner and broadcast from it. */
static int gather_range(mpx_session *s, size_t lo, size_t hi)
{
    const mpx_instance *c = &s->inst[MPX_KIND_COMM];
    size_t w = (size_t)(s->world > 0 ? s->world : 1), chunk = s->numel_pad / w, es = mpx_dtype_size(s->weights.t);
    for (size_t r = 0; r < w; r++) {
        size_t a = lo > r * chunk ? lo : r * chunk, b = hi < (r + 1) * chunk ? hi : (r + 1) * chunk;
        if (a >= b) continue;
        mpx_arg dst = mpx_at(s->wg_buf, a - lo);
        if ((size_t)s->rank == r &&
            s->ops->copy(s->be, dst.p, mpx_at(s->weights, a - s->weights_base).p, (b - a) * es))
            return MPX_FAIL(model_env(s), "zero/stage3: copying this rank's weights [%zu, %zu) failed", a, b);
        if (w > 1 && c->rec->vt.comm.broadcast(c->self, dst, b - a, (int)r)) {
            char e[1024];
            return MPX_FAIL(model_env(s), "zero/stage3: gathering weights [%zu, %zu) from rank %zu: %s", a, b, r,
                            mpx_session_error(s, MPX_KIND_COMM, e, sizeof e));
        }
    }
    return MPX_OK;
}

static int wg_gather(void *ctx, size_t first, size_t end, mpx_arg *out)
{
    mpx_session *s = ctx;
    if (first >= end || end > s->n_params)
        return MPX_FAIL(model_env(s), "zero/stage3: gather of parameters [%zu, %zu) of %zu", first, end, s->n_params);
    if (s->wg_held)
        return MPX_FAIL(model_env(s), "zero/stage3: gather of parameters [%zu, %zu) while another range is held "
                        "(release it first)", first, end);
    size_t lo = s->offsets[first], hi = s->offsets[end];
    s->wg_lo = lo;
    s->wg_hi = hi;
    if (s->wg_whole.p) {
        *out = mpx_at(s->wg_whole, lo);
        s->wg_held = 1;
        return MPX_OK;
    }
    if (hi - lo > s->wg_cap) {
        release_buf(s, &s->wg_buf);
        s->wg_cap = 0;
        size_t bytes = (hi - lo) * mpx_dtype_size(s->weights.t);
        s->wg_buf = mpx_a(mpx_session_alloc(s, MPX_ROLE_SCRATCH, bytes, "weights gathered for a layer"), s->weights.t);
        if (!s->wg_buf.p) return MPX_FAIL(model_env(s), "zero/stage3: out of memory gathering %zu bytes of weights", bytes);
        s->wg_cap = hi - lo;
    }
    MPX_TRY(gather_range(s, lo, hi));
    *out = s->wg_buf;
    s->wg_held = 1;
    return MPX_OK;
}

static int wg_release(void *ctx)
{
    mpx_session *s = ctx;
    if (!s->wg_held) return MPX_FAIL(model_env(s), "zero/stage3: release with no gathered weights");
    s->wg_held = 0;
    return MPX_OK;
}

int mpx_wgather_model_refuses(const mpx_session *s, char *why, size_t len)
{
    const mpx_instance *m = &s->inst[MPX_KIND_MODEL];
    if (m->rec->vt.model.set_weight_gather) return 0;
    snprintf(why, len, "%s cannot run under zero/stage3: it has no set_weight_gather hook (ABI 1.7; it was "
             "built against %u.%u), so it would read weights this rank does not hold", m->env.label,
             m->rec->desc.abi_major, m->rec->desc.abi_minor);
    return -1;
}

int mpx_wgather_bind(mpx_session *s, char *err, size_t errlen)
{
    if (mpx_wgather_model_refuses(s, err, errlen)) return -1;
    s->wg = (mpx_weight_gather){ .size = sizeof s->wg, .ctx = s, .gather = wg_gather, .release = wg_release };
    mpx_instance *m = &s->inst[MPX_KIND_MODEL];
    if (m->rec->vt.model.set_weight_gather(m->self, &s->wg)) {
        mpx_session_error(s, MPX_KIND_MODEL, err, errlen);
        return -1;
    }
    return 0;
}

int mpx_wgather_begin_whole(mpx_session *s, char *err, size_t errlen)
{
    if (s->stage < 3 || s->world <= 1 || s->wg_whole.p) return 0;
    size_t es = mpx_dtype_size(s->weights.t);
    s->wg_whole = mpx_a(mpx_session_alloc(s, MPX_ROLE_SCRATCH, s->numel_pad * es, "whole weights for evaluation"),
                        s->weights.t);
    if (!s->wg_whole.p) { snprintf(err, errlen, "zero/stage3: out of memory gathering the whole weights"); return -1; }
    mpx_arg mine = mpx_at(s->wg_whole, s->shard_begin);
    const mpx_instance *c = &s->inst[MPX_KIND_COMM];
    if (s->ops->copy(s->be, mine.p, s->weights.p, s->shard_len * es) ||
        c->rec->vt.comm.allgather(c->self, mine, s->wg_whole, s->shard_len)) {
        snprintf(err, errlen, "zero/stage3: gathering the whole weights failed");
        mpx_wgather_end_whole(s);
        return -1;
    }
    return 0;
}

void mpx_wgather_end_whole(mpx_session *s) { release_buf(s, &s->wg_whole); }
