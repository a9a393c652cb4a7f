/* Row-wise ops over the last dimension: bias add/grad, layernorm, the cross-entropy over
 * positions (softmax, alone and fused with the attention dropout: cpu_rows_softmax.c; the
 * row job and helpers both use: cpu_internal.h). Every row is widened to fp32 once, all
 * statistics (mean, variance, max, sum, log-sum-exp) are fp32, each output is rounded once.
 * Column reductions over rows (bias_grad, dgamma, dbeta) sum fixed blocks of
 * CPU_ROW_BLOCK rows and then the block partials in block order: the same bits for
 * any thread count. */
#include "cpu_internal.h"

#include <math.h>
#include <stdlib.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

/* An fp32 copy of a length-`cols` vector in workspace `slot`. */
static float *vector_f32(cpu_be *be, mpx_arg v, size_t cols, int slot)
{
    float *w = cpu_ws(be, slot, cols * sizeof(float) + 64);
    if (w) cpu_load(be, v, 0, cols, w);
    return w;
}

/* The row sums of cpu_internal.h: LANES lanes, combined in a fixed order. */
float cpu_row_sum(const float *x, size_t n)
{
    float acc[LANES] = { 0 };
    size_t c = 0;
    for (; c + LANES <= n; c += LANES)
        for (int k = 0; k < LANES; k++) acc[k] += x[c + k];
    for (; c < n; c++) acc[0] += x[c];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

float cpu_row_dot(const float *x, const float *y, size_t n)
{
    float acc[LANES] = { 0 };
    size_t c = 0;
    for (; c + LANES <= n; c += LANES)
        for (int k = 0; k < LANES; k++) acc[k] += x[c + k] * y[c + k];
    for (; c < n; c++) acc[0] += x[c] * y[c];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
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
 * its order (ISO C contracts nothing into an FMA); the row sums stay cpu_row_sum's and
 * cpu_row_dot's. Each returns the elements done, a multiple of 16. */

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

/* Row i: r = (x - mean) * rstd * gamma + beta over the fp32 row x (gamma, beta: vec0,
 * vec1), its mean and rstd saved when the job asks. */
static void layernorm_row(const row_job *j, const float *x, float *r, size_t i)
{
    const size_t n = j->cols;
    float mean = cpu_row_sum(x, n) / (float)n;
    float acc[LANES] = { 0 };
    size_t c = 0;
    for (; c + LANES <= n; c += LANES)
        for (int k = 0; k < LANES; k++) { float d = x[c + k] - mean; acc[k] += d * d; }
    for (; c < n; c++) { float d = x[c] - mean; acc[0] += d * d; }
    float var = cpu_row_sum(acc, LANES);
    float rstd = 1.0f / sqrtf(var / (float)n + j->eps);
    c = 0;
#if defined(__x86_64__) || defined(__i386__)
    if (j->be->has_avx512) c = ln_fwd_out_avx512(x, mean, rstd, j->vec0, j->vec1, r, n);
#endif
    for (; c < n; c++) r[c] = (x[c] - mean) * rstd * j->vec0[c] + j->vec1[c];
    if (j->mean) j->mean[i] = mean;
    if (j->rstd) j->rstd[i] = rstd;
}

static void layernorm_fwd_rows(void *vj, size_t begin, size_t end)
{
    row_job *j = vj;
    float *buf = row_buffers(j, 2);
    if (!buf) return;
    const size_t n = j->cols;
    for (size_t i = begin; i < end; i++) {
        float *r = row_out(j->y, i * n, buf + n);
        layernorm_row(j, row_in(j, j->x, i * n, buf), r, i);
        row_done(j, r, j->y, i * n);
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

/* ---- dropout, residual add and layernorm in one pass (ABI 1.17) ----
 * Each row goes through the three ops' arithmetic with every intermediate rounded to the
 * dtype the op would store it in: the dropped x in x's dtype, the sum in r's (stored: the
 * backward reads it), then layernorm over the sum as stored. Job fields: x, aux = the
 * residual, dx = r, y, vec0/vec1 = gamma/beta, dscale = p, rng. */
static void dropout_add_ln_rows(void *vj, size_t begin, size_t end)
{
    row_job *j = vj;
    const size_t n = j->cols;
    float *buf = row_buffers(j, 5);
    uint32_t *words = buf ? malloc(n * sizeof(double)) : NULL;   /* the row's draws, or a row of any dtype */
    if (buf && !words) atomic_store(&j->failed, 1);
    if (!buf || !words) {
        free(buf);
        return;
    }
    const int drop = j->dscale > 0.0f;
    const uint32_t keep_from = cpu_dropout_keep_from(j->dscale);
    const float s = cpu_dropout_scale(j->dscale);
    for (size_t i = begin; i < end; i++) {
        const float *d = row_in(j, j->x, i * n, buf);
        if (drop) {   /* dropout_fwd's output as it would be stored, in x's dtype */
            float *dd = buf + n;
            cpu_philox_words(j->be, &j->rng, j->rng.offset + i * n, n, words);
            cpu_dropout_apply(j->be, d, words, n, keep_from, s, dd);
            if (j->x.t != MPX_F32) {
                mpx_arg stored = mpx_a(words, j->x.t);
                cpu_store(j->be, dd, stored, 0, n);
                cpu_load(j->be, stored, 0, n, dd);
            }
            d = dd;
        }
        const float *res = row_in(j, j->aux, i * n, buf + 2 * n);
        float *r = row_out(j->dx, i * n, buf + 3 * n);
        for (size_t c = 0; c < n; c++) r[c] = d[c] + res[c];   /* add's sum */
        row_done(j, r, j->dx, i * n);
        if (j->dx.t != MPX_F32) cpu_load(j->be, j->dx, i * n, n, r);   /* the sum as stored */
        float *y = row_out(j->y, i * n, buf + 4 * n);
        layernorm_row(j, r, y, i);
        row_done(j, y, j->y, i * n);
    }
    free(words);
    free(buf);
}

int cpu_dropout_add_layernorm_fwd(void *vbe, mpx_arg x, float p, mpx_rng rng, mpx_arg resid, mpx_arg r,
                                  mpx_arg gamma, mpx_arg beta, mpx_arg y, float *mean, float *rstd, size_t rows,
                                  size_t cols, float eps)
{
    cpu_be *be = vbe;
    const size_t n = rows * cols;
    CPU_CHECK(be, "dropout_add_layernorm_fwd", "x", x, n);
    CPU_CHECK(be, "dropout_add_layernorm_fwd", "resid", resid, n);
    CPU_CHECK(be, "dropout_add_layernorm_fwd", "r", r, n);
    CPU_CHECK(be, "dropout_add_layernorm_fwd", "gamma", gamma, cols);
    CPU_CHECK(be, "dropout_add_layernorm_fwd", "beta", beta, cols);
    CPU_CHECK(be, "dropout_add_layernorm_fwd", "y", y, n);
    if (!(p >= 0.0f && p <= 1.0f))
        return CPU_FAIL(be, "cpu dropout_add_layernorm_fwd: p = %g is outside [0, 1]", (double)p);
    if ((r.p == x.p && r.t != x.t) || (r.p == resid.p && r.t != resid.t))
        return CPU_FAIL(be, "cpu dropout_add_layernorm_fwd: r may share memory with x or resid only in their dtype");
    if (y.p && (y.p == x.p || y.p == resid.p || y.p == r.p))
        return CPU_FAIL(be, "cpu dropout_add_layernorm_fwd: y must not overlap x, resid or r");
    if (!rows || !cols) return MPX_OK;
    row_job j = { .be = be, .x = x, .aux = resid, .dx = r, .y = y, .mean = mean, .rstd = rstd, .rows = rows,
                  .cols = cols, .eps = eps, .dscale = p, .rng = rng };
    if (!(j.vec0 = vector_f32(be, gamma, cols, 0)) || !(j.vec1 = vector_f32(be, beta, cols, 1)))
        return MPX_ERR_NOMEM;
    cpu_pool_run(be->pool, rows, CPU_ROW_GRAIN, dropout_add_ln_rows, &j);
    return finish(&j, "dropout_add_layernorm_fwd");
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
            float mg = cpu_row_sum(g, n) / (float)n, mgx = cpu_row_dot(g, xh, n) / (float)n;
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
    /* loss may be NULL (MPX_OPS_LOSS_OPTIONAL) when dlogits is wanted: a backward */
    if (!loss && !dlogits.p) return CPU_FAIL(be, "cpu cross_entropy: neither a loss pointer nor dlogits");
    if (rows && (!labels || !cols)) return CPU_FAIL(be, "cpu cross_entropy: no labels or no columns");
    for (size_t i = 0; i < rows; i++)
        if (labels[i] < 0 || (size_t)labels[i] >= cols)
            return CPU_FAIL(be, "cpu cross_entropy: label %d of row %zu is outside [0, %zu)",
                            (int)labels[i], i, cols);
    if (!rows) {
        if (loss) *loss = NAN;
        return MPX_OK;
    }
    row_job j = { .be = be, .x = logits, .dx = dlogits, .labels = labels, .rows = rows,
                  .cols = cols, .dscale = dscale };
    if (!(j.row_loss = cpu_ws(be, 2, rows * sizeof(double)))) return MPX_ERR_NOMEM;
    cpu_pool_run(be->pool, rows, CPU_ROW_GRAIN, cross_entropy_rows, &j);
    MPX_TRY(finish(&j, "cross_entropy"));
    if (!loss) return MPX_OK;
    double total = 0.0;     /* in row order: independent of threads */
    for (size_t i = 0; i < rows; i++) total += j.row_loss[i];
    *loss = total / (double)rows;
    if (logits.t == MPX_F16 || logits.t == MPX_BF16) *loss = (double)round_to(logits.t, (float)*loss); /* a 16-bit scalar */
    return MPX_OK;
}
