/* Device-side helpers shared by the .cu files: loading and storing one element of any
 * storage dtype (mpx/numerics.h's conversions, compiled for the device), launch shapes,
 * and the cpu backend's 8-lane row sums done by one warp. */
#ifndef MPX_CUDA_DEVICE_CUH
#define MPX_CUDA_DEVICE_CUH

#include "cuda_internal.h"

#include <math.h>

#define CUDA_THREADS 256

/* Blocks for a grid-stride loop over n items. */
static inline unsigned cuda_blocks(size_t n)
{
    size_t b = (n + CUDA_THREADS - 1) / CUDA_THREADS;
    if (b > 65535u * 8u) b = 65535u * 8u;
    return b ? (unsigned)b : 1u;
}

__device__ __forceinline__ float dev_ld(const void *p, mpx_dtype t, size_t i)
{
    if (t == MPX_F32) return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return t == MPX_BF16 ? mpx_bf16_to_f32(h) : mpx_f16_to_f32(h);
}

__device__ __forceinline__ void dev_st(void *p, mpx_dtype t, size_t i, float v)
{
    if (t == MPX_F32) { ((float *)p)[i] = v; return; }
    ((uint16_t *)p)[i] = t == MPX_BF16 ? mpx_f32_to_bf16(v) : mpx_f32_to_f16(v);
}

/* v rounded to t and widened back (fp32: v). */
__device__ __forceinline__ float dev_round(float v, mpx_dtype t)
{
    if (t == MPX_BF16) return mpx_round_bf16(v);
    if (t == MPX_F16) return mpx_round_f16(v);
    return v;
}

/* Dropout's threshold and scale for p (mpx/ops.h: element kept when (word >> 8) >=
 * keep_from, kept values scaled by 1 / (1 - p)), as every dropout kernel computes them. */
static inline uint32_t cuda_keep_from(float p) { return (uint32_t)ceil((double)p * 0x1p24); }
static inline float cuda_dropout_scale(float p) { return p < 1.0f ? 1.0f / (1.0f - p) : 0.0f; }

/* Word e % 4 of Philox block e / 4: stream element e's draw (a kernel that takes a
 * whole block per thread uses mpx_philox_block itself). */
__device__ __forceinline__ uint32_t dev_philox_word(const mpx_rng &rng, uint64_t e)
{
    mpx_philox_out r = mpx_philox_block(rng.seed, rng.site, rng.tick, e >> 2);
    return r.v[e & 3u];
}

/* x kept or dropped by its draw w, as dropout_fwd stores it before rounding. */
__device__ __forceinline__ float dev_dropped(float x, uint32_t w, uint32_t keep_from, float scale)
{
    float v = x * scale;
    return (w >> 8) >= keep_from ? v : 0.0f;
}

#define GRID_STRIDE(i, n) \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
         i += (size_t)gridDim.x * blockDim.x)

/* The cpu backend's row_sum/row_dot/row_max (cpu_rows.c): lane k of 8 adds elements
 * c + k for c = 0, 8, ... while c + 8 <= n; the tail goes to lane 0; the lanes combine
 * as ((a0 + a4) + (a1 + a5)) + ((a2 + a6) + (a3 + a7)). One whole warp calls it (the
 * shuffles need all 32 lanes); all 32 evaluate the terms, lanes 0..7 do the adding in
 * that order; every lane gets the result. `f(c)` is the c-th term. */
template <typename F>
__device__ float warp_row_sum8(size_t n, F f)
{
    const unsigned lane = threadIdx.x & 31u, v = lane & 7u;
    float acc = 0.0f;
    size_t c = 0;
    /* 32 columns at a time: each lane evaluates one term (coalesced loads, 32 lanes of
     * exp), and lane v < 8 adds the terms of columns c + v, c + v + 8, c + v + 16,
     * c + v + 24 in that order, fetched by shuffle: the very sequence it adds alone. */
    for (; c + 32 <= n; c += 32) {
        float x = f(c + lane);
        float x0 = __shfl_sync(0xffffffffu, x, v), x1 = __shfl_sync(0xffffffffu, x, v + 8);
        float x2 = __shfl_sync(0xffffffffu, x, v + 16), x3 = __shfl_sync(0xffffffffu, x, v + 24);
        acc += x0;
        acc += x1;
        acc += x2;
        acc += x3;
    }
    if (lane < 8) {
        for (; c + 8 <= n; c += 8) acc += f(c + lane);
        if (lane == 0)
            for (; c < n; c++) acc += f(c);
    }
    float a[8];
    for (int k = 0; k < 8; k++) a[k] = __shfl_sync(0xffffffffu, acc, k);
    return ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
}

/* Maximum as the cpu's row_max: `x > m ? x : m` per lane (NaN skipped), lanes 1..7
 * folded into lane 0 in order. */
template <typename F>
__device__ float warp_row_max8(size_t n, F f)
{
    const unsigned lane = threadIdx.x & 31u, v = lane & 7u;
    float acc = -INFINITY;
    size_t c = 0;
    for (; c + 32 <= n; c += 32) {   /* as warp_row_sum8: the same sequence per lane */
        float x = f(c + lane);
        for (unsigned k = 0; k < 32; k += 8) {
            float y = __shfl_sync(0xffffffffu, x, v + k);
            acc = y > acc ? y : acc;
        }
    }
    if (lane < 8) {
        for (; c + 8 <= n; c += 8) { float x = f(c + lane); acc = x > acc ? x : acc; }
        if (lane == 0)
            for (; c < n; c++) { float x = f(c); acc = x > acc ? x : acc; }
    }
    float m = __shfl_sync(0xffffffffu, acc, 0);
    for (int k = 1; k < 8; k++) { float x = __shfl_sync(0xffffffffu, acc, k); m = x > m ? x : m; }
    return m;
}

#endif
