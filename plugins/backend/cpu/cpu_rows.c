/* Row-wise ops over the last dimension: bias add/grad, layernorm, softmax (alone and
 * fused with the attention dropout), the
 * cross-entropy over positions. Every row is widened to fp32 once, all statistics
 * (mean, variance, max, sum, log-sum-exp) are fp32, each output is rounded once.
 * Column reductions over rows (bias_grad, dgamma, dbeta) sum fixed blocks of
 * CPU_ROW_BLOCK rows and then the block partials in block order: the same bits for
 * any thread count. */
#include "cpu_internal.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#elif defined(__SSE__)
#include <xmmintrin.h>
#endif

/* Rows per piece handed to a thread (rows are cols-sized; a few hundred floats each). */
#define CPU_ROW_GRAIN 8

typedef struct row_job {
    cpu_be *be;
    mpx_arg x, y, dy, dx, aux;      /* per-op meaning, see each op */
    const float *vec0, *vec1;       /* fp32 copies of per-column vectors (bias, gamma, beta) */
    float *mean, *rstd;
    const float *cmean, *crstd;
    float *partials;                /* column-reduction partials, [block][n_vec][cols] */
    double *row_loss;
    const int32_t *labels;
    size_t rows, cols, heads_rows;
    float scale, eps, dscale;       /* dscale: the dropout's p in the fused softmax */
    mpx_rng rng;                    /* the fused softmax's dropout stream */
    uint32_t *keep;                 /* the attention op's mask bits, keep_words a row (or NULL) */
    size_t keep_words;
    int accumulate;
    atomic_int failed;              /* a worker's allocation failed */
} row_job;

/* `count` fp32 row buffers of `cols` each, or NULL (flagging the job). */
static float *row_buffers(row_job *j, size_t count)
{
    float *b = malloc(count * j->cols * sizeof(float));
    if (!b) atomic_store(&j->failed, 1);
    return b;
}

static int finish(row_job *j, const char *op)
{
    if (atomic_load(&j->failed))
        return (void)CPU_FAIL(j->be, "cpu %s: out of memory for row buffers (cols=%zu)", op, j->cols), MPX_ERR_NOMEM;
    return MPX_OK;
}

/* An fp32 copy of a length-`cols` vector in workspace `slot`. */
static float *vector_f32(cpu_be *be, mpx_arg v, size_t cols, int slot)
{
    float *w = cpu_ws(be, slot, cols * sizeof(float) + 64);
    if (w) cpu_load(be, v, 0, cols, w);
    return w;
}

/* ---- fp32 rows in place ----
 * An fp32 row is read and written where it is stored (no copy into a work buffer);
 * other dtypes go through `buf`. Each op below reads element c of its inputs before it
 * writes element c of its output (or finishes reading a row before writing it), so an
 * output aliasing an input is fine. */
static const float *row_in(const row_job *j, mpx_arg a, size_t off, float *buf)
{
    if (a.t == MPX_F32) return (const float *)a.p + off;
    cpu_load(j->be, a, off, j->cols, buf);
    return buf;
}

static float *row_out(mpx_arg a, size_t off, float *buf)
{
    return a.t == MPX_F32 ? (float *)a.p + off : buf;
}

static void row_done(const row_job *j, const float *r, mpx_arg a, size_t off)
{
    if (a.t != MPX_F32) cpu_store(j->be, r, a, off, j->cols);
}

/* Sums and maxima over a row in 8 interleaved lanes combined in a fixed order: the loops
 * vectorise, and the result depends only on n (never on threads). */
#define LANES 8
static float row_sum(const float *x, size_t n)
{
    float acc[LANES] = { 0 };
    size_t c = 0;
    for (; c + LANES <= n; c += LANES)
        for (int k = 0; k < LANES; k++) acc[k] += x[c + k];
    for (; c < n; c++) acc[0] += x[c];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

static float row_dot(const float *x, const float *y, size_t n)
{
    float acc[LANES] = { 0 };
    size_t c = 0;
    for (; c + LANES <= n; c += LANES)
        for (int k = 0; k < LANES; k++) acc[k] += x[c + k] * y[c + k];
    for (; c < n; c++) acc[0] += x[c] * y[c];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

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

/* ---- bias ---- */

static void bias_add_rows(void *vj, size_t begin, size_t end)
{
    row_job *j = vj;
    float *buf = row_buffers(j, 2);
    if (!buf) return;
    for (size_t i = begin; i < end; i++) {
        const float *x = row_in(j, j->x, i * j->cols, buf);
        float *r = row_out(j->y, i * j->cols, buf + j->cols);
        cpu_vadd(j->be, x, j->vec0, r, j->cols);
        row_done(j, r, j->y, i * j->cols);
    }
    free(buf);
}

int cpu_bias_add(void *vbe, mpx_arg x, mpx_arg bias, mpx_arg y, size_t rows, size_t cols)
{
    cpu_be *be = vbe;
    CPU_CHECK(be, "bias_add", "x", x, rows * cols);
    CPU_CHECK(be, "bias_add", "bias", bias, cols);
    CPU_CHECK(be, "bias_add", "y", y, rows * cols);
    if (!rows || !cols) return MPX_OK;
    row_job j = { .be = be, .x = x, .y = y, .rows = rows, .cols = cols };
    if (!(j.vec0 = vector_f32(be, bias, cols, 0))) return MPX_ERR_NOMEM;
    cpu_pool_run(be->pool, rows, CPU_ROW_GRAIN, bias_add_rows, &j);
    return finish(&j, "bias_add");
}

/* Block partial sums of dy over rows: partials[blk][c]. */
static void bias_grad_blocks(void *vj, size_t begin, size_t end)
{
    row_job *j = vj;
    float *r = row_buffers(j, 1);
    if (!r) return;
    for (size_t blk = begin; blk < end; blk++) {
        float *p = j->partials + blk * j->cols;
        memset(p, 0, j->cols * sizeof(float));
        size_t r1 = (blk + 1) * CPU_ROW_BLOCK < j->rows ? (blk + 1) * CPU_ROW_BLOCK : j->rows;
        for (size_t i = blk * CPU_ROW_BLOCK; i < r1; i++) {
            const float *dy = row_in(j, j->dy, i * j->cols, r);
            cpu_vadd(j->be, p, dy, p, j->cols);
        }
    }
    free(r);
}

/* out[c] = (accumulate ? old[c] : 0) + sum over blocks of partials[blk][k][c], k = which. */
static int reduce_partials(cpu_be *be, const float *partials, size_t n_blocks, size_t n_vec,
                           size_t which, size_t cols, mpx_arg out, int accumulate)
{
    float *acc = cpu_ws(be, 3, cols * sizeof(float) + 64);
    if (!acc) return MPX_ERR_NOMEM;
    if (accumulate) cpu_load(be, out, 0, cols, acc);
    else memset(acc, 0, cols * sizeof(float));
    for (size_t blk = 0; blk < n_blocks; blk++) {
        const float *p = partials + (blk * n_vec + which) * cols;
        cpu_vadd(be, acc, p, acc, cols);
    }
    cpu_store(be, acc, out, 0, cols);
    return MPX_OK;
}

int cpu_bias_grad(void *vbe, mpx_arg dy, mpx_arg dbias, size_t rows, size_t cols, int accumulate)
{
    cpu_be *be = vbe;
    CPU_CHECK(be, "bias_grad", "dy", dy, rows * cols);
    CPU_CHECK(be, "bias_grad", "dbias", dbias, cols);
    if (!cols) return MPX_OK;
    size_t n_blocks = (rows + CPU_ROW_BLOCK - 1) / CPU_ROW_BLOCK;
    row_job j = { .be = be, .dy = dy, .rows = rows, .cols = cols };
    if (!(j.partials = cpu_ws(be, 2, (n_blocks ? n_blocks : 1) * cols * sizeof(float)))) return MPX_ERR_NOMEM;
    cpu_pool_run(be->pool, n_blocks, 1, bias_grad_blocks, &j);
    MPX_TRY(finish(&j, "bias_grad"));
    return reduce_partials(be, j.partials, n_blocks, 1, 0, cols, dbias, accumulate);
}

/* ---- layernorm ---- */

#if defined(__x86_64__) || defined(__i386__)
/* The layernorm rows' elementwise loops in AVX-512 registers (the loops below run 4 SSE
 * lanes), each product, sum and difference rounded as the scalar expression rounds it, in
 * its order (ISO C contracts nothing into an FMA); the row sums stay row_sum's and
 * row_dot's. Each returns the elements done, a multiple of 16. */

/* r = (x - mean) * rstd * gamma + beta */
__attribute__((target("avx512f"))) static size_t ln_fwd_out_avx512(const float *x, float mean, float rstd,
                                                                     const float *gamma, const float *beta, float *r,
                                                                     size_t n)
{
    const __m512 mu = _mm512_set1_ps(mean), rs = _mm512_set1_ps(rstd);
    size_t c = 0;
    for (; c + 16 <= n; c += 16) {
        __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x + c), mu), rs), _mm512_loadu_ps(gamma + c));
        _mm512_storeu_ps(r + c, _mm512_add_ps(v, _mm512_loadu_ps(beta + c)));
    }
    return c;
}

/* xh = (x - mean) * rstd; g = dy * gamma; pg += dy * xh; pb += dy */
__attribute__((target("avx512f"))) static size_t ln_bwd_in_avx512(const float *dy, const float *x, float mean,
                                                                    float rstd, const float *gamma, float *xh, float *g,
                                                                    float *pg, float *pb, size_t n)
{
    const __m512 mu = _mm512_set1_ps(mean), rs = _mm512_set1_ps(rstd);
    size_t c = 0;
    for (; c + 16 <= n; c += 16) {
        __m512 d = _mm512_loadu_ps(dy + c), h = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x + c), mu), rs);
        _mm512_storeu_ps(xh + c, h);
        _mm512_storeu_ps(g + c, _mm512_mul_ps(d, _mm512_loadu_ps(gamma + c)));
        _mm512_storeu_ps(pg + c, _mm512_add_ps(_mm512_loadu_ps(pg + c), _mm512_mul_ps(d, h)));
        _mm512_storeu_ps(pb + c, _mm512_add_ps(_mm512_loadu_ps(pb + c), d));
    }
    return c;
}

/* v = rs * ((g - mg) - xh * mgx); dx = old + v (or v) */
__attribute__((target("avx512f"))) static size_t ln_bwd_out_avx512(const float *g, const float *xh, float rstd,
                                                                     float mg, float mgx, const float *old, float *dx,
                                                                     size_t n)
{
    const __m512 rs = _mm512_set1_ps(rstd), a = _mm512_set1_ps(mg), b = _mm512_set1_ps(mgx);
    size_t c = 0;
    for (; c + 16 <= n; c += 16) {
        __m512 t = _mm512_sub_ps(_mm512_sub_ps(_mm512_loadu_ps(g + c), a), _mm512_mul_ps(_mm512_loadu_ps(xh + c), b));
        __m512 v = _mm512_mul_ps(rs, t);
        _mm512_storeu_ps(dx + c, old ? _mm512_add_ps(_mm512_loadu_ps(old + c), v) : v);
    }
    return c;
}
#endif

static void layernorm_fwd_rows(void *vj, size_t begin, size_t end)
{
    row_job *j = vj;
    float *buf = row_buffers(j, 2);
    if (!buf) return;
    const size_t n = j->cols;
    for (size_t i = begin; i < end; i++) {
        const float *x = row_in(j, j->x, i * n, buf);
        float *r = row_out(j->y, i * n, buf + n);
        float mean = row_sum(x, n) / (float)n;
        float acc[LANES] = { 0 };
        size_t c = 0;
        for (; c + LANES <= n; c += LANES)
            for (int k = 0; k < LANES; k++) { float d = x[c + k] - mean; acc[k] += d * d; }
        for (; c < n; c++) { float d = x[c] - mean; acc[0] += d * d; }
        float var = row_sum(acc, LANES);
        float rstd = 1.0f / sqrtf(var / (float)n + j->eps);
        c = 0;
#if defined(__x86_64__) || defined(__i386__)
        if (j->be->has_avx512) c = ln_fwd_out_avx512(x, mean, rstd, j->vec0, j->vec1, r, n);
#endif
        for (; c < n; c++) r[c] = (x[c] - mean) * rstd * j->vec0[c] + j->vec1[c];
        row_done(j, r, j->y, i * n);
        if (j->mean) j->mean[i] = mean;
        if (j->rstd) j->rstd[i] = rstd;
    }
    free(buf);
}

int cpu_layernorm_fwd(void *vbe, mpx_arg x, mpx_arg gamma, mpx_arg beta, mpx_arg y,
                      float *mean, float *rstd, size_t rows, size_t cols, float eps)
{
    cpu_be *be = vbe;
    CPU_CHECK(be, "layernorm_fwd", "x", x, rows * cols);
    CPU_CHECK(be, "layernorm_fwd", "gamma", gamma, cols);
    CPU_CHECK(be, "layernorm_fwd", "beta", beta, cols);
    CPU_CHECK(be, "layernorm_fwd", "y", y, rows * cols);
    if (!rows || !cols) return MPX_OK;
    row_job j = { .be = be, .x = x, .y = y, .mean = mean, .rstd = rstd, .rows = rows,
                  .cols = cols, .eps = eps };
    if (!(j.vec0 = vector_f32(be, gamma, cols, 0)) || !(j.vec1 = vector_f32(be, beta, cols, 1)))
        return MPX_ERR_NOMEM;
    cpu_pool_run(be->pool, rows, CPU_ROW_GRAIN, layernorm_fwd_rows, &j);
    return finish(&j, "layernorm_fwd");
}

/* dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * gamma; the block's
 * dgamma (sum dy * xhat) and dbeta (sum dy) partials go to partials[blk][0|1]. */
static void layernorm_bwd_blocks(void *vj, size_t begin, size_t end)
{
    row_job *j = vj;
    const size_t n = j->cols;
    float *buf = row_buffers(j, 5);
    if (!buf) return;
    float *dyb = buf, *xb = buf + n, *xh = buf + 2 * n, *g = buf + 3 * n, *dxb = buf + 4 * n;
    for (size_t blk = begin; blk < end; blk++) {
        float *pg = j->partials + blk * 2 * n, *pb = pg + n;
        memset(pg, 0, 2 * n * sizeof(float));
        size_t r1 = (blk + 1) * CPU_ROW_BLOCK < j->rows ? (blk + 1) * CPU_ROW_BLOCK : j->rows;
        for (size_t i = blk * CPU_ROW_BLOCK; i < r1; i++) {
            const float *dy = row_in(j, j->dy, i * n, dyb), *x = row_in(j, j->x, i * n, xb);
            float mu = j->cmean[i], rs = j->crstd[i];
            size_t c0 = 0;
#if defined(__x86_64__) || defined(__i386__)
            if (j->be->has_avx512) c0 = ln_bwd_in_avx512(dy, x, mu, rs, j->vec0, xh, g, pg, pb, n);
#endif
            for (size_t c = c0; c < n; c++) {
                xh[c] = (x[c] - mu) * rs;
                g[c] = dy[c] * j->vec0[c];
                pg[c] += dy[c] * xh[c];
                pb[c] += dy[c];
            }
            float mg = row_sum(g, n) / (float)n, mgx = row_dot(g, xh, n) / (float)n;
            if (!j->dx.p) continue;
            float *dx = row_out(j->dx, i * n, dxb);
            const float *old = j->accumulate ? row_in(j, j->dx, i * n, dxb) : NULL;
            c0 = 0;
#if defined(__x86_64__) || defined(__i386__)
            if (j->be->has_avx512) c0 = ln_bwd_out_avx512(g, xh, rs, mg, mgx, old, dx, n);
#endif
            for (size_t c = c0; c < n; c++) {
                float v = rs * (g[c] - mg - xh[c] * mgx);
                dx[c] = old ? old[c] + v : v;
            }
            row_done(j, dx, j->dx, i * n);
        }
    }
    free(buf);
}

/* dx.p, dgamma.p or dbeta.p NULL skips that output. */
int cpu_layernorm_bwd(void *vbe, mpx_arg dy, mpx_arg x, mpx_arg gamma, const float *mean,
                      const float *rstd, mpx_arg dx, mpx_arg dgamma, mpx_arg dbeta,
                      size_t rows, size_t cols, int accumulate_dx, int accumulate_params)
{
    cpu_be *be = vbe;
    CPU_CHECK(be, "layernorm_bwd", "dy", dy, rows * cols);
    CPU_CHECK(be, "layernorm_bwd", "x", x, rows * cols);
    CPU_CHECK(be, "layernorm_bwd", "gamma", gamma, cols);
    CPU_CHECK_OPT(be, "layernorm_bwd", "dx", dx, rows * cols);
    CPU_CHECK_OPT(be, "layernorm_bwd", "dgamma", dgamma, cols);
    CPU_CHECK_OPT(be, "layernorm_bwd", "dbeta", dbeta, cols);
    if (rows && (!mean || !rstd)) return CPU_FAIL(be, "cpu layernorm_bwd: saved mean/rstd are NULL");
    if (!cols) return MPX_OK;
    size_t n_blocks = (rows + CPU_ROW_BLOCK - 1) / CPU_ROW_BLOCK;
    row_job j = { .be = be, .dy = dy, .x = x, .dx = dx, .cmean = mean, .crstd = rstd,
                  .rows = rows, .cols = cols, .accumulate = accumulate_dx };
    if (!(j.vec0 = vector_f32(be, gamma, cols, 0))) return MPX_ERR_NOMEM;
    if (!(j.partials = cpu_ws(be, 2, (n_blocks ? n_blocks : 1) * 2 * cols * sizeof(float))))
        return MPX_ERR_NOMEM;
    cpu_pool_run(be->pool, n_blocks, 1, layernorm_bwd_blocks, &j);
    MPX_TRY(finish(&j, "layernorm_bwd"));
    if (dgamma.p) MPX_TRY(reduce_partials(be, j.partials, n_blocks, 2, 0, cols, dgamma, accumulate_params));
    if (dbeta.p) MPX_TRY(reduce_partials(be, j.partials, n_blocks, 2, 1, cols, dbeta, accumulate_params));
    return MPX_OK;
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
    float inv = 1.0f / cpu_exp_sub_sum(j->be, r, mx, r, n);   /* exp(r - mx), row_sum of it */
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
    float dot = row_dot(dy, y, n);
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

/* ---- cross-entropy over positions ---- */

static float round_to(mpx_dtype t, float x)
{
    return t == MPX_BF16 ? mpx_round_bf16(x) : t == MPX_F16 ? mpx_round_f16(x) : x;
}

/* fp32 logits: loss = lse - x[label], dx = (softmax - onehot) * dscale / rows. */
static void cross_entropy_row_f32(const row_job *j, float *r, size_t i, float factor)
{
    const size_t n = j->cols, label = (size_t)j->labels[i];
    float mx = -INFINITY, sum = 0.0f;
    for (size_t c = 0; c < n; c++) mx = r[c] > mx ? r[c] : mx;
    for (size_t c = 0; c < n; c++) sum += expf(r[c] - mx);
    float lse = mx + logf(sum);
    j->row_loss[i] = (double)(lse - r[label]);
    if (!j->dx.p) return;
    for (size_t c = 0; c < n; c++) r[c] = (expf(r[c] - lse) - (c == label ? 1.0f : 0.0f)) * factor;
    cpu_store(j->be, r, j->dx, i * n, n);
}

/* 16-bit logits, as PyTorch's log_softmax + nll_loss on a 16-bit tensor: the
 * log-probabilities (fp32 max and sum inside) are rounded to the logits' dtype; the loss
 * reads them; backward starts from d = round(dscale / rows) at the label and the
 * log_softmax backward dx = round(exp(logp) * d - onehot * d) reads the rounded logp. */
static void cross_entropy_row_16(const row_job *j, float *r, size_t i, float d)
{
    const size_t n = j->cols, label = (size_t)j->labels[i];
    const mpx_dtype t = j->x.t;
    float mx = -INFINITY, sum = 0.0f;
    for (size_t c = 0; c < n; c++) mx = r[c] > mx ? r[c] : mx;
    for (size_t c = 0; c < n; c++) sum += expf(r[c] - mx);
    const float lsum = logf(sum);
    for (size_t c = 0; c < n; c++) r[c] = round_to(t, (r[c] - mx) - lsum);
    j->row_loss[i] = -(double)r[label];
    if (!j->dx.p) return;
    for (size_t c = 0; c < n; c++) r[c] = expf(r[c]) * d - (c == label ? d : 0.0f);
    cpu_store(j->be, r, j->dx, i * n, n);
}

static void cross_entropy_rows(void *vj, size_t begin, size_t end)
{
    row_job *j = vj;
    const size_t n = j->cols;
    float *r = row_buffers(j, 1);
    if (!r) return;
    const int low = j->x.t == MPX_F16 || j->x.t == MPX_BF16;
    const float factor = low ? round_to(j->x.t, j->dscale / (float)j->rows) : j->dscale / (float)j->rows;
    for (size_t i = begin; i < end; i++) {
        cpu_load(j->be, j->x, i * n, n, r);
        if (low) cross_entropy_row_16(j, r, i, factor);
        else cross_entropy_row_f32(j, r, i, factor);
    }
    free(r);
}

int cpu_cross_entropy(void *vbe, mpx_arg logits, const int32_t *labels, size_t rows,
                      size_t cols, double *loss, mpx_arg dlogits, float dscale)
{
    cpu_be *be = vbe;
    CPU_CHECK(be, "cross_entropy", "logits", logits, rows * cols);
    CPU_CHECK_OPT(be, "cross_entropy", "dlogits", dlogits, rows * cols);
    if (!loss) return CPU_FAIL(be, "cpu cross_entropy: loss pointer is NULL");
    if (rows && (!labels || !cols)) return CPU_FAIL(be, "cpu cross_entropy: no labels or no columns");
    for (size_t i = 0; i < rows; i++)
        if (labels[i] < 0 || (size_t)labels[i] >= cols)
            return CPU_FAIL(be, "cpu cross_entropy: label %d of row %zu is outside [0, %zu)",
                            (int)labels[i], i, cols);
    if (!rows) { *loss = NAN; return MPX_OK; }
    row_job j = { .be = be, .x = logits, .dx = dlogits, .labels = labels, .rows = rows,
                  .cols = cols, .dscale = dscale };
    if (!(j.row_loss = cpu_ws(be, 2, rows * sizeof(double)))) return MPX_ERR_NOMEM;
    cpu_pool_run(be->pool, rows, CPU_ROW_GRAIN, cross_entropy_rows, &j);
    MPX_TRY(finish(&j, "cross_entropy"));
    double total = 0.0;     /* in row order: independent of threads */
    for (size_t i = 0; i < rows; i++) total += j.row_loss[i];
    *loss = total / (double)rows;
    if (logits.t == MPX_F16 || logits.t == MPX_BF16) *loss = (double)round_to(logits.t, (float)*loss); /* a 16-bit scalar */
    return MPX_OK;
}
