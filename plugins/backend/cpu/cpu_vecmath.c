/* Vectorised helpers for the elementwise and row ops: Philox draws for a run of
 * elements, the normal CDF Phi (GELU) and exp over arrays.
 *
 * Philox: 16 counters go through the ten rounds side by side in AVX2 registers (when
 * the CPU has AVX2), 32 in AVX-512 registers (when it has AVX-512F; the draws were half
 * of a dropout's time, and the wider lanes made the dropout about twice as fast). Each
 * lane is exactly mpx_philox_block, so the draws are those of the scalar stream
 * (test_cpu_ops checks dropout against a reference written from the counter layout).
 * Phi and exp call glibc's vector math library (libmvec, glibc >= 2.35 for erfc) on
 * 8 floats at a time when the CPU has AVX2 and FMA: its functions are accurate to a few
 * ulp (glibc's libm-test-ulps), against the correctly rounded or 1-ulp scalar ones, far
 * inside the ops' tested error bounds. Without them the scalar functions are used. */
#include "cpu_internal.h"

#include <math.h>

#define PHILOX_LANES 16

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_AVX2_PHILOX 1

/* hi and lo 32 bits of m * c for 8 lanes (vpmuludq works on the even lanes). */
__attribute__((target("avx2")))
static inline void mul_hilo(__m256i c, __m256i m, __m256i *hi, __m256i *lo)
{
    __m256i pe = _mm256_mul_epu32(c, m), po = _mm256_mul_epu32(_mm256_srli_epi64(c, 32), m);
    *hi = _mm256_blend_epi32(_mm256_srli_epi64(pe, 32), po, 0xAA);
    *lo = _mm256_blend_epi32(pe, _mm256_slli_epi64(po, 32), 0xAA);
}

/* out[w][l] = word w of Philox(counter = (block0 + l, site, tick)), l < PHILOX_LANES:
 * two groups of 8 lanes through the ten rounds of mpx_philox4x32_10. */
__attribute__((target("avx2")))
static void philox_lanes_avx2(uint64_t seed, uint32_t site, uint32_t tick, uint64_t block0,
                              uint32_t out[4][PHILOX_LANES])
{
    const __m256i m0 = _mm256_set1_epi32((int)0xD2511F53u), m1 = _mm256_set1_epi32((int)0xCD9E8D57u);
    __m256i c0[2], c1[2], c2[2], c3[2];
    for (int g = 0; g < 2; g++) {
        uint32_t lo[8], hi[8];
        for (int l = 0; l < 8; l++) {
            uint64_t b = block0 + (uint64_t)(8 * g + l);
            lo[l] = (uint32_t)b;
            hi[l] = (uint32_t)(b >> 32);
        }
        c0[g] = _mm256_loadu_si256((const __m256i *)lo);
        c1[g] = _mm256_loadu_si256((const __m256i *)hi);
        c2[g] = _mm256_set1_epi32((int)site);
        c3[g] = _mm256_set1_epi32((int)tick);
    }
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        const __m256i vk0 = _mm256_set1_epi32((int)k0), vk1 = _mm256_set1_epi32((int)k1);
        for (int g = 0; g < 2; g++) {
            __m256i hi0, lo0, hi1, lo1;
            mul_hilo(c0[g], m0, &hi0, &lo0);
            mul_hilo(c2[g], m1, &hi1, &lo1);
            __m256i n0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1[g]), vk0);
            __m256i n2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3[g]), vk1);
            c0[g] = n0;
            c1[g] = lo1;
            c2[g] = n2;
            c3[g] = lo0;
        }
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    for (int g = 0; g < 2; g++) {
        _mm256_storeu_si256((__m256i *)&out[0][8 * g], c0[g]);
        _mm256_storeu_si256((__m256i *)&out[1][8 * g], c1[g]);
        _mm256_storeu_si256((__m256i *)&out[2][8 * g], c2[g]);
        _mm256_storeu_si256((__m256i *)&out[3][8 * g], c3[g]);
    }
}

/* The same 16 lanes in one AVX-512 group each: 32 lanes (128 words) a call, transposed
 * in registers so the words land in stream order (element e = 4 block + word). */
#define PHILOX_LANES_512 32

/* As mul_hilo, with the odd lanes moved down and the halves put back by dword shuffles
 * under a lane mask (one shuffle-port uop each) instead of 64-bit shifts and blends: the
 * shifts and the multiplies share a port on AVX-512, and the shifts kept it busy. */
__attribute__((target("avx512f")))
static inline void mul_hilo_512(__m512i c, __m512i m, __m512i *hi, __m512i *lo)
{
    __m512i pe = _mm512_mul_epu32(c, m), po = _mm512_mul_epu32(_mm512_shuffle_epi32(c, _MM_PERM_DDBB), m);
    *hi = _mm512_mask_shuffle_epi32(po, 0x5555, pe, _MM_PERM_DDBB);   /* even lanes: pe's high words */
    *lo = _mm512_mask_shuffle_epi32(pe, 0xAAAA, po, _MM_PERM_CCAA);   /* odd lanes: po's low words */
}

__attribute__((target("avx512f")))
static void philox_lanes_avx512(uint64_t seed, uint32_t site, uint32_t tick, uint64_t block0,
                                uint32_t *out)
{
    const __m512i m0 = _mm512_set1_epi32((int)0xD2511F53u), m1 = _mm512_set1_epi32((int)0xCD9E8D57u);
    __m512i c0[2], c1[2], c2[2], c3[2];
    for (int g = 0; g < 2; g++) {
        uint32_t lo[16], hi[16];
        for (int l = 0; l < 16; l++) {
            uint64_t b = block0 + (uint64_t)(16 * g + l);
            lo[l] = (uint32_t)b;
            hi[l] = (uint32_t)(b >> 32);
        }
        c0[g] = _mm512_loadu_si512(lo);
        c1[g] = _mm512_loadu_si512(hi);
        c2[g] = _mm512_set1_epi32((int)site);
        c3[g] = _mm512_set1_epi32((int)tick);
    }
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        const __m512i vk0 = _mm512_set1_epi32((int)k0), vk1 = _mm512_set1_epi32((int)k1);
        for (int g = 0; g < 2; g++) {
            __m512i hi0, lo0, hi1, lo1;
            mul_hilo_512(c0[g], m0, &hi0, &lo0);
            mul_hilo_512(c2[g], m1, &hi1, &lo1);
            __m512i n0 = _mm512_ternarylogic_epi32(hi1, c1[g], vk0, 0x96);   /* a ^ b ^ c */
            __m512i n2 = _mm512_ternarylogic_epi32(hi0, c3[g], vk1, 0x96);
            c0[g] = n0;
            c1[g] = lo1;
            c2[g] = n2;
            c3[g] = lo0;
        }
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    for (int g = 0; g < 2; g++) {
        /* u0..u3 hold lanes 4j, 4j+1, 4j+2, 4j+3 whole in their 128-bit slot j; then a
         * 4 x 4 transpose of the slots puts lanes 4j..4j+3 into output vector j */
        __m512i t0 = _mm512_unpacklo_epi32(c0[g], c1[g]), t1 = _mm512_unpackhi_epi32(c0[g], c1[g]);
        __m512i t2 = _mm512_unpacklo_epi32(c2[g], c3[g]), t3 = _mm512_unpackhi_epi32(c2[g], c3[g]);
        __m512i u0 = _mm512_unpacklo_epi64(t0, t2), u1 = _mm512_unpackhi_epi64(t0, t2);
        __m512i u2 = _mm512_unpacklo_epi64(t1, t3), u3 = _mm512_unpackhi_epi64(t1, t3);
        __m512i v0 = _mm512_shuffle_i32x4(u0, u1, 0x44), v1 = _mm512_shuffle_i32x4(u2, u3, 0x44);
        __m512i v2 = _mm512_shuffle_i32x4(u0, u1, 0xEE), v3 = _mm512_shuffle_i32x4(u2, u3, 0xEE);
        uint32_t *o = out + 64 * g;
        _mm512_storeu_si512(o, _mm512_shuffle_i32x4(v0, v1, 0x88));
        _mm512_storeu_si512(o + 16, _mm512_shuffle_i32x4(v0, v1, 0xDD));
        _mm512_storeu_si512(o + 32, _mm512_shuffle_i32x4(v2, v3, 0x88));
        _mm512_storeu_si512(o + 48, _mm512_shuffle_i32x4(v2, v3, 0xDD));
    }
}

static int detect_avx512(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f");
}

static int detect_avx2(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2");
}
#else
static int detect_avx2(void) { return 0; }
static int detect_avx512(void) { return 0; }
#endif

static void philox_lanes_scalar(uint64_t seed, uint32_t site, uint32_t tick, uint64_t block0,
                                uint32_t out[4][PHILOX_LANES])
{
    for (int l = 0; l < PHILOX_LANES; l++) {
        mpx_philox_out o = mpx_philox_block(seed, site, tick, block0 + (uint64_t)l);
        for (int k = 0; k < 4; k++) out[k][l] = o.v[k];
    }
}

void cpu_philox_words(const cpu_be *be, const mpx_rng *rng, uint64_t e0, size_t n, uint32_t *out)
{
    size_t i = 0;
    /* a partial block first, so the groups below start on a block boundary */
    while (i < n && ((e0 + i) & 3)) {
        uint64_t e = e0 + i;
        out[i++] = mpx_philox_block(rng->seed, rng->site, rng->tick, e >> 2).v[e & 3];
    }
#ifdef HAVE_AVX2_PHILOX
    if (be->has_avx512)
        for (; i + 4 * PHILOX_LANES_512 <= n; i += 4 * PHILOX_LANES_512)
            philox_lanes_avx512(rng->seed, rng->site, rng->tick, (e0 + i) >> 2, out + i);
#endif
    uint32_t w[4][PHILOX_LANES];
    for (; i + 4 * PHILOX_LANES <= n; i += 4 * PHILOX_LANES) {
#ifdef HAVE_AVX2_PHILOX
        if (be->has_avx2) philox_lanes_avx2(rng->seed, rng->site, rng->tick, (e0 + i) >> 2, w);
        else
#endif
            philox_lanes_scalar(rng->seed, rng->site, rng->tick, (e0 + i) >> 2, w);
        for (int l = 0; l < PHILOX_LANES; l++)
            for (int k = 0; k < 4; k++) out[i + 4 * (size_t)l + (size_t)k] = w[k][l];
    }
    for (; i < n; i++) {
        uint64_t e = e0 + i;
        out[i] = mpx_philox_block(rng->seed, rng->site, rng->tick, e >> 2).v[e & 3];
    }
}

int cpu_detect_avx2(void) { return detect_avx2(); }
int cpu_detect_avx512(void) { return detect_avx512(); }

/* ---- libmvec ---- */

#if defined(__x86_64__) && defined(__GLIBC__) && defined(__GLIBC_PREREQ)
#if __GLIBC_PREREQ(2, 35)
#define HAVE_MVEC 1
#endif
#endif

#ifdef HAVE_MVEC

__m256 _ZGVdN8v_erfcf(__m256 x);
__m256 _ZGVdN8v_expf(__m256 x);
/* The AVX-512 variants, 16 lanes a call, where the CPU has AVX-512F: they return the
 * AVX2 variants' bits for every float input (compared exhaustively, all 2^32 inputs, on
 * glibc 2.36; test_mvec checks a stride of them on the machine it runs on), so a run's
 * bits do not depend on which one ran. */
__m512 _ZGVeN16v_erfcf(__m512 x);
__m512 _ZGVeN16v_expf(__m512 x);

__attribute__((target("avx512f")))
static size_t phi_avx512(const float *x, float *out, size_t n)
{
    const __m512 k = _mm512_set1_ps(-(float)M_SQRT1_2), half = _mm512_set1_ps(0.5f);
    size_t j = 0;
    for (; j + 16 <= n; j += 16) {
        __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + j), k);
        _mm512_storeu_ps(out + j, _mm512_mul_ps(half, _ZGVeN16v_erfcf(v)));
    }
    return j;
}

__attribute__((target("avx2,fma")))
static void phi_avx2(const float *x, float *out, size_t n, int avx512)
{
    const __m256 k = _mm256_set1_ps(-(float)M_SQRT1_2), half = _mm256_set1_ps(0.5f);
    size_t j = avx512 ? phi_avx512(x, out, n) : 0;
    for (; j + 8 <= n; j += 8) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + j), k);
        _mm256_storeu_ps(out + j, _mm256_mul_ps(half, _ZGVdN8v_erfcf(v)));
    }
    for (; j < n; j++) out[j] = 0.5f * erfcf(-x[j] * (float)M_SQRT1_2);
}

/* Lanes at or below EXP_ZERO_BELOW are +0 without a call: libmvec sends out-of-range
 * lanes to scalar expf one by one, and the softmax's masked positions (about -10000)
 * would all go that way. expf and libmvec's expf are +0 for every float <= -104 (checked
 * exhaustively, -inf included), and a lane's result never depends on the other lanes,
 * so the bits are those of the plain call. */
#define EXP_ZERO_BELOW -104.0f

/* exp_avx2's 16-lane groups; returns the elements done. */
__attribute__((target("avx512f")))
static size_t exp_avx512(const float *x, float *out, size_t n)
{
    const __m512 lim = _mm512_set1_ps(EXP_ZERO_BELOW), zero = _mm512_setzero_ps();
    size_t j = 0;
    for (; j + 16 <= n; j += 16) {
        __m512 v = _mm512_loadu_ps(x + j);
        __mmask16 low = _mm512_cmp_ps_mask(v, lim, _CMP_LE_OQ);
        if (low == 0xffff) { _mm512_storeu_ps(out + j, zero); continue; }
        v = _mm512_mask_mov_ps(v, low, zero);   /* exp(0) there, then masked to +0 */
        _mm512_storeu_ps(out + j, _mm512_mask_mov_ps(_ZGVeN16v_expf(v), low, zero));
    }
    return j;
}

/* exp_sub_sum_avx2's groups of 16: each half added into the 8 lane sums in turn (lane k
 * still takes the elements j with j % 8 == k, in order); returns the elements done. */
__attribute__((target("avx512f")))
static size_t exp_sub_sum_avx512(const float *x, float sub, float *out, size_t n, __m256 *acc)
{
    const __m512 lim = _mm512_set1_ps(EXP_ZERO_BELOW), zero = _mm512_setzero_ps(), s = _mm512_set1_ps(sub);
    __m256 a = *acc;
    size_t j = 0;
    for (; j + 16 <= n; j += 16) {
        __m512 v = _mm512_sub_ps(_mm512_loadu_ps(x + j), s), e = zero;
        __mmask16 low = _mm512_cmp_ps_mask(v, lim, _CMP_LE_OQ);
        if (low != 0xffff) e = _mm512_mask_mov_ps(_ZGVeN16v_expf(_mm512_mask_mov_ps(v, low, zero)), low, zero);
        _mm512_storeu_ps(out + j, e);
        a = _mm256_add_ps(a, _mm512_castps512_ps256(e));
        a = _mm256_add_ps(a, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1)));
    }
    *acc = a;
    return j;
}

__attribute__((target("avx2,fma")))
static void exp_avx2(const float *x, float *out, size_t n, int avx512)
{
    const __m256 lim = _mm256_set1_ps(EXP_ZERO_BELOW), zero = _mm256_setzero_ps();
    size_t j = avx512 ? exp_avx512(x, out, n) : 0;
    for (; j + 8 <= n; j += 8) {
        __m256 v = _mm256_loadu_ps(x + j), low = _mm256_cmp_ps(v, lim, _CMP_LE_OQ);
        int m = _mm256_movemask_ps(low);
        if (m == 0xff) { _mm256_storeu_ps(out + j, zero); continue; }
        if (m) v = _mm256_blendv_ps(v, zero, low);   /* exp(0) there, then masked to +0 */
        _mm256_storeu_ps(out + j, _mm256_andnot_ps(low, _ZGVdN8v_expf(v)));
    }
    for (; j < n; j++) out[j] = expf(x[j]);
}

/* out[j] = exp(x[j] - sub) and their sum in cpu_row_sum's order: 8 lane sums over the full
 * groups of 8 (lane k takes the elements j with j % 8 == k), the tail into lane 0, then
 * ((0 + 4) + (1 + 5)) + ((2 + 6) + (3 + 7)). One pass instead of subtract, exp, sum. */
__attribute__((target("avx2,fma")))
static float exp_sub_sum_avx2(const float *x, float sub, float *out, size_t n, int avx512)
{
    const __m256 lim = _mm256_set1_ps(EXP_ZERO_BELOW), zero = _mm256_setzero_ps(), s = _mm256_set1_ps(sub);
    __m256 acc = zero;
    size_t j = avx512 ? exp_sub_sum_avx512(x, sub, out, n, &acc) : 0;
    for (; j + 8 <= n; j += 8) {
        __m256 v = _mm256_sub_ps(_mm256_loadu_ps(x + j), s), low = _mm256_cmp_ps(v, lim, _CMP_LE_OQ);
        int m = _mm256_movemask_ps(low);
        __m256 e = zero;
        if (m != 0xff) {
            if (m) v = _mm256_blendv_ps(v, zero, low);
            e = _mm256_andnot_ps(low, _ZGVdN8v_expf(v));
        }
        _mm256_storeu_ps(out + j, e);
        acc = _mm256_add_ps(acc, e);
    }
    float a[8];
    _mm256_storeu_ps(a, acc);
    for (; j < n; j++) {
        out[j] = expf(x[j] - sub);
        a[0] += out[j];
    }
    return ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
}

#endif

float cpu_exp_sub_sum(const cpu_be *be, const float *x, float sub, float *out, size_t n)
{
#ifdef HAVE_MVEC
    if (be->has_avx2_fma) return exp_sub_sum_avx2(x, sub, out, n, be->has_avx512);
#endif
    for (size_t j = 0; j < n; j++) out[j] = x[j] - sub;
    cpu_exp(be, out, out, n);
    float a[8] = { 0 };
    size_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int k = 0; k < 8; k++) a[k] += out[j + k];
    for (; j < n; j++) a[0] += out[j];
    return ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
}

int cpu_detect_avx2_fma(void)
{
#ifdef HAVE_MVEC
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return 0;
#endif
}

void cpu_phi(const cpu_be *be, const float *x, float *out, size_t n)
{
#ifdef HAVE_MVEC
    if (be->has_avx2_fma) { phi_avx2(x, out, n, be->has_avx512); return; }
#else
    (void)be;
#endif
    for (size_t j = 0; j < n; j++) out[j] = 0.5f * erfcf(-x[j] * (float)M_SQRT1_2);
}

void cpu_exp(const cpu_be *be, const float *x, float *out, size_t n)
{
#ifdef HAVE_MVEC
    if (be->has_avx2_fma) { exp_avx2(x, out, n, be->has_avx512); return; }
#else
    (void)be;
#endif
    for (size_t j = 0; j < n; j++) out[j] = expf(x[j]);
}
