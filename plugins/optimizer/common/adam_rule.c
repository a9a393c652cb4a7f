#include "adam_rule.h"

#include <math.h>

int adam_rule_read(mpx_env *env, int has_modes, adam_rule *r)
{
    double b1, b2, eps;
    MPX_TRY(optc_betas(env, &b1, &b2));
    MPX_TRY(env->host->opt_float(env, "eps", &eps));
    if (!(eps >= 0.0)) return MPX_FAIL(env, "eps = %g must be >= 0", eps);
    r->beta1 = b1;
    r->beta2 = b2;
    r->b1 = (float)b1;
    r->b2 = (float)b2;
    r->one_minus_b1 = (float)(1.0 - b1);
    r->one_minus_b2 = (float)(1.0 - b2);
    r->eps = (float)eps;
    r->adam_w_mode = 1;
    r->bias_correction = 1;
    if (has_modes) {
        MPX_TRY(env->host->opt_bool(env, "adam_w_mode", &r->adam_w_mode));
        MPX_TRY(env->host->opt_bool(env, "bias_correction", &r->bias_correction));
    }
    MPX_TRY(env->host->opt_bool(env, "anyprecision", &r->anyprecision));
    if (r->anyprecision && (!r->adam_w_mode || !r->bias_correction))
        return MPX_FAIL(env, "anyprecision = true is AdamW with bias correction: it needs adam_w_mode and bias_correction true");
    return MPX_OK;
}

const char *adam_rule_state_name(int i)
{
    return i == 0 ? "exp_avg" : i == 1 ? "exp_avg_sq" : NULL;
}

/* Per-step constants, as FusedAdam passes them to its kernel (floats). */
typedef struct adam_consts {
    float bc1, bc2, neg_lr;
} adam_consts;

/* What a pass over a chunk does: the plain path updates and stores in one pass; a
 * scaled state (fp16 / format, MS-AMP O2) takes two, as MS-AMP's stage-1 and stage-2
 * kernels do: the update and the new moments' amax first, then the same moments
 * recomputed and stored with the scale that amax gives. */
enum { PASS_UPDATE_STORE, PASS_UPDATE_AMAX, PASS_STORE, PASS_ADD_STORE /* PASS_UPDATE_STORE adding into param */ };

typedef struct adam_piece {
    const optc_state *st;  /* [2]: exp_avg, exp_avg_sq */
    float inv[2], scale[2]; /* 1 / the scale the moments were stored with; the scale to store with */
    float amax[2];
} adam_piece;

/* An fp32 moment stored unscaled is updated where it lies (no copy into the chunk's buffer
 * and back) when the pass stores it; a pass that only measures amax leaves it as it is. */
static float *in_place(const optc_state *st, size_t off, int pass)
{
    int stores = pass == PASS_UPDATE_STORE || pass == PASS_ADD_STORE;
    return stores && !st->scales && st->a.t == MPX_F32 ? (float *)st->a.p + off : NULL;
}

/* The rule for one element, shared by every pass: the moments from the gradient g (L2
 * decay folded into it), then the update from the new moments. */
static inline void adam_moments(const adam_rule *r, float wd, float g, float p, float *m, float *v)
{
    if (!r->adam_w_mode && wd != 0.0f) g += wd * p;
    *m = r->b1 * *m + r->one_minus_b1 * g;
    *v = r->b2 * *v + r->one_minus_b2 * g * g;
}

static inline float adam_update_of(const adam_rule *r, const adam_consts *c, float wd, float m, float v, float p)
{
    float denom = sqrtf(v / c->bc2) + r->eps;
    float u = (m / c->bc1) / denom;
    if (r->adam_w_mode && wd != 0.0f) u += wd * p;
    return c->neg_lr * u;
}

/* The plain pass's element loop (adam_chunk's, without the amax and store-only
 * branches), on operands that do not overlap. Cloned for AVX2, 8 lanes: the same
 * operations in the same order, each IEEE-rounded, so the same bits as the SSE loop
 * (the build's ISO C mode contracts no a * b + c into an FMA). */
__attribute__((target_clones("avx2", "default")))
static void adam_update_store(const adam_rule *r, const adam_consts *c, float wd, size_t n,
                              const float *restrict grad, const float *restrict p, float *restrict m,
                              float *restrict v, float *restrict update)
{
    const float *pp = wd != 0.0f ? p : grad;   /* p is read only with a decay (else unset) */
    for (size_t i = 0; i < n; i++) {
        adam_moments(r, wd, grad[i], pp[i], &m[i], &v[i]);
        update[i] = adam_update_of(r, c, wd, m[i], v[i], pp[i]);
    }
}

/* The same loop adding each update into the fp32 param where it lies (MPX_STEP_ADD_IN_PLACE):
 * p = p + u, the fp32 addition apply_update makes, after p's one read for the decay. */
__attribute__((target_clones("avx2", "default")))
static void adam_update_add(const adam_rule *r, const adam_consts *c, float wd, size_t n,
                            const float *restrict grad, float *restrict p, float *restrict m,
                            float *restrict v)
{
    for (size_t i = 0; i < n; i++) {
        adam_moments(r, wd, grad[i], p[i], &m[i], &v[i]);
        p[i] += adam_update_of(r, c, wd, m[i], v[i], p[i]);
    }
}

static void adam_chunk(const adam_rule *r, const adam_consts *c, const mpx_opt_step *s,
                       float wd, size_t off, size_t n, adam_piece *ap, int pass)
{
    float pb[OPTC_CHUNK], mb[OPTC_CHUNK], vb[OPTC_CHUNK];
    const float *grad = s->grad + off, *p = pb;
    float *m = in_place(&ap->st[0], off, pass), *v = in_place(&ap->st[1], off, pass);
    if (wd != 0.0f) {
        if (s->param.t == MPX_F32) p = (const float *)s->param.p + off;
        else optc_load(s->param, off, n, pb);
    }
    if (!m) optc_state_load(&ap->st[0], ap->inv[0], off, n, m = mb);
    if (!v) optc_state_load(&ap->st[1], ap->inv[1], off, n, v = vb);
    if (pass == PASS_ADD_STORE || pass == PASS_UPDATE_STORE) {
        if (pass == PASS_ADD_STORE) adam_update_add(r, c, wd, n, grad, (float *)s->param.p + off, m, v);
        else adam_update_store(r, c, wd, n, grad, p, m, v, s->update + off);
        if (m == mb) optc_state_store(&ap->st[0], ap->scale[0], m, off, n);
        if (v == vb) optc_state_store(&ap->st[1], ap->scale[1], v, off, n);
        return;
    }
    const float *pp = wd != 0.0f ? p : grad;
    for (size_t i = 0; i < n; i++) {
        adam_moments(r, wd, grad[i], pp[i], &m[i], &v[i]);
        if (pass == PASS_STORE) continue;
        ap->amax[0] = fmaxf(ap->amax[0], fabsf(m[i]));   /* PASS_UPDATE_AMAX */
        ap->amax[1] = fmaxf(ap->amax[1], fabsf(v[i]));
        s->update[off + i] = adam_update_of(r, c, wd, m[i], v[i], pp[i]);
    }
    if (pass == PASS_UPDATE_AMAX) return;
    optc_state_store(&ap->st[0], ap->scale[0], m, off, n);
    optc_state_store(&ap->st[1], ap->scale[1], v, off, n);
}

static void adam_passes(const adam_rule *r, const adam_consts *c, const mpx_opt_step *s, const mpx_piece *pc,
                        adam_piece *ap, int pass)
{
    for (size_t done = 0; done < pc->len; done += OPTC_CHUNK) {
        size_t n = pc->len - done < OPTC_CHUNK ? pc->len - done : OPTC_CHUNK;
        adam_chunk(r, c, s, pc->weight_decay, pc->offset + done, n, ap, pass);
    }
}

/* One piece on host memory: the update, and its moments stored back. With add_in_place
 * (MPX_STEP_ADD_IN_PLACE granted, fp32 param) an unscaled state's single pass adds the
 * update into param; returns whether it did (else the caller hands `update` over). */
static int adam_piece_step(const adam_rule *r, const adam_consts *c, const mpx_opt_step *s, const mpx_piece *pc,
                           const optc_state *st, int add_in_place)
{
    adam_piece ap = { .st = st };
    int scaled = 0;
    for (int k = 0; k < 2; k++) {
        float old = optc_state_scale(&st[k], pc->param);
        ap.inv[k] = 1.0f / old;
        ap.scale[k] = old;
        scaled |= st[k].scales != NULL;
    }
    if (!scaled) {
        adam_passes(r, c, s, pc, &ap, add_in_place ? PASS_ADD_STORE : PASS_UPDATE_STORE);
        return add_in_place;
    }
    adam_passes(r, c, s, pc, &ap, PASS_UPDATE_AMAX);
    for (int k = 0; k < 2; k++) {
        if (!st[k].scales) continue;
        ap.scale[k] = optc_state_next_scale(&st[k], ap.amax[k], ap.scale[k]);
    }
    adam_passes(r, c, s, pc, &ap, PASS_STORE);
    for (int k = 0; k < 2; k++)
        if (st[k].scales) st[k].scales[pc->param] = ap.scale[k];
    return 0;
}

int adam_rule_step(const adam_rule *r, mpx_env *env, const mpx_opt_step *s)
{
    optc_device dev;
    MPX_TRY(optc_device_get(env, &dev));
    if (r->anyprecision && dev.on)
        return MPX_FAIL(env, "anyprecision = true runs on host memory only: the backend's fused_update has no "
                        "AnyPrecisionAdamW rule (use the cpu backend)");
    if (r->anyprecision) return adam_rule_step_anyprecision(r, env, s);
    optc_state st[2];
    MPX_TRY(optc_check_step_scaled(env, s, 2, st));
    if (dev.on && (st[0].scales || st[1].scales))
        return MPX_FAIL(env, "optimizer state in fp16 or an 8-bit format runs on host memory only: the backend's "
                        "fused_update has no scaled-state rule (use the cpu backend)");
    adam_consts c = {
        .bc1 = (float)optc_bias_correction(r->beta1, s->step, r->bias_correction),
        .bc2 = (float)optc_bias_correction(r->beta2, s->step, r->bias_correction),
        .neg_lr = (float)-s->lr,
    };
    const int add_in_place = !dev.on && optc_add_in_place(s);
    for (size_t k = 0; k < s->n_pieces; k++) {
        const mpx_piece *pc = &s->pieces[k];
        if (dev.on) {
            mpx_fused_update f = optc_fused_piece(MPX_FUSED_ADAM, s, pc);
            f.b1 = r->b1; f.b2 = r->b2; f.one_minus_b1 = r->one_minus_b1; f.one_minus_b2 = r->one_minus_b2;
            f.eps = r->eps; f.bc1 = c.bc1; f.bc2 = c.bc2; f.neg_lr = c.neg_lr; f.adam_w_mode = r->adam_w_mode;
            MPX_TRY(optc_fused_apply(env, &dev, s, &f, pc));
            continue;
        }
        if (!adam_piece_step(r, &c, s, pc, st, add_in_place)) MPX_TRY(env->host->apply_update(env, pc, s->update));
    }
    return MPX_OK;
}
