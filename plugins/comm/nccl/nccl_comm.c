/* comm/nccl: data-parallel GPU ranks, one process per GPU, collectives over NCCL on
 * device memory (the cuda backend's). The ranks are MPI processes (mpirun, or
 * mpx run --ranks N): rank 0 makes the NCCL unique id and MPI broadcasts it
 * (ncclCommInitRank's documented bootstrap). comm/mpi is a separate plugin, so this one
 * links MPI itself for the bootstrap and for the host-side all-reduce.
 *
 * Collectives run on the legacy default stream, which orders with the cuda backend's
 * (blocking) stream both ways: the backend's kernels before a collective finish before
 * it starts, and those after it wait for it. A 16-bit all-reduce is NCCL's, a rounding
 * per hop in the buffer's dtype (what precision.comm_dtype asks for).
 * The host-side all-reduce (norms, overflow flags) gathers every rank's doubles and
 * combines them in rank order, so every rank gets bitwise the same value. */
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include "mpx/mpx.h"

typedef struct nccl_comm {
    mpx_env *env;
    MPI_Comm mpi;
    int rank, world, device, we_initialised;
    ncclComm_t nccl;
    double *host_tmp;
    size_t host_cap;
} nccl_comm;

#define NCCL_STREAM cudaStreamLegacy

static int nccl_fail(nccl_comm *c, const char *what, ncclResult_t r)
{
    const char *last = ncclGetLastError(c->nccl);
    return MPX_FAIL(c->env, "comm/nccl: %s failed on rank %d of %d (device %d): %s%s%s", what, c->rank, c->world,
                    c->device, ncclGetErrorString(r), last && *last ? ": " : "", last ? last : "");
}

static int mpi_fail(nccl_comm *c, const char *what, int rc)
{
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return MPX_FAIL(c->env, "comm/nccl: %s failed on rank %d of %d: %s", what, c->rank, c->world, msg);
}

static void nccl_destroy(void *self)
{
    nccl_comm *c = self;
    if (!c) return;
    if (c->nccl) ncclCommDestroy(c->nccl);
    if (c->mpi != MPI_COMM_NULL) MPI_Comm_free(&c->mpi);
    if (c->we_initialised) MPI_Finalize();
    free(c->host_tmp);
    free(c);
}

static int nccl_create(mpx_env *env, void **self)
{
    void *be = NULL;
    const mpx_ops *ops = env->host->ops(env, &be);
    if (!ops || !MPX_OPS_HAS(ops, flags) || !(ops->flags & MPX_OPS_DEVICE_MEMORY))
        return MPX_FAIL(env, "comm/nccl moves device memory: it needs a GPU backend (backend.plugin = \"cuda\")");
    nccl_comm *c = calloc(1, sizeof *c);
    if (!c) return MPX_ERR_NOMEM;
    c->env = env;
    c->mpi = MPI_COMM_NULL;
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        if (MPI_Init(NULL, NULL) != MPI_SUCCESS) {
            free(c);
            return MPX_FAIL(env, "comm/nccl: MPI_Init failed (start the ranks with mpirun, or mpx run --ranks N)");
        }
        c->we_initialised = 1;
    }
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &c->mpi);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_set_errhandler(c->mpi, MPI_ERRORS_RETURN);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(c->mpi, &c->rank);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_size(c->mpi, &c->world);
    if (rc != MPI_SUCCESS) {
        int r = mpi_fail(c, "setting up the MPI communicator", rc);
        nccl_destroy(c);
        return r;
    }
    /* the backend chose this process's device when it was created */
    cudaError_t ce = cudaGetDevice(&c->device);
    if (ce != cudaSuccess) {
        int r = MPX_FAIL(env, "comm/nccl: no current CUDA device: %s", cudaGetErrorString(ce));
        nccl_destroy(c);
        return r;
    }
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    ncclResult_t nr = ncclSuccess;
    if (c->rank == 0) nr = ncclGetUniqueId(&id);
    /* every rank learns whether rank 0 got an id before waiting on it */
    int ok = nr == ncclSuccess, all_ok = 0;
    rc = MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, c->mpi);
    if (rc == MPI_SUCCESS && all_ok) rc = MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, c->mpi);
    if (rc != MPI_SUCCESS || !all_ok) {
        int r = rc != MPI_SUCCESS ? mpi_fail(c, "sharing the NCCL unique id", rc)
                                  : MPX_FAIL(env, "comm/nccl: rank 0 could not make an NCCL unique id");
        nccl_destroy(c);
        return r;
    }
    nr = ncclCommInitRank(&c->nccl, c->world, id, c->rank);
    if (nr != ncclSuccess) {
        int r = nccl_fail(c, "ncclCommInitRank", nr);
        c->nccl = NULL;
        nccl_destroy(c);
        return r;
    }
    *self = c;
    return MPX_OK;
}

static int nccl_rank(void *self) { return ((nccl_comm *)self)->rank; }
static int nccl_world(void *self) { return ((nccl_comm *)self)->world; }

static int nccl_type(nccl_comm *c, mpx_dtype t, ncclDataType_t *out)
{
    switch (t) {
    case MPX_F32: *out = ncclFloat32; return MPX_OK;
    case MPX_F16: *out = ncclFloat16; return MPX_OK;
    case MPX_BF16: *out = ncclBfloat16; return MPX_OK;
    case MPX_I32: *out = ncclInt32; return MPX_OK;
    default:
        (void)MPX_FAIL(c->env, "comm/nccl: dtype %s cannot be communicated", mpx_dtype_name(t));
        return MPX_ERR_UNSUPPORTED;
    }
}

static int same_type(nccl_comm *c, const char *op, mpx_arg send, mpx_arg recv, ncclDataType_t *t)
{
    if (send.t != recv.t)
        return MPX_FAIL(c->env, "comm/nccl %s: send is %s but recv is %s", op, mpx_dtype_name(send.t), mpx_dtype_name(recv.t));
    return nccl_type(c, send.t, t);
}

static int nccl_allreduce(void *self, mpx_arg buf, size_t n, mpx_reduce_op op)
{
    nccl_comm *c = self;
    ncclDataType_t t;
    MPX_TRY(nccl_type(c, buf.t, &t));
    if (!n) return MPX_OK;
    ncclResult_t r = ncclAllReduce(buf.p, buf.p, n, t, op == MPX_MAX ? ncclMax : ncclSum, c->nccl, NCCL_STREAM);
    return r == ncclSuccess ? MPX_OK : nccl_fail(c, "ncclAllReduce", r);
}

static int nccl_reduce_scatter(void *self, mpx_arg send, mpx_arg recv, size_t n_per_rank)
{
    nccl_comm *c = self;
    ncclDataType_t t;
    MPX_TRY(same_type(c, "reduce_scatter", send, recv, &t));
    if (!n_per_rank) return MPX_OK;
    ncclResult_t r = ncclReduceScatter(send.p, recv.p, n_per_rank, t, ncclSum, c->nccl, NCCL_STREAM);
    return r == ncclSuccess ? MPX_OK : nccl_fail(c, "ncclReduceScatter", r);
}

static int nccl_allgather(void *self, mpx_arg send, mpx_arg recv, size_t n_per_rank)
{
    nccl_comm *c = self;
    ncclDataType_t t;
    MPX_TRY(same_type(c, "allgather", send, recv, &t));
    if (!n_per_rank) return MPX_OK;
    ncclResult_t r = ncclAllGather(send.p, recv.p, n_per_rank, t, c->nccl, NCCL_STREAM);
    return r == ncclSuccess ? MPX_OK : nccl_fail(c, "ncclAllGather", r);
}

static int nccl_broadcast(void *self, mpx_arg buf, size_t n, int root)
{
    nccl_comm *c = self;
    ncclDataType_t t;
    MPX_TRY(nccl_type(c, buf.t, &t));
    if (root < 0 || root >= c->world) return MPX_FAIL(c->env, "comm/nccl broadcast: root %d of %d ranks", root, c->world);
    if (!n) return MPX_OK;
    ncclResult_t r = ncclBroadcast(buf.p, buf.p, n, t, root, c->nccl, NCCL_STREAM);
    return r == ncclSuccess ? MPX_OK : nccl_fail(c, "ncclBroadcast", r);
}

/* Every rank's device work done, then every rank here. */
static int nccl_barrier(void *self)
{
    nccl_comm *c = self;
    cudaError_t e = cudaStreamSynchronize(NCCL_STREAM);
    if (e != cudaSuccess) return MPX_FAIL(c->env, "comm/nccl barrier: %s", cudaGetErrorString(e));
    int rc = MPI_Barrier(c->mpi);
    return rc == MPI_SUCCESS ? MPX_OK : mpi_fail(c, "MPI_Barrier", rc);
}

static int nccl_allreduce_host(void *self, double *vals, size_t n, mpx_reduce_op op)
{
    nccl_comm *c = self;
    if (!n || c->world == 1) return MPX_OK;
    if (n > (size_t)INT32_MAX / (size_t)c->world) return MPX_FAIL(c->env, "comm/nccl: %zu host values is too many", n);
    size_t need = n * (size_t)c->world;
    if (need > c->host_cap) {
        double *t = realloc(c->host_tmp, need * sizeof *t);
        if (!t) return MPX_ERR_NOMEM;
        c->host_tmp = t;
        c->host_cap = need;
    }
    int rc = MPI_Allgather(vals, (int)n, MPI_DOUBLE, c->host_tmp, (int)n, MPI_DOUBLE, c->mpi);
    if (rc != MPI_SUCCESS) return mpi_fail(c, "MPI_Allgather (host values)", rc);
    for (size_t i = 0; i < n; i++) {
        double acc = c->host_tmp[i];
        for (int r = 1; r < c->world; r++) {
            double v = c->host_tmp[(size_t)r * n + i];
            acc = op == MPX_MAX ? (v > acc ? v : acc) : acc + v;
        }
        vals[i] = acc;
    }
    return MPX_OK;
}

static const mpx_comm_vtable nccl_vtable = {
    .size = sizeof(mpx_comm_vtable),
    .create = nccl_create, .destroy = nccl_destroy,
    .rank = nccl_rank, .world = nccl_world,
    .allreduce = nccl_allreduce, .reduce_scatter = nccl_reduce_scatter, .allgather = nccl_allgather,
    .broadcast = nccl_broadcast, .barrier = nccl_barrier,
    .allreduce_host = nccl_allreduce_host,
};

static const mpx_incompat nccl_incompat[] = {
    { "backend/cpu", "NCCL moves GPU memory: the cpu backend's buffers are host memory (with it, use comm local or mpi)" },
};

static const mpx_plugin_desc nccl_desc = {
    MPX_DESC_HEADER,
    .kind = MPX_KIND_COMM,
    .name = "nccl",
    .version = "0.1.0",
    .summary = "GPU ranks (one process per GPU): NCCL all-reduce, reduce-scatter, all-gather, broadcast; bootstrapped over MPI",
    .incompat = nccl_incompat,
    .n_incompat = MPX_COUNT(nccl_incompat),
    .vtable = &nccl_vtable,
};

MPX_PLUGIN_ENTRY { (void)host; return &nccl_desc; }
