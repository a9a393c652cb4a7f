/* Header-only numerics shared by the core, backends and plugins (DESIGN, Numerics rules):
 *  - fp32 <-> fp16 and fp32 <-> bf16, round to nearest even; fp16 subnormals, overflow
 *    to inf, NaN kept (made quiet, sign and top payload bits kept), signed zeros;
 *  - stochastic rounding fp32 -> bf16 / fp16 from one 32-bit Philox draw;
 *  - Philox 4x32-10 and the stream layout every backend shares.
 * 16-bit floats are uint16_t bit patterns. Everything here is plain integer C11 so the
 * CPU and CUDA backends can reproduce it bit for bit.
 */
#ifndef MPX_NUMERICS_H
#define MPX_NUMERICS_H

#include <stdint.h>
#include <string.h>

/* Every function here is also a CUDA device function when nvcc compiles it, so the
 * cuda backend rounds and draws with this very code. */
#if defined(__CUDACC__)
#define MPX_NUM static inline __host__ __device__
#else
#define MPX_NUM static inline
#endif

MPX_NUM uint32_t mpx_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
MPX_NUM float mpx_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* ---- bf16 --------------------------------------------------------------------- */

/* Exact: bf16 is the top half of an fp32 (NaN bits pass through unchanged). */
MPX_NUM float mpx_bf16_to_f32(uint16_t h) { return mpx_bits_f32((uint32_t)h << 16); }

MPX_NUM uint16_t mpx_f32_to_bf16(float f)
{
    uint32_t u = mpx_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)          /* NaN: keep sign/payload, make quiet */
        return (uint16_t)((u >> 16) | 0x0040u);
    /* Adding 0x7fff plus the kept lsb rounds half to even; a carry walks into the
     * exponent, which is what overflow to inf needs as well. */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* ---- fp16 --------------------------------------------------------------------- */

/* Exact widening; a signalling NaN becomes quiet (as the F16C instruction does). */
MPX_NUM float mpx_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f)
        return mpx_bits_f32(sign | 0x7f800000u | (man ? 0x00400000u | (man << 13) : 0));
    if (exp != 0)
        return mpx_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
    if (man == 0)
        return mpx_bits_f32(sign);
    /* subnormal: man * 2^-24, normalised by shifting the leading one to bit 10 */
    uint32_t e = 113;
    while (!(man & 0x400u)) { man <<= 1; e--; }
    return mpx_bits_f32(sign | (e << 23) | ((man & 0x3ffu) << 13));
}

/* Magnitude bits `m` (24-bit significand with the hidden one) shifted right by `s`
 * with round to nearest even; s in [1, 31]. */
MPX_NUM uint32_t mpx_shift_rne_(uint32_t m, unsigned s)
{
    uint32_t q = m >> s, rem = m & ((1u << s) - 1u), half = 1u << (s - 1);
    return q + (rem > half || (rem == half && (q & 1u)));
}

MPX_NUM uint16_t mpx_f32_to_f16(float f)
{
    uint32_t u = mpx_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u)                           /* NaN: top payload bits, quiet */
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u)                          /* >= 65520 rounds to inf (even tie) */
        return (uint16_t)(sign | 0x7c00u);
    if (a >= 0x38800000u) {                        /* normal fp16: rebias, round 13 bits */
        uint32_t r = a - 0x38000000u;
        r += 0x0fffu + ((r >> 13) & 1u);
        return (uint16_t)(sign | (r >> 13));
    }
    if (a <= 0x33000000u)                          /* <= 2^-25: ties to even give zero */
        return sign;
    /* subnormal result: value = m * 2^(e-150), in units of 2^-24 that is m >> (126-e) */
    uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
    return (uint16_t)(sign | mpx_shift_rne_(m, 126u - e));
}

/* ---- Philox 4x32-10 (Salmon et al., SC'11; Random123) ----------------------------- */

typedef struct mpx_philox_out { uint32_t v[4]; } mpx_philox_out;

MPX_NUM mpx_philox_out mpx_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2])
{
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3], k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c0 = n0; c1 = (uint32_t)p1; c2 = n2; c3 = (uint32_t)p0;
        k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
    }
    mpx_philox_out o = { { c0, c1, c2, c3 } };
    return o;
}

/* The mpx stream: key = (seed low word, seed high word); counter = (block low word,
 * block high word, site, tick) with block = element / 4; element i takes word i % 4. */
MPX_NUM mpx_philox_out mpx_philox_block(uint64_t seed, uint32_t site, uint32_t tick,
                                              uint64_t block)
{
    uint32_t key[2] = { (uint32_t)seed, (uint32_t)(seed >> 32) };
    uint32_t ctr[4] = { (uint32_t)block, (uint32_t)(block >> 32), site, tick };
    return mpx_philox4x32_10(ctr, key);
}

/* One element's draw (callers walking many elements should reuse each block of 4). */
MPX_NUM uint32_t mpx_philox_draw(uint64_t seed, uint32_t site, uint32_t tick, uint64_t i)
{
    return mpx_philox_block(seed, site, tick, i >> 2).v[i & 3];
}

/* A draw as a uniform in [0, 1): (x >> 8) * 2^-24, exact in fp32. */
MPX_NUM float mpx_uniform(uint32_t x) { return (float)(x >> 8) * 0x1p-24f; }

/* ---- stochastic rounding -------------------------------------------------------
 * A finite value between two neighbours of the target type rounds away from zero with
 * probability equal to the discarded fraction f of the gap, decided as u < f in 24-bit
 * fixed point with u = x >> 8 (the uniform above), so the result is unbiased (to 2^-24
 * of an ulp when more than 24 bits are discarded, i.e. deep fp16 subnormals).
 * NaN stays NaN (quiet) and inf stays inf; beyond the largest finite the value may
 * round to inf, as the gap to the next power of two says. */

/* Keep `q` = m >> s and round away from zero when the draw falls under the remainder. */
MPX_NUM uint32_t mpx_shift_sr_(uint32_t m, unsigned s, uint32_t x)
{
    uint32_t q = m >> s, rem = m & ((1u << s) - 1u);
    uint32_t frac24 = s <= 24 ? rem << (24 - s) : rem >> (s - 24);
    return q + ((x >> 8) < frac24);
}

MPX_NUM uint16_t mpx_f32_to_bf16_sr(float f, uint32_t x)
{
    uint32_t u = mpx_f32_bits(f);
    if ((u & 0x7fffffffu) >= 0x7f800000u)
        return mpx_f32_to_bf16(f);
    /* working on the whole sign-magnitude word rounds the magnitude; a carry into the
     * exponent (or from the largest finite into inf) is the right neighbour */
    uint32_t sign = u & 0x80000000u;
    return (uint16_t)((sign >> 16) | mpx_shift_sr_(u & 0x7fffffffu, 16, x));
}

MPX_NUM uint16_t mpx_f32_to_f16_sr(float f, uint32_t x)
{
    uint32_t u = mpx_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a >= 0x7f800000u)
        return mpx_f32_to_f16(f);
    if (a >= 0x47800000u)                          /* >= 65536: past the last gap */
        return (uint16_t)(sign | 0x7c00u);
    if (a >= 0x38800000u)                          /* normal: 13 bits discarded */
        return (uint16_t)(sign | mpx_shift_sr_(a - 0x38000000u, 13, x));
    /* subnormal fp16 (or zero): m * 2^(e-150) in units of 2^-24 is m >> (126 - e) */
    uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
    unsigned s = 126u - e;                         /* 14..126 */
    if (s <= 31)
        return (uint16_t)(sign | mpx_shift_sr_(m, s, x));
    if (s >= 48 || e == 0)                         /* < 2^-46: up with probability < 2^-24 */
        return sign;
    return (uint16_t)(sign | ((x >> 8) < (m >> (s - 24))));
}

/* Convenience over mpx_dtype-free code: round fp32 to a 16-bit type and back. */
MPX_NUM float mpx_round_bf16(float f) { return mpx_bf16_to_f32(mpx_f32_to_bf16(f)); }
MPX_NUM float mpx_round_f16(float f) { return mpx_f16_to_f32(mpx_f32_to_f16(f)); }

#endif
