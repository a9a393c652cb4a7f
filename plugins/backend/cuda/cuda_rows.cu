/* Row-wise ops over the last dimension: bias add/grad, layernorm, softmax, the
 * cross-entropy over positions, softmax fused with the attention dropout (ABI 1.10) and
 * a post-LN block's dropout, residual add and layernorm in one pass (ABI 1.17).
 * One warp per row; the row statistics add in the cpu
 * backend's order (warp_row_sum8), the column reductions (bias_grad, dgamma, dbeta) sum
 * blocks of CUDA_ROW_BLOCK rows into partials and then the partials in block order, as
 * cpu_rows.c does — so, exp and log aside, the bits are the cpu backend's. */
#include "cuda_device.cuh"

#include <math.h>

#define ROWS_PER_BLOCK (CUDA_THREADS / 32)

static unsigned row_blocks(size_t rows)
{
    size_t b = (rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
    return b ? (unsigned)(b < 65535u * 64u ? b : 65535u * 64u) : 1u;
}

/* The fused ops' dropout rate, as dropout_fwd checks it. */
static int fused_p(cuda_be *be, const char *op, float p)
{
    if (!(p >= 0.0f && p <= 1.0f)) return CUDA_FAIL(be, "cuda %s: p = %g is outside [0, 1]", op, (double)p);
    return MPX_OK;
}

#define WARP_ROWS(i, rows) \
    for (size_t i = (size_t)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32; i < (rows); \
         i += (size_t)gridDim.x * ROWS_PER_BLOCK)

/* ---- bias ---- */

__global__ void k_bias_add(const void *x, mpx_dtype xt, const void *bias, mpx_dtype bt, void *y,
                           mpx_dtype yt, size_t rows, size_t cols)
{
    GRID_STRIDE(i, rows * cols) dev_st(y, yt, i, dev_ld(x, xt, i) + dev_ld(bias, bt, i % cols));
}

extern "C" int cuda_bias_add(void *vbe, mpx_arg x, mpx_arg bias, mpx_arg y, size_t rows, size_t cols)
{
    cuda_be *be = (cuda_be *)vbe;
    CUDA_CHECK(be, "bias_add", "x", x, rows * cols);
    CUDA_CHECK(be, "bias_add", "bias", bias, cols);
    CUDA_CHECK(be, "bias_add", "y", y, rows * cols);
    if (!rows || !cols) return MPX_OK;
    k_bias_add<<<cuda_blocks(rows * cols), CUDA_THREADS, 0, be->stream>>>(x.p, x.t, bias.p, bias.t, y.p, y.t, rows, cols);
    CUDA_LAUNCHED(be, "bias_add");
    return MPX_OK;
}

/* partials[blk][c] = sum over the block's rows of dy[r][c], in row order. */
__global__ void k_col_partials(const void *dy, mpx_dtype dyt, size_t rows, size_t cols,
                               size_t n_blocks, float *partials)
{
    GRID_STRIDE(i, n_blocks * cols) {
        size_t blk = i / cols, c = i % cols, r1 = (blk + 1) * CUDA_ROW_BLOCK;
        if (r1 > rows) r1 = rows;
        float p = 0.0f;
        for (size_t r = blk * CUDA_ROW_BLOCK; r < r1; r++) p += dev_ld(dy, dyt, r * cols + c);
        partials[i] = p;
    }
}

/* out[c] = (accumulate ? out[c] : 0) + partials[0][which][c] + partials[1][which][c] + ... */
__global__ void k_col_reduce(const float *partials, size_t n_blocks, size_t n_vec, size_t which,
                             size_t cols, void *out, mpx_dtype ot, int accumulate)
{
    GRID_STRIDE(c, cols) {
        float acc = accumulate ? dev_ld(out, ot, c) : 0.0f;
        for (size_t blk = 0; blk < n_blocks; blk++) acc += partials[(blk * n_vec + which) * cols + c];
        dev_st(out, ot, c, acc);
    }
}

static int col_reduce(cuda_be *be, const float *partials, size_t n_blocks, size_t n_vec, size_t which,
                      size_t cols, mpx_arg out, int accumulate, const char *op)
{
    k_col_reduce<<<cuda_blocks(cols), CUDA_THREADS, 0, be->stream>>>(partials, n_blocks, n_vec, which, cols,
                                                                     out.p, out.t, accumulate);
    CUDA_LAUNCHED(be, op);
    return MPX_OK;
}

extern "C" int cuda_bias_grad(void *vbe, mpx_arg dy, mpx_arg dbias, size_t rows, size_t cols, int accumulate)
{
    cuda_be *be = (cuda_be *)vbe;
    CUDA_CHECK(be, "bias_grad", "dy", dy, rows * cols);
    CUDA_CHECK(be, "bias_grad", "dbias", dbias, cols);
    if (!cols) return MPX_OK;
    size_t n_blocks = (rows + CUDA_ROW_BLOCK - 1) / CUDA_ROW_BLOCK;
    float *partials = (float *)cuda_ws(be, 2, (n_blocks ? n_blocks : 1) * cols * sizeof(float));
    if (!partials) return MPX_ERR_NOMEM;
    if (n_blocks) {
        k_col_partials<<<cuda_blocks(n_blocks * cols), CUDA_THREADS, 0, be->stream>>>(dy.p, dy.t, rows, cols,
                                                                                       n_blocks, partials);
        CUDA_LAUNCHED(be, "bias_grad");
    }
    return col_reduce(be, partials, n_blocks, 1, 0, cols, dbias, accumulate, "bias_grad");
}

/* ---- layernorm ---- */

/* Row i (elements o .. o + n - 1) of y = (x - mean) * rstd * gamma + beta, its mean and
 * rstd saved when asked; the whole warp calls it. */
__device__ void dev_layernorm_row(const void *x, mpx_dtype xt, const void *gamma, mpx_dtype gt, const void *beta,
                                  mpx_dtype btt, void *y, mpx_dtype yt, float *mean_out, float *rstd_out, size_t i,
                                  size_t n, float eps)
{
    const unsigned lane = threadIdx.x & 31u;
    const size_t o = i * n;
    float mean = warp_row_sum8(n, [&](size_t c) { return dev_ld(x, xt, o + c); }) / (float)n;
    float var = warp_row_sum8(n, [&](size_t c) { float d = dev_ld(x, xt, o + c) - mean; return d * d; });
    float rstd = 1.0f / sqrtf(var / (float)n + eps);
    for (size_t c = lane; c < n; c += 32)
        dev_st(y, yt, o + c, (dev_ld(x, xt, o + c) - mean) * rstd * dev_ld(gamma, gt, c) + dev_ld(beta, btt, c));
    if (lane == 0) {
        if (mean_out) mean_out[i] = mean;
        if (rstd_out) rstd_out[i] = rstd;
    }
}

__global__ void k_layernorm_fwd(const void *x, mpx_dtype xt, const void *gamma, mpx_dtype gt,
                                const void *beta, mpx_dtype btt, void *y, mpx_dtype yt,
                                float *mean_out, float *rstd_out, size_t rows, size_t n, float eps)
{
    WARP_ROWS(i, rows) dev_layernorm_row(x, xt, gamma, gt, beta, btt, y, yt, mean_out, rstd_out, i, n, eps);
}

extern "C" int cuda_layernorm_fwd(void *vbe, mpx_arg x, mpx_arg gamma, mpx_arg beta, mpx_arg y,
                                  float *mean, float *rstd, size_t rows, size_t cols, float eps)
{
    cuda_be *be = (cuda_be *)vbe;
    CUDA_CHECK(be, "layernorm_fwd", "x", x, rows * cols);
    CUDA_CHECK(be, "layernorm_fwd", "gamma", gamma, cols);
    CUDA_CHECK(be, "layernorm_fwd", "beta", beta, cols);
    CUDA_CHECK(be, "layernorm_fwd", "y", y, rows * cols);
    if (!rows || !cols) return MPX_OK;
    k_layernorm_fwd<<<row_blocks(rows), CUDA_THREADS, 0, be->stream>>>(x.p, x.t, gamma.p, gamma.t, beta.p, beta.t,
                                                                       y.p, y.t, mean, rstd, rows, cols, eps);
    CUDA_LAUNCHED(be, "layernorm_fwd");
    return MPX_OK;
}

/* ---- dropout, residual add and layernorm in one pass (ABI 1.17) ----
 * One warp per row: each lane forms its elements' sums as the three ops would store them
 * (the dropped x rounded to x's dtype, plus the residual, rounded to r's dtype) and
 * stores them in r; after __syncwarp (which orders the warp's memory accesses) the row is
 * k_layernorm_fwd's over r as stored. */
__global__ void k_dropout_add_layernorm_fwd(const void *x, mpx_dtype xt, int drop, uint32_t keep_from, float dscale,
                                            mpx_rng rng, const void *res, mpx_dtype et, void *r, mpx_dtype rt,
                                            const void *gamma, mpx_dtype gt, const void *beta, mpx_dtype btt,
                                            void *y, mpx_dtype yt, float *mean_out, float *rstd_out, size_t rows,
                                            size_t n, float eps)
{
    const unsigned lane = threadIdx.x & 31u;
    WARP_ROWS(i, rows) {
        const size_t o = i * n;
        for (size_t c = lane; c < n; c += 32) {
            float d = dev_ld(x, xt, o + c);
            if (drop) d = dev_round(dev_dropped(d, dev_philox_word(rng, rng.offset + o + c), keep_from, dscale), xt);
            dev_st(r, rt, o + c, d + dev_ld(res, et, o + c));
        }
        __syncwarp();
        dev_layernorm_row(r, rt, gamma, gt, beta, btt, y, yt, mean_out, rstd_out, i, n, eps);
    }
}

extern "C" int cuda_dropout_add_layernorm_fwd(void *vbe, mpx_arg x, float p, mpx_rng rng, mpx_arg resid, mpx_arg r,
                                              mpx_arg gamma, mpx_arg beta, mpx_arg y, float *mean, float *rstd,
                                              size_t rows, size_t cols, float eps)
{
    cuda_be *be = (cuda_be *)vbe;
    const size_t n = rows * cols;
    CUDA_CHECK(be, "dropout_add_layernorm_fwd", "x", x, n);
    CUDA_CHECK(be, "dropout_add_layernorm_fwd", "resid", resid, n);
    CUDA_CHECK(be, "dropout_add_layernorm_fwd", "r", r, n);
    CUDA_CHECK(be, "dropout_add_layernorm_fwd", "gamma", gamma, cols);
    CUDA_CHECK(be, "dropout_add_layernorm_fwd", "beta", beta, cols);
    CUDA_CHECK(be, "dropout_add_layernorm_fwd", "y", y, n);
    MPX_TRY(fused_p(be, "dropout_add_layernorm_fwd", p));
    if ((r.p == x.p && r.t != x.t) || (r.p == resid.p && r.t != resid.t))
        return CUDA_FAIL(be, "cuda dropout_add_layernorm_fwd: r may share memory with x or resid only in their dtype");
    if (y.p && (y.p == x.p || y.p == resid.p || y.p == r.p))
        return CUDA_FAIL(be, "cuda dropout_add_layernorm_fwd: y must not overlap x, resid or r");
    if (!rows || !cols) return MPX_OK;
    k_dropout_add_layernorm_fwd<<<row_blocks(rows), CUDA_THREADS, 0, be->stream>>>(
        x.p, x.t, p > 0.0f, cuda_keep_from(p), cuda_dropout_scale(p), rng, resid.p, resid.t, r.p, r.t, gamma.p,
        gamma.t, beta.p, beta.t, y.p, y.t, mean, rstd, rows, cols, eps);
    CUDA_LAUNCHED(be, "dropout_add_layernorm_fwd");
    return MPX_OK;
}

/* dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma (cpu_rows.c). */
__global__ void k_layernorm_bwd_dx(const void *dy, mpx_dtype dyt, const void *x, mpx_dtype xt,
                                   const void *gamma, mpx_dtype gt, const float *mean, const float *rstd,
                                   void *dx, mpx_dtype dxt, size_t rows, size_t n, int accumulate)
{
    const unsigned lane = threadIdx.x & 31u;
    WARP_ROWS(i, rows) {
        const size_t o = i * n;
        const float mu = mean[i], rs = rstd[i];
        auto xh = [&](size_t c) { return (dev_ld(x, xt, o + c) - mu) * rs; };
        auto g = [&](size_t c) { return dev_ld(dy, dyt, o + c) * dev_ld(gamma, gt, c); };
        float mg = warp_row_sum8(n, g) / (float)n;
        float mgx = warp_row_sum8(n, [&](size_t c) { return g(c) * xh(c); }) / (float)n;
        for (size_t c = lane; c < n; c += 32) {
            float v = rs * (g(c) - mg - xh(c) * mgx);
            dev_st(dx, dxt, o + c, accumulate ? dev_ld(dx, dxt, o + c) + v : v);
        }
    }
}

/* partials[blk][0][c] = sum dy * xhat, partials[blk][1][c] = sum dy over the block's rows. */
__global__ void k_layernorm_bwd_partials(const void *dy, mpx_dtype dyt, const void *x, mpx_dtype xt,
                                         const float *mean, const float *rstd, size_t rows, size_t n,
                                         size_t n_blocks, float *partials)
{
    GRID_STRIDE(i, n_blocks * n) {
        size_t blk = i / n, c = i % n, r1 = (blk + 1) * CUDA_ROW_BLOCK;
        if (r1 > rows) r1 = rows;
        float pg = 0.0f, pb = 0.0f;
        for (size_t r = blk * CUDA_ROW_BLOCK; r < r1; r++) {
            float d = dev_ld(dy, dyt, r * n + c);
            float xh = (dev_ld(x, xt, r * n + c) - mean[r]) * rstd[r];
            pg += d * xh;
            pb += d;
        }
        partials[(blk * 2) * n + c] = pg;
        partials[(blk * 2 + 1) * n + c] = pb;
    }
}

extern "C" int cuda_layernorm_bwd(void *vbe, mpx_arg dy, mpx_arg x, mpx_arg gamma, const float *mean,
                                  const float *rstd, mpx_arg dx, mpx_arg dgamma, mpx_arg dbeta,
                                  size_t rows, size_t cols, int accumulate_dx, int accumulate_params)
{
    cuda_be *be = (cuda_be *)vbe;
    CUDA_CHECK(be, "layernorm_bwd", "dy", dy, rows * cols);
    CUDA_CHECK(be, "layernorm_bwd", "x", x, rows * cols);
    CUDA_CHECK(be, "layernorm_bwd", "gamma", gamma, cols);
    CUDA_CHECK_OPT(be, "layernorm_bwd", "dx", dx, rows * cols);
    CUDA_CHECK_OPT(be, "layernorm_bwd", "dgamma", dgamma, cols);
    CUDA_CHECK_OPT(be, "layernorm_bwd", "dbeta", dbeta, cols);
    if (rows && (!mean || !rstd)) return CUDA_FAIL(be, "cuda layernorm_bwd: saved mean/rstd are NULL");
    if (!cols) return MPX_OK;
    if (dx.p && rows) {
        k_layernorm_bwd_dx<<<row_blocks(rows), CUDA_THREADS, 0, be->stream>>>(
            dy.p, dy.t, x.p, x.t, gamma.p, gamma.t, mean, rstd, dx.p, dx.t, rows, cols, accumulate_dx);
        CUDA_LAUNCHED(be, "layernorm_bwd (dx)");
    }
    if (!dgamma.p && !dbeta.p) return MPX_OK;
    size_t n_blocks = (rows + CUDA_ROW_BLOCK - 1) / CUDA_ROW_BLOCK;
    float *partials = (float *)cuda_ws(be, 2, (n_blocks ? n_blocks : 1) * 2 * cols * sizeof(float));
    if (!partials) return MPX_ERR_NOMEM;
    if (n_blocks) {
        k_layernorm_bwd_partials<<<cuda_blocks(n_blocks * cols), CUDA_THREADS, 0, be->stream>>>(
            dy.p, dy.t, x.p, x.t, mean, rstd, rows, cols, n_blocks, partials);
        CUDA_LAUNCHED(be, "layernorm_bwd (dgamma, dbeta)");
    }
    if (dgamma.p) MPX_TRY(col_reduce(be, partials, n_blocks, 2, 0, cols, dgamma, accumulate_params, "layernorm_bwd"));
    if (dbeta.p) MPX_TRY(col_reduce(be, partials, n_blocks, 2, 1, cols, dbeta, accumulate_params, "layernorm_bwd"));
    return MPX_OK;
}

/* ---- softmax with additive mask ---- */

/* One row of the softmax's input, scale * x + mask, column by column; its maximum and
 * the reciprocal of its sum of exponentials (the whole warp calls it). */
struct sm_row {
    const void *x, *mask;
    mpx_dtype xt, mt;
    size_t o, mo;
    float scale;
    __device__ float operator()(size_t c) const
    {
        return scale * dev_ld(x, xt, o + c) + (mask ? dev_ld(mask, mt, mo + c) : 0.0f);
    }
    __device__ float inv_sum(size_t n, float *mx) const
    {
        const float m = warp_row_max8(n, *this);
        *mx = m;
        return 1.0f / warp_row_sum8(n, [&](size_t c) { return expf((*this)(c) - m); });
    }
};

__global__ void k_softmax_fwd(const void *x, mpx_dtype xt, const void *mask, mpx_dtype mt, void *y,
                              mpx_dtype yt, size_t rows, size_t n, size_t heads_rows, float scale)
{
    const unsigned lane = threadIdx.x & 31u;
    WARP_ROWS(i, rows) {
        const size_t o = i * n;
        const sm_row r = { x, mask, xt, mt, o, (i / heads_rows) * n, scale };
        float mx, inv = r.inv_sum(n, &mx);
        for (size_t c = lane; c < n; c += 32) dev_st(y, yt, o + c, expf(r(c) - mx) * inv);
    }
}

extern "C" int cuda_softmax_fwd(void *vbe, mpx_arg x, const mpx_arg mask, mpx_arg y, size_t batch,
                                size_t heads, size_t rows, size_t cols, float scale)
{
    cuda_be *be = (cuda_be *)vbe;
    size_t total = batch * heads * rows;
    CUDA_CHECK(be, "softmax_fwd", "x", x, total * cols);
    CUDA_CHECK(be, "softmax_fwd", "y", y, total * cols);
    CUDA_CHECK_OPT(be, "softmax_fwd", "mask", mask, batch * cols);
    if (!total || !cols) return MPX_OK;
    k_softmax_fwd<<<row_blocks(total), CUDA_THREADS, 0, be->stream>>>(x.p, x.t, mask.p, mask.t, y.p, y.t, total,
                                                                      cols, heads * rows, scale);
    CUDA_LAUNCHED(be, "softmax_fwd");
    return MPX_OK;
}

__global__ void k_softmax_bwd(const void *dy, mpx_dtype dyt, const void *y, mpx_dtype yt, void *dx,
                              mpx_dtype dxt, size_t rows, size_t n, float scale)
{
    const unsigned lane = threadIdx.x & 31u;
    WARP_ROWS(i, rows) {
        const size_t o = i * n;
        float dot = warp_row_sum8(n, [&](size_t c) { return dev_ld(dy, dyt, o + c) * dev_ld(y, yt, o + c); });
        for (size_t c = lane; c < n; c += 32)
            dev_st(dx, dxt, o + c, scale * dev_ld(y, yt, o + c) * (dev_ld(dy, dyt, o + c) - dot));
    }
}

extern "C" int cuda_softmax_bwd(void *vbe, mpx_arg dy, mpx_arg y, mpx_arg dx, size_t n_rows, size_t cols,
                                float scale)
{
    cuda_be *be = (cuda_be *)vbe;
    CUDA_CHECK(be, "softmax_bwd", "dy", dy, n_rows * cols);
    CUDA_CHECK(be, "softmax_bwd", "y", y, n_rows * cols);
    CUDA_CHECK(be, "softmax_bwd", "dx", dx, n_rows * cols);
    if (!n_rows || !cols) return MPX_OK;
    k_softmax_bwd<<<row_blocks(n_rows), CUDA_THREADS, 0, be->stream>>>(dy.p, dy.t, y.p, y.t, dx.p, dx.t, n_rows,
                                                                       cols, scale);
    CUDA_LAUNCHED(be, "softmax_bwd");
    return MPX_OK;
}

/* ---- softmax and the attention dropout in one pass (ABI 1.10) ----
 * Each row goes through what the two ops compute one after the other, the intermediate
 * rounded to its dtype in between: the probability as softmax_fwd stores it, then
 * dropout_fwd's value of it (backward: dropout_bwd's value rounded to dyd's dtype, then
 * softmax_bwd's arithmetic). What is saved is the second op's trip through memory over
 * the [batch, heads, seq, seq] tensor. Each element computes its own Philox block (the
 * separate dropout kernel shares one block among 4 elements): the same words. */

__global__ void k_softmax_dropout_fwd(const void *x, mpx_dtype xt, const void *mask, mpx_dtype mt, void *y,
                                      mpx_dtype yt, void *yd, mpx_dtype ydt, size_t rows, size_t n,
                                      size_t heads_rows, float scale, uint32_t keep_from, float dscale, mpx_rng rng)
{
    const unsigned lane = threadIdx.x & 31u;
    WARP_ROWS(i, rows) {
        const size_t o = i * n;
        const sm_row r = { x, mask, xt, mt, o, (i / heads_rows) * n, scale };
        float mx, inv = r.inv_sum(n, &mx);
        for (size_t c = lane; c < n; c += 32) {
            float v = dev_round(expf(r(c) - mx) * inv, yt);   /* the probability as stored */
            dev_st(y, yt, o + c, v);
            dev_st(yd, ydt, o + c, dev_dropped(v, dev_philox_word(rng, rng.offset + o + c), keep_from, dscale));
        }
    }
}

extern "C" int cuda_softmax_dropout_fwd(void *vbe, mpx_arg x, const mpx_arg mask, mpx_arg y, mpx_arg yd,
                                        size_t batch, size_t heads, size_t rows, size_t cols, float scale,
                                        float p, mpx_rng rng)
{
    cuda_be *be = (cuda_be *)vbe;
    size_t total = batch * heads * rows;
    CUDA_CHECK(be, "softmax_dropout_fwd", "x", x, total * cols);
    CUDA_CHECK(be, "softmax_dropout_fwd", "y", y, total * cols);
    CUDA_CHECK(be, "softmax_dropout_fwd", "yd", yd, total * cols);
    CUDA_CHECK_OPT(be, "softmax_dropout_fwd", "mask", mask, batch * cols);
    MPX_TRY(fused_p(be, "softmax_dropout_fwd", p));
    /* one warp's row would overwrite, in another dtype, rows that other warps still read */
    if ((yd.p == x.p && yd.t != x.t) || (y.p == x.p && y.t != x.t) || (yd.p == y.p && yd.t != y.t))
        return CUDA_FAIL(be, "cuda softmax_dropout_fwd: x, y and yd may share memory only in the same dtype");
    if (!total || !cols) return MPX_OK;
    k_softmax_dropout_fwd<<<row_blocks(total), CUDA_THREADS, 0, be->stream>>>(
        x.p, x.t, mask.p, mask.t, y.p, y.t, yd.p, yd.t, total, cols, heads * rows, scale, cuda_keep_from(p),
        cuda_dropout_scale(p), rng);
    CUDA_LAUNCHED(be, "softmax_dropout_fwd");
    return MPX_OK;
}

__global__ void k_dropout_softmax_bwd(const void *dyd, mpx_dtype dydt, const void *y, mpx_dtype yt, void *dx,
                                      mpx_dtype dxt, size_t rows, size_t n, float scale, uint32_t keep_from,
                                      float dscale, mpx_rng rng)
{
    const unsigned lane = threadIdx.x & 31u;
    WARP_ROWS(i, rows) {
        const size_t o = i * n;
        /* dropout_bwd's output as it would be stored, in dyd's dtype */
        auto dp = [&](size_t c) {
            float d = dev_dropped(dev_ld(dyd, dydt, o + c), dev_philox_word(rng, rng.offset + o + c), keep_from, dscale);
            return dev_round(d, dydt);
        };
        float dot = warp_row_sum8(n, [&](size_t c) { return dp(c) * dev_ld(y, yt, o + c); });
        for (size_t c = lane; c < n; c += 32)
            dev_st(dx, dxt, o + c, scale * dev_ld(y, yt, o + c) * (dp(c) - dot));
    }
}

extern "C" int cuda_dropout_softmax_bwd(void *vbe, mpx_arg dyd, mpx_arg y, mpx_arg dx, size_t n_rows,
                                        size_t cols, float scale, float p, mpx_rng rng)
{
    cuda_be *be = (cuda_be *)vbe;
    CUDA_CHECK(be, "dropout_softmax_bwd", "dyd", dyd, n_rows * cols);
    CUDA_CHECK(be, "dropout_softmax_bwd", "y", y, n_rows * cols);
    CUDA_CHECK(be, "dropout_softmax_bwd", "dx", dx, n_rows * cols);
    MPX_TRY(fused_p(be, "dropout_softmax_bwd", p));
    if (dx.p == dyd.p && dx.t != dyd.t)
        return CUDA_FAIL(be, "cuda dropout_softmax_bwd: dx aliases dyd with another dtype");
    if (!n_rows || !cols) return MPX_OK;
    k_dropout_softmax_bwd<<<row_blocks(n_rows), CUDA_THREADS, 0, be->stream>>>(
        dyd.p, dyd.t, y.p, y.t, dx.p, dx.t, n_rows, cols, scale, cuda_keep_from(p), cuda_dropout_scale(p), rng);
    CUDA_LAUNCHED(be, "dropout_softmax_bwd");
    return MPX_OK;
}

/* ---- cross-entropy over positions (cpu_rows.c's two contracts): one thread per row for
 * the max and the sum of exponentials (the cpu backend's sequential order), then one
 * thread per element for the gradient.
 *   fp32 logits:   loss = lse - x[label], dx = (exp(x - lse) - onehot) * dscale / rows;
 *   16-bit logits: as PyTorch on a 16-bit tensor, logp = round((x - max) - log(sum)),
 *                  loss = -logp[label], d = round(dscale / rows),
 *                  dx = round(exp(logp) * d - onehot * d), the mean loss rounded. ---- */

__device__ __forceinline__ int is16(mpx_dtype t) { return t == MPX_F16 || t == MPX_BF16; }

__global__ void k_ce_rows(const void *x, mpx_dtype xt, const int32_t *labels, size_t rows, size_t n,
                          float *mx_out, float *lsum_out, double *row_loss)
{
    GRID_STRIDE(i, rows) {
        const size_t o = i * n;
        float mx = -INFINITY, sum = 0.0f;
        for (size_t c = 0; c < n; c++) { float v = dev_ld(x, xt, o + c); mx = v > mx ? v : mx; }
        for (size_t c = 0; c < n; c++) sum += expf(dev_ld(x, xt, o + c) - mx);
        const int32_t lab = labels[i];   /* outside [0, n): skipped, and reported (cuda_check_ids) */
        const float lsum = logf(sum), xl = lab >= 0 && (size_t)lab < n ? dev_ld(x, xt, o + (size_t)lab) : NAN;
        mx_out[i] = mx;
        lsum_out[i] = lsum;
        row_loss[i] = is16(xt) ? -(double)dev_round((xl - mx) - lsum, xt) : (double)((mx + lsum) - xl);
    }
}

__global__ void k_ce_grad(const void *x, mpx_dtype xt, const int32_t *labels, const float *mx, const float *lsum,
                          size_t rows, size_t n, void *dx, mpx_dtype dxt, float factor)
{
    GRID_STRIDE(i, rows * n) {
        size_t r = i / n, c = i % n;
        const int hit = c == (size_t)labels[r];
        float v;
        if (is16(xt)) {
            float logp = dev_round((dev_ld(x, xt, i) - mx[r]) - lsum[r], xt);
            v = expf(logp) * factor - (hit ? factor : 0.0f);
        } else {
            v = (expf(dev_ld(x, xt, i) - (mx[r] + lsum[r])) - (hit ? 1.0f : 0.0f)) * factor;
        }
        dev_st(dx, dxt, i, v);
    }
}

static float round_host(mpx_dtype t, float v)
{
    return t == MPX_BF16 ? mpx_round_bf16(v) : t == MPX_F16 ? mpx_round_f16(v) : v;
}

extern "C" int cuda_cross_entropy(void *vbe, mpx_arg logits, const int32_t *labels, size_t rows,
                                  size_t cols, double *loss, mpx_arg dlogits, float dscale)
{
    cuda_be *be = (cuda_be *)vbe;
    CUDA_CHECK(be, "cross_entropy", "logits", logits, rows * cols);
    CUDA_CHECK_OPT(be, "cross_entropy", "dlogits", dlogits, rows * cols);
    /* loss == NULL (MPX_OPS_LOSS_OPTIONAL): dlogits only, no wait for the device */
    if (!loss && !dlogits.p) return CUDA_FAIL(be, "cuda cross_entropy: neither a loss pointer nor dlogits");
    if (rows && (!labels || !cols)) return CUDA_FAIL(be, "cuda cross_entropy: no labels or no columns");
    if (!rows) { if (loss) *loss = NAN; return MPX_OK; }
    MPX_TRY(cuda_check_ids(be, labels, rows, cols, CUDA_BAD_LABEL));   /* reported by this op's wait for the loss, else the next */
    char *ws = (char *)cuda_ws(be, 3, rows * (sizeof(double) + 2 * sizeof(float)));
    if (!ws) return MPX_ERR_NOMEM;
    double *row_loss = (double *)ws;
    float *mx = (float *)(ws + rows * sizeof(double)), *lsum = mx + rows;
    const int low = logits.t == MPX_F16 || logits.t == MPX_BF16;
    const float factor = low ? round_host(logits.t, dscale / (float)rows) : dscale / (float)rows;
    k_ce_rows<<<cuda_blocks(rows), CUDA_THREADS, 0, be->stream>>>(logits.p, logits.t, labels, rows, cols, mx, lsum,
                                                                  row_loss);
    CUDA_LAUNCHED(be, "cross_entropy");
    if (dlogits.p) {
        k_ce_grad<<<cuda_blocks(rows * cols), CUDA_THREADS, 0, be->stream>>>(
            logits.p, logits.t, labels, mx, lsum, rows, cols, dlogits.p, dlogits.t, factor);
        CUDA_LAUNCHED(be, "cross_entropy (gradient)");
    }
    if (!loss) return MPX_OK;   /* a label outside is reported at the next synchronisation */
    double *h = (double *)cuda_hws(be, 1, rows * sizeof(double));
    if (!h) return MPX_ERR_NOMEM;
    CUDA_TRY(be, cudaMemcpyAsync(h, row_loss, rows * sizeof(double), cudaMemcpyDeviceToHost, be->stream), "cross_entropy (loss to host)");
    CUDA_SYNC(be, "cross_entropy");
    double total = 0.0;     /* in row order, as the cpu backend */
    for (size_t i = 0; i < rows; i++) total += h[i];
    *loss = total / (double)rows;
    if (low) *loss = (double)round_host(logits.t, (float)*loss);   /* a 16-bit scalar */
    return MPX_OK;
}
