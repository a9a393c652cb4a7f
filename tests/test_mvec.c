/* The cpu backend calls glibc's vector math library (libmvec) for exp and erfc
 * (cpu_vecmath.c): its AVX2 variants on every CPU with AVX2 and FMA, and its AVX-512
 * variants, 16 lanes a call, where the CPU also has AVX-512F. A run's bits must not
 * depend on which of the two ran, so the two must agree on every input: checked here on
 * every 61st float of all 2^32 (70 million inputs, both signs, every exponent, NaN, the
 * infinities), against each other, lane by lane. A NaN may come back with another
 * payload; it must come back NaN from both. Skipped on a CPU without AVX-512F (there the
 * AVX-512 variants never run). */
#include <criterion/criterion.h>
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

__m256 _ZGVdN8v_expf(__m256 x);
__m512 _ZGVeN16v_expf(__m512 x);
__m256 _ZGVdN8v_erfcf(__m256 x);
__m512 _ZGVeN16v_erfcf(__m512 x);

#define STRIDE 61u

typedef struct pair_fn {
    __m512 (*f512)(__m512);
    __m256 (*f256)(__m256);
} pair_fn;

/* Inputs whose two results differ (NaN against NaN is agreement); the first in *first. */
__attribute__((target("avx512f,avx2,fma")))
static uint64_t disagreements(pair_fn fn, uint32_t *first)
{
    uint64_t bad = 0;
    uint32_t in[16];
    for (uint64_t base = 0; base < (1ull << 32); base += 16ull * STRIDE) {
        for (int i = 0; i < 16; i++) in[i] = (uint32_t)(base + (uint64_t)i * STRIDE);
        __m512 x;
        __m256 lo, hi;
        memcpy(&x, in, sizeof x);
        memcpy(&lo, in, sizeof lo);
        memcpy(&hi, in + 8, sizeof hi);
        __m512 w = fn.f512(x);
        __m256 n0 = fn.f256(lo), n1 = fn.f256(hi);
        float a[16], b[16];
        memcpy(a, &w, sizeof a);
        memcpy(b, &n0, sizeof n0);
        memcpy(b + 8, &n1, sizeof n1);
        for (int i = 0; i < 16; i++) {
            if (a[i] != a[i] && b[i] != b[i]) continue;
            if (memcmp(&a[i], &b[i], sizeof a[i]) == 0) continue;
            if (!bad) *first = in[i];
            bad++;
        }
    }
    return bad;
}

static void check(const char *name, pair_fn fn)
{
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
        cr_skip_test("this CPU lacks AVX-512F (or AVX2 and FMA): the backend never calls libmvec's AVX-512 %s", name);
    uint32_t first = 0;
    uint64_t bad = disagreements(fn, &first);
    float f;
    memcpy(&f, &first, sizeof f);
    cr_assert_eq(bad, 0, "libmvec's AVX-512 and AVX2 %s differ on %llu of the floats checked (every %u-th bit pattern; first: 0x%08x = %a)",
                 name, (unsigned long long)bad, STRIDE, first, (double)f);
}

Test(mvec, avx512_expf_is_the_avx2_expf_bit_for_bit) { check("expf", (pair_fn){ _ZGVeN16v_expf, _ZGVdN8v_expf }); }

Test(mvec, avx512_erfcf_is_the_avx2_erfcf_bit_for_bit)
{
    check("erfcf", (pair_fn){ _ZGVeN16v_erfcf, _ZGVdN8v_erfcf });
}
