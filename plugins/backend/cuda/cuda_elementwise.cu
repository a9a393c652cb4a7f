/* Elementwise ops: cast, add, axpby, scale, GELU, dropout, apply_update, and the GEMM
 * operand conversion. One thread per element (grid-stride; 16 bytes of elements where
 * the operands share a dtype and alignment allows, below), fp32 inside, each output
 * rounded once; the Philox ops give one thread one Philox block (4 stream elements),
 * the draws those elements take on the cpu backend. */
#include "cuda_device.cuh"

#include <math.h>

/* ---- 16-byte loads where every operand has one dtype ----
 * When the operands of add, axpby, scale, GELU or dropout share one storage dtype and
 * start 16-byte aligned, a thread takes 16 bytes of each (8 fp16/bf16 or 4 fp32
 * elements) in one load and one store, the dtype fixed at compile time; the elements
 * past the last whole vector, and every other case, go through the scalar kernels. The
 * arithmetic is the scalar kernels' expression for expression (conversions from
 * mpx/numerics.h), so the bits are theirs. */

template <mpx_dtype T> struct dt;
template <> struct dt<MPX_F32> {
    typedef float S;
    static __device__ __forceinline__ float ld(float v) { return v; }
    static __device__ __forceinline__ float st(float v) { return v; }
};
template <> struct dt<MPX_BF16> {
    typedef uint16_t S;
    static __device__ __forceinline__ float ld(uint16_t v) { return mpx_bf16_to_f32(v); }
    static __device__ __forceinline__ uint16_t st(float v) { return mpx_f32_to_bf16(v); }
};
template <> struct dt<MPX_F16> {
    typedef uint16_t S;
    static __device__ __forceinline__ float ld(uint16_t v) { return mpx_f16_to_f32(v); }
    static __device__ __forceinline__ uint16_t st(float v) { return mpx_f32_to_f16(v); }
};

#define VEC_BYTES 16
template <typename S> struct alignas(VEC_BYTES) vec_t { S v[VEC_BYTES / sizeof(S)]; };

/* Elements per vector of dtype t (fp32, fp16, bf16). */
static size_t vec_width(mpx_dtype t) { return VEC_BYTES / mpx_dtype_size(t); }

/* Whole vectors of n elements when every pointer is aligned (else 0). */
static size_t vec_count(size_t n, mpx_dtype t, const void *a, const void *b, const void *c)
{
    const void *ps[3] = { a, b, c };
    for (int i = 0; i < 3; i++)
        if (ps[i] && ((uintptr_t)ps[i] % VEC_BYTES)) return 0;
    return n / vec_width(t);
}

/* Launches kernel template K for dtype t over nv vectors. */
#define VEC_LAUNCH(t, nv, K, ...)                                                                   \
    do {                                                                                             \
        unsigned g_ = cuda_blocks(nv);                                                               \
        if ((t) == MPX_F32) K<MPX_F32><<<g_, CUDA_THREADS, 0, be->stream>>>(__VA_ARGS__);            \
        else if ((t) == MPX_BF16) K<MPX_BF16><<<g_, CUDA_THREADS, 0, be->stream>>>(__VA_ARGS__);     \
        else K<MPX_F16><<<g_, CUDA_THREADS, 0, be->stream>>>(__VA_ARGS__);                           \
    } while (0)

/* Vector j of x widened to fp32 into the array f (W elements; S and W in scope). */
#define VEC_LD(T, x, j, f)                                                                          \
    {                                                                                                \
        vec_t<S> in_ = ((const vec_t<S> *)(x))[j];                                                   \
        _Pragma("unroll") for (int k = 0; k < W; k++) f[k] = dt<T>::ld(in_.v[k]);                   \
    }
/* Declares S (T's storage type), W (elements per vector) and f, loaded from vector j of x. */
#define VEC_IN(T, x, j, f)                                                                          \
    typedef typename dt<T>::S S;                                                                     \
    const int W = VEC_BYTES / (int)sizeof(S);                                                        \
    float f[VEC_BYTES / 2];                                                                          \
    VEC_LD(T, x, j, f)
/* The W values of f rounded and stored as vector j of y. */
#define VEC_OUT(T, y, j, f)                                                                         \
    {                                                                                                \
        vec_t<S> out_;                                                                               \
        _Pragma("unroll") for (int k = 0; k < W; k++) out_.v[k] = dt<T>::st(f[k]);                  \
        ((vec_t<S> *)(y))[j] = out_;                                                                 \
    }

template <mpx_dtype T>
__global__ void kv_add(const void *a, const void *b, void *y, size_t nv)
{
    GRID_STRIDE(j, nv) {
        VEC_IN(T, a, j, fa);
        float fb[VEC_BYTES / 2];
        VEC_LD(T, b, j, fb);
#pragma unroll
        for (int k = 0; k < W; k++) fa[k] = fa[k] + fb[k];
        VEC_OUT(T, y, j, fa);
    }
}

template <mpx_dtype T>
__global__ void kv_axpby(float alpha, const void *x, float beta, void *y, size_t nv)
{
    GRID_STRIDE(j, nv) {
        VEC_IN(T, x, j, fx);
        float fy[VEC_BYTES / 2] = { 0 };
        if (beta != 0.0f) VEC_LD(T, y, j, fy);   /* beta 0 does not read y, as the scalar kernel */
#pragma unroll
        for (int k = 0; k < W; k++) {
            float v = alpha * fx[k];
            if (beta != 0.0f) v = v + beta * fy[k];
            fx[k] = v;
        }
        VEC_OUT(T, y, j, fx);
    }
}

template <mpx_dtype T>
__global__ void kv_scale(void *x, float alpha, size_t nv)
{
    GRID_STRIDE(j, nv) {
        VEC_IN(T, x, j, f);
#pragma unroll
        for (int k = 0; k < W; k++) f[k] = f[k] * alpha;
        VEC_OUT(T, x, j, f);
    }
}

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
    size_t nv = a.t == b.t && a.t == y.t ? vec_count(n, a.t, a.p, b.p, y.p) : 0, done = nv * vec_width(a.t);
    if (nv) VEC_LAUNCH(a.t, nv, kv_add, a.p, b.p, y.p, nv);
    if (done < n)
        k_add<<<cuda_blocks(n - done), CUDA_THREADS, 0, be->stream>>>(mpx_at(a, done).p, a.t, mpx_at(b, done).p, b.t,
                                                                      mpx_at(y, done).p, y.t, n - done);
    CUDA_LAUNCHED(be, "add");
    return MPX_OK;
}

extern "C" int cuda_axpby(void *vbe, float alpha, mpx_arg x, float beta, mpx_arg y, size_t n)
{
    cuda_be *be = (cuda_be *)vbe;
    CUDA_CHECK(be, "axpby", "x", x, n);
    CUDA_CHECK(be, "axpby", "y", y, n);
    if (!n) return MPX_OK;
    size_t nv = x.t == y.t ? vec_count(n, x.t, x.p, y.p, NULL) : 0, done = nv * vec_width(x.t);
    if (nv) VEC_LAUNCH(x.t, nv, kv_axpby, alpha, x.p, beta, y.p, nv);
    if (done < n)
        k_axpby<<<cuda_blocks(n - done), CUDA_THREADS, 0, be->stream>>>(alpha, mpx_at(x, done).p, x.t, beta,
                                                                        mpx_at(y, done).p, y.t, n - done);
    CUDA_LAUNCHED(be, "axpby");
    return MPX_OK;
}

extern "C" int cuda_scale(void *vbe, mpx_arg x, float alpha, size_t n)
{
    cuda_be *be = (cuda_be *)vbe;
    CUDA_CHECK(be, "scale", "x", x, n);
    if (!n) return MPX_OK;
    size_t nv = vec_count(n, x.t, x.p, NULL, NULL), done = nv * vec_width(x.t);
    if (nv) VEC_LAUNCH(x.t, nv, kv_scale, x.p, alpha, nv);
    if (done < n)
        k_scale<<<cuda_blocks(n - done), CUDA_THREADS, 0, be->stream>>>(mpx_at(x, done).p, x.t, alpha, n - done);
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

template <mpx_dtype T>
__global__ void kv_gelu_fwd(const void *x, void *y, size_t nv)
{
    GRID_STRIDE(j, nv) {
        VEC_IN(T, x, j, f);
#pragma unroll
        for (int k = 0; k < W; k++) f[k] = f[k] * dev_phi(f[k]);
        VEC_OUT(T, y, j, f);
    }
}

template <mpx_dtype T>
__global__ void kv_gelu_bwd(const void *dy, const void *x, void *dx, size_t nv)
{
    const float inv_sqrt_2pi = 0.3989422804014327f;
    GRID_STRIDE(j, nv) {
        VEC_IN(T, x, j, f);
        float g[VEC_BYTES / 2];
        VEC_LD(T, dy, j, g);
#pragma unroll
        for (int k = 0; k < W; k++) {
            float v = f[k], pdf = expf(-0.5f * v * v);
            f[k] = g[k] * (dev_phi(v) + v * (inv_sqrt_2pi * pdf));
        }
        VEC_OUT(T, dx, j, f);
    }
}

extern "C" int cuda_gelu_fwd(void *vbe, mpx_arg x, mpx_arg y, size_t n)
{
    cuda_be *be = (cuda_be *)vbe;
    CUDA_CHECK(be, "gelu_fwd", "x", x, n);
    CUDA_CHECK(be, "gelu_fwd", "y", y, n);
    if (!n) return MPX_OK;
    size_t nv = x.t == y.t ? vec_count(n, x.t, x.p, y.p, NULL) : 0, done = nv * vec_width(x.t);
    if (nv) VEC_LAUNCH(x.t, nv, kv_gelu_fwd, x.p, y.p, nv);
    if (done < n)
        k_gelu_fwd<<<cuda_blocks(n - done), CUDA_THREADS, 0, be->stream>>>(mpx_at(x, done).p, x.t, mpx_at(y, done).p,
                                                                           y.t, n - done);
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
    size_t nv = dy.t == x.t && x.t == dx.t ? vec_count(n, x.t, dy.p, x.p, dx.p) : 0, done = nv * vec_width(x.t);
    if (nv) VEC_LAUNCH(x.t, nv, kv_gelu_bwd, dy.p, x.p, dx.p, nv);
    if (done < n)
        k_gelu_bwd<<<cuda_blocks(n - done), CUDA_THREADS, 0, be->stream>>>(
            mpx_at(dy, done).p, dy.t, mpx_at(x, done).p, x.t, mpx_at(dx, done).p, dx.t, n - done);
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

/* Vector j holds the stream's elements rng.offset + j W .. + W - 1; with rng.offset a
 * multiple of 4 they are W / 4 whole Philox blocks. */
template <mpx_dtype T>
__global__ void kv_dropout(const void *x, void *y, size_t nv, uint32_t keep_from, float scale, mpx_rng rng)
{
    GRID_STRIDE(j, nv) {
        VEC_IN(T, x, j, f);
        const uint64_t b0 = (rng.offset >> 2) + (uint64_t)j * (uint64_t)(W / 4);
#pragma unroll
        for (int q = 0; q < W / 4; q++) {
            mpx_philox_out r = mpx_philox_block(rng.seed, rng.site, rng.tick, b0 + (uint64_t)q);
#pragma unroll
            for (int k = 0; k < 4; k++) f[4 * q + k] = dev_dropped(f[4 * q + k], r.v[k], keep_from, scale);
        }
        VEC_OUT(T, y, j, f);
    }
}

static int dropout(cuda_be *be, const char *op, mpx_arg x, mpx_arg y, size_t n, float p, mpx_rng rng)
{
    CUDA_CHECK(be, op, "input", x, n);
    CUDA_CHECK(be, op, "output", y, n);
    if (!(p >= 0.0f && p <= 1.0f)) return CUDA_FAIL(be, "cuda %s: p = %g is outside [0, 1]", op, (double)p);
    if (!n) return MPX_OK;
    const uint32_t keep_from = cuda_keep_from(p);
    const float scale = cuda_dropout_scale(p);
    size_t nv = x.t == y.t && rng.offset % 4 == 0 ? vec_count(n, x.t, x.p, y.p, NULL) : 0, done = nv * vec_width(x.t);
    if (nv) VEC_LAUNCH(x.t, nv, kv_dropout, x.p, y.p, nv, keep_from, scale, rng);
    if (done < n) {
        mpx_rng rest = rng;
        rest.offset += done;
        k_dropout<<<cuda_blocks(philox_blocks(rest, n - done)), CUDA_THREADS, 0, be->stream>>>(
            mpx_at(x, done).p, x.t, mpx_at(y, done).p, y.t, n - done, keep_from, scale, rest);
    }
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
