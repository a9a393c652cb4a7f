#include "opt_common.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

void optc_load(mpx_arg a, size_t off, size_t n, float *dst)
{
    switch (a.t) {
    case MPX_F32:
        memcpy(dst, (const float *)a.p + off, n * sizeof *dst);
        return;
    case MPX_BF16: {
        const uint16_t *p = (const uint16_t *)a.p + off;
        for (size_t i = 0; i < n; i++) dst[i] = mpx_bf16_to_f32(p[i]);
        return;
    }
    case MPX_F16: {
        const uint16_t *p = (const uint16_t *)a.p + off;
        for (size_t i = 0; i < n; i++) dst[i] = mpx_f16_to_f32(p[i]);
        return;
    }
    default: /* excluded by optc_check_step */
        return;
    }
}

void optc_store(const float *src, mpx_arg a, size_t off, size_t n)
{
    if (a.t == MPX_F32) {
        memcpy((float *)a.p + off, src, n * sizeof *src);
    } else if (a.t == MPX_BF16) {
        uint16_t *p = (uint16_t *)a.p + off;
        for (size_t i = 0; i < n; i++) p[i] = mpx_f32_to_bf16(src[i]);
    }
}

static int loadable(mpx_dtype t) { return t == MPX_F32 || t == MPX_BF16 || t == MPX_F16; }

int optc_add_in_place(const mpx_opt_step *s)
{
    return s->size >= offsetof(mpx_opt_step, flags) + sizeof s->flags && (s->flags & MPX_STEP_ADD_IN_PLACE) &&
           s->param.t == MPX_F32 && s->param.p != NULL;
}

int optc_check_step(mpx_env *env, const mpx_opt_step *s, int n_state)
{
    if (!s || !s->grad || !s->update || !s->param.p)
        return MPX_FAIL(env, "step without param, grad or update buffer");
    if (!loadable(s->param.t))
        return MPX_FAIL(env, "param buffer dtype %s not supported",
                        mpx_dtype_name(s->param.t));
    if (s->step < 1)
        return MPX_FAIL(env, "step number %lld, expected >= 1", (long long)s->step);
    for (int i = 0; i < n_state; i++) {
        if (!s->state[i].p)
            return MPX_FAIL(env, "state buffer %d missing", i);
        if (s->state[i].t != MPX_F32 && s->state[i].t != MPX_BF16)
            return MPX_FAIL(env, "optimizer state dtype %s not supported (fp32 or bf16; fp16 and 8-bit "
                            "formats are implemented in adam and adamw)", mpx_dtype_name(s->state[i].t));
    }
    for (size_t k = 0; k < s->n_pieces; k++) {
        const mpx_piece *p = &s->pieces[k];
        if (p->tensor_offset + p->len > p->tensor_numel)
            return MPX_FAIL(env, "piece %zu of parameter %zu runs past its tensor "
                            "(%zu + %zu > %zu)", k, p->param, p->tensor_offset, p->len,
                            p->tensor_numel);
    }
    return MPX_OK;
}

int optc_betas(mpx_env *env, double *b1, double *b2)
{
    double b[2];
    size_t n = 0;
    MPX_TRY(env->host->opt_float_list(env, "betas", b, 2, &n));
    if (n != 2)
        return MPX_FAIL(env, "betas needs 2 values, got %zu", n);
    for (int i = 0; i < 2; i++)
        if (!(b[i] >= 0.0 && b[i] < 1.0))
            return MPX_FAIL(env, "betas[%d] = %g outside [0, 1)", i, b[i]);
    *b1 = b[0];
    *b2 = b[1];
    return MPX_OK;
}

double optc_bias_correction(double beta, int64_t step, int enabled)
{
    return enabled ? 1.0 - pow(beta, (double)step) : 1.0;
}

int optc_device_get(mpx_env *env, optc_device *d)
{
    d->on = d->in_place = 0;
    d->be = NULL;
    d->ops = env->host->ops(env, &d->be);
    if (!d->ops || !MPX_OPS_HAS(d->ops, flags) || !(d->ops->flags & MPX_OPS_DEVICE_MEMORY)) return MPX_OK;
    if (!MPX_OPS_HAS(d->ops, fused_update) || !d->ops->fused_update)
        return MPX_FAIL(env, "the backend's memory is not host-addressable and it has no fused_update "
                        "(ABI 1.4): this optimizer cannot run on it");
    d->on = 1;
    d->in_place = (d->ops->flags & MPX_OPS_FUSED_ADD_IN_PLACE) != 0;
    return MPX_OK;
}

mpx_fused_update optc_fused_piece(mpx_fused_rule rule, const mpx_opt_step *s, const mpx_piece *pc)
{
    mpx_fused_update f;
    memset(&f, 0, sizeof f);
    f.size = sizeof f;
    f.rule = rule;
    f.n = pc->len;
    f.param = mpx_at(s->param, pc->offset);
    f.grad = s->grad + pc->offset;
    for (int i = 0; i < 2; i++)
        f.state[i] = s->state[i].p ? mpx_at(s->state[i], pc->offset) : s->state[i];
    f.update = s->update + pc->offset;
    f.weight_decay = pc->weight_decay;
    return f;
}

int optc_fused_run(mpx_env *env, const optc_device *d, mpx_fused_update *f, const mpx_piece *pc)
{
    int rc = d->ops->fused_update(d->be, f);
    if (rc) return MPX_FAIL(env, "fused update of parameter %zu (%zu elements) failed", pc->param, pc->len);
    return MPX_OK;
}

int optc_fused_apply(mpx_env *env, const optc_device *d, const mpx_opt_step *s, mpx_fused_update *f,
                     const mpx_piece *pc)
{
    f->add_in_place = d->in_place && optc_add_in_place(s);
    MPX_TRY(optc_fused_run(env, d, f, pc));
    return f->add_in_place ? MPX_OK : env->host->apply_update(env, pc, s->update);
}

/* ---- state in fp16 or any format ---- */

int optc_check_step_scaled(mpx_env *env, const mpx_opt_step *s, int n_state, optc_state *st)
{
    int scaled = 0;
    for (int i = 0; s && i < n_state; i++) scaled |= mpx_opt_state_scaled(s->state[i].t);
    if (!scaled) {
        MPX_TRY(optc_check_step(env, s, n_state));
        for (int i = 0; i < n_state; i++) st[i] = (optc_state){ .a = s->state[i] };
        return MPX_OK;
    }
    /* check the rest with fp32 state standing in for the scaled buffers */
    mpx_opt_step t = *s;
    for (int i = 0; i < n_state; i++)
        if (mpx_opt_state_scaled(t.state[i].t)) t.state[i].t = MPX_F32;
    MPX_TRY(optc_check_step(env, &t, n_state));
    if (s->size < offsetof(mpx_opt_step, state_scale) + sizeof s->state_scale)
        return MPX_FAIL(env, "optimizer state in %s needs per-tensor scales: the host is older than ABI 1.8",
                        mpx_dtype_name(s->state[0].t));
    for (int i = 0; i < n_state; i++) {
        mpx_dtype d = s->state[i].t;
        st[i] = (optc_state){ .a = s->state[i] };
        if (!mpx_opt_state_scaled(d)) continue;
        if (!s->state_scale[i]) return MPX_FAIL(env, "state buffer %d (%s) has no scales", i, mpx_dtype_name(d));
        st[i].scales = s->state_scale[i];
        if (d == MPX_F16) { st[i].fmt_max = 65504.0f; continue; }
        st[i].fmt = env->host->format(env, d);
        if (!st[i].fmt) return MPX_FAIL(env, "state buffer %d: dtype %d is no format of this run", i, (int)d);
        st[i].fmt_max = mpx_fmt_max(st[i].fmt);
    }
    return MPX_OK;
}

float optc_state_scale(const optc_state *st, size_t param) { return st->scales ? st->scales[param] : 1.0f; }

void optc_state_load(const optc_state *st, float inv_scale, size_t off, size_t n, float *dst)
{
    if (!st->scales) { optc_load(st->a, off, n, dst); return; }
    if (st->fmt) {
        const uint8_t *c1 = (const uint8_t *)st->a.p + off;
        const uint16_t *c2 = (const uint16_t *)st->a.p + off;
        int two = mpx_dtype_size(st->a.t) == 2;
        for (size_t i = 0; i < n; i++) dst[i] = mpx_fmt_decode(st->fmt, two ? c2[i] : c1[i]) * inv_scale;
        return;
    }
    const uint16_t *p = (const uint16_t *)st->a.p + off;
    for (size_t i = 0; i < n; i++) dst[i] = mpx_f16_to_f32(p[i]) * inv_scale;
}

void optc_state_store(const optc_state *st, float scale, const float *src, size_t off, size_t n)
{
    if (!st->scales) { optc_store(src, st->a, off, n); return; }
    if (st->fmt) {
        int two = mpx_dtype_size(st->a.t) == 2;
        for (size_t i = 0; i < n; i++) {
            uint32_t c = mpx_fmt_encode_sat(st->fmt, src[i] * scale);
            if (two) ((uint16_t *)st->a.p)[off + i] = (uint16_t)c;
            else ((uint8_t *)st->a.p)[off + i] = (uint8_t)c;
        }
        return;
    }
    uint16_t *p = (uint16_t *)st->a.p + off;
    for (size_t i = 0; i < n; i++) p[i] = mpx_f32_to_f16(src[i] * scale);
}

float optc_state_next_scale(const optc_state *st, float amax, float old)
{
    if (!(amax > 0.0f) || !isfinite(amax)) return old;
    /* floor(log2(fmt_max / amax)) exactly, from the fp32 ratio's exponent; kept inside
     * fp32's normal range (MS-AMP's pow(2, exp) would give inf past it) */
    int e;
    float ratio = st->fmt_max / amax;
    if (!isfinite(ratio)) return ldexpf(1.0f, 126);
    (void)frexpf(ratio, &e);
    e -= 1;
    if (e > 126) e = 126;
    if (e < -126) e = -126;
    return ldexpf(1.0f, e);
}
