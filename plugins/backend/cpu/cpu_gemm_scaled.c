/* GEMM with a number format as compute dtype: the 8-bit emulation (DESIGN, Numerics).
 *
 * Each operand is widened to fp32, scaled, rounded to the format (saturating, as the
 * fp8 conversions of cuda_fp8.h with __NV_SATFINITE that Transformer Engine uses) and
 * multiplied in fp32; C is rounded once to its dtype:
 *   - per-tensor recipes (none, delayed, current): q = round(x * s) with the scale the
 *     host gives for that operand (host->tensor_scale keyed by the operand's address,
 *     which also records its amax), and the product is taken on the q values with
 *     alpha * (1/s_a) * (1/s_b), as a tensor core applies the two scale inverses;
 *   - MX (OCP MX v1.0): each block of 32 consecutive elements along K shares the scale
 *     2^X, X = floor(log2(block amax)) - emax of the element format, stored as E8M0;
 *     elements are x / 2^X rounded (saturating) and multiplied back by 2^X (exact).
 * Where a real tensor core differs: it accumulates the K products in blocks, truncating
 * (an H100: 32 products aligned and cut to 13 fraction bits), while this emulation
 * accumulates in OpenBLAS's fp32 order, unless the backend's fp8_accumulate option asks
 * for the H100's arithmetic (cpu_gemm_h100.c, mmaemu's model, bit for bit on its
 * fixture).
 * Operands are converted whole (all batch items), single-threaded; the multiply uses
 * the pool as the 16-bit path does. Each conversion is counted (non-zero, saturated,
 * flushed to zero) and reported to the host (gemm_input_stats, ABI 1.8). */
#include "cpu_internal.h"

#include <math.h>
#include <stdlib.h>

typedef struct stored {
    mpx_arg a;
    int rows, cols, ld;   /* one item as stored */
    long long stride;
    int batch;
} stored;

/* Every item of o into dst (batch x rows x cols, compact fp32). */
static void widen(const cpu_be *be, const stored *o, float *dst)
{
    for (int b = 0; b < o->batch; b++)
        for (int r = 0; r < o->rows; r++) {
            size_t src = (size_t)((long long)b * o->stride) + (size_t)r * (size_t)o->ld;
            cpu_load(be, o->a, src, (size_t)o->cols, dst + ((size_t)b * o->rows + r) * (size_t)o->cols);
        }
}

static float amax_of(const float *x, size_t n)
{
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (a > m || isnan(a)) m = isnan(m) ? m : a;
    }
    return m;
}

/* One element rounded from its scaled value v (= x * s, or x / 2^X for MX) into q,
 * counted into st (mpx_quant_stats). */
static inline void count_quant(mpx_quant_stats *st, const mpx_format *f, float x, float v, float q)
{
    if (x == 0.0f || isnan(x)) return;
    st->nonzero++;
    if (mpx_fmt_saturates(f, v)) st->saturated++;   /* not a hair above the top that rounds to it */
    else if (q == 0.0f) st->flushed++;
}

static void quantize_tensor(const mpx_format *f, const float *lut, float *x, size_t n, float s, mpx_quant_stats *st)
{
    for (size_t i = 0; i < n; i++) {
        float v = x[i] * s, q = lut[mpx_fmt_encode_sat(f, v)];
        count_quant(st, f, x[i], v, q);
        x[i] = q;
    }
    st->n += n;
    st->scale = s;
}

/* MX blocks along K. `k_along_cols`: K runs along a stored row (contiguous), else down
 * a stored column (stride cols). */
static void quantize_mx(const mpx_format *f, const float *lut, float *x, int batch, int rows, int cols,
                        int k_along_cols, mpx_quant_stats *st)
{
    const int emax = mpx_fmt_emax(f);
    st->n += (size_t)batch * rows * cols;
    st->scale = NAN;
    const int lines = k_along_cols ? rows : cols, klen = k_along_cols ? cols : rows;
    const size_t step = k_along_cols ? 1 : (size_t)cols, line_step = k_along_cols ? (size_t)cols : 1;
    for (int b = 0; b < batch; b++) {
        float *m = x + (size_t)b * rows * cols;
        for (int l = 0; l < lines; l++) {
            float *v = m + (size_t)l * line_step;
            for (int k0 = 0; k0 < klen; k0 += MPX_MX_BLOCK) {
                int k1 = k0 + MPX_MX_BLOCK < klen ? k0 + MPX_MX_BLOCK : klen;
                float amax = 0.0f;
                int nan = 0;
                for (int k = k0; k < k1; k++) {
                    float a = fabsf(v[(size_t)k * step]);
                    nan |= isnan(a);
                    amax = a > amax ? a : amax;
                }
                if (nan) amax = NAN;
                float scale = mpx_e8m0_decode(mpx_mx_scale_code(amax, emax));
                float inv = 1.0f / scale;          /* 2^-X: exact, 2^-127 included */
                if (isnan(scale)) {
                    for (int k = k0; k < k1; k++) {
                        float *e = &v[(size_t)k * step];
                        if (*e != 0.0f && !isnan(*e)) st->nonzero++;
                        *e = scale;
                    }
                    continue;
                }
                for (int k = k0; k < k1; k++) {
                    float *e = &v[(size_t)k * step], sc = *e * inv, q = lut[mpx_fmt_encode_sat(f, sc)];
                    count_quant(st, f, *e, sc, q);
                    *e = q * scale;
                }
            }
        }
    }
}

static mpx_scaling recipe_of(const cpu_be *be)
{
    const mpx_precision_desc *d = be->env->host->precision(be->env);
    if (!d || d->size < offsetof(mpx_precision_desc, scaling) + sizeof d->scaling) return MPX_SCALING_NONE;
    return d->scaling;
}

/* Widen and quantize one operand; *inv_scale is 1/s for per-tensor recipes. */
static int prepare(cpu_be *be, const stored *o, mpx_dtype t, mpx_scaling recipe, int k_along_cols,
                   float *dst, float *inv_scale, mpx_quant_stats *st)
{
    const mpx_format *f = cpu_fmt(be, t);
    const float *lut = be->lut[t - MPX_FORMAT_FIRST];
    size_t n = (size_t)o->batch * o->rows * o->cols;
    widen(be, o, dst);
    *inv_scale = 1.0f;
    if (recipe == MPX_SCALING_MX) {
        quantize_mx(f, lut, dst, o->batch, o->rows, o->cols, k_along_cols, st);
        return MPX_OK;
    }
    float s = 1.0f;
    if (recipe == MPX_SCALING_DELAYED || recipe == MPX_SCALING_CURRENT)
        MPX_TRY(be->env->host->tensor_scale(be->env, t, o->a.p, amax_of(dst, n), &s));
    quantize_tensor(f, lut, dst, n, s, st);
    *inv_scale = 1.0f / s;
    return MPX_OK;
}

int cpu_gemm_scaled(cpu_be *be, const mpx_gemm *g)
{
    if (be->env->host->size < offsetof(mpx_host, tensor_scale) + sizeof(void *) || !be->env->host->tensor_scale)
        return CPU_FAIL(be, "cpu gemm: number formats need an ABI 1.2 host");
    mpx_scaling recipe = recipe_of(be);
    stored sa = { g->a, g->trans_a ? g->k : g->m, g->trans_a ? g->m : g->k, g->lda, g->stride_a, g->batch };
    stored sb = { g->b, g->trans_b ? g->n : g->k, g->trans_b ? g->k : g->n, g->ldb, g->stride_b, g->batch };
    size_t na = (size_t)g->batch * g->m * g->k, nb = (size_t)g->batch * g->k * g->n;
    size_t nc = g->c.t == MPX_F32 ? 0 : (size_t)g->m * g->n;
    float *A = malloc((na + nb + nc + 1) * sizeof(float));
    if (!A) return (void)CPU_FAIL(be, "cpu gemm: out of memory (m=%d n=%d k=%d batch=%d)", g->m, g->n, g->k, g->batch), MPX_ERR_NOMEM;
    float *B = A + na, *Cw = B + nb;
    float ia = 1.0f, ib = 1.0f;
    int rc = MPX_OK;
    mpx_quant_stats qa = { 0 }, qb = { 0 };
    if (g->k > 0) {
        rc = prepare(be, &sa, g->compute, recipe, !g->trans_a, A, &ia, &qa);
        if (!rc) rc = prepare(be, &sb, g->compute, recipe, g->trans_b, B, &ib, &qb);
    }
    if (rc) { free(A); return rc; }
    /* what the rounding did, for the host's diagnostics (ABI 1.8) */
    const mpx_host *h = be->env->host;
    if (g->k > 0 && h->size >= offsetof(mpx_host, gemm_input_stats) + sizeof(void *) && h->gemm_input_stats)
        h->gemm_input_stats(be->env, g->compute, g->a.p, &qa, g->b.p, &qb);
    mpx_gemm gg = *g;
    gg.alpha = g->alpha * ia * ib;
    int h100 = be->fp8_acc != CPU_FP8_ACC_FP32, emin = 0;
    if (h100) {
        const mpx_format *f = cpu_fmt(be, g->compute);
        if (recipe == MPX_SCALING_MX || !f || f->storage_bytes != 1 || !((f->exp_bits == 4 && f->man_bits == 3) ||
                                                                        (f->exp_bits == 5 && f->man_bits == 2))) {
            free(A);
            return CPU_FAIL(be, "cpu gemm: fp8_accumulate = \"%s\" models an H100's E4M3/E5M2 GEMMs with per-tensor "
                            "scales; compute dtype %s%s has none", be->fp8_acc == CPU_FP8_ACC_H100 ? "h100" : "h100-fast",
                            cpu_dtype_name(be, g->compute), recipe == MPX_SCALING_MX ? " with MX block scales" : "");
        }
        emin = 1 - f->bias;
    }
    int lda = sa.cols ? sa.cols : 1, ldb = sb.cols ? sb.cols : 1;
    for (int b = 0; b < g->batch && !rc; b++) {
        const float *Ab = A + (size_t)b * g->m * g->k, *Bb = B + (size_t)b * g->k * g->n;
        mpx_arg cb = mpx_at(g->c, (size_t)((long long)b * g->stride_c));
        float *out = g->c.t == MPX_F32 ? cb.p : Cw;
        int ldo = g->c.t == MPX_F32 ? g->ldc : g->n;
        if (g->c.t != MPX_F32 && g->beta != 0.0f)
            for (int r = 0; r < g->m; r++) cpu_load(be, cb, (size_t)r * g->ldc, (size_t)g->n, Cw + (size_t)r * g->n);
        if (h100) cpu_gemm_h100(&gg, Ab, lda, Bb, ldb, out, ldo, emin, be->fp8_acc == CPU_FP8_ACC_H100_FAST);
        else if (cpu_sgemm_pool(be, be->pool, &gg, Ab, lda, Bb, ldb, out, ldo))
            rc = CPU_FAIL(be, "cpu gemm: out of memory for the linear kernel's packing buffers (m=%d n=%d k=%d)", g->m,
                          g->n, g->k);
        if (g->c.t != MPX_F32)
            for (int r = 0; r < g->m; r++) cpu_store(be, Cw + (size_t)r * g->n, cb, (size_t)r * g->ldc, (size_t)g->n);
    }
    free(A);
    return rc;
}
