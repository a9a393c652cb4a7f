/* backend.cpu.fp8_accumulate = "h100" / "h100-fast": the accumulation of an fp8 GEMM as
 * an H100's tensor cores do it, after mmaemu 0.1.0's model (PyPI `mmaemu`, preset
 * "hopper", validated there against cuBLASLt 12.8.3.14 on an H100 PCIe; model in
 * mmaemu/model/chain.py and mmaemu/model/plan.py, which cite Khattak and Mikaitis,
 * "Accurate Models of NVIDIA Tensor Cores", 2026). Not fp32 accumulation:
 *   - a dot product is a chain of block FMAs over 32 consecutive products, from +0:
 *     d = sum_{i<32} a_i b_i + c, where every product and c are aligned to the block's
 *     largest exponent E (each operand's exponent taken as floor(log2|x|), clamped below
 *     at its format's emin, zero products left out; E clamped below at -132) and
 *     truncated toward zero to 13 fraction bits below 2^E; the exact sum is truncated
 *     to 13 fraction bits of its own exponent (clamped below at -126); a zero is +0;
 *   - "h100" (torch._scaled_mm's default use_fast_accum = False, Transformer Engine's
 *     split accumulator): the chain restarts every 128 elements of K and the chunk
 *     results are added in K order into an fp32 accumulator (round to nearest);
 *     "h100-fast" (use_fast_accum = True): one chain over the whole of K;
 *   - cuBLAS's split-K, which an H100 picks for some shapes, is not modelled (mmaemu's
 *     splitk = 1).
 * The operands are the per-tensor scaled fp8 values (E4M3 or E5M2) the caller rounded;
 * alpha (the scale inverses) and beta are applied in fp32 after the accumulation.
 * Every step is exact in double precision. One thread; O(m n k) scalar work. */
#include "cpu_internal.h"

#include <limits.h>
#include <math.h>

#define H100_NFMA 32
#define H100_FRAC 13
#define H100_FRAC_OUT 13
#define H100_MIN_EXP (-132)
#define H100_SLOW_CHUNK 128

/* floor(log2|x|) of a non-zero finite x, clamped below at emin. */
static int exp_clamped(double x, int emin)
{
    int e;
    (void)frexp(x, &e);
    return e - 1 < emin ? emin : e - 1;
}

/* d truncated toward zero to `bits` fraction bits of its own exponent (clamped at -126). */
static double trunc_bits(double d, int bits)
{
    if (d == 0.0) return 0.0;
    int e;
    (void)frexp(d, &e);
    e -= 1;
    if (e < -126) e = -126;
    return ldexp(trunc(ldexp(d, bits - e)), e - bits);
}

typedef struct h100_dot {
    const float *a, *b;    /* element l at a[l * sa], b[l * sb] */
    size_t sa, sb;
    int emin_a, emin_b;
} h100_dot;

/* One block FMA over elements [l0, l1) with accumulator c; NAN propagates. */
static double block_fma(const h100_dot *d, int l0, int l1, double c)
{
    int E = INT_MIN;
    for (int l = l0; l < l1; l++) {
        double x = d->a[(size_t)l * d->sa], y = d->b[(size_t)l * d->sb], p = x * y;
        if (isnan(p)) return NAN;
        if (p != 0.0) {
            int e = exp_clamped(x, d->emin_a) + exp_clamped(y, d->emin_b);
            if (e > E) E = e;
        }
    }
    if (isnan(c)) return NAN;
    if (c != 0.0) {
        int e;
        (void)frexp(c, &e);
        if (e - 1 > E) E = e - 1;
    }
    if (E < H100_MIN_EXP) E = H100_MIN_EXP;
    double s = trunc(ldexp(c, H100_FRAC - E));
    for (int l = l0; l < l1; l++)
        s += trunc(ldexp((double)d->a[(size_t)l * d->sa] * (double)d->b[(size_t)l * d->sb], H100_FRAC - E));
    double out = trunc_bits(ldexp(s, E - H100_FRAC), H100_FRAC_OUT);
    return out == 0.0 ? 0.0 : out;   /* +0 */
}

/* The chain over [l0, l1) from +0, as an fp32 value. */
static float chain(const h100_dot *d, int l0, int l1)
{
    double c = 0.0;
    for (int b = l0; b < l1; b += H100_NFMA) c = block_fma(d, b, b + H100_NFMA < l1 ? b + H100_NFMA : l1, c);
    return (float)c;   /* exact: 13 fraction bits, exponent >= -126 or zero */
}

float cpu_h100_dot(const float *a, size_t sa, const float *b, size_t sb, int k, int emin_a, int emin_b, int fast)
{
    h100_dot d = { a, b, sa, sb, emin_a, emin_b };
    if (fast) return chain(&d, 0, k);
    float acc = 0.0f;
    for (int c0 = 0; c0 < k; c0 += H100_SLOW_CHUNK)
        acc += chain(&d, c0, c0 + H100_SLOW_CHUNK < k ? c0 + H100_SLOW_CHUNK : k);
    return acc;
}

void cpu_gemm_h100(const mpx_gemm *g, const float *A, int lda, const float *B, int ldb, float *C, int ldc, int emin,
                   int fast)
{
    /* A(i, l) and B(l, j) of the stored (compact) operands, as cblas_sgemm reads them */
    size_t sa = g->trans_a ? (size_t)lda : 1, sb = g->trans_b ? 1 : (size_t)ldb;
    for (int i = 0; i < g->m; i++)
        for (int j = 0; j < g->n; j++) {
            const float *a = g->trans_a ? A + i : A + (size_t)i * lda;
            const float *b = g->trans_b ? B + (size_t)j * ldb : B + j;
            float acc = cpu_h100_dot(a, sa, b, sb, g->k, emin, emin, fast);
            float *c = C + (size_t)i * ldc + j;
            *c = g->beta != 0.0f ? g->alpha * acc + g->beta * *c : g->alpha * acc;
        }
}
