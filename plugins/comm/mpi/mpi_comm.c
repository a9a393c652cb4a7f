/* comm/mpi: data-parallel ranks as MPI processes (OpenMPI). With comm/nccl (its bootstrap)
 * the only part of mpx that links MPI. Buffers are read and written in place, so the backend's memory must be
 * host-addressable (the cpu backend's is).
 *
 * All-reduce and reduce-scatter run the ring of ring.h (NCCL's order, a rounding per hop
 * in the buffer's dtype), not MPI_Allreduce: MPI leaves the order of a reduction to the
 * implementation, and the point of precision.comm_dtype is the rounding of that order.
 * The host-side all-reduce (norms, overflow flags) gathers every rank's values and sums
 * them in rank order, so every rank gets bitwise the same double. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "ring.h"

typedef struct mpi_comm {
    mpx_env *env;
    mpx_ring ring;
    int we_initialised;
    double *host_tmp;
    size_t host_cap;
} mpi_comm;

static int mpi_fail(mpi_comm *c, const char *what, int rc)
{
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return MPX_FAIL(c->env, "comm/mpi: %s failed on rank %d of %d: %s", what, c->ring.rank, c->ring.world, msg);
}

static int mpi_create(mpx_env *env, void **self)
{
    mpi_comm *c = calloc(1, sizeof *c);
    if (!c) return MPX_ERR_NOMEM;
    c->env = env;
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        if (MPI_Init(NULL, NULL) != MPI_SUCCESS) {
            free(c);
            return MPX_FAIL(env, "comm/mpi: MPI_Init failed (start the ranks with mpirun, or mpx run --ranks N)");
        }
        c->we_initialised = 1;
    }
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &c->ring.comm);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_set_errhandler(c->ring.comm, MPI_ERRORS_RETURN);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(c->ring.comm, &c->ring.rank);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_size(c->ring.comm, &c->ring.world);
    if (rc != MPI_SUCCESS) {
        int r = mpi_fail(c, "setting up the communicator", rc);
        free(c);
        return r;
    }
    *self = c;
    return MPX_OK;
}

static void mpi_destroy(void *self)
{
    mpi_comm *c = self;
    if (c->ring.tmp) c->env->host->release(c->env, c->ring.tmp);
    free(c->host_tmp);
    MPI_Comm_free(&c->ring.comm);
    if (c->we_initialised) MPI_Finalize();
    free(c);
}

static int mpi_rank(void *self) { return ((mpi_comm *)self)->ring.rank; }
static int mpi_world(void *self) { return ((mpi_comm *)self)->ring.world; }

/* The ring's receive buffer, grown to one chunk of `bytes`. */
static int ensure_tmp(mpi_comm *c, size_t bytes)
{
    if (bytes <= c->ring.tmp_bytes) return MPX_OK;
    if (c->ring.tmp) c->env->host->release(c->env, c->ring.tmp);
    c->ring.tmp = c->env->host->alloc(c->env, MPX_ROLE_SCRATCH, bytes, "comm/mpi ring chunk");
    c->ring.tmp_bytes = c->ring.tmp ? bytes : 0;
    return c->ring.tmp ? MPX_OK : MPX_ERR_NOMEM;
}

/* Reductions sum, so they take fp32, fp16 and bf16; the copies (allgather, broadcast)
 * move any dtype's bytes, 8-bit formats included (`copy`). */
static int check_args_(mpi_comm *c, const char *what, mpx_arg a, size_t n, int copy)
{
    if (copy ? mpx_dtype_size(a.t) == 0 : a.t != MPX_F32 && a.t != MPX_F16 && a.t != MPX_BF16)
        return MPX_FAIL(c->env, "comm/mpi: %s of %s buffers is not supported (%s)", what, mpx_dtype_name(a.t),
                        copy ? "a dtype of 1, 2 or 4 bytes" : "sums in fp32, fp16 or bf16");
    if (n > (size_t)INT_MAX) return MPX_FAIL(c->env, "comm/mpi: %s of %zu elements (at most %d)", what, n, INT_MAX);
    if (n && !a.p) return MPX_FAIL(c->env, "comm/mpi: %s of a NULL buffer", what);
    return MPX_OK;
}

static int check_args(mpi_comm *c, const char *what, mpx_arg a, size_t n) { return check_args_(c, what, a, n, 0); }

static int mpi_allreduce(void *self, mpx_arg buf, size_t n, mpx_reduce_op op)
{
    mpi_comm *c = self;
    MPX_TRY(check_args(c, "allreduce", buf, n));
    if (c->ring.world == 1 || n == 0) return MPX_OK;
    size_t chunk = (n + (size_t)c->ring.world - 1) / (size_t)c->ring.world;
    MPX_TRY(ensure_tmp(c, chunk * mpx_dtype_size(buf.t)));
    int rc = mpx_ring_reduce_scatter(&c->ring, buf.p, buf.t, n, chunk, op);
    if (rc == MPI_SUCCESS) rc = mpx_ring_allgather(&c->ring, buf.p, buf.t, n, chunk);
    return rc == MPI_SUCCESS ? MPX_OK : mpi_fail(c, "allreduce", rc);
}

/* send (world × n_per_rank) is the ring's working memory: afterwards it holds partial
 * sums outside this rank's slice. */
static int mpi_reduce_scatter(void *self, mpx_arg send, mpx_arg recv, size_t n_per_rank)
{
    mpi_comm *c = self;
    size_t n = n_per_rank * (size_t)c->ring.world, sz = mpx_dtype_size(send.t);
    MPX_TRY(check_args(c, "reduce_scatter", send, n));
    if (recv.t != send.t)
        return MPX_FAIL(c->env, "comm/mpi: reduce_scatter from %s into %s", mpx_dtype_name(send.t), mpx_dtype_name(recv.t));
    MPX_TRY(ensure_tmp(c, n_per_rank * sz));
    int rc = mpx_ring_reduce_scatter(&c->ring, send.p, send.t, n, n_per_rank, MPX_SUM);
    if (rc != MPI_SUCCESS) return mpi_fail(c, "reduce_scatter", rc);
    char *mine = (char *)send.p + (size_t)c->ring.rank * n_per_rank * sz;
    if (recv.p != mine) memmove(recv.p, mine, n_per_rank * sz);
    return MPX_OK;
}

static int mpi_allgather(void *self, mpx_arg send, mpx_arg recv, size_t n_per_rank)
{
    mpi_comm *c = self;
    size_t n = n_per_rank * (size_t)c->ring.world, sz = mpx_dtype_size(recv.t);
    MPX_TRY(check_args_(c, "allgather", recv, n, 1));
    if (recv.t != send.t)
        return MPX_FAIL(c->env, "comm/mpi: allgather from %s into %s", mpx_dtype_name(send.t), mpx_dtype_name(recv.t));
    char *mine = (char *)recv.p + (size_t)c->ring.rank * n_per_rank * sz;
    if (send.p != mine) memmove(mine, send.p, n_per_rank * sz);
    int rc = mpx_ring_allgather(&c->ring, recv.p, recv.t, n, n_per_rank);
    return rc == MPI_SUCCESS ? MPX_OK : mpi_fail(c, "allgather", rc);
}

static int mpi_broadcast(void *self, mpx_arg buf, size_t n, int root)
{
    mpi_comm *c = self;
    MPX_TRY(check_args_(c, "broadcast", buf, n, 1));
    int rc = MPI_Bcast(buf.p, (int)(n * mpx_dtype_size(buf.t)), MPI_BYTE, root, c->ring.comm);
    return rc == MPI_SUCCESS ? MPX_OK : mpi_fail(c, "broadcast", rc);
}

static int mpi_barrier(void *self)
{
    mpi_comm *c = self;
    int rc = MPI_Barrier(c->ring.comm);
    return rc == MPI_SUCCESS ? MPX_OK : mpi_fail(c, "barrier", rc);
}

static int mpi_allreduce_host(void *self, double *vals, size_t n, mpx_reduce_op op)
{
    mpi_comm *c = self;
    size_t w = (size_t)c->ring.world;
    if (w == 1 || n == 0) return MPX_OK;
    if (n * w > (size_t)INT_MAX) return MPX_FAIL(c->env, "comm/mpi: host allreduce of %zu values", n);
    if (n * w > c->host_cap) {
        double *v = realloc(c->host_tmp, n * w * sizeof *v);
        if (!v) return MPX_FAIL(c->env, "comm/mpi: out of memory for a host allreduce of %zu values", n);
        c->host_tmp = v;
        c->host_cap = n * w;
    }
    int rc = MPI_Allgather(vals, (int)n, MPI_DOUBLE, c->host_tmp, (int)n, MPI_DOUBLE, c->ring.comm);
    if (rc != MPI_SUCCESS) return mpi_fail(c, "host allreduce", rc);
    for (size_t i = 0; i < n; i++) {
        double acc = c->host_tmp[i];
        for (size_t r = 1; r < w; r++) {
            double v = c->host_tmp[r * n + i];
            acc = op == MPX_SUM ? acc + v : (v > acc || v != v ? v : acc);
        }
        vals[i] = acc;
    }
    return MPX_OK;
}

static void mpi_abort(void *self, int code)
{
    (void)self;
    MPI_Abort(MPI_COMM_WORLD, code ? code : 1);
}

static const mpx_comm_vtable mpi_vtable = {
    .size = sizeof(mpx_comm_vtable),
    .create = mpi_create, .destroy = mpi_destroy,
    .rank = mpi_rank, .world = mpi_world,
    .allreduce = mpi_allreduce, .reduce_scatter = mpi_reduce_scatter, .allgather = mpi_allgather,
    .broadcast = mpi_broadcast, .barrier = mpi_barrier,
    .allreduce_host = mpi_allreduce_host,
    .abort = mpi_abort,
};

static const mpx_incompat mpi_incompat[] = {
    { "backend/cuda", "comm/mpi reads and writes the buffers in place on the host; device memory needs comm/nccl" },
};

static const mpx_plugin_desc mpi_desc = {
    MPX_DESC_HEADER,
    .kind = MPX_KIND_COMM,
    .name = "mpi",
    .version = "1.1.0",
    .summary = "ranks as MPI processes (OpenMPI); NCCL-order ring all-reduce, a rounding per hop in 16 bits",
    .incompat = mpi_incompat,
    .n_incompat = MPX_COUNT(mpi_incompat),
    .vtable = &mpi_vtable,
};

MPX_PLUGIN_ENTRY { (void)host; return &mpi_desc; }
