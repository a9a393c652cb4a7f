/* ABI 1.4 fused_update: the optimizer rules of plugins/optimizer/ on device memory, one
 * thread per element, with the host loops' fp32 arithmetic operation for operation
 * (built with --fmad=false, so no contraction either): the results agree with the host
 * optimizers bit for bit except sqrt's, which is correctly rounded on both. LAMB's two
 * norms are summed in double per block and the block sums on the host (their order
 * differs from the host loop's sequential sum, in double). With add_in_place (ABI 1.18)
 * ADAM and SGD add the update into the fp32 param in the same pass, as apply_update's
 * nearest into fp32 would (one fp32 addition), and write no update: the one-pass step. */
#include "cuda_device.cuh"

#include <stddef.h>
#include <string.h>

__device__ __forceinline__ float st_ld(const void *p, mpx_dtype t, size_t i) { return dev_ld(p, t, i); }

__global__ void k_adam(mpx_fused_update f)
{
    GRID_STRIDE(i, f.n) {
        const float wd = f.weight_decay;
        float g = f.grad[i], p = wd != 0.0f ? dev_ld(f.param.p, f.param.t, i) : 0.0f;
        if (!f.adam_w_mode && wd != 0.0f) g += wd * p;
        float m = f.b1 * st_ld(f.state[0].p, f.state[0].t, i) + f.one_minus_b1 * g;
        float v = f.b2 * st_ld(f.state[1].p, f.state[1].t, i) + f.one_minus_b2 * g * g;
        float denom = sqrtf(v / f.bc2) + f.eps;
        float u = (m / f.bc1) / denom;
        if (f.adam_w_mode && wd != 0.0f) u += wd * p;
        const float upd = f.neg_lr * u;
        if (f.add_in_place) ((float *)f.param.p)[i] = (wd != 0.0f ? p : ((const float *)f.param.p)[i]) + upd;
        else f.update[i] = upd;
        dev_st(f.state[0].p, f.state[0].t, i, m);
        dev_st(f.state[1].p, f.state[1].t, i, v);
    }
}

__global__ void k_sgd(mpx_fused_update f)
{
    GRID_STRIDE(i, f.n) {
        const float wd = f.weight_decay, g = f.grad[i];
        float d = wd != 0.0f ? g + wd * dev_ld(f.param.p, f.param.t, i) : g;
        if (f.momentum != 0.0f) {
            float buf = f.first_step ? d : f.momentum * st_ld(f.state[0].p, f.state[0].t, i) + f.one_minus_dampening * d;
            d = f.nesterov ? d + f.momentum * buf : buf;
            dev_st(f.state[0].p, f.state[0].t, i, buf);
        }
        const float upd = f.neg_lr * d;
        if (f.add_in_place) ((float *)f.param.p)[i] += upd;
        else f.update[i] = upd;
    }
}

/* The raw LAMB update and, per block, sum p² and sum u² (in double) into sums[2 * block]. */
__global__ void k_lamb(mpx_fused_update f, double *sums)
{
    __shared__ double s_w[CUDA_THREADS], s_u[CUDA_THREADS];
    double w2 = 0.0, u2 = 0.0;
    GRID_STRIDE(i, f.n) {
        float g = f.grad[i], p = dev_ld(f.param.p, f.param.t, i);
        float m = f.b1 * st_ld(f.state[0].p, f.state[0].t, i) + f.one_minus_b1 * g;
        float v = f.b2 * st_ld(f.state[1].p, f.state[1].t, i) + f.one_minus_b2 * g * g;
        float u = m / (sqrtf(v) + f.eps) + f.weight_decay * p;
        f.update[i] = u;
        dev_st(f.state[0].p, f.state[0].t, i, m);
        dev_st(f.state[1].p, f.state[1].t, i, v);
        w2 += (double)p * p;
        u2 += (double)u * u;
    }
    s_w[threadIdx.x] = w2;
    s_u[threadIdx.x] = u2;
    __syncthreads();
    for (unsigned s = CUDA_THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            s_w[threadIdx.x] += s_w[threadIdx.x + s];
            s_u[threadIdx.x] += s_u[threadIdx.x + s];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        sums[2 * blockIdx.x] = s_w[0];
        sums[2 * blockIdx.x + 1] = s_u[0];
    }
}

static int state_ok(cuda_be *be, const mpx_fused_update *f, int k)
{
    mpx_arg s = f->state[k];
    if (!s.p) return CUDA_FAIL(be, "cuda fused_update: state buffer %d missing", k);
    if (s.t != MPX_F32 && s.t != MPX_BF16) {
        (void)CUDA_FAIL(be, "cuda fused_update: state %d has dtype %s; supported: fp32, bf16", k, mpx_dtype_name(s.t));
        return MPX_ERR_UNSUPPORTED;
    }
    return MPX_OK;
}

extern "C" int cuda_fused_update(void *vbe, mpx_fused_update *f)
{
    cuda_be *be = (cuda_be *)vbe;
    const size_t before_1_18 = offsetof(mpx_fused_update, add_in_place);
    if (!f || f->size < before_1_18)
        return CUDA_FAIL(be, "cuda fused_update: argument struct of %u bytes, expected at least %zu",
                         f ? f->size : 0u, before_1_18);
    /* the caller's struct as far as it goes (an optimizer built before 1.18 has no add_in_place) */
    mpx_fused_update k;
    memset(&k, 0, sizeof k);
    memcpy(&k, f, f->size < sizeof k ? f->size : sizeof k);
    if (k.rule == MPX_FUSED_LAMB) k.add_in_place = 0;
    CUDA_CHECK(be, "fused_update", "param", k.param, k.n);
    if (k.add_in_place && k.param.t != MPX_F32)
        return CUDA_FAIL(be, "cuda fused_update: add_in_place into a %s param (fp32 only)", mpx_dtype_name(k.param.t));
    if (k.n && (!k.grad || (!k.update && !k.add_in_place))) return CUDA_FAIL(be, "cuda fused_update: grad or update is NULL");
    f->norms[0] = f->norms[1] = 0.0;
    if (!k.n) return MPX_OK;
    unsigned blocks = cuda_blocks(k.n);
    switch (k.rule) {
    case MPX_FUSED_ADAM:
        MPX_TRY(state_ok(be, &k, 0));
        MPX_TRY(state_ok(be, &k, 1));
        k_adam<<<blocks, CUDA_THREADS, 0, be->stream>>>(k);
        CUDA_LAUNCHED(be, "fused_update (adam)");
        return MPX_OK;
    case MPX_FUSED_SGD:
        if (k.momentum != 0.0f) MPX_TRY(state_ok(be, &k, 0));
        k_sgd<<<blocks, CUDA_THREADS, 0, be->stream>>>(k);
        CUDA_LAUNCHED(be, "fused_update (sgd)");
        return MPX_OK;
    case MPX_FUSED_LAMB: {
        MPX_TRY(state_ok(be, &k, 0));
        MPX_TRY(state_ok(be, &k, 1));
        double *d = (double *)cuda_ws(be, 3, 2 * (size_t)blocks * sizeof(double));
        double *h = (double *)cuda_hws(be, 1, 2 * (size_t)blocks * sizeof(double));
        if (!d || !h) return MPX_ERR_NOMEM;
        k_lamb<<<blocks, CUDA_THREADS, 0, be->stream>>>(k, d);
        CUDA_LAUNCHED(be, "fused_update (lamb)");
        CUDA_TRY(be, cudaMemcpyAsync(h, d, 2 * (size_t)blocks * sizeof(double), cudaMemcpyDeviceToHost, be->stream),
                 "fused_update (lamb norms to host)");
        CUDA_SYNC(be, "fused_update (lamb)");
        for (unsigned b = 0; b < blocks; b++) {
            f->norms[0] += h[2 * b];
            f->norms[1] += h[2 * b + 1];
        }
        return MPX_OK;
    }
    }
    (void)CUDA_FAIL(be, "cuda fused_update: unknown rule %d", (int)f->rule);
    return MPX_ERR_UNSUPPORTED;
}
