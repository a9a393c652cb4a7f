/* The cost of the 8-bit GEMM emulation (cpu_gemm_scaled.c) against the fp32 and bf16
 * paths of the cpu backend, on the MiniLM shapes of one training step (batch 3 x 384
 * tokens, hidden 384, intermediate 1536, 12 heads). Operands are stored in bf16, as the
 * fp8-delayed (storage bf16) and mxfp8 policies keep them; the compute dtype is
 * fp8-e4m3 under each recipe: none (plain saturating rounding), delayed and current
 * (per-tensor scale: one amax pass more) and mx (a scale per 32 elements along K).
 * Columns: GFLOP/s, each time over the fp32 time, and each fp8 time over the bf16 time, in
 * the same run. Two tables: backend.cpu.bf16_gemm = "fma" (the default) and "amx" (the
 * bf16 and 8-bit products on AMX tiles; skipped where the CPU has none).
 * Usage: bench_gemm_fp8 [threads]   (default 0 = all cores) */
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

typedef struct backend {
    mpx_env *env;
    const mpx_ops *ops;
    void *be;
} backend;

static backend open_backend(mpx_scaling recipe, int threads, const char *bf16_gemm)
{
    mpx_precision_desc d = th_fp32_policy();
    d.scaling = recipe;
    d.amax_history_len = 16;
    backend b = { th_env(NULL, NULL, &d), NULL, NULL };
    char opts[128];
    snprintf(opts, sizeof opts, "threads = %d; bf16_gemm = \"%s\";", threads, bf16_gemm);
    if (th_use_cpu_backend(b.env, opts)) {
        fprintf(stderr, "bench_gemm_fp8: %s\n", th_error(b.env));
        th_env_free(b.env);
        b.env = NULL;
        return b;
    }
    b.ops = b.env->host->ops(b.env, &b.be);
    return b;
}

static mpx_gemm make_gemm(const shape *s, void *a, void *bb, void *c, mpx_dtype st, mpx_dtype ct, mpx_dtype compute)
{
    int a_cols = s->ta ? s->m : s->k, b_cols = s->tb ? s->k : s->n;
    mpx_gemm g = { .trans_a = s->ta, .trans_b = s->tb, .m = s->m, .n = s->n, .k = s->k, .alpha = 1.0f, .beta = 0.0f,
                   .a = mpx_a(a, st), .lda = a_cols, .stride_a = (long long)s->m * s->k,
                   .b = mpx_a(bb, st), .ldb = b_cols, .stride_b = (long long)s->k * s->n,
                   .c = mpx_a(c, ct), .ldc = s->n, .stride_c = (long long)s->m * s->n,
                   .batch = s->batch, .compute = compute };
    return g;
}

static double time_op(const backend *b, const mpx_gemm *g)
{
    double best = 1e30, start = now();
    for (int r = 0; r < 3 || now() - start < 0.3; r++) {
        double t0 = now();
        if (b->ops->gemm(b->be, g) != 0) { fprintf(stderr, "gemm failed: %s\n", th_error(b->env)); exit(1); }
        double dt = now() - t0;
        if (dt < best) best = dt;
        if (r > 30) break;
    }
    return best;
}

static void fill(void *p, size_t n, mpx_dtype t, unsigned seed)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        float v = (float)((s >> 40) & 0xffffff) / 16777216.0f - 0.5f;
        if (t == MPX_F32) ((float *)p)[i] = v;
        else ((uint16_t *)p)[i] = mpx_f32_to_bf16(v);
    }
}

static int one_table(int threads, const char *bf16_gemm)
{
    const mpx_scaling recipes[4] = { MPX_SCALING_NONE, MPX_SCALING_DELAYED, MPX_SCALING_CURRENT, MPX_SCALING_MX };
    backend b[4];
    for (int r = 0; r < 4; r++) {
        b[r] = open_backend(recipes[r], threads, bf16_gemm);
        if (!b[r].env) {
            for (int q = 0; q < r; q++) th_env_free(b[q].env);
            printf("\nbf16_gemm = \"%s\": not available here\n", bf16_gemm);
            return 0;
        }
    }
    const int T = 1152, S = 384, B = 3, H = 12, Hd = 384, Im = 1536, dh = Hd / H;
    shape shapes[] = {
        { "384->1536 fwd  X.W^T", 0, 1, T, Im, Hd, 1 }, { "384->1536 dX   dY.W", 0, 0, T, Hd, Im, 1 },
        { "384->1536 dW   dY^T.X", 1, 0, Im, Hd, T, 1 }, { "384->384 fwd   X.W^T", 0, 1, T, Hd, Hd, 1 },
        { "attn QK^T 36x(384x384x32)", 0, 1, S, S, dh, B * H }, { "attn PV   36x(384x32x384)", 0, 0, S, dh, S, B * H },
    };
    printf("\nbackend.cpu.bf16_gemm = \"%s\"\n", bf16_gemm);
    printf("%-28s %8s %8s %8s %8s %8s %8s   %-31s %s\n", "shape (GFLOP/s)", "fp32", "bf16", "fp8", "delayed", "current",
           "mx", "time / fp32: bf16 fp8 del cur mx", "/ bf16: fp8 del cur mx");
    double sum[5] = { 0 }, worst = 0;
    const int ns = (int)(sizeof shapes / sizeof *shapes);
    for (int i = 0; i < ns; i++) {
        const shape *s = &shapes[i];
        size_t na = (size_t)s->m * s->k * s->batch, nb = (size_t)s->k * s->n * s->batch, nc = (size_t)s->m * s->n * s->batch;
        float *a32 = malloc(na * 4), *b32 = malloc(nb * 4), *c32 = malloc(nc * 4);
        uint16_t *a16 = malloc(na * 2), *b16 = malloc(nb * 2), *c16 = malloc(nc * 2);
        if (!a32 || !b32 || !c32 || !a16 || !b16 || !c16) { fprintf(stderr, "oom\n"); return 1; }
        fill(a32, na, MPX_F32, 1); fill(b32, nb, MPX_F32, 2); fill(a16, na, MPX_BF16, 1); fill(b16, nb, MPX_BF16, 2);
        double flop = 2.0 * s->m * s->n * s->k * s->batch, t[6];
        mpx_gemm g32 = make_gemm(s, a32, b32, c32, MPX_F32, MPX_F32, MPX_F32);
        mpx_gemm g16 = make_gemm(s, a16, b16, c16, MPX_BF16, MPX_BF16, MPX_BF16);
        mpx_gemm g8 = make_gemm(s, a16, b16, c16, MPX_BF16, MPX_BF16, MPX_FP8_E4M3);
        t[0] = time_op(&b[0], &g32);
        t[1] = time_op(&b[0], &g16);
        for (int r = 0; r < 4; r++) t[2 + r] = time_op(&b[r], &g8);
        printf("%-28s", s->name);
        for (int c = 0; c < 6; c++) printf(" %8.1f", flop / t[c] * 1e-9);
        printf("  ");
        for (int c = 1; c < 6; c++) { printf(" %.2f", t[c] / t[0]); sum[c - 1] += t[c] / t[0]; }
        printf("      ");
        for (int c = 2; c < 6; c++) {
            printf(" %.2f", t[c] / t[1]);
            if (t[c] / t[1] > worst) worst = t[c] / t[1];
        }
        printf("\n");
        free(a32); free(b32); free(c32); free(a16); free(b16); free(c16);
    }
    printf("mean time / fp32: bf16 %.2f, fp8 (no scaling) %.2f, delayed %.2f, current %.2f, mx %.2f; the slowest 8-bit "
           "GEMM %.2fx its bf16 op\n", sum[0] / ns, sum[1] / ns, sum[2] / ns, sum[3] / ns, sum[4] / ns, worst);
    for (int r = 0; r < 4; r++) th_env_free(b[r].env);
    return 0;
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 0;
    if (one_table(threads, "fma")) return 1;
    return one_table(threads, "amx");
}
