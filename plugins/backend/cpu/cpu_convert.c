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

void cpu_load(const cpu_be *be, mpx_arg a, size_t off, size_t n, float *dst)
{
    if (mpx_dtype_is_format(a.t)) { cpu_fmt_load(be, a, off, n, dst); return; }
    switch (a.t) {
    case MPX_F32:
        memcpy(dst, (const float *)a.p + off, n * sizeof(float));
        return;
    case MPX_BF16:
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
