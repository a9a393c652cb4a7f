/* Block conversions between the storage dtypes and fp32 work buffers.
 * The scalar loops are written so the compiler vectorises them (-O3, selects instead of
 * branches); fp16 uses the F16C instructions when the CPU has them, which round exactly
 * as mpx_f32_to_f16 does (test_numerics holds the two against each other). */
#include "cpu_internal.h"

#include <immintrin.h>

int cpu_detect_f16c(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
#else
    return 0;
#endif
}

#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("avx,f16c")))
static void f16_load_f16c(const uint16_t *s, size_t n, float *d)
{
    size_t j = 0;
    for (; j + 8 <= n; j += 8)
        _mm256_storeu_ps(d + j, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + j))));
    for (; j < n; j++) d[j] = _cvtsh_ss(s[j]);
}

__attribute__((target("avx,f16c")))
static void f16_store_f16c(const float *s, size_t n, uint16_t *d)
{
    size_t j = 0;
    for (; j + 8 <= n; j += 8)
        _mm_storeu_si128((__m128i *)(d + j),
                         _mm256_cvtps_ph(_mm256_loadu_ps(s + j), _MM_FROUND_TO_NEAREST_INT));
    for (; j < n; j++) d[j] = _cvtss_sh(s[j], _MM_FROUND_TO_NEAREST_INT);
}

__attribute__((target("avx,f16c")))
static void f16_round_f16c(float *x, size_t n)
{
    size_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + j), _MM_FROUND_TO_NEAREST_INT);
        _mm256_storeu_ps(x + j, _mm256_cvtph_ps(h));
    }
    for (; j < n; j++) x[j] = _cvtsh_ss(_cvtss_sh(x[j], _MM_FROUND_TO_NEAREST_INT));
}
#define HAVE_F16C_PATH 1
#else
#define HAVE_F16C_PATH 0
#endif

static void bf16_load(const uint16_t *s, size_t n, float *d)
{
    for (size_t j = 0; j < n; j++) d[j] = mpx_bits_f32((uint32_t)s[j] << 16);
}

static inline uint16_t bf16_rne_bits(uint32_t u)
{
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t q = (u >> 16) | 0x40u;
    return (uint16_t)(((u & 0x7fffffffu) > 0x7f800000u) ? q : r);
}

static void bf16_store(const float *s, size_t n, uint16_t *d)
{
    for (size_t j = 0; j < n; j++) d[j] = bf16_rne_bits(mpx_f32_bits(s[j]));
}

static void bf16_round(float *x, size_t n)
{
    for (size_t j = 0; j < n; j++) x[j] = mpx_bits_f32((uint32_t)bf16_rne_bits(mpx_f32_bits(x[j])) << 16);
}

/* The same three in AVX2, 8 or 16 elements a step: bf16_rne_bits lane by lane (the NaN
 * test is a signed compare, exact since both sides are below 2^31), so the bits are the
 * scalar loops' (test_cpu_ops holds cast and GEMM input rounding against numerics.h on
 * every high half with the rounding-edge low halves, and every bf16 pattern). The
 * compiler's own vectorisation of the loops above is SSE2 only, where narrowing 32 to
 * 16 bits has no instruction: a bf16-master step spent ~15 % of its CPU time here. */
#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("avx2")))
static inline __m256i bf16_rne_avx2(__m256i u)
{
    const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff);
    __m256i hi = _mm256_srli_epi32(u, 16);
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, bias), _mm256_and_si256(hi, one)), 16);
    __m256i q = _mm256_or_si256(hi, _mm256_set1_epi32(0x40));
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                     _mm256_set1_epi32(0x7f800000));
    return _mm256_blendv_epi8(r, q, nan);
}

__attribute__((target("avx2")))
static void bf16_load_avx2(const uint16_t *s, size_t n, float *d)
{
    size_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(s + j)));
        _mm256_storeu_si256((__m256i *)(d + j), _mm256_slli_epi32(w, 16));
    }
    bf16_load(s + j, n - j, d + j);
}

__attribute__((target("avx2")))
static void bf16_store_avx2(const float *s, size_t n, uint16_t *d)
{
    size_t j = 0;
    for (; j + 16 <= n; j += 16) {
        __m256i a = bf16_rne_avx2(_mm256_loadu_si256((const __m256i *)(s + j)));
        __m256i b = bf16_rne_avx2(_mm256_loadu_si256((const __m256i *)(s + j + 8)));
        /* lanes hold values below 2^16: the unsigned pack never saturates; it interleaves
         * 128-bit halves, which the permute puts back in order */
        __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xD8);
        _mm256_storeu_si256((__m256i *)(d + j), p);
    }
    bf16_store(s + j, n - j, d + j);
}

__attribute__((target("avx2")))
static void bf16_round_avx2(float *x, size_t n)
{
    size_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256i r = bf16_rne_avx2(_mm256_loadu_si256((const __m256i *)(x + j)));
        _mm256_storeu_si256((__m256i *)(x + j), _mm256_slli_epi32(r, 16));
    }
    bf16_round(x + j, n - j);
}
#define HAVE_BF16_AVX2 1
#else
#define HAVE_BF16_AVX2 0
#endif

void cpu_load(const cpu_be *be, mpx_arg a, size_t off, size_t n, float *dst)
{
    if (mpx_dtype_is_format(a.t)) { cpu_fmt_load(be, a, off, n, dst); return; }
    switch (a.t) {
    case MPX_F32:
        memcpy(dst, (const float *)a.p + off, n * sizeof(float));
        return;
    case MPX_BF16:
#if HAVE_BF16_AVX2
        if (be->has_avx2) { bf16_load_avx2((const uint16_t *)a.p + off, n, dst); return; }
#endif
        bf16_load((const uint16_t *)a.p + off, n, dst);
        return;
    case MPX_F16: {
        const uint16_t *s = (const uint16_t *)a.p + off;
#if HAVE_F16C_PATH
        if (be->has_f16c) { f16_load_f16c(s, n, dst); return; }
#endif
        for (size_t j = 0; j < n; j++) dst[j] = mpx_f16_to_f32(s[j]);
        return;
    }
    default:
        return; /* callers check dtypes first (cpu_check_) */
    }
}

void cpu_store(const cpu_be *be, const float *src, mpx_arg a, size_t off, size_t n)
{
    if (mpx_dtype_is_format(a.t)) { cpu_fmt_store(be, src, a, off, n); return; }
    switch (a.t) {
    case MPX_F32:
        memmove((float *)a.p + off, src, n * sizeof(float));
        return;
    case MPX_BF16:
#if HAVE_BF16_AVX2
        if (be->has_avx2) { bf16_store_avx2(src, n, (uint16_t *)a.p + off); return; }
#endif
        bf16_store(src, n, (uint16_t *)a.p + off);
        return;
    case MPX_F16: {
        uint16_t *d = (uint16_t *)a.p + off;
#if HAVE_F16C_PATH
        if (be->has_f16c) { f16_store_f16c(src, n, d); return; }
#endif
        for (size_t j = 0; j < n; j++) d[j] = mpx_f32_to_f16(src[j]);
        return;
    }
    default:
        return;
    }
}

void cpu_round_inplace(const cpu_be *be, float *x, size_t n, mpx_dtype t)
{
    if (mpx_dtype_is_format(t)) { cpu_fmt_round(be, x, n, t); return; }
    switch (t) {
    case MPX_BF16:
#if HAVE_BF16_AVX2
        if (be->has_avx2) { bf16_round_avx2(x, n); return; }
#endif
        bf16_round(x, n);
        return;
    case MPX_F16:
#if HAVE_F16C_PATH
        if (be->has_f16c) { f16_round_f16c(x, n); return; }
#endif
        for (size_t j = 0; j < n; j++) x[j] = mpx_round_f16(x[j]);
        return;
    default:
        return;
    }
}
