/* The cuda suites' error bounds (test_cuda_common.c) checked from both sides, on the CPU:
 * no GPU is needed to know what they let through. What a correct GPU kernel may change —
 * the same fp32 products summed in another order (cuBLAS's tiles, split sums), an exp or
 * erf an ulp apart before the rounding — stays under them; the faults they exist to
 * catch fail them: a 16-bit output one ulp off everywhere, a cast that truncates instead
 * of rounding to nearest even, a bf16 output rounded twice (through fp16), and for fp32
 * GEMMs TF32's inputs rounded to 10 bits. The outputs are those of the suites' shapes and
 * value ranges, at every k the suites and the model use. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/numerics.h"
#include "test_cuda_common.h"

/* xorshift, uniform in [lo, hi) */
static float uni(uint64_t *s, float lo, float hi)
{
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return lo + (hi - lo) * (float)((*s >> 40) * 0x1p-24);
}

static float round_to(mpx_dtype t, float v)
{
    return t == MPX_BF16 ? mpx_round_bf16(v) : t == MPX_F16 ? mpx_round_f16(v) : v;
}

/* The faults, applied to the fp32 value v that should be rounded to t. */
enum fault { ONE_ULP, TRUNCATE, TWICE_VIA_F16 };
static float faulty(enum fault f, mpx_dtype t, float v)
{
    if (f == ONE_ULP) { /* the correct 16-bit value, its last bit one step away from zero */
        if (t == MPX_BF16) return mpx_bf16_to_f32((uint16_t)(mpx_f32_to_bf16(v) + 1));
        return mpx_f16_to_f32((uint16_t)(mpx_f32_to_f16(v) + 1));
    }
    if (f == TRUNCATE) { /* drop the low bits: toward zero */
        uint32_t u = mpx_f32_bits(v);
        if (t == MPX_BF16) return mpx_bits_f32(u & 0xFFFF0000u);
        /* fp16: the nearest-even value, or the next one toward zero where that is larger */
        float r = mpx_round_f16(v);
        if (fabsf(r) > fabsf(v)) r = mpx_f16_to_f32((uint16_t)(mpx_f32_to_f16(v) - 1));
        return r;
    }
    return mpx_round_bf16(mpx_round_f16(v));
}

static double nmse_f(const float *ref, const float *got, size_t n)
{
    double *a = malloc(2 * n * sizeof *a);
    cr_assert(a);
    for (size_t i = 0; i < n; i++) a[i] = ref[i], a[n + i] = got[i];
    double e = nmse_host(a, a + n, n);
    free(a);
    return e;
}

/* C = A B over k, A [M, k], B [k, N] rounded to `in`; the fp32 sum in k order (the cpu
 * backend's), and the same products summed as a GPU's tiles might (8 interleaved partial
 * sums, added pairwise) */
#define M 48
#define NN 64
static void gemm_two_orders(int k, mpx_dtype in, float scale, float *c_seq, float *c_tiled, float *c_tf32)
{
    uint64_t s = 0x9E3779B97F4A7C15ull ^ (uint64_t)k;
    float *a = malloc((size_t)M * (size_t)k * sizeof *a), *b = malloc((size_t)k * NN * sizeof *b);
    cr_assert(a && b);
    for (size_t i = 0; i < (size_t)M * (size_t)k; i++) a[i] = round_to(in, uni(&s, -1, 1));
    for (size_t i = 0; i < (size_t)k * NN; i++) b[i] = round_to(in, uni(&s, -1, 1));
    for (int i = 0; i < M; i++)
        for (int j = 0; j < NN; j++) {
            float acc = 0, part[8] = { 0 }, tf = 0;
            for (int p = 0; p < k; p++) {
                float prod = a[(size_t)i * k + p] * b[(size_t)p * NN + j];
                acc += prod;
                part[p % 8] += prod;
                /* TF32: each input rounded to 10 mantissa bits */
                float ta = mpx_bits_f32((mpx_f32_bits(a[(size_t)i * k + p]) + 0x1000u) & 0xFFFFE000u);
                float tb = mpx_bits_f32((mpx_f32_bits(b[(size_t)p * NN + j]) + 0x1000u) & 0xFFFFE000u);
                tf += ta * tb;
            }
            float t01 = part[0] + part[1], t23 = part[2] + part[3], t45 = part[4] + part[5], t67 = part[6] + part[7];
            c_seq[i * NN + j] = acc * scale;
            c_tiled[i * NN + j] = ((t01 + t23) + (t45 + t67)) * scale;
            c_tf32[i * NN + j] = tf * scale;
        }
    free(a);
    free(b);
}

Test(cuda_bounds, gemm_bounds_pass_another_summation_order_and_fail_the_faults)
{
    static const int ks[] = { 7, 65, 128, 384, 768, 3072, 12288 };
    static const mpx_dtype outs[] = { MPX_BF16, MPX_F16, MPX_F32 };
    float seq[M * NN], tiled[M * NN], tf32[M * NN], ref[M * NN], got[M * NN];
    for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++)
        for (size_t oi = 0; oi < 3; oi++) {
            mpx_dtype out = outs[oi];
            mpx_dtype in = out == MPX_F32 ? MPX_F32 : out;
            /* activations near 1, and gradients near 1e-5 (where fp16 loses bits) */
            for (int sc = 0; sc < 2; sc++) {
                float scale = sc ? 1e-5f : 1.0f / sqrtf((float)ks[ki]);
                gemm_two_orders(ks[ki], in, scale, seq, tiled, tf32);
                double bound = gemm_nmse_bound(out, ks[ki]);
                for (int i = 0; i < M * NN; i++) ref[i] = round_to(out, seq[i]), got[i] = round_to(out, tiled[i]);
                double e = nmse_f(ref, got, M * NN);
                cr_log_info("k %d, %s out, scale %g: another order %.3g (bound %.3g)", ks[ki], mpx_dtype_name(out),
                            (double)scale, e, bound);
                cr_expect(e <= bound, "k %d, %s out, scale %g: another summation order, error %.3g > bound %.3g", ks[ki],
                          mpx_dtype_name(out), (double)scale, e, bound);
                if (out == MPX_F32) {
                    e = nmse_f(ref, tf32, M * NN);
                    cr_log_info("k %d: TF32 %.3g (bound %.3g)", ks[ki], e, bound);
                    cr_expect(e > bound, "k %d: TF32 inputs, error %.3g within the fp32 bound %.3g", ks[ki], e, bound);
                    continue;
                }
                for (int f = ONE_ULP; f <= TWICE_VIA_F16; f++) {
                    if (f == TWICE_VIA_F16 && (out != MPX_BF16 || !sc)) continue; /* only small values lose bits */
                    for (int i = 0; i < M * NN; i++) got[i] = faulty((enum fault)f, out, seq[i]);
                    e = nmse_f(ref, got, M * NN);
                    static const char *const name[] = { "one ulp off", "truncated", "rounded twice via fp16" };
                    cr_log_info("k %d, %s out, scale %g: %s %.3g (bound %.3g)", ks[ki], mpx_dtype_name(out),
                                (double)scale, name[f], e, bound);
                    cr_expect(e > bound, "k %d, %s out, scale %g: %s, error %.3g within the bound %.3g", ks[ki],
                              mpx_dtype_name(out), (double)scale, name[f], e, bound);
                }
            }
        }
}

/* The row ops with exp or erf, at the suites' shapes and ranges: softmax over 203
 * columns of scores in [-8, 8) x 0.125 and GELU of values in [-3, 3). "Another ulp": the
 * exp and erf of double precision rounded once to fp32, against glibc's expf and erff
 * (each within an ulp of it), as CUDA's are. */
Test(cuda_bounds, transcendental_bounds_pass_an_ulp_of_exp_and_fail_the_faults)
{
    enum { ROWS = 42, COLS = 203, G = 5003 };
    static float a[ROWS * COLS + G], b[ROWS * COLS + G], ra[ROWS * COLS + G], rb[ROWS * COLS + G];
    uint64_t s = 77;
    for (int r = 0; r < ROWS; r++) {
        float x[COLS], mx = -INFINITY;
        for (int c = 0; c < COLS; c++) x[c] = 0.125f * uni(&s, -8, 8), mx = fmaxf(mx, x[c]);
        float sa = 0, sb = 0, ea[COLS], eb[COLS];
        for (int c = 0; c < COLS; c++) {
            ea[c] = expf(x[c] - mx);
            eb[c] = (float)exp((double)(x[c] - mx));
            sa += ea[c];
            sb += eb[c];
        }
        for (int c = 0; c < COLS; c++) a[r * COLS + c] = ea[c] / sa, b[r * COLS + c] = eb[c] / sb;
    }
    for (int i = 0; i < G; i++) {
        float x = uni(&s, -3, 3);
        a[ROWS * COLS + i] = 0.5f * x * (1.0f + erff(x * (float)M_SQRT1_2));
        b[ROWS * COLS + i] = 0.5f * x * (1.0f + (float)erf((double)(x * (float)M_SQRT1_2)));
    }
    const size_t n = ROWS * COLS + G;
    for (int ti = 0; ti < 3; ti++) {
        static const mpx_dtype ts[] = { MPX_F32, MPX_F16, MPX_BF16 };
        mpx_dtype t = ts[ti];
        double bound = nmse_bound(t);
        for (size_t i = 0; i < n; i++) ra[i] = round_to(t, a[i]), rb[i] = round_to(t, b[i]);
        double e = nmse_f(ra, rb, n);
        cr_log_info("%s: exp and erf an ulp apart, error %.3g (bound %.3g)", mpx_dtype_name(t), e, bound);
        cr_expect(e <= bound, "%s: exp and erf an ulp apart, error %.3g > bound %.3g", mpx_dtype_name(t), e, bound);
        if (t == MPX_F32) continue;
        for (int f = ONE_ULP; f <= TWICE_VIA_F16; f++) {
            if (f == TWICE_VIA_F16 && t != MPX_BF16) continue;
            for (size_t i = 0; i < n; i++) rb[i] = faulty((enum fault)f, t, a[i]);
            e = nmse_f(ra, rb, n);
            static const char *const name[] = { "one ulp off", "truncated", "rounded twice via fp16" };
            cr_log_info("%s: %s, error %.3g (bound %.3g)", mpx_dtype_name(t), name[f], e, bound);
            cr_expect(e > bound, "%s: %s, error %.3g within the bound %.3g", mpx_dtype_name(t), name[f], e, bound);
        }
    }
}
