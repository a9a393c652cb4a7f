/* Row-wise softmax over the last dimension, with an additive mask, alone and fused with
 * the attention dropout, and one head's rows of both for the attention op
 * (cpu_attention.c); the row job and helpers it shares with cpu_rows.c are in
 * cpu_internal.h. Every row is widened to fp32 once, its max and sum are fp32, each
 * output is rounded once. */
#include "cpu_internal.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#elif defined(__SSE__)
#include <xmmintrin.h>
#endif

/* NaN elements are skipped, as `x > m ? x : m` does. SSE's maxps(x, m) is that select
 * exactly (m when either is NaN or they are equal), so the lanes run in two registers
 * (the compiler does not vectorise the select itself). */
static float row_max(const float *x, size_t n)
{
    float acc[LANES];
    size_t c = 0;
#if defined(__SSE__)
    __m128 a0 = _mm_set1_ps(-INFINITY), a1 = a0;
    for (; c + LANES <= n; c += LANES) {
        a0 = _mm_max_ps(_mm_loadu_ps(x + c), a0);
        a1 = _mm_max_ps(_mm_loadu_ps(x + c + 4), a1);
    }
    _mm_storeu_ps(acc, a0);
    _mm_storeu_ps(acc + 4, a1);
#else
    for (int k = 0; k < LANES; k++) acc[k] = -INFINITY;
    for (; c + LANES <= n; c += LANES)
        for (int k = 0; k < LANES; k++) acc[k] = x[c + k] > acc[k] ? x[c + k] : acc[k];
#endif
    for (; c < n; c++) acc[0] = x[c] > acc[0] ? x[c] : acc[0];
    float m = acc[0];
    for (int k = 1; k < LANES; k++) m = acc[k] > m ? acc[k] : m;
    return m;
}

/* ---- softmax with additive mask ---- */

#if defined(__x86_64__) || defined(__i386__)
/* softmax_row's passes in AVX-512 registers (the loops below run 4 lanes of SSE). The
 * first: r = scale * x + mask (+ 0 without one: -0 becomes +0), a multiply then an add,
 * each rounded as the scalar loop rounds it, and the maximum of r. maxps keeps the running
 * maximum when either is NaN, as row_max does; the maximum of the same values does not
 * depend on the lanes they went through (but for the sign of a zero maximum, which
 * exp(r - max) does not see). Returns the elements done, a multiple of 16. */
__attribute__((target("avx512f"))) static size_t scale_mask_max_avx512(const float *x, const float *mask, float scale,
                                                                         float *r, size_t n, float *mx)
{
    const __m512 s = _mm512_set1_ps(scale);
    __m512 acc = _mm512_set1_ps(-INFINITY);
    size_t c = 0;
    for (; c + 16 <= n; c += 16) {
        __m512 v = _mm512_mul_ps(s, _mm512_loadu_ps(x + c));
        v = _mm512_add_ps(v, mask ? _mm512_loadu_ps(mask + c) : _mm512_setzero_ps());
        _mm512_storeu_ps(r + c, v);
        acc = _mm512_max_ps(v, acc);
    }
    float a[16], m = -INFINITY;
    _mm512_storeu_ps(a, acc);
    for (int k = 0; k < 16; k++) m = a[k] > m ? a[k] : m;
    *mx = m;
    return c;
}

/* softmax_bwd_row's dx = (scale * y) * (dy - dot), each product and difference rounded as
 * the scalar loop rounds it. */
__attribute__((target("avx512f"))) static size_t softmax_bwd_avx512(const float *dy, const float *y, float scale,
                                                                      float dot, float *dx, size_t n)
{
    const __m512 s = _mm512_set1_ps(scale), d = _mm512_set1_ps(dot);
    size_t c = 0;
    for (; c + 16 <= n; c += 16)
        _mm512_storeu_ps(dx + c, _mm512_mul_ps(_mm512_mul_ps(s, _mm512_loadu_ps(y + c)),
                                               _mm512_sub_ps(_mm512_loadu_ps(dy + c), d)));
    return c;
}
#endif

/* Row i of softmax(scale * x + mask[b, :]) into r (fp32); `mask` holds the row's mask
 * row, loaded into it when *mask_row changes. */
static void softmax_row(const row_job *j, size_t i, const float *x, float *r, float *mask, size_t *mask_row)
{
    const size_t n = j->cols, b = i / j->heads_rows;
    if (j->aux.p && b != *mask_row) { cpu_load(j->be, j->aux, b * n, n, mask); *mask_row = b; }
    float mx;
    size_t c = 0;
#if defined(__x86_64__) || defined(__i386__)
    if (j->be->has_avx512) {
        c = scale_mask_max_avx512(x, j->aux.p ? mask : NULL, j->scale, r, n, &mx);
        for (size_t t = c; t < n; t++) {
            r[t] = j->scale * x[t] + (j->aux.p ? mask[t] : 0.0f);
            mx = r[t] > mx ? r[t] : mx;
        }
    } else
#endif
    {
        if (j->aux.p)
            for (; c < n; c++) r[c] = j->scale * x[c] + mask[c];
        else
            for (; c < n; c++) r[c] = j->scale * x[c] + 0.0f;
        mx = row_max(r, n);
    }
    float inv = 1.0f / cpu_exp_sub_sum(j->be, r, mx, r, n);   /* exp(r - mx), cpu_row_sum of it */
    cpu_vscale(j->be, r, inv, r, n);
}

static void softmax_fwd_rows(void *vj, size_t begin, size_t end)
{
    row_job *j = vj;
    const size_t n = j->cols;
    float *buf = row_buffers(j, 3);
    if (!buf) return;
    float *xb = buf, *mask = buf + n, *yb = buf + 2 * n;
    size_t mask_row = (size_t)-1;
    for (size_t i = begin; i < end; i++) {
        float *r = row_out(j->y, i * n, yb);
        softmax_row(j, i, row_in(j, j->x, i * n, xb), r, mask, &mask_row);
        row_done(j, r, j->y, i * n);
    }
    free(buf);
}

int cpu_softmax_fwd(void *vbe, mpx_arg x, const mpx_arg mask, mpx_arg y, size_t batch,
                    size_t heads, size_t rows, size_t cols, float scale)
{
    cpu_be *be = vbe;
    size_t total = batch * heads * rows;
    CPU_CHECK(be, "softmax_fwd", "x", x, total * cols);
    CPU_CHECK(be, "softmax_fwd", "y", y, total * cols);
    CPU_CHECK_OPT(be, "softmax_fwd", "mask", mask, batch * cols);
    if (!total || !cols) return MPX_OK;
    row_job j = { .be = be, .x = x, .y = y, .aux = mask, .rows = total, .cols = cols,
                  .heads_rows = heads * rows, .scale = scale };
    cpu_pool_run(be->pool, total, CPU_ROW_GRAIN, softmax_fwd_rows, &j);
    return finish(&j, "softmax_fwd");
}

/* dx = scale * y * (dy - sum_c dy * y) for one row */
static void softmax_bwd_row(const row_job *j, const float *dy, const float *y, float *dx)
{
    const size_t n = j->cols;
    float dot = cpu_row_dot(dy, y, n);
    size_t c = 0;
#if defined(__x86_64__) || defined(__i386__)
    if (j->be->has_avx512) c = softmax_bwd_avx512(dy, y, j->scale, dot, dx, n);
#endif
    for (; c < n; c++) dx[c] = j->scale * y[c] * (dy[c] - dot);
}

static void softmax_bwd_rows(void *vj, size_t begin, size_t end)
{
    row_job *j = vj;
    const size_t n = j->cols;
    float *buf = row_buffers(j, 3);
    if (!buf) return;
    for (size_t i = begin; i < end; i++) {
        const float *dy = row_in(j, j->dy, i * n, buf), *y = row_in(j, j->y, i * n, buf + n);
        float *dx = row_out(j->dx, i * n, buf + 2 * n);
        softmax_bwd_row(j, dy, y, dx);
        row_done(j, dx, j->dx, i * n);
    }
    free(buf);
}

int cpu_softmax_bwd(void *vbe, mpx_arg dy, mpx_arg y, mpx_arg dx, size_t n_rows, size_t cols,
                    float scale)
{
    cpu_be *be = vbe;
    CPU_CHECK(be, "softmax_bwd", "dy", dy, n_rows * cols);
    CPU_CHECK(be, "softmax_bwd", "y", y, n_rows * cols);
    CPU_CHECK(be, "softmax_bwd", "dx", dx, n_rows * cols);
    if (!n_rows || !cols) return MPX_OK;
    row_job j = { .be = be, .dy = dy, .y = y, .dx = dx, .rows = n_rows, .cols = cols, .scale = scale };
    cpu_pool_run(be->pool, n_rows, CPU_ROW_GRAIN, softmax_bwd_rows, &j);
    return finish(&j, "softmax_bwd");
}

/* ---- softmax and the attention dropout in one pass (ABI 1.10) ----
 * Each row goes through exactly what the two ops do one after the other, with the
 * intermediate rounded to its dtype in between, so the bits are those of the pair; what
 * is saved is the second op's trip through memory (the row is still in L1). */

/* Row buffers and room for the row's Philox words (also used as a row of any dtype);
 * NULL (flagging the job) when out of memory. */
static float *fused_buffers(row_job *j, size_t count, uint32_t **words)
{
    float *buf = row_buffers(j, count);
    *words = buf ? malloc(j->cols * sizeof(double)) : NULL;
    if (buf && !*words) {
        free(buf);
        buf = NULL;
        atomic_store(&j->failed, 1);
    }
    return buf;
}

/* fwd: x, aux = mask, y (the probabilities), dx = yd (their dropout) */
static void softmax_dropout_fwd_rows(void *vj, size_t begin, size_t end)
{
    row_job *j = vj;
    const size_t n = j->cols;
    uint32_t *words;
    float *buf = fused_buffers(j, 4, &words);
    if (!buf) return;
    float *xb = buf, *mask = buf + n, *yb = buf + 2 * n, *db = buf + 3 * n;
    const uint32_t keep_from = cpu_dropout_keep_from(j->dscale);
    const float s = cpu_dropout_scale(j->dscale);
    size_t mask_row = (size_t)-1;
    for (size_t i = begin; i < end; i++) {
        float *r = row_out(j->y, i * n, yb);
        softmax_row(j, i, row_in(j, j->x, i * n, xb), r, mask, &mask_row);
        row_done(j, r, j->y, i * n);
        if (j->y.t != MPX_F32) cpu_load(j->be, j->y, i * n, n, r);   /* the probabilities as stored */
        cpu_philox_words(j->be, &j->rng, j->rng.offset + i * n, n, words);
        float *d = row_out(j->dx, i * n, db);
        if (j->keep) {   /* the decisions kept as bits, for the attention op's backward */
            uint32_t *bits = j->keep + i * j->keep_words;
            cpu_dropout_bits(j->be, words, n, keep_from, bits);
            cpu_dropout_apply_bits(j->be, r, bits, n, s, d);
        } else {
            cpu_dropout_apply(j->be, r, words, n, keep_from, s, d);
        }
        row_done(j, d, j->dx, i * n);
    }
    free(words);
    free(buf);
}

static int check_p(cpu_be *be, const char *op, float p)
{
    if (!(p >= 0.0f && p <= 1.0f)) return CPU_FAIL(be, "cpu %s: p = %g is outside [0, 1]", op, (double)p);
    return MPX_OK;
}

int cpu_softmax_dropout_fwd(void *vbe, mpx_arg x, const mpx_arg mask, mpx_arg y, mpx_arg yd,
                            size_t batch, size_t heads, size_t rows, size_t cols, float scale,
                            float p, mpx_rng rng)
{
    cpu_be *be = vbe;
    size_t total = batch * heads * rows;
    CPU_CHECK(be, "softmax_dropout_fwd", "x", x, total * cols);
    CPU_CHECK(be, "softmax_dropout_fwd", "y", y, total * cols);
    CPU_CHECK(be, "softmax_dropout_fwd", "yd", yd, total * cols);
    CPU_CHECK_OPT(be, "softmax_dropout_fwd", "mask", mask, batch * cols);
    MPX_TRY(check_p(be, "softmax_dropout_fwd", p));
    if (!total || !cols) return MPX_OK;
    row_job j = { .be = be, .x = x, .y = y, .dx = yd, .aux = mask, .rows = total, .cols = cols,
                  .heads_rows = heads * rows, .scale = scale, .dscale = p, .rng = rng };
    cpu_pool_run(be->pool, total, CPU_ROW_GRAIN, softmax_dropout_fwd_rows, &j);
    return finish(&j, "softmax_dropout_fwd");
}

/* bwd: dy = the dropout's output gradient, y, dx */
static void dropout_softmax_bwd_rows(void *vj, size_t begin, size_t end)
{
    row_job *j = vj;
    const size_t n = j->cols;
    uint32_t *words;
    float *buf = fused_buffers(j, 4, &words);
    if (!buf) return;
    const uint32_t keep_from = cpu_dropout_keep_from(j->dscale);
    const float s = cpu_dropout_scale(j->dscale);
    float *dp = buf + 3 * n;
    for (size_t i = begin; i < end; i++) {
        const float *dyd = row_in(j, j->dy, i * n, buf), *y = row_in(j, j->y, i * n, buf + n);
        if (j->keep) {
            cpu_dropout_apply_bits(j->be, dyd, j->keep + i * j->keep_words, n, s, dp);
        } else {
            cpu_philox_words(j->be, &j->rng, j->rng.offset + i * n, n, words);
            cpu_dropout_apply(j->be, dyd, words, n, keep_from, s, dp);
        }
        if (j->dy.t != MPX_F32) {   /* dropout_bwd's output as it would be stored, in dyd's dtype */
            mpx_arg stored = mpx_a(words, j->dy.t);
            cpu_store(j->be, dp, stored, 0, n);
            cpu_load(j->be, stored, 0, n, dp);
        }
        float *dx = row_out(j->dx, i * n, buf + 2 * n);
        softmax_bwd_row(j, dp, y, dx);
        row_done(j, dx, j->dx, i * n);
    }
    free(words);
    free(buf);
}

int cpu_dropout_softmax_bwd(void *vbe, mpx_arg dyd, mpx_arg y, mpx_arg dx, size_t n_rows,
                            size_t cols, float scale, float p, mpx_rng rng)
{
    cpu_be *be = vbe;
    CPU_CHECK(be, "dropout_softmax_bwd", "dyd", dyd, n_rows * cols);
    CPU_CHECK(be, "dropout_softmax_bwd", "y", y, n_rows * cols);
    CPU_CHECK(be, "dropout_softmax_bwd", "dx", dx, n_rows * cols);
    MPX_TRY(check_p(be, "dropout_softmax_bwd", p));
    if (dx.p == dyd.p && dx.t != dyd.t)
        return CPU_FAIL(be, "cpu dropout_softmax_bwd: dx aliases dyd with another dtype");
    if (!n_rows || !cols) return MPX_OK;
    row_job j = { .be = be, .dy = dyd, .y = y, .dx = dx, .rows = n_rows, .cols = cols, .scale = scale,
                  .dscale = p, .rng = rng };
    cpu_pool_run(be->pool, n_rows, CPU_ROW_GRAIN, dropout_softmax_bwd_rows, &j);
    return finish(&j, "dropout_softmax_bwd");
}

/* ---- one head's rows, on the calling thread (cpu_attention.c) ----
 * The row loops above over rows 0 .. rows of one head: the mask row is the head's own
 * (heads_rows = rows, so every row reads mask row 0 of `mask_row`), and the stream
 * position comes with rng.offset. */

int cpu_attn_softmax_rows(cpu_be *be, mpx_arg x, mpx_arg mask_row, mpx_arg y, mpx_arg yd, size_t rows,
                          size_t cols, float p, mpx_rng rng, uint32_t *keep)
{
    row_job j = { .be = be, .x = x, .y = y, .dx = yd, .aux = mask_row, .rows = rows, .cols = cols,
                  .heads_rows = rows, .scale = 1.0f, .dscale = p, .rng = rng, .keep = keep,
                  .keep_words = (cols + 31) / 32 };
    if (p > 0.0f) softmax_dropout_fwd_rows(&j, 0, rows);
    else softmax_fwd_rows(&j, 0, rows);
    return finish(&j, "attention_fwd (softmax)");
}

int cpu_attn_dropout_rows(cpu_be *be, mpx_arg y, mpx_arg yd, size_t rows, size_t cols, float p, mpx_rng rng,
                          const uint32_t *keep)
{
    row_job j = { .be = be, .rows = rows, .cols = cols };
    uint32_t *words;
    float *buf = fused_buffers(&j, 2, &words);
    if (!buf) return finish(&j, "attention_bwd (dropout)");
    const uint32_t keep_from = cpu_dropout_keep_from(p);
    const float s = cpu_dropout_scale(p);
    for (size_t i = 0; i < rows; i++) {   /* softmax_dropout_fwd_rows' second half */
        const float *r = row_in(&j, y, i * cols, buf);
        float *d = row_out(yd, i * cols, buf + cols);
        if (keep) {
            cpu_dropout_apply_bits(be, r, keep + i * ((cols + 31) / 32), cols, s, d);
        } else {
            cpu_philox_words(be, &rng, rng.offset + i * cols, cols, words);
            cpu_dropout_apply(be, r, words, cols, keep_from, s, d);
        }
        row_done(&j, d, yd, i * cols);
    }
    free(words);
    free(buf);
    return MPX_OK;
}

int cpu_attn_softmax_bwd_rows(cpu_be *be, mpx_arg dyd, mpx_arg y, mpx_arg dx, size_t rows, size_t cols, float p,
                              mpx_rng rng, const uint32_t *keep)
{
    row_job j = { .be = be, .dy = dyd, .y = y, .dx = dx, .rows = rows, .cols = cols, .scale = 1.0f, .dscale = p,
                  .rng = rng, .keep = (uint32_t *)keep, .keep_words = (cols + 31) / 32 };
    if (p > 0.0f) dropout_softmax_bwd_rows(&j, 0, rows);
    else softmax_bwd_rows(&j, 0, rows);
    return finish(&j, "attention_bwd (softmax)");
}
