/* Elementwise ops: cast, add, axpby, scale, GELU, dropout, apply_update.
 * Each op is a kernel over fp32 blocks: inputs are widened block by block into stack
 * buffers, the kernel computes in fp32, the output block is rounded once to its dtype.
 * Element results never depend on how the range is split, so neither on threads. */
#include "cpu_internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include <math.h>

/* Below this many elements an op runs on the calling thread. */
#define CPU_EW_GRAIN 16384

typedef struct ew_job ew_job;
/* out[j] for elements off..off+n-1 from in[0..n_in-1][j] (and out[j] itself when the
 * job reads its output). */
typedef void (*ew_kernel)(const ew_job *job, size_t off, size_t n, float *const *in, float *out);

struct ew_job {
    cpu_be *be;
    mpx_arg in[2];
    int n_in;
    mpx_arg out;
    int read_out;
    ew_kernel kernel;
    float alpha, beta, p, keep_scale;
    mpx_rng rng;
};

/* fp32 operands are used in place (no copy into the stack buffers): every kernel reads
 * element j of its inputs before it writes element j of out, so y aliasing an input is
 * fine. */
static void ew_range(void *vjob, size_t begin, size_t end)
{
    const ew_job *job = vjob;
    float buf[3][CPU_BLOCK];
    for (size_t off = begin; off < end; off += CPU_BLOCK) {
        size_t n = end - off < CPU_BLOCK ? end - off : CPU_BLOCK;
        float *in[2] = { buf[0], buf[1] };
        for (int i = 0; i < job->n_in; i++) {
            if (job->in[i].t == MPX_F32) in[i] = (float *)job->in[i].p + off;
            else cpu_load(job->be, job->in[i], off, n, in[i]);
        }
        float *out = job->out.t == MPX_F32 ? (float *)job->out.p + off : buf[2];
        if (job->read_out && out == buf[2]) cpu_load(job->be, job->out, off, n, out);
        job->kernel(job, off, n, in, out);
        if (out == buf[2]) cpu_store(job->be, out, job->out, off, n);
    }
}

static int ew_run(ew_job *job, size_t n)
{
    cpu_pool_run(job->be->pool, n, CPU_EW_GRAIN, ew_range, job);
    return MPX_OK;
}

/* The common shapes: y = f(x) and y = f(a, b), every operand n elements, checked by name. */
static int ew_unary(cpu_be *be, const char *op, const char *xn, mpx_arg x, const char *yn, mpx_arg y,
                    size_t n, ew_kernel k)
{
    CPU_CHECK(be, op, xn, x, n);
    CPU_CHECK(be, op, yn, y, n);
    ew_job job = { .be = be, .in = { x }, .n_in = 1, .out = y, .kernel = k };
    return ew_run(&job, n);
}

static int ew_binary(cpu_be *be, const char *op, const char *an, mpx_arg a, const char *bn, mpx_arg b,
                     const char *yn, mpx_arg y, size_t n, ew_kernel k)
{
    CPU_CHECK(be, op, an, a, n);
    CPU_CHECK(be, op, bn, b, n);
    CPU_CHECK(be, op, yn, y, n);
    ew_job job = { .be = be, .in = { a, b }, .n_in = 2, .out = y, .kernel = k };
    return ew_run(&job, n);
}

/* ---- AVX-512 loops ----
 * The elementwise kernels' loops in 16-lane registers (the compiler's run 4 SSE lanes):
 * each product, sum and difference rounded as the scalar expression rounds it, in its
 * order (ISO C contracts nothing into an FMA). Each returns the elements done, a
 * multiple of 16; the scalar loops finish the rest (or all, without AVX-512). */
#if defined(__x86_64__) || defined(__i386__)
#define EW512 __attribute__((target("avx512f"))) static size_t

EW512 add_avx512(const float *a, const float *b, float *out, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, _mm512_add_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i)));
    return i;
}

/* out = alpha x (+ beta out when read_out) */
EW512 axpby_avx512(float alpha, const float *x, float beta, int read_out, float *out, size_t n)
{
    const __m512 a = _mm512_set1_ps(alpha), b = _mm512_set1_ps(beta);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_mul_ps(a, _mm512_loadu_ps(x + i));
        if (read_out) v = _mm512_add_ps(v, _mm512_mul_ps(b, _mm512_loadu_ps(out + i)));
        _mm512_storeu_ps(out + i, v);
    }
    return i;
}

EW512 mul_avx512(const float *a, const float *b, float *out, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i)));
    return i;
}

/* GELU backward's pieces: pdf = (-0.5 x) x, then out = dy (cdf + x (k pdf)) */
EW512 gelu_pdf_arg_avx512(const float *x, float *pdf, size_t n)
{
    const __m512 h = _mm512_set1_ps(-0.5f);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_loadu_ps(x + i);
        _mm512_storeu_ps(pdf + i, _mm512_mul_ps(_mm512_mul_ps(h, v), v));
    }
    return i;
}

EW512 gelu_bwd_out_avx512(const float *dy, const float *x, const float *cdf, const float *pdf, float k, float *out,
                          size_t n)
{
    const __m512 kv = _mm512_set1_ps(k);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 t = _mm512_mul_ps(_mm512_loadu_ps(x + i), _mm512_mul_ps(kv, _mm512_loadu_ps(pdf + i)));
        t = _mm512_add_ps(_mm512_loadu_ps(cdf + i), t);
        _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_loadu_ps(dy + i), t));
    }
    return i;
}

/* cpu_dropout_apply: x s where (word >> 8) >= keep_from, else +0 (a masked multiply) */
EW512 dropout_apply_avx512(const float *x, const uint32_t *words, size_t n, uint32_t keep_from, float s, float *out)
{
    const __m512i kf = _mm512_set1_epi32((int)keep_from);
    const __m512 sv = _mm512_set1_ps(s);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i w = _mm512_srli_epi32(_mm512_loadu_si512(words + i), 8);
        _mm512_storeu_ps(out + i, _mm512_maskz_mul_ps(_mm512_cmpge_epu32_mask(w, kf), _mm512_loadu_ps(x + i), sv));
    }
    return i;
}
#undef EW512
#define EW_AVX512(be, call) ((be)->has_avx512 ? (call) : 0)
#else
#define EW_AVX512(be, call) 0
#endif

void cpu_vadd(const cpu_be *be, const float *a, const float *b, float *out, size_t n)
{
    size_t i = EW_AVX512(be, add_avx512(a, b, out, n));
    for (; i < n; i++) out[i] = a[i] + b[i];
}

void cpu_vscale(const cpu_be *be, const float *x, float alpha, float *out, size_t n)
{
    size_t i = EW_AVX512(be, axpby_avx512(alpha, x, 0.0f, 0, out, n));
    for (; i < n; i++) out[i] = alpha * x[i];
}

/* ---- cast, add, axpby, scale ---- */

static void k_copy(const ew_job *j, size_t off, size_t n, float *const *in, float *out)
{
    (void)j; (void)off;
    if (out != in[0]) memmove(out, in[0], n * sizeof *out);
}

int cpu_cast(void *vbe, mpx_arg x, mpx_arg y, size_t n)
{
    return ew_unary(vbe, "cast", "x", x, "y", y, n, k_copy);
}

static void k_add(const ew_job *j, size_t off, size_t n, float *const *in, float *out)
{
    (void)off;
    cpu_vadd(j->be, in[0], in[1], out, n);
}

int cpu_add(void *vbe, mpx_arg a, mpx_arg b, mpx_arg y, size_t n)
{
    return ew_binary(vbe, "add", "a", a, "b", b, "y", y, n, k_add);
}

static void k_axpby(const ew_job *j, size_t off, size_t n, float *const *in, float *out)
{
    (void)off;
    size_t i = EW_AVX512(j->be, axpby_avx512(j->alpha, in[0], j->beta, j->read_out, out, n));
    if (j->read_out)
        for (; i < n; i++) out[i] = j->alpha * in[0][i] + j->beta * out[i];
    else
        for (; i < n; i++) out[i] = j->alpha * in[0][i];
}

/* beta == 0 does not read y (BLAS convention: an uninitialised y may hold NaN). */
int cpu_axpby(void *vbe, float alpha, mpx_arg x, float beta, mpx_arg y, size_t n)
{
    cpu_be *be = vbe;
    CPU_CHECK(be, "axpby", "x", x, n);
    CPU_CHECK(be, "axpby", "y", y, n);
    ew_job job = { .be = be, .in = { x }, .n_in = 1, .out = y, .read_out = beta != 0.0f,
                   .kernel = k_axpby, .alpha = alpha, .beta = beta };
    return ew_run(&job, n);
}

static void k_scale(const ew_job *j, size_t off, size_t n, float *const *in, float *out)
{
    (void)off; (void)in;
    cpu_vscale(j->be, out, j->alpha, out, n);
}

int cpu_scale(void *vbe, mpx_arg x, float alpha, size_t n)
{
    cpu_be *be = vbe;
    CPU_CHECK(be, "scale", "x", x, n);
    ew_job job = { .be = be, .out = x, .read_out = 1, .kernel = k_scale, .alpha = alpha };
    return ew_run(&job, n);
}

/* ---- GELU, erf form: x * Phi(x) ----
 * Phi(x) = erfc(-x / sqrt 2) / 2 equals (1 + erf(x / sqrt 2)) / 2 but keeps its relative
 * accuracy for negative x, where 1 + erf cancels (x = -4 would lose 10 bits): cpu_phi. */

static void k_gelu_fwd(const ew_job *j, size_t off, size_t n, float *const *in, float *out)
{
    (void)off;
    float cdf[CPU_BLOCK];
    cpu_phi(j->be, in[0], cdf, n);
    size_t i = EW_AVX512(j->be, mul_avx512(in[0], cdf, out, n));
    for (; i < n; i++) out[i] = in[0][i] * cdf[i];
}

static void k_gelu_bwd(const ew_job *j, size_t off, size_t n, float *const *in, float *out)
{
    (void)off;
    const float inv_sqrt_2pi = 0.3989422804014327f;
    float cdf[CPU_BLOCK], pdf[CPU_BLOCK];
    const float *x = in[1];
    cpu_phi(j->be, x, cdf, n);
    size_t i = EW_AVX512(j->be, gelu_pdf_arg_avx512(x, pdf, n));
    for (; i < n; i++) pdf[i] = -0.5f * x[i] * x[i];
    cpu_exp(j->be, pdf, pdf, n);
    i = EW_AVX512(j->be, gelu_bwd_out_avx512(in[0], x, cdf, pdf, inv_sqrt_2pi, out, n));
    for (; i < n; i++) out[i] = in[0][i] * (cdf[i] + x[i] * (inv_sqrt_2pi * pdf[i]));
}

int cpu_gelu_fwd(void *vbe, mpx_arg x, mpx_arg y, size_t n)
{
    return ew_unary(vbe, "gelu_fwd", "x", x, "y", y, n, k_gelu_fwd);
}

int cpu_gelu_bwd(void *vbe, mpx_arg dy, mpx_arg x, mpx_arg dx, size_t n)
{
    return ew_binary(vbe, "gelu_bwd", "dy", dy, "x", x, "dx", dx, n, k_gelu_bwd);
}

/* ---- dropout: element i keeps when (draw_i >> 8) * 2^-24 >= p ---- */

/* keep  <=>  (x >> 8) * 2^-24 >= p  <=>  (x >> 8) >= ceil(p * 2^24)  (exact: p * 2^24 is a
 * float scaled by a power of two), so the compare is on integers and vectorises. */
uint32_t cpu_dropout_keep_from(float p)
{
    return (uint32_t)ceil((double)p * 0x1p24);
}

float cpu_dropout_scale(float p)
{
    return p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
}

void cpu_dropout_apply(const cpu_be *be, const float *x, const uint32_t *words, size_t n, uint32_t keep_from,
                       float s, float *out)
{
    size_t i = EW_AVX512(be, dropout_apply_avx512(x, words, n, keep_from, s, out));
    for (; i < n; i++) {
        /* a bit mask rather than a select, so the loop vectorises (a dropped inf is 0) */
        float v = x[i] * s;
        uint32_t bits, keep = 0u - (uint32_t)((words[i] >> 8) >= keep_from);
        memcpy(&bits, &v, sizeof bits);
        bits &= keep;
        memcpy(&out[i], &bits, sizeof bits);
    }
}

/* The same decisions kept as bits, and applied from them (cpu_attention.c keeps a head's
 * mask so that backward need not draw it again): the AVX-512 paths compare 16 words and
 * multiply under the 16-bit mask, which gives x * s or +0 exactly as the loop above. */
#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("avx512f"))) static size_t bits_avx512(const uint32_t *words, size_t n, uint32_t keep_from,
                                                               uint32_t *bits)
{
    const __m512i kf = _mm512_set1_epi32((int)keep_from);
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512i w0 = _mm512_srli_epi32(_mm512_loadu_si512(words + i), 8);
        __m512i w1 = _mm512_srli_epi32(_mm512_loadu_si512(words + i + 16), 8);
        bits[i / 32] = (uint32_t)_mm512_cmpge_epu32_mask(w0, kf) | (uint32_t)_mm512_cmpge_epu32_mask(w1, kf) << 16;
    }
    return i;
}

__attribute__((target("avx512f"))) static size_t apply_bits_avx512(const float *x, const uint32_t *bits, size_t n,
                                                                     float s, float *out)
{
    const __m512 sv = _mm512_set1_ps(s);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __mmask16 k = (__mmask16)(bits[i / 32] >> (i % 32));
        _mm512_storeu_ps(out + i, _mm512_maskz_mul_ps(k, _mm512_loadu_ps(x + i), sv));
    }
    return i;
}

/* AVX2: the draws past the shift are below 2^24, so the signed compare is the unsigned
 * one; a lane keeps when keep_from > draw is false. Applying: a byte of the mask spread
 * over 8 lanes, and the product AND-ed with it, as the loop below does element by element. */
__attribute__((target("avx2"))) static size_t bits_avx2(const uint32_t *words, size_t n, uint32_t keep_from,
                                                         uint32_t *bits)
{
    const __m256i kf = _mm256_set1_epi32((int)keep_from);
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        uint32_t dropped = 0;
        for (int q = 0; q < 4; q++) {
            __m256i w = _mm256_srli_epi32(_mm256_loadu_si256((const __m256i *)(words + i + 8 * q)), 8);
            dropped |= (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(kf, w))) << (8 * q);
        }
        bits[i / 32] = ~dropped;
    }
    return i;
}

__attribute__((target("avx2"))) static size_t apply_bits_avx2(const float *x, const uint32_t *bits, size_t n, float s,
                                                               float *out)
{
    const __m256 sv = _mm256_set1_ps(s);
    const __m256i lane = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i b = _mm256_and_si256(_mm256_set1_epi32((int)(bits[i / 32] >> (i % 32))), lane);
        __m256 keep = _mm256_castsi256_ps(_mm256_cmpeq_epi32(b, lane));
        _mm256_storeu_ps(out + i, _mm256_and_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), sv), keep));
    }
    return i;
}
#endif

void cpu_dropout_bits(const cpu_be *be, const uint32_t *words, size_t n, uint32_t keep_from, uint32_t *bits)
{
    size_t i = 0;
#if defined(__x86_64__) || defined(__i386__)
    if (be->has_avx512) i = bits_avx512(words, n, keep_from, bits);
    else if (be->has_avx2) i = bits_avx2(words, n, keep_from, bits);
#endif
    for (; i < n; i++) {
        if (i % 32 == 0) bits[i / 32] = 0;
        bits[i / 32] |= (uint32_t)((words[i] >> 8) >= keep_from) << (i % 32);
    }
}

void cpu_dropout_apply_bits(const cpu_be *be, const float *x, const uint32_t *bits, size_t n, float s, float *out)
{
    size_t i = 0;
#if defined(__x86_64__) || defined(__i386__)
    if (be->has_avx512) i = apply_bits_avx512(x, bits, n, s, out);
    else if (be->has_avx2) i = apply_bits_avx2(x, bits, n, s, out);
#endif
    for (; i < n; i++) {
        float v = x[i] * s;
        uint32_t b, keep = 0u - ((bits[i / 32] >> (i % 32)) & 1u);
        memcpy(&b, &v, sizeof b);
        b &= keep;
        memcpy(&out[i], &b, sizeof b);
    }
}

static void k_dropout(const ew_job *j, size_t off, size_t n, float *const *in, float *out)
{
    uint32_t words[CPU_BLOCK];
    cpu_philox_words(j->be, &j->rng, j->rng.offset + off, n, words);
    cpu_dropout_apply(j->be, in[0], words, n, cpu_dropout_keep_from(j->p), j->keep_scale, out);
}

static int dropout(cpu_be *be, const char *op, mpx_arg x, mpx_arg y, size_t n, float p, mpx_rng rng)
{
    CPU_CHECK(be, op, "input", x, n);
    CPU_CHECK(be, op, "output", y, n);
    if (!(p >= 0.0f && p <= 1.0f)) return CPU_FAIL(be, "cpu %s: p = %g is outside [0, 1]", op, (double)p);
    ew_job job = { .be = be, .in = { x }, .n_in = 1, .out = y, .kernel = k_dropout, .p = p,
                   .keep_scale = cpu_dropout_scale(p), .rng = rng };
    return ew_run(&job, n);
}

int cpu_dropout_fwd(void *be, mpx_arg x, mpx_arg y, size_t n, float p, mpx_rng rng)
{
    return dropout(be, "dropout_fwd", x, y, n, p, rng);
}

/* The same mask and scale applied to the gradient. */
int cpu_dropout_bwd(void *be, mpx_arg dy, mpx_arg dx, size_t n, float p, mpx_rng rng)
{
    return dropout(be, "dropout_bwd", dy, dx, n, p, rng);
}

/* ---- apply_update ----
 * NEAREST:    w = rne(w + u).
 * STOCHASTIC: w = sr(w + u) with element i's draw (fp32 w: plain fp32 add).
 * KAHAN:      y = u - c; t = rnd_w(w + y); c = (t - w) - y; w = t — the sum is rounded to
 *             w's dtype before the compensation is taken, so c holds what the stored
 *             weight lost (with fp32 weights this is textbook Kahan). c is stored in its
 *             dtype, rounded to nearest. */

typedef struct upd_job {
    cpu_be *be;
    mpx_arg w, comp;
    const float *u;
    mpx_rounding mode;
    mpx_rng rng;
} upd_job;

static void sr_store(const upd_job *j, const float *v, size_t off, size_t n)
{
    uint16_t *d = (uint16_t *)j->w.p + off;
    for (size_t i = 0; i < n;) {
        uint64_t e = j->rng.offset + off + i;
        mpx_philox_out r = mpx_philox_block(j->rng.seed, j->rng.site, j->rng.tick, e >> 2);
        for (unsigned k = (unsigned)(e & 3); k < 4 && i < n; k++, i++)
            d[i] = j->w.t == MPX_BF16 ? mpx_f32_to_bf16_sr(v[i], r.v[k]) : mpx_f32_to_f16_sr(v[i], r.v[k]);
    }
}

static void upd_range(void *vjob, size_t begin, size_t end)
{
    const upd_job *j = vjob;
    float w[CPU_BLOCK], c[CPU_BLOCK], t[CPU_BLOCK];
    for (size_t off = begin; off < end; off += CPU_BLOCK) {
        size_t n = end - off < CPU_BLOCK ? end - off : CPU_BLOCK;
        const float *u = j->u + off;
        if (j->w.t == MPX_F32 && j->mode != MPX_ROUND_KAHAN) {
            float *wp = (float *)j->w.p + off;   /* in place: no trip through the buffer */
            for (size_t i = 0; i < n; i++) wp[i] += u[i];
            continue;
        }
        cpu_load(j->be, j->w, off, n, w);
        if (j->mode == MPX_ROUND_KAHAN) {
            cpu_load(j->be, j->comp, off, n, c);
            for (size_t i = 0; i < n; i++) {
                c[i] = u[i] - c[i];              /* y */
                t[i] = w[i] + c[i];
            }
            cpu_round_inplace(j->be, t, n, j->w.t);
            for (size_t i = 0; i < n; i++) c[i] = (t[i] - w[i]) - c[i];
            cpu_store(j->be, c, j->comp, off, n);
            cpu_store(j->be, t, j->w, off, n);
            continue;
        }
        for (size_t i = 0; i < n; i++) w[i] += u[i];
        if (j->mode == MPX_ROUND_STOCHASTIC)
            sr_store(j, w, off, n);
        else
            cpu_store(j->be, w, j->w, off, n);
    }
}

int cpu_apply_update(void *vbe, mpx_arg w, mpx_arg comp, const float *u, size_t n,
                     mpx_rounding mode, mpx_rng rng)
{
    cpu_be *be = vbe;
    CPU_CHECK(be, "apply_update", "w", w, n);
    if (n && !u) return CPU_FAIL(be, "cpu apply_update: update is NULL");
    if (mode != MPX_ROUND_NEAREST && mode != MPX_ROUND_STOCHASTIC && mode != MPX_ROUND_KAHAN) {
        (void)CPU_FAIL(be, "cpu apply_update: unknown rounding mode %d", (int)mode);
        return MPX_ERR_UNSUPPORTED;
    }
    if (mode == MPX_ROUND_STOCHASTIC && mpx_dtype_is_format(w.t)) {
        (void)CPU_FAIL(be, "cpu apply_update: stochastic rounding into %s is not implemented (fp16/bf16 only)",
                       cpu_dtype_name(be, w.t));
        return MPX_ERR_UNSUPPORTED;
    }
    if (mode == MPX_ROUND_KAHAN) {
        if (n && !comp.p) return CPU_FAIL(be, "cpu apply_update: kahan rounding needs a compensation buffer");
        CPU_CHECK(be, "apply_update", "comp (kahan compensation)", comp, n);
    }
    upd_job job = { .be = be, .w = w, .comp = comp, .u = u, .mode = mode, .rng = rng };
    cpu_pool_run(be->pool, n, CPU_EW_GRAIN, upd_range, &job);
    return MPX_OK;
}
