/* AnyPrecisionAdamW's arithmetic (llama-recipes src/llama_recipes/policies/
 * anyprecision_optimizer.py, the copy of torchdistx's; use_kahan_summation = False):
 * every tensor op's result is rounded to its tensor's dtype, as PyTorch's CPU kernels
 * compute each op in fp32 and round once:
 *   p = R_p(p * (1 - lr wd))                       weight decay, before the moments
 *   m = R_s(R_s(m * b1) + R_s(1 - b1) g)           exp_avg.mul_(beta1).add_(grad, alpha=1-beta1)
 *   v = R_s(R_s(v * b2) + ((1 - b2) g) g)          exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1-beta2)
 *   step_size = lr / (1 - b1^t),  dc = sqrt(1 - b2^t)   (fp32 tensors: the step is one)
 *   d = R_s(R_s(R_s(sqrt(v)) / dc) + R_s(eps))     (exp_avg_sq.sqrt() / denom_correction).add_(eps)
 *   p = R_p(p + (-step_size) (m / d))              p.addcdiv_(exp_avg, d, value=-step_size)
 * R_s rounds to the state dtype, R_p to the parameter's. Scalars enter as PyTorch's
 * vectorised CPU kernels take them (measured on torch 2.15.0, bf16 tensors): add_'s
 * alpha (1 - b1) and an added scalar (eps) are first rounded to the tensor's dtype, as a
 * vector of that dtype holds them; mul_'s, addcmul_'s and addcdiv_'s scalars and the 0-dim
 * fp32 corrections stay fp32. (Its scalar loop, for tails shorter than a vector, keeps
 * them all fp32: the fixture's tensors are whole vectors.) The host then writes the new
 * parameter exactly: the update handed to apply_update is new - old, exact in fp32 for
 * two nearby 16-bit values, so round-to-nearest gives back the new value. */
#include "adam_rule.h"

#include <math.h>

static float round_to(mpx_dtype t, float x)
{
    return t == MPX_BF16 ? mpx_round_bf16(x) : t == MPX_F16 ? mpx_round_f16(x) : x;
}

typedef struct ap_consts {
    float decay, step_size, dc, b1, b2, one_minus_b1, one_minus_b2, eps;
    mpx_dtype ts, tp;
} ap_consts;

static void ap_chunk(const ap_consts *c, const mpx_opt_step *s, size_t off, size_t n, float wd)
{
    float p[OPTC_CHUNK], m[OPTC_CHUNK], v[OPTC_CHUNK];
    const float *grad = s->grad + off;
    optc_load(s->param, off, n, p);
    optc_load(s->state[0], off, n, m);
    optc_load(s->state[1], off, n, v);
    for (size_t i = 0; i < n; i++) {
        float g = grad[i], p0 = p[i], q = p0;
        if (wd != 0.0f) q = round_to(c->tp, q * c->decay);
        m[i] = round_to(c->ts, round_to(c->ts, m[i] * c->b1) + c->one_minus_b1 * g);
        v[i] = round_to(c->ts, round_to(c->ts, v[i] * c->b2) + c->one_minus_b2 * g * g);
        float d = round_to(c->ts, round_to(c->ts, round_to(c->ts, sqrtf(v[i])) / c->dc) + c->eps);
        q = round_to(c->tp, q + -c->step_size * (m[i] / d));
        s->update[off + i] = q - p0;
    }
    optc_store(m, s->state[0], off, n);
    optc_store(v, s->state[1], off, n);
}

int adam_rule_step_anyprecision(const adam_rule *r, mpx_env *env, const mpx_opt_step *s)
{
    MPX_TRY(optc_check_step(env, s, 2));
    const float t = (float)s->step; /* state["step"], an fp32 tensor */
    const mpx_dtype ts = s->state[0].t;
    ap_consts c = {
        .b1 = r->b1, .b2 = r->b2, .one_minus_b1 = round_to(ts, r->one_minus_b1), .one_minus_b2 = r->one_minus_b2,
        .eps = round_to(ts, r->eps), .ts = ts, .tp = s->param.t,
        .step_size = (float)s->lr / (1.0f - powf(r->b1, t)),
        .dc = sqrtf(1.0f - powf(r->b2, t)),
    };
    for (size_t k = 0; k < s->n_pieces; k++) {
        const mpx_piece *pc = &s->pieces[k];
        c.decay = (float)(1.0 - s->lr * (double)pc->weight_decay);
        for (size_t done = 0; done < pc->len; done += OPTC_CHUNK) {
            size_t n = pc->len - done < OPTC_CHUNK ? pc->len - done : OPTC_CHUNK;
            ap_chunk(&c, s, pc->offset + done, n, pc->weight_decay);
        }
        MPX_TRY(env->host->apply_update(env, pc, s->update));
    }
    return MPX_OK;
}
