/* Embedding gather / scatter-add, the reductions reported to the host (sum of squares,
 * count of non-finite values) and the attention op's pointer arrays. The ids are read
 * back to the host, checked against the table and, for the scatter-add, grouped there
 * exactly as the cpu backend groups them: each table row adds its dy rows in position
 * order and is rounded once, so the result does not depend on scheduling (no atomics). */
#include "cuda_device.cuh"

#include <stdlib.h>

/* ---- embeddings ---- */

__global__ void k_gather(const int32_t *ids, size_t n_ids, const void *table, mpx_dtype tt, size_t dim,
                         void *y, mpx_dtype yt)
{
    GRID_STRIDE(i, n_ids * dim) {
        size_t r = i / dim, c = i % dim;
        dev_st(y, yt, i, dev_ld(table, tt, (size_t)ids[r] * dim + c));
    }
}

extern "C" int cuda_embedding_fwd(void *vbe, const int32_t *ids, size_t n_ids, mpx_arg table,
                                  size_t table_rows, size_t dim, mpx_arg y)
{
    cuda_be *be = (cuda_be *)vbe;
    CUDA_CHECK(be, "embedding_fwd", "table", table, n_ids * dim);
    CUDA_CHECK(be, "embedding_fwd", "y", y, n_ids * dim);
    if (!n_ids || !dim) return MPX_OK;
    if (!ids) return CUDA_FAIL(be, "cuda embedding_fwd: ids is NULL");
    if (!cuda_ids_to_host(be, ids, n_ids, table_rows, "embedding_fwd", "id", 0)) return MPX_ERR;
    k_gather<<<cuda_blocks(n_ids * dim), CUDA_THREADS, 0, be->stream>>>(ids, n_ids, table.p, table.t, dim, y.p, y.t);
    CUDA_LAUNCHED(be, "embedding_fwd");
    return MPX_OK;
}

/* One thread per (group, column): the table value plus the group's dy rows in order. */
__global__ void k_scatter_groups(const int32_t *ids, const uint64_t *order, const uint64_t *starts,
                                 size_t n_groups, size_t dim, const void *dy, mpx_dtype dyt,
                                 void *table, mpx_dtype tt)
{
    GRID_STRIDE(i, n_groups * dim) {
        size_t g = i / dim, c = i % dim;
        size_t first = (size_t)starts[g], last = (size_t)starts[g + 1];
        size_t dst = (size_t)ids[order[first]] * dim + c;
        float acc = dev_ld(table, tt, dst);
        for (size_t k = first; k < last; k++) acc += dev_ld(dy, dyt, (size_t)order[k] * dim + c);
        dev_st(table, tt, dst, acc);
    }
}

typedef struct id_pos { int32_t id; size_t pos; } id_pos;

static int by_id_then_pos(const void *a, const void *b)
{
    const id_pos *x = (const id_pos *)a, *y = (const id_pos *)b;
    if (x->id != y->id) return x->id < y->id ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

extern "C" int cuda_embedding_bwd(void *vbe, const int32_t *ids, size_t n_ids, mpx_arg dy, mpx_arg dtable,
                                  size_t table_rows, size_t dim)
{
    cuda_be *be = (cuda_be *)vbe;
    CUDA_CHECK(be, "embedding_bwd", "dy", dy, n_ids * dim);
    CUDA_CHECK(be, "embedding_bwd", "dtable", dtable, n_ids * dim);
    if (!n_ids || !dim) return MPX_OK;
    if (!ids) return CUDA_FAIL(be, "cuda embedding_bwd: ids is NULL");
    const int32_t *h_ids = cuda_ids_to_host(be, ids, n_ids, table_rows, "embedding_bwd", "id", 0);
    if (!h_ids) return MPX_ERR;
    id_pos *pairs = (id_pos *)malloc(n_ids * sizeof *pairs);
    uint64_t *plan = (uint64_t *)cuda_hws(be, 1, (2 * n_ids + 1) * sizeof(uint64_t));
    if (!pairs || !plan) {
        free(pairs);
        return CUDA_FAIL(be, "cuda embedding_bwd: out of memory sorting %zu ids", n_ids);
    }
    for (size_t i = 0; i < n_ids; i++) pairs[i] = (id_pos){ h_ids[i], i };
    qsort(pairs, n_ids, sizeof *pairs, by_id_then_pos);
    uint64_t *order = plan, *starts = plan + n_ids;
    size_t n_groups = 0;
    for (size_t k = 0; k < n_ids; k++) {
        order[k] = pairs[k].pos;
        if (k == 0 || pairs[k].id != pairs[k - 1].id) starts[n_groups++] = k;
    }
    starts[n_groups] = n_ids;
    free(pairs);
    size_t bytes = (n_ids + n_groups + 1) * sizeof(uint64_t);
    uint64_t *d_plan = (uint64_t *)cuda_ws(be, 4, bytes);
    if (!d_plan) return MPX_ERR_NOMEM;
    /* order, then starts right after it */
    CUDA_TRY(be, cudaMemcpyAsync(d_plan, plan, n_ids * sizeof(uint64_t), cudaMemcpyHostToDevice, be->stream), "embedding_bwd (order)");
    CUDA_TRY(be, cudaMemcpyAsync(d_plan + n_ids, starts, (n_groups + 1) * sizeof(uint64_t), cudaMemcpyHostToDevice, be->stream), "embedding_bwd (groups)");
    k_scatter_groups<<<cuda_blocks(n_groups * dim), CUDA_THREADS, 0, be->stream>>>(
        ids, d_plan, d_plan + n_ids, n_groups, dim, dy.p, dy.t, dtable.p, dtable.t);
    CUDA_LAUNCHED(be, "embedding_bwd");
    /* the host plan is pageable memory the next call may overwrite: finish the copies */
    CUDA_SYNC(be, "embedding_bwd");
    return MPX_OK;
}

/* ---- reductions ---- */

/* One warp per chunk of CUDA_SUM_CHUNK elements: the cpu backend's 8-lane fp32 sum. */
__global__ void k_sumsq_chunks(const void *x, mpx_dtype xt, size_t n, size_t chunks, double *partial)
{
    for (size_t ch = (size_t)blockIdx.x * (CUDA_THREADS / 32) + threadIdx.x / 32; ch < chunks;
         ch += (size_t)gridDim.x * (CUDA_THREADS / 32)) {
        size_t b = ch * CUDA_SUM_CHUNK, e = b + CUDA_SUM_CHUNK < n ? b + CUDA_SUM_CHUNK : n;
        float s = warp_row_sum8(e - b, [&](size_t c) { float v = dev_ld(x, xt, b + c); return v * v; });
        if ((threadIdx.x & 31u) == 0) partial[ch] = (double)s;
    }
}

extern "C" int cuda_sum_squares(void *vbe, mpx_arg x, size_t n, double *out)
{
    cuda_be *be = (cuda_be *)vbe;
    CUDA_CHECK(be, "sum_squares", "x", x, n);
    if (!out) return CUDA_FAIL(be, "cuda sum_squares: out is NULL");
    size_t chunks = (n + CUDA_SUM_CHUNK - 1) / CUDA_SUM_CHUNK;
    if (!chunks) { *out = 0.0; return MPX_OK; }
    double *d = (double *)cuda_ws(be, 3, chunks * sizeof(double));
    double *h = (double *)cuda_hws(be, 1, chunks * sizeof(double));
    if (!d || !h) return MPX_ERR_NOMEM;
    size_t blocks = (chunks + CUDA_THREADS / 32 - 1) / (CUDA_THREADS / 32);
    k_sumsq_chunks<<<(unsigned)(blocks < 65535u * 64u ? blocks : 65535u * 64u), CUDA_THREADS, 0, be->stream>>>(
        x.p, x.t, n, chunks, d);
    CUDA_LAUNCHED(be, "sum_squares");
    CUDA_TRY(be, cudaMemcpyAsync(h, d, chunks * sizeof(double), cudaMemcpyDeviceToHost, be->stream), "sum_squares (to host)");
    CUDA_SYNC(be, "sum_squares");
    double total = 0.0;     /* chunks in order, as the cpu backend */
    for (size_t ch = 0; ch < chunks; ch++) total += h[ch];
    *out = total;
    return MPX_OK;
}

/* Non-finite: all exponent bits set, tested on the widened fp32 bits. */
__global__ void k_nonfinite(const void *x, mpx_dtype xt, size_t n, unsigned long long *count)
{
    unsigned long long mine = 0;
    GRID_STRIDE(i, n) mine += (__float_as_uint(dev_ld(x, xt, i)) & 0x7f800000u) == 0x7f800000u;
    if (mine) atomicAdd(count, mine);
}

extern "C" int cuda_count_nonfinite(void *vbe, mpx_arg x, size_t n, size_t *out)
{
    cuda_be *be = (cuda_be *)vbe;
    CUDA_CHECK(be, "count_nonfinite", "x", x, n);
    if (!out) return CUDA_FAIL(be, "cuda count_nonfinite: out is NULL");
    if (!n) { *out = 0; return MPX_OK; }
    unsigned long long *d = (unsigned long long *)cuda_ws(be, 5, sizeof *d);
    if (!d) return MPX_ERR_NOMEM;
    unsigned long long h = 0;
    CUDA_TRY(be, cudaMemsetAsync(d, 0, sizeof *d, be->stream), "count_nonfinite");
    k_nonfinite<<<cuda_blocks(n), CUDA_THREADS, 0, be->stream>>>(x.p, x.t, n, d);
    CUDA_LAUNCHED(be, "count_nonfinite");
    CUDA_TRY(be, cudaMemcpyAsync(&h, d, sizeof h, cudaMemcpyDeviceToHost, be->stream), "count_nonfinite (to host)");
    CUDA_SYNC(be, "count_nonfinite");
    *out = (size_t)h;
    return MPX_OK;
}

/* ---- the attention op's pointer arrays (cuda_attention.c) ---- */

__global__ void k_fill_pointers(void **out, const char *base, long long per_example, long long per_head, int batch,
                                int heads)
{
    GRID_STRIDE(i, (size_t)batch * (size_t)heads) {
        long long b = (long long)(i / (size_t)heads), h = (long long)(i % (size_t)heads);
        out[i] = (void *)(base + b * per_example + h * per_head);
    }
}

extern "C" int cuda_fill_pointers(cuda_be *be, void **out, const void *base, long long per_example,
                                  long long per_head, int batch, int heads)
{
    size_t n = (size_t)batch * (size_t)heads;
    if (!n) return MPX_OK;
    k_fill_pointers<<<cuda_blocks(n), CUDA_THREADS, 0, be->stream>>>(out, (const char *)base, per_example, per_head,
                                                                    batch, heads);
    CUDA_LAUNCHED(be, "attention pointer arrays");
    return MPX_OK;
}
