/* mpx/numerics.h: fp16/bf16 conversions (exhaustive), stochastic rounding (unbiased),
 * Philox 4x32-10 (published known answers).
 * References are independent of the header: the processor's F16C instructions, a
 * branchy integer bf16 rounding, and a double-precision ldexp/nearbyint rounding. */
#include <criterion/criterion.h>
#include <fenv.h>
#include <immintrin.h>
#include <math.h>
#include <stdio.h>

#include "mpx/numerics.h"

static int have_f16c(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
}

/* ---- references ---- */

/* Round a double to `sig` significant bits with exponent floor `emin` (subnormals) and
 * overflow to inf at `max_finite` + half an ulp (ties to even past it): nearbyint in the
 * default round-to-nearest-even mode does the rounding. */
static double ref_round(double v, int sig, int emin, double max_finite)
{
    if (isnan(v) || isinf(v) || v == 0.0) return v;
    int e = ilogb(v);
    if (e < emin) e = emin;
    double q = nearbyint(ldexp(v, sig - 1 - e));
    double r = ldexp(q, e - (sig - 1));
    if (fabs(r) > max_finite) return copysign(INFINITY, v);
    return r;
}
#define F16_MAX 65504.0
#define BF16_MAX 3.3895313892515355e38 /* (2 - 2^-7) * 2^127 */
static double ref_f16(double v) { return ref_round(v, 11, -14, F16_MAX); }
static double ref_bf16(double v) { return ref_round(v, 8, -126, BF16_MAX); }

/* The value a 16-bit pattern denotes, from its fields. */
static double ref_f16_value(uint16_t h)
{
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v = e == 31 ? (m ? NAN : INFINITY) : e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
    return s ? -v : v;
}
static double ref_bf16_value(uint16_t h)
{
    int s = h >> 15, e = (h >> 7) & 255, m = h & 127;
    double v = e == 255 ? (m ? NAN : INFINITY) : e ? ldexp(128 + m, e - 134) : ldexp(m, -133);
    return s ? -v : v;
}

/* Branchy truncate-and-compare bf16 rounding (a different formulation from the header). */
static uint16_t ref_bf16_bits(uint32_t u)
{
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x7fffffu)) return (uint16_t)((u >> 16) | 0x40);
    uint32_t hi = u >> 16, rem = u & 0xffffu;
    if (rem > 0x8000u || (rem == 0x8000u && (hi & 1u))) hi++;
    return (uint16_t)hi;
}

static int same_value_bits(double ref, float got)
{
    if (isnan(ref)) return isnan(got);
    return ref == (double)got && !!signbit(ref) == !!signbit(got);
}

/* ---- 16-bit -> fp32 -> 16-bit, all 65,536 patterns ---- */

Test(f16, all_patterns_widen_and_round_trip)
{
    int f16c = have_f16c();
    for (uint32_t h = 0; h < 65536; h++) {
        float f = mpx_f16_to_f32((uint16_t)h);
        cr_assert(same_value_bits(ref_f16_value((uint16_t)h), f), "f16 %04x widened to %a", h, (double)f);
        if (f16c) {
            float g = _cvtsh_ss((unsigned short)h);
            cr_assert(mpx_f32_bits(f) == mpx_f32_bits(g), "f16 %04x: %08x, F16C %08x", h, mpx_f32_bits(f), mpx_f32_bits(g));
        }
        uint16_t back = mpx_f32_to_f16(f);
        int is_nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
        uint16_t want = is_nan ? (uint16_t)(h | 0x200) : (uint16_t)h;   /* NaN: made quiet */
        cr_assert_eq(back, want, "f16 %04x -> %a -> %04x, want %04x", h, (double)f, back, want);
    }
}

Test(bf16, all_patterns_widen_and_round_trip)
{
    for (uint32_t h = 0; h < 65536; h++) {
        float f = mpx_bf16_to_f32((uint16_t)h);
        cr_assert(same_value_bits(ref_bf16_value((uint16_t)h), f), "bf16 %04x widened to %a", h, (double)f);
        uint16_t back = mpx_f32_to_bf16(f);
        int is_nan = (h & 0x7f80) == 0x7f80 && (h & 0x7f);
        uint16_t want = is_nan ? (uint16_t)(h | 0x40) : (uint16_t)h;
        cr_assert_eq(back, want, "bf16 %04x -> %a -> %04x, want %04x", h, (double)f, back, want);
    }
}

/* ---- fp32 -> 16-bit over every fp32 pattern, in four quarters (run in parallel) ---- */

static void f16_range_vs_f16c(uint32_t quarter)
{
    if (!have_f16c()) cr_skip_test("the CPU has no F16C: exhaustive fp16 check skipped");
    uint64_t begin = (uint64_t)quarter << 30, end = begin + (1ull << 30);
    uint32_t in[8];
    uint16_t hw[8];
    for (uint64_t u = begin; u < end; u += 8) {
        for (int i = 0; i < 8; i++) in[i] = (uint32_t)u + (uint32_t)i;
        __m256 v;
        memcpy(&v, in, sizeof v);
        __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
        memcpy(hw, &h, sizeof hw);
        for (int i = 0; i < 8; i++) {
            uint16_t mine = mpx_f32_to_f16(mpx_bits_f32(in[i]));
            if (mine != hw[i])
                cr_assert_fail("fp32 %08x -> f16 %04x, F16C says %04x", in[i], mine, hw[i]);
        }
    }
}
Test(f16, every_fp32_pattern_q0) { f16_range_vs_f16c(0); }
Test(f16, every_fp32_pattern_q1) { f16_range_vs_f16c(1); }
Test(f16, every_fp32_pattern_q2) { f16_range_vs_f16c(2); }
Test(f16, every_fp32_pattern_q3) { f16_range_vs_f16c(3); }

static void bf16_range_vs_ref(uint32_t half)
{
    uint64_t begin = (uint64_t)half << 31, end = begin + (1ull << 31);
    for (uint64_t u = begin; u < end; u++) {
        uint16_t mine = mpx_f32_to_bf16(mpx_bits_f32((uint32_t)u)), ref = ref_bf16_bits((uint32_t)u);
        if (mine != ref) cr_assert_fail("fp32 %08x -> bf16 %04x, reference %04x", (uint32_t)u, mine, ref);
    }
}
Test(bf16, every_fp32_pattern_h0) { bf16_range_vs_ref(0); }
Test(bf16, every_fp32_pattern_h1) { bf16_range_vs_ref(1); }

/* ---- a dense sample against the double-precision reference ---- */

/* Every sign and exponent, each top-mantissa value at the cut, and the low bits at the
 * rounding boundaries (0, 1, half-1, half, half+1, all ones) for a cut at `cut` bits. */
static void dense_sample(int cut, double (*ref)(double), uint16_t (*conv)(float),
                         float (*widen)(uint16_t), const char *name)
{
    const uint32_t half = 1u << (cut - 1), low_max = (1u << cut) - 1;
    const uint32_t lows[] = { 0, 1, half - 1, half, half + 1, low_max };
    const uint32_t top_n = 1u << (23 - cut);
    for (uint32_t se = 0; se < 512; se++) {
        if ((se & 255) == 255) continue;                 /* inf/NaN: below */
        for (uint32_t top = 0; top < top_n; top++)
            for (size_t l = 0; l < sizeof lows / sizeof lows[0]; l++) {
                uint32_t u = (se << 23) | (top << cut) | lows[l];
                double want = ref((double)mpx_bits_f32(u));
                float got = widen(conv(mpx_bits_f32(u)));
                if (!same_value_bits(want, got))
                    cr_assert_fail("%s: fp32 %08x (%a) -> %a, reference %a", name, u,
                                   (double)mpx_bits_f32(u), (double)got, want);
            }
    }
}

Test(f16, dense_boundaries_vs_double_reference) { dense_sample(13, ref_f16, mpx_f32_to_f16, mpx_f16_to_f32, "f16"); }
Test(bf16, dense_boundaries_vs_double_reference) { dense_sample(16, ref_bf16, mpx_f32_to_bf16, mpx_bf16_to_f32, "bf16"); }

Test(f16, named_boundary_cases)
{
    struct { float in; uint16_t out; } c[] = {
        { 0.0f, 0x0000 }, { -0.0f, 0x8000 },
        { 65504.0f, 0x7bff },                  /* largest finite */
        { 65519.99609375f, 0x7bff },           /* just under the overflow threshold */
        { 65520.0f, 0x7c00 },                  /* tie to even: overflows */
        { -65520.0f, 0xfc00 }, { 1e10f, 0x7c00 }, { INFINITY, 0x7c00 }, { -INFINITY, 0xfc00 },
        { 0x1p-24f, 0x0001 },                  /* smallest subnormal */
        { 0x1p-25f, 0x0000 },                  /* tie with zero: to even (zero) */
        { 0x1.000002p-25f, 0x0001 },           /* just above the tie */
        { 0x1.8p-24f, 0x0002 },                /* 1.5 ulp: tie to even (2) */
        { 0x1.4p-23f, 0x0002 },                /* 2.5 ulp: tie to even (2) */
        { 0x1.ff8p-15f, 0x03ff },              /* largest subnormal */
        { 0x1.ffcp-15f, 0x0400 },              /* half way to the smallest normal: even */
        { 0x1p-14f, 0x0400 },                  /* smallest normal */
        { 1.0f + 0x1p-11f, 0x3c00 },           /* tie: stays even */
        { 1.0f + 0x1.8p-10f, 0x3c02 },         /* tie: up to even */
        { -2.0f, 0xc000 },
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++)
        cr_assert_eq(mpx_f32_to_f16(c[i].in), c[i].out, "%a -> %04x, want %04x", (double)c[i].in,
                     mpx_f32_to_f16(c[i].in), c[i].out);
    /* NaN payloads: sign and top 10 payload bits kept, quiet bit set */
    cr_assert_eq(mpx_f32_to_f16(mpx_bits_f32(0x7f800001u)), 0x7e00);  /* sNaN, low payload lost */
    cr_assert_eq(mpx_f32_to_f16(mpx_bits_f32(0xff802000u)), 0xfe01);
    cr_assert_eq(mpx_f32_to_f16(mpx_bits_f32(0x7fffe000u)), 0x7fff);
}

Test(bf16, named_boundary_cases)
{
    struct { uint32_t in; uint16_t out; } c[] = {
        { 0x00000000u, 0x0000 }, { 0x80000000u, 0x8000 },
        { 0x7f7f0000u, 0x7f7f },               /* largest finite */
        { 0x7f7f7fffu, 0x7f7f }, { 0x7f7f8000u, 0x7f80 }, /* tie at the top: to inf (even) */
        { 0x7f7fffffu, 0x7f80 },               /* FLT_MAX overflows */
        { 0x3f808000u, 0x3f80 }, { 0x3f818000u, 0x3f82 }, /* ties to even */
        { 0x3f808001u, 0x3f81 },
        { 0x00000001u, 0x0000 }, { 0x00008000u, 0x0000 }, { 0x00018000u, 0x0002 }, /* subnormals */
        { 0x7f800000u, 0x7f80 }, { 0xff800000u, 0xff80 },
        { 0x7f800001u, 0x7fc0 }, { 0xffa00000u, 0xffe0 }, { 0x7fc12345u, 0x7fc1 }, /* NaNs */
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++)
        cr_assert_eq(mpx_f32_to_bf16(mpx_bits_f32(c[i].in)), c[i].out, "%08x -> %04x, want %04x",
                     c[i].in, mpx_f32_to_bf16(mpx_bits_f32(c[i].in)), c[i].out);
}

/* ---- Philox 4x32-10: Random123 kat_vectors ---- */

Test(philox, known_answers)
{
    struct { uint32_t ctr[4], key[2], out[4]; } kat[] = {
        { { 0, 0, 0, 0 }, { 0, 0 }, { 0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u } },
        { { 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu }, { 0xffffffffu, 0xffffffffu },
          { 0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu } },
        { { 0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u }, { 0xa4093822u, 0x299f31d0u },
          { 0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u } },
    };
    for (size_t k = 0; k < 3; k++) {
        mpx_philox_out o = mpx_philox4x32_10(kat[k].ctr, kat[k].key);
        for (int i = 0; i < 4; i++)
            cr_assert_eq(o.v[i], kat[k].out[i], "vector %zu word %d: %08x, want %08x", k, i, o.v[i], kat[k].out[i]);
    }
}

Test(philox, stream_layout)
{
    /* element i of (seed, site, tick) is word i%4 of counter (i/4 lo, i/4 hi, site, tick) */
    uint64_t seed = 0x0123456789abcdefull, i = ((5ull << 32) + 7) * 4 + 3;
    uint32_t ctr[4] = { 7, 5, 11, 13 }, key[2] = { 0x89abcdefu, 0x01234567u };
    cr_assert_eq(mpx_philox_draw(seed, 11, 13, i), mpx_philox4x32_10(ctr, key).v[3]);
    cr_assert_eq(mpx_uniform(0), 0.0f);
    cr_assert_eq(mpx_uniform(0xffffffffu), 1.0f - 0x1p-24f);
    cr_assert_eq(mpx_uniform(0x80000000u), 0.5f);
    cr_assert_eq(mpx_uniform(0x000000ffu), 0.0f);
}

/* ---- stochastic rounding ---- */

/* Mean of N stochastic roundings of x lies within 5 sigma of x, where sigma is the
 * standard deviation of one rounding (gap * sqrt(f (1 - f))) over sqrt(N); every result
 * is one of the two neighbours. */
static void check_unbiased(float x, int bf16, uint32_t site)
{
    const int N = 200000;
    double lo, hi;
    {
        uint16_t t = bf16 ? mpx_f32_to_bf16(x) : mpx_f32_to_f16(x);
        float r = bf16 ? mpx_bf16_to_f32(t) : mpx_f16_to_f32(t);
        /* neighbours around x from the reference rounding toward -inf / +inf */
        double ax = fabs((double)x), step;
        int e = ilogb(ax);
        if (bf16) step = ldexp(1.0, (e < -126 ? -126 : e) - 7);
        else step = ldexp(1.0, (e < -14 ? -14 : e) - 10);
        lo = floor((double)x / step) * step;
        hi = lo + step;
        (void)r;
    }
    double sum = 0.0;
    for (int i = 0; i < N; i++) {
        uint32_t d = mpx_philox_draw(1234, site, 0, (uint64_t)i);
        float r = bf16 ? mpx_bf16_to_f32(mpx_f32_to_bf16_sr(x, d)) : mpx_f16_to_f32(mpx_f32_to_f16_sr(x, d));
        cr_assert((double)r == lo || (double)r == hi, "%s sr(%a) gave %a, not %a or %a",
                  bf16 ? "bf16" : "f16", (double)x, (double)r, lo, hi);
        sum += r;
    }
    double f = ((double)x - lo) / (hi - lo);
    double sigma = (hi - lo) * sqrt(f * (1 - f)) / sqrt((double)N);
    double mean = sum / N;
    cr_assert(fabs(mean - (double)x) <= 5 * sigma + 1e-12 * fabs((double)x),
              "%s sr(%a): mean %.17g, off by %.3g sigma", bf16 ? "bf16" : "f16", (double)x, mean,
              sigma > 0 ? fabs(mean - x) / sigma : INFINITY);
}

Test(stochastic_rounding, unbiased_bf16)
{
    float xs[] = { 1.0f + 0x1p-9f, 1.0f / 3.0f, -2.7182817f, 1e-3f, 0x1.0001p-130f /* subnormal */,
                   3.0e38f, 1.0f + 0x1p-20f };
    for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++) check_unbiased(xs[i], 1, (uint32_t)i);
}

Test(stochastic_rounding, unbiased_f16)
{
    float xs[] = { 1.0f + 0x1p-12f, 1.0f / 3.0f, -2.7182817f, 1e-3f, 0x1.3p-20f /* subnormal */,
                   65000.3f, 0x1.8p-26f /* below the smallest subnormal */ };
    for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++) check_unbiased(xs[i], 0, (uint32_t)i + 100);
}

Test(stochastic_rounding, exact_values_and_specials_stay)
{
    for (uint32_t d = 0; d < 1000; d++) {
        uint32_t x = mpx_philox_draw(9, 1, 2, d);
        cr_assert_eq(mpx_f32_to_bf16_sr(1.5f, x), 0x3fc0);
        cr_assert_eq(mpx_f32_to_f16_sr(1.5f, x), 0x3e00);
        cr_assert_eq(mpx_f32_to_f16_sr(-0.0f, x), 0x8000);
        cr_assert_eq(mpx_f32_to_f16_sr(INFINITY, x), 0x7c00);
        cr_assert_eq(mpx_f32_to_f16_sr(1e6f, x), 0x7c00);
        cr_assert_eq(mpx_f32_to_bf16_sr(-INFINITY, x), 0xff80);
        cr_assert(isnan(mpx_bf16_to_f32(mpx_f32_to_bf16_sr(NAN, x))));
        cr_assert(isnan(mpx_f16_to_f32(mpx_f32_to_f16_sr(NAN, x))));
    }
    /* the extreme draws pick the two neighbours */
    cr_assert_eq(mpx_f32_to_bf16_sr(1.0f + 0x1p-9f, 0u), 0x3f81);          /* u = 0 < f: up */
    cr_assert_eq(mpx_f32_to_bf16_sr(1.0f + 0x1p-9f, 0xffffffffu), 0x3f80); /* u ~ 1: down */
}
