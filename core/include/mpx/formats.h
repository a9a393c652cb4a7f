/* Number formats beyond fp32/fp16/bf16 (ABI 1.2): fp8, fp6, fp4 and any ExMy a precision
 * plugin declares by its parameters. Header-only and plain integer C11, like numerics.h,
 * so the core, every backend and every plugin convert bit for bit alike.
 *
 * A format is sign + `exp_bits` + `man_bits` (sign in the top bit of the code, codes in
 * the low bits of `storage_bytes` bytes), exponent `bias`, subnormals or not, and one of
 * four encodings of the special values (the names are ml_dtypes' / LLVM APFloat's):
 *   IEEE   the all-ones exponent holds inf (mantissa 0) and NaN           fp8-e5m2, e4m3
 *   FN     no inf; only all-ones exponent and mantissa is NaN             fp8-e4m3 (OCP)
 *   FNUZ   no inf, no -0: the code "sign bit alone" is the one NaN        e4m3fnuz, e5m2fnuz
 *   FINITE every code is a number: no inf, no NaN                         e3m2, e2m3, e2m1
 * fp32 -> format rounds to nearest even once. Overflow (after rounding) gives inf for
 * IEEE, NaN for FN/FNUZ and the largest finite for FINITE, as ml_dtypes does; with
 * `saturate` set it gives +-largest finite for every encoding (and inf becomes the
 * largest finite too). NaN becomes the format's NaN (IEEE: quiet, sign kept); FINITE has
 * none, and gives a zero of the opposite sign (ml_dtypes' behaviour, kept so the
 * fixtures match). Without subnormals, a result that would be subnormal is flushed to a
 * zero of the same sign, and a zero exponent field reads as zero.
 *
 * A plugin may also give its own `encode`/`decode` for formats the parameters cannot
 * describe (they must be pure functions: no state). The core then uses those.
 */
#ifndef MPX_FORMATS_H
#define MPX_FORMATS_H

#include <stdint.h>
#include <string.h>

typedef enum mpx_fmt_special {
    MPX_FMT_IEEE = 0,
    MPX_FMT_FN = 1,
    MPX_FMT_FNUZ = 2,
    MPX_FMT_FINITE = 3,
} mpx_fmt_special;

typedef struct mpx_format {
    uint32_t size;            /* sizeof(mpx_format) as the declarer knows it */
    const char *name;         /* "fp8-e4m3": usable wherever a dtype name is */
    uint8_t exp_bits;         /* 1..8 */
    uint8_t man_bits;         /* 0..10 (1 + exp_bits + man_bits <= 8 * storage_bytes) */
    uint8_t subnormals;       /* 1: exponent field 0 holds subnormals; 0: flushed */
    uint8_t special;          /* mpx_fmt_special */
    int16_t bias;
    uint8_t saturate;         /* 1: overflow and inf give the largest finite */
    uint8_t storage_bytes;    /* 1 or 2 */
    /* Optional own conversions (both or neither): code <-> fp32. */
    uint32_t (*encode)(float x);
    float (*decode)(uint32_t code);
} mpx_format;

#define MPX_FORMAT_PARAMS(NAME, E, M, BIAS, SPECIAL) \
    { .size = sizeof(mpx_format), .name = NAME, .exp_bits = E, .man_bits = M, .subnormals = 1, \
      .special = SPECIAL, .bias = BIAS, .saturate = 0, .storage_bytes = 1 }

/* The OCP 8-bit formats (OCP FP8 v1.0) and the MX element formats (OCP MX v1.0). */
#define MPX_FORMAT_FP8_E4M3 MPX_FORMAT_PARAMS("fp8-e4m3", 4, 3, 7, MPX_FMT_FN)
#define MPX_FORMAT_FP8_E5M2 MPX_FORMAT_PARAMS("fp8-e5m2", 5, 2, 15, MPX_FMT_IEEE)
#define MPX_FORMAT_FP6_E3M2 MPX_FORMAT_PARAMS("e3m2", 3, 2, 3, MPX_FMT_FINITE)
#define MPX_FORMAT_FP6_E2M3 MPX_FORMAT_PARAMS("e2m3", 2, 3, 1, MPX_FMT_FINITE)
#define MPX_FORMAT_FP4_E2M1 MPX_FORMAT_PARAMS("e2m1", 2, 1, 1, MPX_FMT_FINITE)

static inline unsigned mpx_fmt_bits(const mpx_format *f) { return 1u + f->exp_bits + f->man_bits; }
static inline uint32_t mpx_fmt_sign_bit(const mpx_format *f) { return 1u << (f->exp_bits + f->man_bits); }

/* Code of the largest finite magnitude. */
static inline uint32_t mpx_fmt_max_code(const mpx_format *f)
{
    uint32_t all = mpx_fmt_sign_bit(f) - 1u, man = (1u << f->man_bits) - 1u;
    switch (f->special) {
    case MPX_FMT_IEEE: return all - man - 1u;   /* exponent all-ones minus 1, mantissa all ones */
    case MPX_FMT_FN: return all - 1u;            /* all ones is NaN */
    default: return all;                         /* FNUZ, FINITE */
    }
}

/* A code's value (NaN as a quiet fp32 NaN, sign kept). */
static inline float mpx_fmt_decode(const mpx_format *f, uint32_t code)
{
    if (f->decode) return f->decode(code);
    uint32_t sbit = mpx_fmt_sign_bit(f), mag = code & (sbit - 1u);
    uint32_t sign = (code & sbit) ? 0x80000000u : 0u;
    uint32_t e = mag >> f->man_bits, m = mag & ((1u << f->man_bits) - 1u), emax = (1u << f->exp_bits) - 1u;
    union { uint32_t u; float f; } r;
    if (f->special == MPX_FMT_FNUZ && (code & ((sbit << 1) - 1u)) == sbit) { r.u = 0x7fc00000u; return r.f; }
    if (f->special == MPX_FMT_FN && mag == (sbit - 1u)) { r.u = sign | 0x7fc00000u; return r.f; }
    if (f->special == MPX_FMT_IEEE && e == emax) { r.u = sign | 0x7f800000u | (m ? 0x00400000u : 0u); return r.f; }
    if (e == 0 && (m == 0 || !f->subnormals)) { r.u = sign; return r.f; }
    /* value = sig * 2^(exp - man_bits), sig < 2^11: exact in fp32 via its bits */
    int exp = e ? (int)e - f->bias : 1 - f->bias;
    uint32_t sig = e ? (m | (1u << f->man_bits)) : m;
    int lead = 31 - __builtin_clz(sig);            /* position of the leading one */
    int e32 = exp - f->man_bits + lead;            /* unbiased fp32 exponent */
    uint32_t frac = (sig << (23 - lead)) & 0x7fffffu;
    if (e32 < -126) {                              /* fp32 subnormal (only for biases past 126) */
        r.u = sign | ((sig << (23 - lead)) | 0x800000u) >> (-126 - e32);
        return r.f;
    }
    r.u = sign | ((uint32_t)(e32 + 127) << 23) | frac;
    return r.f;
}

/* m >> s rounded to nearest even, for any s >= 0. */
static inline uint32_t mpx_fmt_shift_rne_(uint32_t m, unsigned s)
{
    if (s == 0) return m;
    if (s > 31) return 0;
    uint32_t q = m >> s, rem = m & ((1u << s) - 1u), half = 1u << (s - 1);
    return q + (rem > half || (rem == half && (q & 1u)));
}

static inline uint32_t mpx_fmt_encode_(const mpx_format *f, float x, int saturate)
{
    if (f->encode && !saturate) return f->encode(x);
    uint32_t u;
    memcpy(&u, &x, 4);
    uint32_t sbit = mpx_fmt_sign_bit(f), sign = (u >> 31) ? sbit : 0u, a = u & 0x7fffffffu;
    uint32_t maxc = mpx_fmt_max_code(f), emaxf = (1u << f->exp_bits) - 1u;
    if (a > 0x7f800000u) {                         /* NaN */
        switch (f->special) {
        case MPX_FMT_IEEE: return sign | (emaxf << f->man_bits) | (f->man_bits ? 1u << (f->man_bits - 1) : 0u);
        case MPX_FMT_FN: return sign | (sbit - 1u);
        case MPX_FMT_FNUZ: return sbit;
        default: return sign ^ sbit;
        }
    }
    uint32_t over;                                 /* what overflow gives */
    if (saturate || f->special == MPX_FMT_FINITE) over = sign | maxc;
    else if (f->special == MPX_FMT_IEEE) over = sign | (emaxf << f->man_bits);
    else if (f->special == MPX_FMT_FN) over = sign | (sbit - 1u);
    else over = sbit;
    if (a == 0x7f800000u) return over;
    if (a == 0) return f->special == MPX_FMT_FNUZ ? 0u : sign;
    int e = (int)(a >> 23);
    uint32_t m = a & 0x7fffffu;
    if (e) {
        m |= 0x800000u;
    } else {                                       /* an fp32 subnormal: normalized, so that */
        e = 1;                                     /* a format reaching below 2^-126 (bias */
        int z = __builtin_clz(m) - 8;              /* past 126) rounds it in its own grid */
        m <<= z;
        e -= z;
    }
    e -= 127;                                      /* x = m * 2^(e - 23), 2^23 <= m < 2^24 */
    int emin = 1 - f->bias;                        /* smallest normal exponent */
    uint32_t mag;
    if (e >= emin) {
        uint32_t q = mpx_fmt_shift_rne_(m, 23u - f->man_bits);   /* 2^M <= q <= 2^(M+1) */
        int ee = e;
        if (q >> (f->man_bits + 1)) { q >>= 1; ee++; }
        long long ef = (long long)ee + f->bias;
        if (ef > (long long)emaxf) return over;
        mag = ((uint32_t)ef << f->man_bits) | (q & ((1u << f->man_bits) - 1u));
    } else {
        /* subnormal: in units of 2^(emin - M) the value is m >> (23 - M + emin - e) */
        long long s = 23LL - f->man_bits + emin - e;
        mag = s > 31 ? 0u : mpx_fmt_shift_rne_(m, (unsigned)s);  /* 2^M here is the smallest normal */
        if (!f->subnormals && mag < (1u << f->man_bits)) mag = 0;
    }
    if (mag > maxc) return over;
    if (mag == 0 && f->special == MPX_FMT_FNUZ) return 0u;
    return sign | mag;
}

/* fp32 -> code, round to nearest even (saturating when the format says so). */
static inline uint32_t mpx_fmt_encode(const mpx_format *f, float x) { return mpx_fmt_encode_(f, x, f->saturate); }
/* fp32 -> code, round to nearest even, overflow and inf to +-largest finite. */
static inline uint32_t mpx_fmt_encode_sat(const mpx_format *f, float x) { return mpx_fmt_encode_(f, x, 1); }
static inline float mpx_fmt_round(const mpx_format *f, float x) { return mpx_fmt_decode(f, mpx_fmt_encode(f, x)); }
/* The largest finite value. */
static inline float mpx_fmt_max(const mpx_format *f) { return mpx_fmt_decode(f, mpx_fmt_max_code(f)); }
/* Whether converting x saturates: |x| lies past what rounding to nearest keeps at the
 * largest finite value (beyond the midpoint to the next grid value, or on it when that
 * tie rounds up), so that only the clamp brings it back. A value a hair above the largest
 * finite (448.00003 for E4M3, what amax * (448 / amax) often gives) rounds to it and is
 * not saturated. Formats with their own conversions: |x| > largest finite. */
static inline int mpx_fmt_saturates(const mpx_format *f, float x)
{
    float a = x < 0 ? -x : x, top = mpx_fmt_max(f);
    if (a != a) return 0;
    if (f->encode) return a > top;
    uint32_t u;
    memcpy(&u, &top, 4);
    int e = (int)((u >> 23) & 0xffu) - 127;
    if (e - f->man_bits - 1 < -126) return a > top;   /* a top too small for the midpoint as a normal */
    union { uint32_t u; float f; } half;
    half.u = (uint32_t)(e - f->man_bits - 1 + 127) << 23;   /* half the step above top */
    float mid = top + half.f;                         /* exact: one bit more than top has */
    uint32_t maxc = mpx_fmt_max_code(f);
    int tie_up = f->man_bits == 0 || (maxc & 1u);     /* as mpx_fmt_encode rounds the tie */
    return a > mid || (a == mid && tie_up);
}

/* floor(log2(largest finite)): the element's emax in OCP MX terms. */
static inline int mpx_fmt_emax(const mpx_format *f)
{
    float m = mpx_fmt_max(f);
    uint32_t u;
    memcpy(&u, &m, 4);
    return (int)((u >> 23) & 0xffu) - 127;
}

/* Parameters make sense (and fit the storage); NULL, or what is wrong. */
static inline const char *mpx_fmt_invalid(const mpx_format *f)
{
    if (!f->name || !f->name[0]) return "no name";
    if (f->storage_bytes != 1 && f->storage_bytes != 2) return "storage_bytes must be 1 or 2";
    if ((f->encode == NULL) != (f->decode == NULL)) return "give both encode and decode, or neither";
    if (f->encode) return NULL;
    if (f->exp_bits < 1 || f->exp_bits > 8) return "exp_bits must be 1..8";
    if (f->man_bits > 10) return "man_bits must be 0..10";
    if (mpx_fmt_bits(f) > 8u * f->storage_bytes) return "1 + exp_bits + man_bits exceeds the storage";
    if (f->special > MPX_FMT_FINITE) return "unknown special-value encoding";
    if (f->special == MPX_FMT_IEEE && f->exp_bits < 2) return "IEEE specials need 2 or more exponent bits";
    if (f->special == MPX_FMT_FN && f->exp_bits + f->man_bits < 2) return "too few bits for an FN NaN";
    if (f->bias < -100 || f->bias > 150) return "bias out of range";
    /* every value must be an fp32: the largest below 2^128, the smallest step >= 2^-149 */
    if ((int)(mpx_fmt_max_code(f) >> f->man_bits) - f->bias > 127)
        return "its largest finite value is past fp32's range (2^128): lower exp_bits or raise bias";
    if (1 - f->bias - (f->subnormals ? f->man_bits : 0) < -149)
        return "its smallest value is below fp32's smallest subnormal (2^-149): lower bias";
    return NULL;
}

/* ---- OCP MX v1.0 shared scale: E8M0 (a power of two 2^(code - 127); 0xff is NaN) ---- */

#define MPX_MX_BLOCK 32

static inline float mpx_e8m0_decode(uint8_t c)
{
    union { uint32_t u; float f; } r;
    if (c == 0xff) { r.u = 0x7fc00000u; return r.f; }
    if (c == 0) { r.u = 0x00400000u; return r.f; }  /* 2^-127: an fp32 subnormal */
    r.u = (uint32_t)c << 23;
    return r.f;
}

/* The MX v1.0 shared exponent of a block whose largest magnitude is `amax` (section 6.3):
 * X = floor(log2(amax)) - emax_elem, clamped to E8M0's range; amax 0 gives 2^-127; NaN
 * or inf gives the NaN scale. */
static inline uint8_t mpx_mx_scale_code(float amax, int emax_elem)
{
    uint32_t u;
    memcpy(&u, &amax, 4);
    u &= 0x7fffffffu;
    if (u >= 0x7f800000u) return 0xff;
    if (u == 0) return 0;
    int e = (int)(u >> 23);
    if (e == 0) e = -126 - (__builtin_clz(u) - 9); else e -= 127;  /* floor(log2) of subnormals */
    int x = e - emax_elem;
    if (x < -127) x = -127;
    if (x > 127) x = 127;
    return (uint8_t)(x + 127);
}

#endif
