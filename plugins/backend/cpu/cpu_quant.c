/* The 8-bit GEMMs' quantisation (cpu_gemm_scaled.c): q = the format's value nearest to
 * x * s (round to nearest even, saturating), counted as mpx_quant_stats counts it.
 *
 * The scalar form is mpx/formats.h's encoder and the backend's decode table:
 * q = lut[mpx_fmt_encode_sat(f, x * s)], about 10 ns an element. The AVX-512 form
 * computes the same value in fp32 arithmetic, 16 lanes at a time, for every format whose
 * parameters describe it (no own encode function, at most 10 mantissa bits, smallest
 * normal 2^emin with emin >= -126):
 *   |v| >= 2^emin: v's fp32 bits rounded to nearest even at the format's last mantissa
 *                  bit (bit 23 - M): a carry into the exponent is the next binade;
 *   |v| <  2^emin: (|v| + 2^(emin - M + 23)) - 2^(emin - M + 23): the fp32 sum rounds
 *                  to nearest even in units of 2^(emin - M), the format's subnormal
 *                  step (formats without subnormals then flush what is below 2^emin);
 *   then the smaller of that and the largest finite (saturation), the sign put back
 *   (FNUZ has no -0). A group of 16 holding an inf or NaN in x * s goes to the scalar form.
 * test_scaling checks the two against each other on every fp32 bit pattern's high half
 * with eight low halves, for the four formats the policies use. */
#include "cpu_internal.h"

#include <math.h>
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

void cpu_qfmt_init(const mpx_format *f, cpu_qfmt *q)
{
    memset(q, 0, sizeof *q);
    int emin = 1 - f->bias, m = f->man_bits;
    float top = mpx_fmt_max(f);
    uint32_t u;
    memcpy(&u, &top, 4);
    int e = (int)((u >> 23) & 0xffu) - 127;
    if (f->encode || m > 10 || f->exp_bits < 1 || emin < -126 || emin - m + 23 > 127 || !isfinite(top) ||
        e - m - 1 < -126)
        return;   /* the scalar form */
    q->ok = 1;
    q->min_normal = ldexpf(1.0f, emin);
    q->magic = ldexpf(1.0f, emin - m + 23);
    q->maxv = top;
    q->mid = top + ldexpf(1.0f, e - m - 1);   /* as mpx_fmt_saturates: half a step above the top */
    q->tie_up = m == 0 || (mpx_fmt_max_code(f) & 1u);
    q->subnormals = f->subnormals;
    q->fnuz = f->special == MPX_FMT_FNUZ;
    q->sh = 23u - (unsigned)m;
}

/* One element, as the scalar form does it. */
static inline void quant_one(const mpx_format *f, const float *lut, float *x, float s, mpx_quant_stats *st)
{
    float v = *x * s, q = lut[mpx_fmt_encode_sat(f, v)];
    if (*x != 0.0f && !isnan(*x)) {
        st->nonzero++;
        if (mpx_fmt_saturates(f, v)) st->saturated++;   /* not a hair above the top that rounds to it */
        else if (q == 0.0f) st->flushed++;
    }
    *x = q;
}

#if defined(__x86_64__)
/* 16 values x scaled by vs (per lane), rounded as above: 0 with *out unset when a lane of
 * x vs is inf or NaN (the caller's scalar form takes the group), else 1, the group counted
 * into cnt (nonzero, saturated, flushed). */
__attribute__((target("avx512f"))) static inline int quant16(const cpu_qfmt *qf, __m512 xv, __m512 vs, __m512 *out,
                                                            uint64_t cnt[3])
{
    const __m512 minn = _mm512_set1_ps(qf->min_normal), magic = _mm512_set1_ps(qf->magic);
    const __m512 maxv = _mm512_set1_ps(qf->maxv), mid = _mm512_set1_ps(qf->mid), zero = _mm512_setzero_ps();
    const __m512i absm = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
    const __m512i inc = _mm512_set1_epi32((int)((1u << (qf->sh - 1)) - 1u)), one = _mm512_set1_epi32(1);
    const __m512i keep = _mm512_set1_epi32((int)~((1u << qf->sh) - 1u));
    __m512 v = _mm512_mul_ps(xv, vs);
    __m512i vb = _mm512_castps_si512(v), ab = _mm512_and_si512(vb, absm);
    if (_mm512_cmpge_epu32_mask(ab, inf)) return 0;
    __m512 a = _mm512_castsi512_ps(ab);
    __m512i r = _mm512_add_epi32(ab, _mm512_add_epi32(inc, _mm512_and_si512(_mm512_srli_epi32(ab, qf->sh), one)));
    __m512 qn = _mm512_castsi512_ps(_mm512_and_si512(r, keep));
    __m512 qs = _mm512_sub_ps(_mm512_add_ps(a, magic), magic);
    __mmask16 small = _mm512_cmp_ps_mask(a, minn, _CMP_LT_OQ);
    __m512 q = _mm512_mask_blend_ps(small, qn, qs);
    if (!qf->subnormals) q = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(q, minn, _CMP_LT_OQ), q, zero);
    q = _mm512_min_ps(q, maxv);
    __mmask16 is_zero = _mm512_cmp_ps_mask(q, zero, _CMP_EQ_OQ);
    __m512i qb = _mm512_or_si512(_mm512_castps_si512(q), _mm512_andnot_si512(absm, vb));
    if (qf->fnuz) qb = _mm512_mask_mov_epi32(qb, is_zero, _mm512_setzero_si512());
    *out = _mm512_castsi512_ps(qb);
    __mmask16 m_nz = _mm512_cmp_ps_mask(xv, zero, _CMP_NEQ_OQ);
    __mmask16 m_sat = _mm512_cmp_ps_mask(a, mid, _CMP_GT_OQ);
    if (qf->tie_up) m_sat |= _mm512_cmp_ps_mask(a, mid, _CMP_EQ_OQ);
    cnt[0] += (uint64_t)__builtin_popcount(m_nz);
    cnt[1] += (uint64_t)__builtin_popcount(m_nz & m_sat);
    cnt[2] += (uint64_t)__builtin_popcount(m_nz & ~m_sat & is_zero);
    return 1;
}

/* Groups of 16 from the start; returns the elements done (a group with an inf or NaN in
 * x * s, and the tail, are left to the caller's scalar form: it continues from there). */
__attribute__((target("avx512f"))) static size_t quant_avx512(const cpu_qfmt *qf, float *x, size_t n,
                                                                       float s, mpx_quant_stats *st)
{
    const __m512 vs = _mm512_set1_ps(s);
    uint64_t cnt[3] = { 0, 0, 0 };
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 q;
        if (!quant16(qf, _mm512_loadu_ps(x + i), vs, &q, cnt)) break;
        _mm512_storeu_ps(x + i, q);
    }
    st->nonzero += cnt[0];
    st->saturated += cnt[1];
    st->flushed += cnt[2];
    return i;
}

/* A whole MX block of 32 contiguous values with AVX-512: 0 when it holds an inf or NaN, or
 * a group went to the scalar form (then nothing is written or counted). */
__attribute__((target("avx512f"))) static int mx_block32_avx512(const mpx_format *f, const cpu_qfmt *qf, float *x,
                                                                mpx_quant_stats *st)
{
    const __m512i absm = _mm512_set1_epi32(0x7fffffff);
    __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
    uint32_t mb = _mm512_reduce_max_epu32(_mm512_max_epu32(_mm512_and_si512(_mm512_castps_si512(x0), absm),
                                                           _mm512_and_si512(_mm512_castps_si512(x1), absm)));
    if (mb >= 0x7f800000u) return 0;
    float amax;
    memcpy(&amax, &mb, 4);
    float scale = mpx_e8m0_decode(mpx_mx_scale_code(amax, mpx_fmt_emax(f)));
    const __m512 vinv = _mm512_set1_ps(1.0f / scale), vsc = _mm512_set1_ps(scale);
    __m512 q0, q1;
    uint64_t cnt[3] = { 0, 0, 0 };
    if (!quant16(qf, x0, vinv, &q0, cnt) || !quant16(qf, x1, vinv, &q1, cnt)) return 0;
    _mm512_storeu_ps(x, _mm512_mul_ps(q0, vsc));
    _mm512_storeu_ps(x + 16, _mm512_mul_ps(q1, vsc));
    st->nonzero += cnt[0];
    st->saturated += cnt[1];
    st->flushed += cnt[2];
    return 1;
}

/* cpu_quantize_mx_cols on 16 columns with AVX-512: 0 when a column holds an inf or NaN
 * or a group went to the scalar form (then nothing is written or counted). */
__attribute__((target("avx512f"))) static int mx_cols_avx512(const mpx_format *f, const cpu_qfmt *qf, float *x,
                                                             size_t ld, int rows, mpx_quant_stats *st)
{
    __m512i mx = _mm512_setzero_si512();
    const __m512i absm = _mm512_set1_epi32(0x7fffffff);
    for (int r = 0; r < rows; r++)
        mx = _mm512_max_epu32(mx, _mm512_and_si512(_mm512_castps_si512(_mm512_loadu_ps(x + (size_t)r * ld)), absm));
    uint32_t amax_bits[16];
    float inv[16], scale[16];
    _mm512_storeu_si512(amax_bits, mx);
    const int emax = mpx_fmt_emax(f);
    for (int c = 0; c < 16; c++) {
        if (amax_bits[c] >= 0x7f800000u) return 0;
        float amax;
        memcpy(&amax, &amax_bits[c], 4);
        scale[c] = mpx_e8m0_decode(mpx_mx_scale_code(amax, emax));
        inv[c] = 1.0f / scale[c];
    }
    const __m512 vinv = _mm512_loadu_ps(inv), vsc = _mm512_loadu_ps(scale);
    __m512 q[32];
    uint64_t cnt[3] = { 0, 0, 0 };
    for (int r = 0; r < rows; r++)
        if (!quant16(qf, _mm512_loadu_ps(x + (size_t)r * ld), vinv, &q[r], cnt)) return 0;
    for (int r = 0; r < rows; r++) _mm512_storeu_ps(x + (size_t)r * ld, _mm512_mul_ps(q[r], vsc));
    st->nonzero += cnt[0];
    st->saturated += cnt[1];
    st->flushed += cnt[2];
    return 1;
}
#endif

void cpu_quantize(const cpu_be *be, const mpx_format *f, const cpu_qfmt *qf, const float *lut, float *x, size_t n,
                  float s, mpx_quant_stats *st)
{
    size_t i = 0;
    while (i < n) {
#if defined(__x86_64__)
        if (qf->ok && be->has_avx512) i += quant_avx512(qf, x + i, n - i, s, st);
#else
        (void)be;
        (void)qf;
#endif
        /* the scalar form: the tail, a group with an inf or NaN, or every element */
        size_t stop = qf->ok && be->has_avx512 ? (i + 16 < n ? i + 16 : n) : n;
        for (; i < stop; i++) quant_one(f, lut, x + i, s, st);
    }
}

uint32_t cpu_abs_bits_max(const float *x, size_t n, size_t step, uint32_t m)
{
    if (step == 1) {   /* a loop the compiler vectorises */
        for (size_t i = 0; i < n; i++) {
            uint32_t u;
            memcpy(&u, &x[i], 4);
            u &= 0x7fffffffu;
            m = u > m ? u : m;
        }
        return m;
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i * step], 4);
        u &= 0x7fffffffu;
        m = u > m ? u : m;
    }
    return m;
}

void cpu_quantize_mx_block(const cpu_be *be, const mpx_format *f, const cpu_qfmt *qf, const float *lut, float *x, int w,
                           mpx_quant_stats *st)
{
#if defined(__x86_64__)
    if (w == 32 && qf->ok && be->has_avx512 && mx_block32_avx512(f, qf, x, st)) return;
#endif
    uint32_t mb = cpu_abs_bits_max(x, (size_t)w, 1, 0);
    float amax;
    memcpy(&amax, &mb, 4);
    if (mb > 0x7f800000u) amax = NAN;
    float scale = mpx_e8m0_decode(mpx_mx_scale_code(amax, mpx_fmt_emax(f)));
    if (isnan(scale)) {   /* a NaN in the block: the whole block NaN */
        for (int k = 0; k < w; k++) {
            if (x[k] != 0.0f && !isnan(x[k])) st->nonzero++;
            x[k] = scale;
        }
        return;
    }
    /* the block's elements x / 2^X rounded (counted as such), times 2^X (exact; 2^-X too,
     * 2^-127 included) */
    cpu_quantize(be, f, qf, lut, x, (size_t)w, 1.0f / scale, st);
    for (int k = 0; k < w; k++) x[k] *= scale;
}

void cpu_quantize_mx_cols(const cpu_be *be, const mpx_format *f, const cpu_qfmt *qf, const float *lut, float *x,
                          size_t ld, int rows, int cols, mpx_quant_stats *st)
{
    int c = 0;
#if defined(__x86_64__)
    if (qf->ok && be->has_avx512 && rows <= MPX_MX_BLOCK)
        for (; c + 16 <= cols; c += 16)
            if (!mx_cols_avx512(f, qf, x + c, ld, rows, st)) break;
#endif
    float tmp[MPX_MX_BLOCK];
    for (; c < cols; c++) {   /* a column at a time: gathered, one block */
        for (int r = 0; r < rows; r++) tmp[r] = x[(size_t)r * ld + (size_t)c];
        cpu_quantize_mx_block(be, f, qf, lut, tmp, rows, st);
        for (int r = 0; r < rows; r++) x[(size_t)r * ld + (size_t)c] = tmp[r];
    }
}
