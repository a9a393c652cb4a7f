/* optimizer/lamb: DeepSpeed FusedLamb (csrc/lamb/fused_lamb_cuda_kernel.cu), per tensor:
 *   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g²
 *   u = m / (sqrt(v) + eps) + wd * p               (moments not bias-corrected here)
 *   coeff = ||p|| / ||u|| clamped to [min_coeff, max_coeff]; 1 when either norm is 0
 *   update = -step_size * coeff * u,  step_size = lr * sqrt(bc2) / bc1 (lr without
 *   bias correction)
 * A tensor may be split across ranks: its two norms are summed through
 * host->allreduce_sum before the coefficient is taken. */
#include "../common/opt_common.h"

#include <math.h>
#include <stdlib.h>

/* Tensors whose partial norms travel together in one allreduce_sum. */
#define LAMB_WINDOW 512

typedef struct lamb {
    double beta1, beta2;   /* as configured: bias corrections are taken in double */
    float b1, b2, one_minus_b1, one_minus_b2; /* 1 - beta rounded once from double */
    float eps, max_coeff, min_coeff;
    int bias_correction;
    double sums[2 * LAMB_WINDOW + 1];
} lamb;

static int lamb_create(mpx_env *env, void **self)
{
    double b1, b2, eps, max_coeff, min_coeff;
    int bias_correction;
    MPX_TRY(optc_betas(env, &b1, &b2));
    MPX_TRY(env->host->opt_float(env, "eps", &eps));
    MPX_TRY(env->host->opt_float(env, "max_coeff", &max_coeff));
    MPX_TRY(env->host->opt_float(env, "min_coeff", &min_coeff));
    MPX_TRY(env->host->opt_bool(env, "bias_correction", &bias_correction));
    if (!(min_coeff >= 0.0 && min_coeff <= max_coeff))
        return MPX_FAIL(env, "min_coeff = %g and max_coeff = %g: need 0 <= min_coeff <= max_coeff",
                        min_coeff, max_coeff);
    lamb *o = calloc(1, sizeof *o);
    if (!o) { (void)MPX_FAIL(env, "out of memory"); return MPX_ERR_NOMEM; }
    *o = (lamb){ .beta1 = b1, .beta2 = b2, .b1 = (float)b1, .b2 = (float)b2,
                 .one_minus_b1 = (float)(1.0 - b1), .one_minus_b2 = (float)(1.0 - b2), .eps = (float)eps,
                 .max_coeff = (float)max_coeff, .min_coeff = (float)min_coeff,
                 .bias_correction = bias_correction };
    *self = o;
    return MPX_OK;
}

static void lamb_destroy(void *self) { free(self); }
static int lamb_n_state(void *self) { (void)self; return 2; }

static const char *lamb_state_name(void *self, int i)
{
    (void)self;
    return i == 0 ? "exp_avg" : i == 1 ? "exp_avg_sq" : NULL;
}

/* Moments and the raw update u of one chunk (u into s->update); adds ||p||², ||u||². */
static void lamb_chunk(const lamb *o, const mpx_opt_step *s, float wd, size_t off, size_t n,
                       double *w2, double *u2)
{
    float p[OPTC_CHUNK], m[OPTC_CHUNK], v[OPTC_CHUNK];
    const float *g = s->grad + off;
    optc_load(s->param, off, n, p);
    optc_load(s->state[0], off, n, m);
    optc_load(s->state[1], off, n, v);
    for (size_t i = 0; i < n; i++) {
        m[i] = o->b1 * m[i] + o->one_minus_b1 * g[i];
        v[i] = o->b2 * v[i] + o->one_minus_b2 * g[i] * g[i];
        float u = m[i] / (sqrtf(v[i]) + o->eps) + wd * p[i];
        s->update[off + i] = u;
        *w2 += (double)p[i] * p[i];
        *u2 += (double)u * u;
    }
    optc_store(m, s->state[0], off, n);
    optc_store(v, s->state[1], off, n);
}

static float trust_ratio(const lamb *o, double w2, double u2)
{
    double w = sqrt(w2), u = sqrt(u2);
    if (w == 0.0 || u == 0.0) return 1.0f;
    double c = w / u;
    if (c > o->max_coeff) c = o->max_coeff;
    if (c < o->min_coeff) c = o->min_coeff;
    return (float)c;
}

/* Whole-tensor norms from the pieces' partial sums (norms[2k], norms[2k+1] in, the
 * coefficient out in coeff[k]). Tensors go in windows of LAMB_WINDOW parameter indices;
 * the last slot counts ranks that still hold tensors past the window, so every rank
 * makes the same number of allreduce_sum calls. */
static int lamb_coefficients(lamb *o, mpx_env *env, const mpx_opt_step *s, const double *norms,
                             float *coeff)
{
    for (size_t base = 0;; base += LAMB_WINDOW) {
        double *sums = o->sums;
        for (size_t i = 0; i < 2 * LAMB_WINDOW + 1; i++) sums[i] = 0.0;
        for (size_t k = 0; k < s->n_pieces; k++) {
            size_t t = s->pieces[k].param;
            if (t >= base + LAMB_WINDOW) { sums[2 * LAMB_WINDOW] = 1.0; continue; }
            if (t < base) continue;
            sums[2 * (t - base)] += norms[2 * k];
            sums[2 * (t - base) + 1] += norms[2 * k + 1];
        }
        MPX_TRY(env->host->allreduce_sum(env, sums, 2 * LAMB_WINDOW + 1));
        for (size_t k = 0; k < s->n_pieces; k++) {
            size_t t = s->pieces[k].param;
            if (t >= base && t < base + LAMB_WINDOW)
                coeff[k] = trust_ratio(o, sums[2 * (t - base)], sums[2 * (t - base) + 1]);
        }
        if (sums[2 * LAMB_WINDOW] == 0.0) return MPX_OK;
    }
}

static int lamb_apply(mpx_env *env, const optc_device *dev, const mpx_opt_step *s, float step_size,
                      const float *coeff)
{
    for (size_t k = 0; k < s->n_pieces; k++) {
        const mpx_piece *pc = &s->pieces[k];
        float scale = -step_size * coeff[k];
        if (dev->on) {
            if (dev->ops->scale(dev->be, mpx_a(s->update + pc->offset, MPX_F32), scale, pc->len))
                return MPX_FAIL(env, "scaling the update of parameter %zu failed", pc->param);
        } else {
            for (size_t i = 0; i < pc->len; i++) s->update[pc->offset + i] *= scale;
        }
        MPX_TRY(env->host->apply_update(env, pc, s->update));
    }
    return MPX_OK;
}

static int lamb_step(void *self, mpx_env *env, const mpx_opt_step *s)
{
    lamb *o = self;
    MPX_TRY(optc_check_step(env, s, 2));
    double *norms = calloc(2 * s->n_pieces + 1, sizeof *norms);
    float *coeff = calloc(s->n_pieces + 1, sizeof *coeff);
    if (!norms || !coeff) {
        free(norms);
        free(coeff);
        (void)MPX_FAIL(env, "out of memory for %zu pieces", s->n_pieces);
        return MPX_ERR_NOMEM;
    }
    optc_device dev;
    int rc = optc_device_get(env, &dev);
    for (size_t k = 0; rc == MPX_OK && k < s->n_pieces; k++) {
        const mpx_piece *pc = &s->pieces[k];
        if (dev.on) {
            mpx_fused_update f = optc_fused_piece(MPX_FUSED_LAMB, s, pc);
            f.b1 = o->b1; f.b2 = o->b2; f.one_minus_b1 = o->one_minus_b1; f.one_minus_b2 = o->one_minus_b2;
            f.eps = o->eps;
            rc = optc_fused_run(env, &dev, &f, pc);
            norms[2 * k] = f.norms[0];
            norms[2 * k + 1] = f.norms[1];
            continue;
        }
        for (size_t done = 0; done < pc->len; done += OPTC_CHUNK) {
            size_t n = pc->len - done < OPTC_CHUNK ? pc->len - done : OPTC_CHUNK;
            lamb_chunk(o, s, pc->weight_decay, pc->offset + done, n, &norms[2 * k], &norms[2 * k + 1]);
        }
    }
    double bc1 = optc_bias_correction(o->beta1, s->step, o->bias_correction);
    double bc2 = optc_bias_correction(o->beta2, s->step, o->bias_correction);
    float step_size = (float)(s->lr * sqrt(bc2) / bc1);
    if (rc == MPX_OK) rc = lamb_coefficients(o, env, s, norms, coeff);
    if (rc == MPX_OK) rc = lamb_apply(env, &dev, s, step_size, coeff);
    free(norms);
    free(coeff);
    return rc;
}

static const mpx_option lamb_options[] = {
    { "betas", MPX_OPT_FLOAT_LIST, "[0.9, 0.999]", 0.0, 0.999999, NULL, "coefficients of the running averages of the gradient and its square", 2 },
    { "eps", MPX_OPT_FLOAT, "1e-8", 0.0, 1.0, NULL, "added to sqrt(exp_avg_sq)", 0 },
    { "weight_decay", MPX_OPT_FLOAT, "0.0", 0.0, 1e9, NULL, "weight decay added to the update before the trust ratio (0 on no-decay tensors)", 0 },
    { "max_coeff", MPX_OPT_FLOAT, "10.0", 0.0, 1e9, NULL, "upper clamp of the per-tensor trust ratio", 0 },
    { "min_coeff", MPX_OPT_FLOAT, "0.01", 0.0, 1e9, NULL, "lower clamp of the per-tensor trust ratio", 0 },
    { "bias_correction", MPX_OPT_BOOL, "true", MPX_NO_RANGE, NULL, "step size lr * sqrt(1 - b2^t) / (1 - b1^t)", 0 },
};

static const mpx_optimizer_vtable lamb_vtable = {
    .size = sizeof(mpx_optimizer_vtable),
    .create = lamb_create,
    .destroy = lamb_destroy,
    .n_state = lamb_n_state,
    .state_name = lamb_state_name,
    .step = lamb_step,
};

static const mpx_plugin_desc lamb_desc = {
    MPX_DESC_HEADER,
    .kind = MPX_KIND_OPTIMIZER,
    .name = "lamb",
    .version = "1.0.0",
    .summary = "DeepSpeed FusedLamb: Adam moments with a per-tensor trust ratio clamped to [min_coeff, max_coeff]",
    .options = lamb_options,
    .n_options = MPX_COUNT(lamb_options),
    .vtable = &lamb_vtable,
};

MPX_PLUGIN_ENTRY { (void)host; return &lamb_desc; }
