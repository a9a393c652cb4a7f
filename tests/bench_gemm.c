/* GEMM speed of the cpu backend on the shapes of one BERT training step (batch 3 x 384
 * tokens = 1152 rows; MiniLM hidden 384 / intermediate 1536 and bert-base 768 / 3072,
 * 12 heads), beside OpenBLAS's own cblas_sgemm in the same run.
 * Columns: GFLOP/s of raw sgemm, of the op with fp32 storage, with bf16 storage (and
 * compute), with fp16 storage, and the bf16/fp32 time ratio (target <= 1.25); then, where
 * the CPU has AMX-BF16, the bf16 op with backend.cpu.bf16_gemm = "amx" and its time over
 * the fp32 op's.
 * Usage: bench_gemm [threads [attention_gemm [linear_gemm]]]   (default 0 = all cores,
 * "mpx", "mpx") */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mpx/mpx.h"
#include "test_host.h"
#include "bench_util.h"

typedef struct shape {
    const char *name;
    int ta, tb, m, n, k, batch;
} shape;

typedef struct bufs { void *a, *b, *c; } bufs;

static mpx_gemm make_gemm(const shape *s, bufs *x, mpx_dtype st, mpx_dtype compute)
{
    int a_cols = s->ta ? s->m : s->k, b_cols = s->tb ? s->k : s->n;
    mpx_gemm g = { .trans_a = s->ta, .trans_b = s->tb, .m = s->m, .n = s->n, .k = s->k,
                   .alpha = 1.0f, .beta = 0.0f,
                   .a = mpx_a(x->a, st), .lda = a_cols, .stride_a = (long long)s->m * s->k,
                   .b = mpx_a(x->b, st), .ldb = b_cols, .stride_b = (long long)s->k * s->n,
                   .c = mpx_a(x->c, st), .ldc = s->n, .stride_c = (long long)s->m * s->n,
                   .batch = s->batch, .compute = compute };
    return g;
}

/* Best time of repeated runs (at least 3, at least ~0.3 s in all). */
static double time_op(const mpx_ops *ops, void *be, const mpx_gemm *g)
{
    double best = 1e30, start = now();
    for (int r = 0; r < 3 || now() - start < 0.3; r++) {
        double t0 = now();
        if (ops->gemm(be, g) != 0) { fprintf(stderr, "gemm failed\n"); exit(1); }
        double dt = now() - t0;
        if (dt < best) best = dt;
        if (r > 50) break;
    }
    return best;
}

static double time_sgemm(const shape *s, const float *a, const float *b, float *c)
{
    double best = 1e30, start = now();
    int lda = s->ta ? s->m : s->k, ldb = s->tb ? s->k : s->n;
    for (int r = 0; r < 3 || now() - start < 0.3; r++) {
        double t0 = now();
        for (int i = 0; i < s->batch; i++)
            cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans, s->tb ? CblasTrans : CblasNoTrans,
                        s->m, s->n, s->k, 1.0f, a + (size_t)i * s->m * s->k, lda,
                        b + (size_t)i * s->k * s->n, ldb, 0.0f, c + (size_t)i * s->m * s->n, s->n);
        double dt = now() - t0;
        if (dt < best) best = dt;
        if (r > 50) break;
    }
    return best;
}

static void fill(void *p, size_t n, mpx_dtype t, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        float v = (float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f;
        if (t == MPX_F32) ((float *)p)[i] = v;
        else if (t == MPX_BF16) ((uint16_t *)p)[i] = mpx_f32_to_bf16(v);
        else ((uint16_t *)p)[i] = mpx_f32_to_f16(v);
    }
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 0;
    const char *why = NULL;
    const mpx_plugin_desc *d = th_load("build/plugins/backend-cpu.so", &why);
    if (!d) { fprintf(stderr, "cannot load build/plugins/backend-cpu.so: %s\n", why); return 1; }
    const char *attn = argc > 2 ? argv[2] : "mpx", *lin = argc > 3 ? argv[3] : "mpx";
    char opts[300];
    snprintf(opts, sizeof opts, "threads = %d; fp8_accumulate = \"fp32\"; attention_gemm = \"%s\"; linear_gemm = \"%s\"; "
             "bf16_gemm = \"fma\"; subnormal_census = false;", threads, attn, lin);
    mpx_env *env = th_env(opts, NULL, NULL);
    const mpx_backend_vtable *vt = d->vtable;
    void *be = NULL;
    if (vt->create(env, &be) != 0) { fprintf(stderr, "create: %s\n", th_error(env)); return 1; }
    const mpx_ops *ops = vt->ops;
    /* the same backend with the AMX path (NULL where the CPU has none) */
    snprintf(opts, sizeof opts, "threads = %d; fp8_accumulate = \"fp32\"; attention_gemm = \"%s\"; linear_gemm = \"%s\"; "
             "bf16_gemm = \"amx\"; subnormal_census = false;", threads, attn, lin);
    mpx_env *env_amx = th_env(opts, NULL, NULL);
    void *be_amx = NULL;
    if (vt->create(env_amx, &be_amx) != 0) be_amx = NULL;

    const int T = 1152, S = 384, B = 3, H = 12;
    shape shapes[32];
    int ns = 0;
    static char names[32][64];
    const int hidden[2] = { 384, 768 };
    for (int h = 0; h < 2; h++) {
        int Hd = hidden[h], Im = 4 * Hd, dh = Hd / H;
        int lin[3][2] = { { Hd, Hd }, { Hd, Im }, { Im, Hd } };   /* in, out */
        for (int l = 0; l < 3; l++) {
            int in = lin[l][0], out = lin[l][1];
            snprintf(names[ns], 64, "H%d %d->%d fwd  X.W^T", Hd, in, out);
            shapes[ns] = (shape){ names[ns], 0, 1, T, out, in, 1 }; ns++;
            snprintf(names[ns], 64, "H%d %d->%d dX   dY.W", Hd, in, out);
            shapes[ns] = (shape){ names[ns], 0, 0, T, in, out, 1 }; ns++;
            snprintf(names[ns], 64, "H%d %d->%d dW   dY^T.X", Hd, in, out);
            shapes[ns] = (shape){ names[ns], 1, 0, out, in, T, 1 }; ns++;
        }
        snprintf(names[ns], 64, "H%d attn QK^T  %dx(%dx%dx%d)", Hd, B * H, S, S, dh);
        shapes[ns] = (shape){ names[ns], 0, 1, S, S, dh, B * H }; ns++;
        snprintf(names[ns], 64, "H%d attn PV    %dx(%dx%dx%d)", Hd, B * H, S, dh, S);
        shapes[ns] = (shape){ names[ns], 0, 0, S, dh, S, B * H }; ns++;
        snprintf(names[ns], 64, "H%d attn dP=dC.V^T %dx(%dx%dx%d)", Hd, B * H, S, S, dh);
        shapes[ns] = (shape){ names[ns], 0, 1, S, S, dh, B * H }; ns++;
        snprintf(names[ns], 64, "H%d attn dV=P^T.dC %dx(%dx%dx%d)", Hd, B * H, S, dh, S);
        shapes[ns] = (shape){ names[ns], 1, 0, S, dh, S, B * H }; ns++;
    }

    printf("%s\n", vt->describe(be));
    printf("%-36s %9s %9s %9s %9s %9s %9s %9s\n", "shape (GFLOP/s)", "sgemm", "op fp32", "op bf16", "op fp16", "bf16/fp32",
           "bf16 amx", "amx/fp32");
    double sum_ratio = 0, worst = 0, sum_amx = 0;
    for (int i = 0; i < ns; i++) {
        const shape *s = &shapes[i];
        size_t na = (size_t)s->m * s->k * s->batch, nb = (size_t)s->k * s->n * s->batch, nc = (size_t)s->m * s->n * s->batch;
        bufs f = { malloc(na * 4), malloc(nb * 4), malloc(nc * 4) };
        bufs h = { malloc(na * 2), malloc(nb * 2), malloc(nc * 2) };
        bufs hf = { malloc(na * 2), malloc(nb * 2), malloc(nc * 2) };
        if (!f.a || !f.b || !f.c || !h.a || !h.b || !h.c || !hf.a || !hf.b || !hf.c) { fprintf(stderr, "oom\n"); return 1; }
        fill(f.a, na, MPX_F32, 1); fill(f.b, nb, MPX_F32, 2);
        fill(h.a, na, MPX_BF16, 1); fill(h.b, nb, MPX_BF16, 2);
        fill(hf.a, na, MPX_F16, 1); fill(hf.b, nb, MPX_F16, 2);
        memset(f.c, 0, nc * 4);
        double flop = 2.0 * s->m * s->n * s->k * s->batch;
        mpx_gemm g32 = make_gemm(s, &f, MPX_F32, MPX_F32), g16 = make_gemm(s, &h, MPX_BF16, MPX_BF16);
        mpx_gemm gh = make_gemm(s, &hf, MPX_F16, MPX_F16);
        ops->gemm(be, &g16);   /* warm the workspaces */
        /* the backend keeps OpenBLAS single-threaded (it threads GEMMs itself): give the
         * raw sgemm column the same number of threads, then put it back */
        openblas_set_num_threads(threads > 0 ? threads : openblas_get_num_procs());
        double t_blas = time_sgemm(s, f.a, f.b, f.c);
        openblas_set_num_threads(1);
        double t32 = time_op(ops, be, &g32), t16 = time_op(ops, be, &g16), th = time_op(ops, be, &gh);
        double ratio = t16 / t32;
        sum_ratio += ratio;
        if (ratio > worst) worst = ratio;
        printf("%-36s %9.1f %9.1f %9.1f %9.1f %9.2f", s->name, flop / t_blas * 1e-9, flop / t32 * 1e-9,
               flop / t16 * 1e-9, flop / th * 1e-9, ratio);
        if (be_amx) {
            ops->gemm(be_amx, &g16);
            double ta = time_op(ops, be_amx, &g16);
            sum_amx += ta / t32;
            printf(" %9.1f %9.2f", flop / ta * 1e-9, ta / t32);
        }
        printf("\n");
        free(f.a); free(f.b); free(f.c); free(h.a); free(h.b); free(h.c); free(hf.a); free(hf.b); free(hf.c);
    }
    printf("bf16/fp32 time: mean %.2f, worst %.2f (target <= 1.25)", sum_ratio / ns, worst);
    if (be_amx) printf("; bf16 on AMX / fp32: mean %.2f", sum_amx / ns);
    printf("\n");
    vt->destroy(be);
    if (be_amx) vt->destroy(be_amx);
    th_env_free(env);
    th_env_free(env_amx);
    return 0;
}
