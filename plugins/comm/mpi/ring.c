#include "ring.h"

#include <string.h>

#include "mpx/numerics.h"

static float load(const void *p, mpx_dtype t, size_t i)
{
    switch (t) {
    case MPX_F16: return mpx_f16_to_f32(((const uint16_t *)p)[i]);
    case MPX_BF16: return mpx_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

static void store(void *p, mpx_dtype t, size_t i, float v)
{
    switch (t) {
    case MPX_F16: ((uint16_t *)p)[i] = mpx_f32_to_f16(v); break;
    case MPX_BF16: ((uint16_t *)p)[i] = mpx_f32_to_bf16(v); break;
    default: ((float *)p)[i] = v; break;
    }
}

/* One fp32 add of two 16-bit values, then one rounding: for fp16 (p = 11) and bf16
 * (p = 8) fp32 (p = 24 >= 2p + 2) makes the double rounding innocuous, so this is the
 * correctly rounded 16-bit sum, as a 16-bit add (NCCL's __hadd) gives. */
void mpx_ring_reduce_into(void *dst, const void *src, mpx_dtype t, size_t n, mpx_reduce_op op)
{
    if (t == MPX_F32 && op == MPX_SUM) {
        float *d = dst;
        const float *s = src;
        for (size_t i = 0; i < n; i++) d[i] += s[i];
        return;
    }
    for (size_t i = 0; i < n; i++) {
        float a = load(dst, t, i), b = load(src, t, i);
        float v = op == MPX_SUM ? a + b : (a != a || b != b) ? a + b : (a > b ? a : b);
        store(dst, t, i, v);
    }
}

/* the wire type: fp32 as floats, 16-bit as 16-bit words, 8-bit formats as bytes */
static MPI_Datatype mpi_type(mpx_dtype t)
{
    size_t sz = mpx_dtype_size(t);
    return t == MPX_F32 ? MPI_FLOAT : sz == 2 ? MPI_UINT16_T : MPI_UINT8_T;
}

static size_t chunk_len(size_t n, size_t chunk, int c)
{
    size_t b = (size_t)c * chunk;
    if (b >= n) return 0;
    return n - b < chunk ? n - b : chunk;
}

static int mod(int a, int w) { return ((a % w) + w) % w; }

int mpx_ring_reduce_scatter(mpx_ring *r, void *buf, mpx_dtype t, size_t n, size_t chunk, mpx_reduce_op op)
{
    size_t sz = mpx_dtype_size(t);
    char *b = buf;
    int right = mod(r->rank + 1, r->world), left = mod(r->rank - 1, r->world);
    for (int step = 0; step < r->world - 1; step++) {
        int send_c = mod(r->rank - 1 - step, r->world), recv_c = mod(r->rank - 2 - step, r->world);
        size_t ns = chunk_len(n, chunk, send_c), nr = chunk_len(n, chunk, recv_c);
        int rc = MPI_Sendrecv(b + (size_t)send_c * chunk * sz, (int)ns, mpi_type(t), right, 0,
                              r->tmp, (int)nr, mpi_type(t), left, 0, r->comm, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return rc;
        mpx_ring_reduce_into(b + (size_t)recv_c * chunk * sz, r->tmp, t, nr, op);
    }
    return MPI_SUCCESS;
}

int mpx_ring_allgather(mpx_ring *r, void *buf, mpx_dtype t, size_t n, size_t chunk)
{
    size_t sz = mpx_dtype_size(t);
    char *b = buf;
    int right = mod(r->rank + 1, r->world), left = mod(r->rank - 1, r->world);
    for (int step = 0; step < r->world - 1; step++) {
        int send_c = mod(r->rank - step, r->world), recv_c = mod(r->rank - 1 - step, r->world);
        size_t ns = chunk_len(n, chunk, send_c), nr = chunk_len(n, chunk, recv_c);
        int rc = MPI_Sendrecv(b + (size_t)send_c * chunk * sz, (int)ns, mpi_type(t), right, 1,
                              b + (size_t)recv_c * chunk * sz, (int)nr, mpi_type(t), left, 1,
                              r->comm, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return rc;
    }
    return MPI_SUCCESS;
}
