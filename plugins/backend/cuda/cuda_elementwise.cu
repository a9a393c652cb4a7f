/* Elementwise ops: cast, add, axpby, scale, GELU, dropout, apply_update, and the GEMM
 * operand conversion. One thread per element (grid-stride), fp32 inside, each output
 * rounded once; the Philox ops give one thread one Philox block (4 stream elements),
 * the draws those elements take on the cpu backend. */
#include "cuda_device.cuh"

#include <math.h>

/* ---- cast, add, axpby, scale ---- */

__global__ void k_cast(const void *x, mpx_dtype xt, void *y, mpx_dtype yt, size_t n)
{
    GRID_STRIDE(i, n) dev_st(y, yt, i, dev_ld(x, xt, i));
}

__global__ void k_add(const void *a, mpx_dtype at, const void *b, mpx_dtype bt, void *y,
                      mpx_dtype yt, size_t n)
{
    GRID_STRIDE(i, n) dev_st(y, yt, i, dev_ld(a, at, i) + dev_ld(b, bt, i));
}

/* beta == 0 does not read y (BLAS convention), as the cpu backend. */
__global__ void k_axpby(float alpha, const void *x, mpx_dtype xt, float beta, void *y,
                        mpx_dtype yt, size_t n)
{
    GRID_STRIDE(i, n) {
        float v = alpha * dev_ld(x, xt, i);
        if (beta != 0.0f) v = v + beta * dev_ld(y, yt, i);
        dev_st(y, yt, i, v);
    }
}

__global__ void k_scale(void *x, mpx_dtype xt, float alpha, size_t n)
{
    GRID_STRIDE(i, n) dev_st(x, xt, i, dev_ld(x, xt, i) * alpha);
}

extern "C" int cuda_cast(void *vbe, mpx_arg x, mpx_arg y, size_t n)
{
    cuda_be *be = (cuda_be *)vbe;
    CUDA_CHECK(be, "cast", "x", x, n);
    CUDA_CHECK(be, "cast", "y", y, n);
    if (!n) return MPX_OK;
    if (x.t == y.t) {
        if (x.p != y.p)
            CUDA_TRY(be, cudaMemcpyAsync(y.p, x.p, n * mpx_dtype_size(x.t), cudaMemcpyDeviceToDevice, be->stream), "cast (copy)");
        return MPX_OK;
    }
    k_cast<<<cuda_blocks(n), CUDA_THREADS, 0, be->stream>>>(x.p, x.t, y.p, y.t, n);
    CUDA_LAUNCHED(be, "cast");
    return MPX_OK;
}

extern "C" int cuda_add(void *vbe, mpx_arg a, mpx_arg b, mpx_arg y, size_t n)
{
    cuda_be *be = (cuda_be *)vbe;
    CUDA_CHECK(be, "add", "a", a, n);
    CUDA_CHECK(be, "add", "b", b, n);
    CUDA_CHECK(be, "add", "y", y, n);
    if (!n) return MPX_OK;
    k_add<<<cuda_blocks(n), CUDA_THREADS, 0, be->stream>>>(a.p, a.t, b.p, b.t, y.p, y.t, n);
    CUDA_LAUNCHED(be, "add");
    return MPX_OK;
}

extern "C" int cuda_axpby(void *vbe, float alpha, mpx_arg x, float beta, mpx_arg y, size_t n)
{
    cuda_be *be = (cuda_be *)vbe;
    CUDA_CHECK(be, "axpby", "x", x, n);
    CUDA_CHECK(be, "axpby", "y", y, n);
    if (!n) return MPX_OK;
    k_axpby<<<cuda_blocks(n), CUDA_THREADS, 0, be->stream>>>(alpha, x.p, x.t, beta, y.p, y.t, n);
    CUDA_LAUNCHED(be, "axpby");
    return MPX_OK;
}

extern "C" int cuda_scale(void *vbe, mpx_arg x, float alpha, size_t n)
{
    cuda_be *be = (cuda_be *)vbe;
    CUDA_CHECK(be, "scale", "x", x, n);
    if (!n) return MPX_OK;
    k_scale<<<cuda_blocks(n), CUDA_THREADS, 0, be->stream>>>(x.p, x.t, alpha, n);
    CUDA_LAUNCHED(be, "scale");
    return MPX_OK;
}

/* ---- GELU, erf form: x * Phi(x), Phi(x) = erfc(-x / sqrt 2) / 2 (accurate for x < 0) ---- */

__device__ __forceinline__ float dev_phi(float x) { return 0.5f * erfcf(-x * 0.70710678118654752f); }

__global__ void k_gelu_fwd(const void *x, mpx_dtype xt, void *y, mpx_dtype yt, size_t n)
{
    GRID_STRIDE(i, n) {
        float v = dev_ld(x, xt, i);
        dev_st(y, yt, i, v * dev_phi(v));
    }
}

__global__ void k_gelu_bwd(const void *dy, mpx_dtype dyt, const void *x, mpx_dtype xt, void *dx,
                           mpx_dtype dxt, size_t n)
{
    const float inv_sqrt_2pi = 0.3989422804014327f;
    GRID_STRIDE(i, n) {
        float v = dev_ld(x, xt, i), g = dev_ld(dy, dyt, i);
        float pdf = expf(-0.5f * v * v);
        dev_st(dx, dxt, i, g * (dev_phi(v) + v * (inv_sqrt_2pi * pdf)));
    }
}

extern "C" int cuda_gelu_fwd(void *vbe, mpx_arg x, mpx_arg y, size_t n)
{
    cuda_be *be = (cuda_be *)vbe;
    CUDA_CHECK(be, "gelu_fwd", "x", x, n);
    CUDA_CHECK(be, "gelu_fwd", "y", y, n);
    if (!n) return MPX_OK;
    k_gelu_fwd<<<cuda_blocks(n), CUDA_THREADS, 0, be->stream>>>(x.p, x.t, y.p, y.t, n);
    CUDA_LAUNCHED(be, "gelu_fwd");
    return MPX_OK;
}

extern "C" int cuda_gelu_bwd(void *vbe, mpx_arg dy, mpx_arg x, mpx_arg dx, size_t n)
{
    cuda_be *be = (cuda_be *)vbe;
    CUDA_CHECK(be, "gelu_bwd", "dy", dy, n);
    CUDA_CHECK(be, "gelu_bwd", "x", x, n);
    CUDA_CHECK(be, "gelu_bwd", "dx", dx, n);
    if (!n) return MPX_OK;
    k_gelu_bwd<<<cuda_blocks(n), CUDA_THREADS, 0, be->stream>>>(dy.p, dy.t, x.p, x.t, dx.p, dx.t, n);
    CUDA_LAUNCHED(be, "gelu_bwd");
    return MPX_OK;
}

/* ---- dropout: element i keeps when (draw_i >> 8) >= ceil(p * 2^24) ----
 * Thread j takes stream block b = e0 / 4 + j, i.e. the elements e = 4b .. 4b + 3 that
 * fall inside [e0, e0 + n). */

/* f(i, draw) for every element i < n of the stream at rng.offset, with its Philox word. */
template <typename F>
__device__ void philox_elements(const mpx_rng &rng, size_t n, F f)
{
    const uint64_t e0 = rng.offset, b0 = e0 >> 2, b1 = (e0 + n - 1) >> 2;
    GRID_STRIDE(j, (size_t)(b1 - b0 + 1)) {
        uint64_t b = b0 + j;
        mpx_philox_out r = mpx_philox_block(rng.seed, rng.site, rng.tick, b);
        for (unsigned k = 0; k < 4; k++) {
            uint64_t e = 4 * b + k;
            if (e >= e0 && e < e0 + n) f((size_t)(e - e0), r.v[k]);
        }
    }
}

static size_t philox_blocks(const mpx_rng &rng, size_t n)
{
    return (size_t)(((rng.offset + n - 1) >> 2) - (rng.offset >> 2) + 1);
}

__global__ void k_dropout(const void *x, mpx_dtype xt, void *y, mpx_dtype yt, size_t n,
                          uint32_t keep_from, float scale, mpx_rng rng)
{
    philox_elements(rng, n, [&](size_t i, uint32_t w) { dev_st(y, yt, i, dev_dropped(dev_ld(x, xt, i), w, keep_from, scale)); });
}

static int dropout(cuda_be *be, const char *op, mpx_arg x, mpx_arg y, size_t n, float p, mpx_rng rng)
{
    CUDA_CHECK(be, op, "input", x, n);
    CUDA_CHECK(be, op, "output", y, n);
    if (!(p >= 0.0f && p <= 1.0f)) return CUDA_FAIL(be, "cuda %s: p = %g is outside [0, 1]", op, (double)p);
    if (!n) return MPX_OK;
    k_dropout<<<cuda_blocks(philox_blocks(rng, n)), CUDA_THREADS, 0, be->stream>>>(x.p, x.t, y.p, y.t, n, cuda_keep_from(p),
                                                                                   cuda_dropout_scale(p), rng);
    CUDA_LAUNCHED(be, op);
    return MPX_OK;
}

extern "C" int cuda_dropout_fwd(void *be, mpx_arg x, mpx_arg y, size_t n, float p, mpx_rng rng)
{
    return dropout((cuda_be *)be, "dropout_fwd", x, y, n, p, rng);
}

extern "C" int cuda_dropout_bwd(void *be, mpx_arg dy, mpx_arg dx, size_t n, float p, mpx_rng rng)
{
    return dropout((cuda_be *)be, "dropout_bwd", dy, dx, n, p, rng);
}

/* ---- apply_update (cpu_elementwise.c's contract) ----
 * NEAREST: w = rne(w + u); STOCHASTIC: w = sr(w + u) with element i's draw (fp32 w: a
 * plain add); KAHAN: y = u - c; t = rnd_w(w + y); c = (t - w) - y; w = t. */

__global__ void k_update_nearest(void *w, mpx_dtype wt, const float *u, size_t n)
{
    GRID_STRIDE(i, n) dev_st(w, wt, i, dev_ld(w, wt, i) + u[i]);
}

__global__ void k_update_kahan(void *w, mpx_dtype wt, void *c, mpx_dtype ct, const float *u, size_t n)
{
    GRID_STRIDE(i, n) {
        float wv = dev_ld(w, wt, i), y = u[i] - dev_ld(c, ct, i);
        float t = dev_round(wv + y, wt);
        dev_st(c, ct, i, (t - wv) - y);
        dev_st(w, wt, i, t);
    }
}

__global__ void k_update_stochastic(uint16_t *w, mpx_dtype wt, const float *u, size_t n, mpx_rng rng)
{
    philox_elements(rng, n, [&](size_t i, uint32_t x) {
        float v = dev_ld(w, wt, i) + u[i];
        w[i] = wt == MPX_BF16 ? mpx_f32_to_bf16_sr(v, x) : mpx_f32_to_f16_sr(v, x);
    });
}

extern "C" int cuda_apply_update(void *vbe, mpx_arg w, mpx_arg comp, const float *u, size_t n,
                                 mpx_rounding mode, mpx_rng rng)
{
    cuda_be *be = (cuda_be *)vbe;
    CUDA_CHECK(be, "apply_update", "w", w, n);
    if (n && !u) return CUDA_FAIL(be, "cuda apply_update: update is NULL");
    if (mode != MPX_ROUND_NEAREST && mode != MPX_ROUND_STOCHASTIC && mode != MPX_ROUND_KAHAN) {
        (void)CUDA_FAIL(be, "cuda apply_update: unknown rounding mode %d", (int)mode);
        return MPX_ERR_UNSUPPORTED;
    }
    if (mode == MPX_ROUND_KAHAN) {
        if (n && !comp.p) return CUDA_FAIL(be, "cuda apply_update: kahan rounding needs a compensation buffer");
        CUDA_CHECK(be, "apply_update", "comp (kahan compensation)", comp, n);
    }
    if (!n) return MPX_OK;
    if (mode == MPX_ROUND_KAHAN) {
        k_update_kahan<<<cuda_blocks(n), CUDA_THREADS, 0, be->stream>>>(w.p, w.t, comp.p, comp.t, u, n);
    } else if (mode == MPX_ROUND_STOCHASTIC && w.t != MPX_F32) {
        k_update_stochastic<<<cuda_blocks(philox_blocks(rng, n)), CUDA_THREADS, 0, be->stream>>>((uint16_t *)w.p, w.t, u, n, rng);
    } else {
        k_update_nearest<<<cuda_blocks(n), CUDA_THREADS, 0, be->stream>>>(w.p, w.t, u, n);
    }
    CUDA_LAUNCHED(be, "apply_update");
    return MPX_OK;
}

/* ---- GEMM operands ---- */

__global__ void k_convert_matrix(const void *src, mpx_dtype st, int rows, int cols, int ld,
                                 long long stride, size_t total, void *dst, mpx_dtype dt,
                                 mpx_dtype round_to, int to_storage)
{
    GRID_STRIDE(i, total) {
        size_t per = (size_t)rows * (size_t)cols;
        size_t b = i / per, r = (i % per) / (size_t)cols, c = i % (size_t)cols;
        size_t s = (size_t)((long long)b * stride) + r * (size_t)ld + c;
        if (to_storage) {
            dev_st((void *)src, st, s, dev_ld(dst, dt, i));
        } else {
            dev_st(dst, dt, i, dev_round(dev_ld(src, st, s), round_to));
        }
    }
}

extern "C" int cuda_convert_matrix(cuda_be *be, mpx_arg src, int rows, int cols, int ld,
                                   long long stride, int batch, mpx_arg dst, mpx_dtype round_to,
                                   int to_storage)
{
    size_t total = (size_t)batch * (size_t)rows * (size_t)cols;
    if (!total) return MPX_OK;
    k_convert_matrix<<<cuda_blocks(total), CUDA_THREADS, 0, be->stream>>>(
        src.p, src.t, rows, cols, ld, stride, total, dst.p, dst.t, round_to, to_storage);
    CUDA_LAUNCHED(be, "gemm operand conversion");
    return MPX_OK;
}
