/* Embedding gather / scatter-add, the reductions reported to the host (sum of squares,
 * count of non-finite values), the id checks and the attention op's pointer arrays. The
 * ids are checked against the table on the device (cuda_check_ids: the gather and the
 * scatter skip an id outside, the next synchronisation reports it); the scatter-add groups them on the
 * device exactly as the cpu backend groups them: each table row adds its dy rows in
 * position order and is rounded once, so the result does not depend on scheduling (no
 * atomics). */
#include "cuda_device.cuh"

#include <cub/device/device_radix_sort.cuh>
#include <stdint.h>
#include <stdlib.h>

/* ---- id checks ---- */

/* Each value outside [0, bound): the lowest (position << 32 | value) of this kind and the
 * bound, for cuda_sync_ to report. */
__global__ void k_check_ids(const int32_t *ids, size_t n, size_t bound, unsigned long long *bad, int kind)
{
    GRID_STRIDE(i, n) {
        const int32_t v = ids[i];
        if (v < 0 || (size_t)v >= bound) {
            const unsigned long long packed = ((unsigned long long)i << 32) | (uint32_t)v;
            /* the bound of the call that holds the lowest position (calls run in stream order) */
            if (atomicMin(&bad[kind], packed) > packed) bad[CUDA_BAD_KINDS + kind] = bound;
        }
    }
}

extern "C" int cuda_check_ids(cuda_be *be, const int32_t *ids, size_t n, size_t bound, int kind)
{
    if (n > (size_t)UINT32_MAX) return CUDA_FAIL(be, "cuda: %zu ids in one call (at most 2^32 - 1)", n);
    if (!n) return MPX_OK;
    k_check_ids<<<cuda_blocks(n), CUDA_THREADS, 0, be->stream>>>(ids, n, bound, be->bad, kind);
    CUDA_LAUNCHED(be, "id check");
    return MPX_OK;
}

/* ---- embeddings ---- */

/* an id outside the table gives a zero row (and an error at the next synchronisation) */
__global__ void k_gather(const int32_t *ids, size_t n_ids, size_t rows, const void *table, mpx_dtype tt, size_t dim,
                         void *y, mpx_dtype yt)
{
    GRID_STRIDE(i, n_ids * dim) {
        size_t r = i / dim, c = i % dim;
        const int32_t id = ids[r];
        dev_st(y, yt, i, id >= 0 && (size_t)id < rows ? dev_ld(table, tt, (size_t)id * dim + c) : 0.0f);
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
    MPX_TRY(cuda_check_ids(be, ids, n_ids, table_rows, CUDA_BAD_EMB_FWD));
    k_gather<<<cuda_blocks(n_ids * dim), CUDA_THREADS, 0, be->stream>>>(ids, n_ids, table_rows, table.p, table.t, dim,
                                                                       y.p, y.t);
    CUDA_LAUNCHED(be, "embedding_fwd");
    return MPX_OK;
}

/* The scatter-add groups the ids on the device: a stable radix sort of (id, position)
 * pairs by id (CUB), so each id's positions stay in ascending order, and then one thread
 * per (first position of an id, column) adds the table value and the id's dy rows in
 * that order, in fp32, rounding once: the cpu backend's grouping and order (cpu_misc.c),
 * hence its bits. The rows' loads are issued EMB_AHEAD at a time before they are added
 * in order: an id that takes many rows (the token-type table: two ids over the whole
 * batch) is one long chain of adds, and its loads need not wait for each other. */
#define EMB_AHEAD 16

/* The sort's keys and values: each id, or `rows` for one outside the table (so all of
 * those sort together after the valid ids, which they cannot split into two groups), and
 * its position. */
__global__ void k_sort_input(const int32_t *ids, size_t n, size_t rows, uint32_t *keys, uint32_t *pos)
{
    GRID_STRIDE(i, n) {
        const int32_t id = ids[i];
        keys[i] = id >= 0 && (size_t)id < rows ? (uint32_t)id : (uint32_t)rows;
        pos[i] = (uint32_t)i;
    }
}

__global__ void k_scatter_sorted(const uint32_t *ids, const uint32_t *pos, size_t n, size_t rows, size_t dim,
                                 const void *dy, mpx_dtype dyt, void *table, mpx_dtype tt)
{
    GRID_STRIDE(i, n * dim) {
        size_t k = i / dim, c = i % dim;
        const uint32_t id = ids[k];
        if (id >= rows) continue;   /* outside the table (k_sort_input): reported at the next synchronisation */
        if (k > 0 && ids[k - 1] == id) continue;   /* not the id's first row */
        size_t e = k + 1;
        while (e < n && ids[e] == id) e++;
        const size_t dst = (size_t)id * dim + c;
        float acc = dev_ld(table, tt, dst);
        size_t j = k;
        for (; j + EMB_AHEAD <= e; j += EMB_AHEAD) {
            float v[EMB_AHEAD];
#pragma unroll
            for (int q = 0; q < EMB_AHEAD; q++) v[q] = dev_ld(dy, dyt, (size_t)pos[j + q] * dim + c);
#pragma unroll
            for (int q = 0; q < EMB_AHEAD; q++) acc += v[q];
        }
        for (; j < e; j++) acc += dev_ld(dy, dyt, (size_t)pos[j] * dim + c);
        dev_st(table, tt, dst, acc);
    }
}

extern "C" int cuda_embedding_bwd(void *vbe, const int32_t *ids, size_t n_ids, mpx_arg dy, mpx_arg dtable,
                                  size_t table_rows, size_t dim)
{
    cuda_be *be = (cuda_be *)vbe;
    CUDA_CHECK(be, "embedding_bwd", "dy", dy, n_ids * dim);
    CUDA_CHECK(be, "embedding_bwd", "dtable", dtable, n_ids * dim);
    if (!n_ids || !dim) return MPX_OK;
    if (!ids) return CUDA_FAIL(be, "cuda embedding_bwd: ids is NULL");
    if (n_ids > (size_t)INT32_MAX || table_rows >= (size_t)UINT32_MAX)
        return CUDA_FAIL(be, "cuda embedding_bwd: %zu ids into %zu rows (at most 2^31 - 1 ids and 2^32 - 2 rows)", n_ids,
                         table_rows);
    /* the ids are checked on the device (the next synchronisation names an id outside and its position) */
    MPX_TRY(cuda_check_ids(be, ids, n_ids, table_rows, CUDA_BAD_EMB_BWD));
    int bits = 1;   /* the sort looks at the bits a key up to table_rows (an id outside) can have */
    while (bits < 32 && ((size_t)1 << bits) <= table_rows) bits++;
    const int n = (int)n_ids;
    size_t temp = 0;
    if (cub::DeviceRadixSort::SortPairs(nullptr, temp, (const uint32_t *)nullptr, (uint32_t *)nullptr,
                                        (const uint32_t *)nullptr, (uint32_t *)nullptr, n, 0, bits,
                                        be->stream) != cudaSuccess)
        return CUDA_FAIL(be, "cuda embedding_bwd: cub::DeviceRadixSort::SortPairs sizing failed for %d ids", n);
    /* slot 4: keys in, positions in, sorted ids, sorted positions, then CUB's temporary storage */
    const size_t words = ((4 * n_ids + 63) / 64) * 64;
    uint32_t *w = (uint32_t *)cuda_ws(be, 4, words * sizeof(uint32_t) + temp);
    if (!w) return MPX_ERR_NOMEM;
    uint32_t *keys = w, *pos_in = w + n_ids, *ids_out = w + 2 * n_ids, *pos_out = w + 3 * n_ids;
    k_sort_input<<<cuda_blocks(n_ids), CUDA_THREADS, 0, be->stream>>>(ids, n_ids, table_rows, keys, pos_in);
    CUDA_LAUNCHED(be, "embedding_bwd (keys and positions)");
    CUDA_TRY(be, cub::DeviceRadixSort::SortPairs(w + words, temp, keys, ids_out, pos_in, pos_out, n, 0, bits, be->stream),
             "embedding_bwd (cub::DeviceRadixSort::SortPairs)");
    k_scatter_sorted<<<cuda_blocks(n_ids * dim), CUDA_THREADS, 0, be->stream>>>(ids_out, pos_out, n_ids, table_rows, dim, dy.p,
                                                                               dy.t, dtable.p, dtable.t);
    CUDA_LAUNCHED(be, "embedding_bwd");
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
