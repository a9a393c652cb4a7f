/* Run under mpirun by tests/test_ranks.c: every collective of comm/mpi on crafted
 * inputs, each rank printing what it holds ("R<rank> <case> <hex>...") for the suite to
 * compare with hand-derived values. Not a Criterion suite: MPI ranks are its processes.
 *
 * Sums (cases sum_*, rs_*): element i of chunk c gets the "big" value 1.0 from one rank
 * and a half-ulp of 1.0 (fp16 2^-11, bf16 2^-8, fp32 2^-24) from every other rank; which
 * rank holds the big value cycles with i (big rank = (c + 1 + i) mod world). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/mpx.h"
#include "support/test_host.h"

static const mpx_comm_vtable *cv;
static void *comm;
static int rank, world;

static uint32_t bits_of(mpx_dtype t, float v)
{
    if (t == MPX_F16) return mpx_f32_to_f16(v);
    if (t == MPX_BF16) return mpx_f32_to_bf16(v);
    return mpx_f32_bits(v);
}

static float half_ulp(mpx_dtype t) { return t == MPX_F16 ? 0x1p-11f : t == MPX_BF16 ? 0x1p-8f : 0x1p-24f; }

static void fill(mpx_dtype t, void *buf, size_t n, size_t chunk)
{
    for (size_t i = 0; i < n; i++) {
        size_t c = i / chunk;
        int big = (int)((c + 1 + i) % (size_t)world);
        uint32_t b = bits_of(t, big == rank ? 1.0f : half_ulp(t));
        if (t == MPX_F32) ((uint32_t *)buf)[i] = b;
        else ((uint16_t *)buf)[i] = (uint16_t)b;
    }
}

static void print(const char *name, mpx_dtype t, const void *buf, size_t n)
{
    printf("R%d %s", rank, name);
    for (size_t i = 0; i < n; i++)
        printf(" %0*x", t == MPX_F32 ? 8 : 4, t == MPX_F32 ? ((const uint32_t *)buf)[i] : ((const uint16_t *)buf)[i]);
    printf("\n");
}

static int fail(mpx_env *env, const char *what)
{
    fprintf(stderr, "R%d %s failed: %s\n", rank, what, th_error(env));
    return 1;
}

int main(void)
{
    mpx_env *env = th_env(NULL, NULL, NULL);
    const char *why = NULL;
    const mpx_plugin_desc *d = th_load("build/plugins/comm-mpi.so", &why);
    if (!d) { fprintf(stderr, "cannot load comm-mpi.so: %s\n", why); return 1; }
    cv = d->vtable;
    if (cv->create(env, &comm)) return fail(env, "create");
    rank = cv->rank(comm);
    world = cv->world(comm);
    static const mpx_dtype types[] = { MPX_F16, MPX_BF16, MPX_F32 };
    static const char *const tname[] = { "f16", "bf16", "f32" };
    for (int k = 0; k < 3; k++) {
        mpx_dtype t = types[k];
        char name[32];
        uint32_t buf[64];
        /* all-reduce of 7 elements: chunks of ceil(7 / world) */
        size_t n = 7, chunk = (n + (size_t)world - 1) / (size_t)world;
        fill(t, buf, n, chunk);
        if (cv->allreduce(comm, mpx_a(buf, t), n, MPX_SUM)) return fail(env, "allreduce");
        snprintf(name, sizeof name, "sum_%s", tname[k]);
        print(name, t, buf, n);
        /* reduce-scatter of 3 per rank into a separate buffer */
        uint32_t recv[8];
        fill(t, buf, 3 * (size_t)world, 3);
        if (cv->reduce_scatter(comm, mpx_a(buf, t), mpx_a(recv, t), 3)) return fail(env, "reduce_scatter");
        snprintf(name, sizeof name, "rs_%s", tname[k]);
        print(name, t, recv, 3);
        /* all-gather of 2 per rank: rank r sends bit patterns 0x10 r + j */
        uint32_t mine[2], all[64];
        for (int j = 0; j < 2; j++) {
            if (t == MPX_F32) mine[j] = 0x100u * (uint32_t)rank + (uint32_t)j + 1;
            else ((uint16_t *)mine)[j] = (uint16_t)(0x100 * rank + j + 1);
        }
        if (cv->allgather(comm, mpx_a(mine, t), mpx_a(all, t), 2)) return fail(env, "allgather");
        snprintf(name, sizeof name, "ag_%s", tname[k]);
        print(name, t, all, 2 * (size_t)world);
    }
    /* broadcast from the last rank */
    uint32_t b[2] = { (uint32_t)rank, 0xabcd0000u + (uint32_t)rank };
    if (cv->broadcast(comm, mpx_a(b, MPX_F32), 2, world - 1)) return fail(env, "broadcast");
    print("bcast", MPX_F32, b, 2);
    /* host all-reduce: 1e16, 1, -1e16, 0, ... summed in rank order; and a max */
    double v[2] = { rank == 0 ? 1e16 : rank == 1 ? 1.0 : rank == 2 ? -1e16 : 0.0, (double)rank };
    if (cv->allreduce_host(comm, v, 1, MPX_SUM) || cv->allreduce_host(comm, v + 1, 1, MPX_MAX)) return fail(env, "allreduce_host");
    printf("R%d host %.17g %.17g\n", rank, v[0], v[1]);
    if (cv->barrier(comm)) return fail(env, "barrier");
    fflush(stdout);
    cv->destroy(comm);
    th_env_free(env);
    return 0;
}
