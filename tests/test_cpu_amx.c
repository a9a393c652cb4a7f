/* cpu backend, the bf16 GEMMs on AMX tiles (option bf16_gemm = "amx", cpu_gemm_amx.c):
 *  - on the models' GEMM shapes (bert-base and MiniLM-L6, 3 windows of 384 tokens: the
 *    linear layers' forward, input and weight gradients, the attention products), every
 *    checked element within the accumulation-order bound the other GEMM tests use
 *    (test_cpu_ops.c: 2^-22 (K + 2) sum |a b|, plus one ulp), against a double reference
 *    of the inputs rounded to bf16;
 *  - the same bits for 1, 2 and 3 threads, and for a batched GEMM item by item;
 *  - subnormals, listed case by case and counted: the unit reads a subnormal bf16 input
 *    as zero and writes a subnormal result as zero; the fma path keeps both.
 * Skipped where the CPU has no AMX-BF16 or the OS does not grant the tiles. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_cpu_ops_ref.h"
#include "shell.h"
#include "test_host.h"

/* The backend with bf16_gemm = "amx", or a skipped test where this machine cannot. */
static tb open_amx(int threads)
{
    const char *why = NULL;
    const mpx_plugin_desc *d = th_load("build/plugins/backend-cpu.so", &why);
    cr_assert_not_null(d, "%s", why ? why : "?");
    char opts[256];
    snprintf(opts, sizeof opts, "threads = %d; fp8_accumulate = \"fp32\"; attention_gemm = \"mpx\"; "
             "linear_gemm = \"mpx\"; bf16_gemm = \"amx\"; subnormal_census = false;", threads);
    mpx_env *env = th_env(opts, NULL, NULL);
    void *be = NULL;
    const mpx_backend_vtable *vt = d->vtable;
    int rc = vt->create(env, &be);
    if (rc != 0) {
        char why_not[512];   /* the message outlives the env */
        snprintf(why_not, sizeof why_not, "%s", th_error(env));
        th_env_free(env);
        cr_assert(strstr(why_not, "AMX") != NULL, "create failed for another reason: %s", why_not);
        cr_skip_test("no AMX-BF16 here: %s", why_not);
    }
    vt->destroy(be);
    th_env_free(env);
    tb t = tb_open_bf16(threads, "mpx", "mpx", "amx");
    cr_assert(strstr(t.vt->describe(t.be), "bf16 GEMMs: amx") != NULL, "describe: %s", t.vt->describe(t.be));
    return t;
}

typedef struct shape { const char *what; int ta, tb, m, n, k, batch; } shape;

/* bert-base (hidden 768, FFN 3072, 12 heads of 64) and MiniLM-L6 (384, 1536, 12 of 32)
 * at 3 windows x 384 tokens = 1152 rows; attention per head: 384 x 384 scores. */
static const shape model_shapes[] = {
    { "bert qkv/out fwd  X W^T", 0, 1, 1152, 768, 768, 1 },
    { "bert ffn up fwd   X W^T", 0, 1, 1152, 3072, 768, 1 },
    { "bert ffn down fwd X W^T", 0, 1, 1152, 768, 3072, 1 },
    { "bert ffn up dX    dY W", 0, 0, 1152, 768, 3072, 1 },
    { "bert ffn up dW    dY^T X", 1, 0, 3072, 768, 1152, 1 },
    { "bert qkv dW       dY^T X", 1, 0, 768, 768, 1152, 1 },
    { "bert scores Q K^T", 0, 1, 384, 384, 64, 4 },
    { "bert context P V", 0, 0, 384, 64, 384, 4 },
    { "bert dV P^T dctx", 1, 0, 384, 64, 384, 4 },
    { "minilm ffn down fwd", 0, 1, 1152, 384, 1536, 1 },
    { "minilm ffn up dW", 1, 0, 1536, 384, 1152, 1 },
    { "minilm scores", 0, 1, 384, 384, 32, 4 },
    { "qa head fwd (N = 2: the fma path)", 0, 1, 1152, 2, 768, 1 },
    { "odd edges, K not a multiple of 32", 0, 0, 161, 133, 71, 2 },
    { "odd edges, transposed", 1, 1, 130, 150, 33, 1 },
};

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static int same_bits(float a, float b) { return memcmp(&a, &b, 4) == 0; }

static float bf16_round(float x)   /* round to nearest even to bf16 (finite x) */
{
    uint32_t u;
    memcpy(&u, &x, 4);
    u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
    memcpy(&x, &u, 4);
    return x;
}

static double ulp32(double v)
{
    int e;
    frexp(v, &e);
    return ldexp(1.0, (e - 24 > -149 ? e - 24 : -149));
}

/* One shape through the backend: A fp32 (rounded by the contract), B bf16, C fp32,
 * compute bf16; rows of C spread over M checked against double. */
static void check_shape(tb *t, const shape *s, float alpha, float beta, uint64_t seed, long *checked)
{
    int ar = s->ta ? s->k : s->m, ac = s->ta ? s->m : s->k, br = s->tb ? s->n : s->k, bc = s->tb ? s->k : s->n;
    size_t na = (size_t)ar * ac, nb = (size_t)br * bc, nc = (size_t)s->m * s->n;
    mpx_arg A = tb_alloc(t, MPX_F32, na * s->batch), B = tb_alloc(t, MPX_BF16, nb * s->batch);
    mpx_arg C = tb_alloc(t, MPX_F32, nc * s->batch);
    float *a = A.p, *c = C.p, *c0 = malloc(nc * s->batch * sizeof *c0), *bv = malloc(nb * s->batch * sizeof *bv);
    cr_assert(c0 && bv);
    uint64_t st = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < na * s->batch; i++) a[i] = (float)((double)(rng_next(&st) >> 11) * 0x1p-53 * 4.0 - 2.0);
    for (size_t i = 0; i < nb * s->batch; i++) bv[i] = bf16_round((float)((double)(rng_next(&st) >> 11) * 0x1p-53 * 2.0 - 1.0));
    for (size_t i = 0; i < nb * s->batch; i++) {
        uint32_t u;
        memcpy(&u, &bv[i], 4);
        ((uint16_t *)B.p)[i] = (uint16_t)(u >> 16);
    }
    for (size_t i = 0; i < nc * s->batch; i++) c0[i] = c[i] = (float)((double)(rng_next(&st) >> 11) * 0x1p-53 - 0.5);
    mpx_gemm g = { .trans_a = s->ta, .trans_b = s->tb, .m = s->m, .n = s->n, .k = s->k, .alpha = alpha, .beta = beta,
                   .a = A, .lda = ac, .stride_a = (long long)na, .b = B, .ldb = bc, .stride_b = (long long)nb, .c = C,
                   .ldc = s->n, .stride_c = (long long)nc, .batch = s->batch, .compute = MPX_BF16 };
    cr_assert_eq(t->ops->gemm(t->be, &g), 0, "%s: %s", s->what, tb_error(t));
    int step = s->m > 48 ? s->m / 24 : 1;
    for (int b = 0; b < s->batch; b++)
        for (int i = 0; i < s->m; i += step)
            for (int j = 0; j < s->n; j++) {
                double ref = 0, mag = 0;
                for (int l = 0; l < s->k; l++) {
                    double x = bf16_round(s->ta ? a[b * na + (size_t)l * ac + i] : a[b * na + (size_t)i * ac + l]);
                    double y = s->tb ? bv[b * nb + (size_t)j * bc + l] : bv[b * nb + (size_t)l * bc + j];
                    ref += x * y;
                    mag += fabs(x * y);
                }
                size_t e = b * nc + (size_t)i * s->n + j;
                double want = alpha * ref + beta * (double)c0[e];
                double bound = ulp32(want) + 0x1p-22 * (s->k + 2) * (fabs(alpha) * mag + fabs(beta * c0[e]));
                cr_assert(fabs((double)c[e] - want) <= bound,
                          "%s (alpha %g beta %g) item %d C[%d, %d] = %.9g, double reference %.9g: off by %.3g, bound %.3g",
                          s->what, (double)alpha, (double)beta, b, i, j, (double)c[e], want, fabs((double)c[e] - want),
                          bound);
                (*checked)++;
            }
    free(c0);
    free(bv);
}

Test(amx, model_shapes_within_the_accumulation_bound, .timeout = 240)
{
    tb t = open_amx(2);
    long checked = 0;
    for (size_t i = 0; i < sizeof model_shapes / sizeof model_shapes[0]; i++) {
        check_shape(&t, &model_shapes[i], 1.0f, 0.0f, i + 1, &checked);
        if (i % 3 == 0) check_shape(&t, &model_shapes[i], 0.125f, 1.0f, i + 100, &checked);
    }
    cr_log_info("%ld elements checked against double", checked);
    tb_close(&t);
}

/* The bits of one GEMM (bf16 operands, fp32 C) through a backend of `threads`, batched
 * or item by item. */
static float *amx_bits(int threads, const shape *s, int one_by_one)
{
    tb t = open_amx(threads);
    int ar = s->ta ? s->k : s->m, ac = s->ta ? s->m : s->k, br = s->tb ? s->n : s->k, bc = s->tb ? s->k : s->n;
    size_t na = (size_t)ar * ac, nb = (size_t)br * bc, nc = (size_t)s->m * s->n;
    mpx_arg A = tb_alloc(&t, MPX_BF16, na * s->batch), B = tb_alloc(&t, MPX_BF16, nb * s->batch);
    mpx_arg C = tb_alloc(&t, MPX_F32, nc * s->batch);
    uint64_t st = 12345;
    /* bf16 values of magnitude 2^-7 .. 2^7, either sign */
    for (size_t i = 0; i < na * s->batch; i++)
        ((uint16_t *)A.p)[i] = (uint16_t)(0x3C00u + rng_next(&st) % 0x0700u) | (uint16_t)((rng_next(&st) & 1) << 15);
    for (size_t i = 0; i < nb * s->batch; i++)
        ((uint16_t *)B.p)[i] = (uint16_t)(0x3C00u + rng_next(&st) % 0x0700u) | (uint16_t)((rng_next(&st) & 1) << 15);
    mpx_gemm g = { .trans_a = s->ta, .trans_b = s->tb, .m = s->m, .n = s->n, .k = s->k, .alpha = 1.0f, .beta = 0.0f,
                   .a = A, .lda = ac, .stride_a = (long long)na, .b = B, .ldb = bc, .stride_b = (long long)nb, .c = C,
                   .ldc = s->n, .stride_c = (long long)nc, .batch = s->batch, .compute = MPX_F32 };
    for (int b = 0; b < (one_by_one ? s->batch : 1); b++) {
        mpx_gemm gi = g;
        if (one_by_one) {
            gi.batch = 1;
            gi.a.p = (uint16_t *)A.p + b * na;
            gi.b.p = (uint16_t *)B.p + b * nb;
            gi.c.p = (float *)C.p + b * nc;
        }
        cr_assert_eq(t.ops->gemm(t.be, &gi), 0, "%s", tb_error(&t));
    }
    float *out = malloc(nc * s->batch * sizeof *out);
    cr_assert_not_null(out);
    memcpy(out, C.p, nc * s->batch * sizeof *out);
    tb_close(&t);
    return out;
}

Test(amx, same_bits_for_any_thread_count_and_batching, .timeout = 120)
{
    static const shape cases[] = {
        { "X W^T", 0, 1, 200, 160, 200, 1 },
        { "dY^T X", 1, 0, 160, 144, 300, 1 },
        { "scores, batched", 0, 1, 128, 128, 32, 8 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const shape *s = &cases[i];
        size_t n = (size_t)s->m * s->n * s->batch;
        float *one = amx_bits(1, s, 0), *two = amx_bits(2, s, 0), *three = amx_bits(3, s, 0), *items = amx_bits(2, s, 1);
        cr_assert_eq(memcmp(one, two, n * sizeof *one), 0, "%s: 1 and 2 threads differ", s->what);
        cr_assert_eq(memcmp(one, three, n * sizeof *one), 0, "%s: 1 and 3 threads differ", s->what);
        cr_assert_eq(memcmp(one, items, n * sizeof *one), 0, "%s: batched and item by item differ", s->what);
        free(one); free(two); free(three); free(items);
    }
}

/* ---- subnormals ---- */

static uint16_t bits16(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return (uint16_t)(u >> 16);
}

/* C (128 x 128, K = 32: the smallest the AMX path takes) = A B for one case: every row of
 * A and every column of B the same pair of values at K positions 0 and 1 (the rest
 * zero), through the given path; out16: C's first 16 values. */
static void one_case(const char *path, float a0, float b0, float a1, float b1, float *out16)
{
    tb t = strcmp(path, "amx") ? tb_open_bf16(1, "mpx", "mpx", "fma") : open_amx(1);
    const int m = 128, n = 128, k = 32;
    mpx_arg A = tb_alloc(&t, MPX_BF16, (size_t)m * k), B = tb_alloc(&t, MPX_BF16, (size_t)k * n);
    mpx_arg C = tb_alloc(&t, MPX_F32, (size_t)m * n);
    for (int i = 0; i < m; i++) {
        ((uint16_t *)A.p)[i * k] = bits16(a0);
        ((uint16_t *)A.p)[i * k + 1] = bits16(a1);
    }
    for (int j = 0; j < n; j++) {
        ((uint16_t *)B.p)[j] = bits16(b0);
        ((uint16_t *)B.p)[n + j] = bits16(b1);
    }
    mpx_gemm g = { .m = m, .n = n, .k = k, .alpha = 1.0f, .beta = 0.0f, .a = A, .lda = k, .b = B, .ldb = n, .c = C,
                   .ldc = n, .batch = 1, .compute = MPX_F32 };
    cr_assert_eq(t.ops->gemm(t.be, &g), 0, "%s", tb_error(&t));
    memcpy(out16, C.p, 16 * sizeof(float));
    tb_close(&t);
}

Test(amx, subnormal_cases_listed_and_counted, .timeout = 60)
{
    const float sub = 0x1p-130f;   /* a bf16 subnormal (below 2^-126) */
    const float tiny = 0x1p-70f;   /* normal; tiny * tiny = 2^-140, a subnormal product */
    struct {
        const char *what;
        float a0, b0, a1, b1;
        float ieee;    /* the exact result, which fp32 holds */
        float amx;     /* what the unit gives */
    } cases[] = {
        { "subnormal input x 1", sub, 1.0f, 0, 0, sub, 0.0f },
        { "subnormal input x 4 (a subnormal product, 2^-128)", sub, 4.0f, 0, 0, 0x1p-128f, 0.0f },
        { "subnormal input x 2^10 (product normal, 2^-120)", sub, 0x1p10f, 0, 0, 0x1p-120f, 0.0f },
        { "normal x normal, subnormal product 2^-140", tiny, tiny, 0, 0, 0x1p-140f, 0.0f },
        { "a normal and a subnormal product (-0x1.fep-127, flushed before the sum)", 0x1p-63f, 0x1p-63f,
          -0x1.fep-64f, 0x1p-63f, 0x1p-126f - 0x1.fep-127f, 0x1p-126f },
        { "two normal products cancelling to a subnormal sum, 2^-132", 0x1p-62f, 0x1p-63f, -0x1.fcp-63f, 0x1p-63f,
          0x1p-132f, 0.0f },
        { "normal result (control)", 0x1p-60f, 0x1p-60f, 0, 0, 0x1p-120f, 0x1p-120f },
    };
    int n_cases = (int)(sizeof cases / sizeof cases[0]), differ = 0;
    for (int i = 0; i < n_cases; i++) {
        float fma_out[16], amx_out[16];
        one_case("fma", cases[i].a0, cases[i].b0, cases[i].a1, cases[i].b1, fma_out);
        one_case("amx", cases[i].a0, cases[i].b0, cases[i].a1, cases[i].b1, amx_out);
        for (int j = 0; j < 16; j++) {
            cr_assert(fma_out[j] == cases[i].ieee, "%s: fma path gave %a, IEEE %a", cases[i].what, (double)fma_out[j],
                      (double)cases[i].ieee);
            cr_assert(amx_out[j] == cases[i].amx, "%s: amx path gave %a, expected %a", cases[i].what,
                      (double)amx_out[j], (double)cases[i].amx);
        }
        differ += fma_out[0] != amx_out[0];
        cr_log_info("subnormal case %d, %s: fma %a, amx %a", i + 1, cases[i].what, (double)fma_out[0], (double)amx_out[0]);
    }
    cr_log_info("%d of %d cases differ between the paths (every one with a subnormal input, product or sum)", differ,
                n_cases);
    cr_assert_eq(differ, n_cases - 1);
}

/* ---- the census (subnormal_census = true) and what says which path ran ---- */

Test(amx, census_counts_subnormal_inputs_and_results, .timeout = 60)
{
    const char *why = NULL;
    const mpx_plugin_desc *d = th_load("build/plugins/backend-cpu.so", &why);
    cr_assert_not_null(d, "%s", why ? why : "?");
    mpx_env *env = th_env("threads = 2; fp8_accumulate = \"fp32\"; attention_gemm = \"mpx\"; linear_gemm = \"mpx\"; "
                          "bf16_gemm = \"auto\"; subnormal_census = true;", NULL, NULL);
    const mpx_backend_vtable *vt = d->vtable;
    void *be = NULL;
    cr_assert_eq(vt->create(env, &be), 0, "%s", th_error(env));
    cr_assert(strstr(vt->describe(be), "bf16 GEMMs: fma (subnormal census)"), "%s", vt->describe(be));
    const mpx_ops *ops = vt->ops;
    /* 128 x 128 x 32: A's row 0 holds 5 subnormals (K 0..4), B's row 0 is all ones and its
     * row 1 holds 3 subnormals (columns 0..2): C's row 0 is 2^-130 + (products that
     * underflow to 0), 128 subnormal results; every other element 0 */
    const int m = 128, n = 128, k = 32;
    uint16_t *A = ops->alloc(be, (size_t)m * k * 2), *B = ops->alloc(be, (size_t)k * n * 2);
    float *C = ops->alloc(be, (size_t)m * n * 4);
    cr_assert(A && B && C);
    for (int l = 0; l < 5; l++) A[l] = bits16(0x1p-130f);
    for (int j = 0; j < n; j++) B[j] = bits16(1.0f);
    for (int j = 0; j < 3; j++) B[n + j] = bits16(0x1p-128f);
    mpx_gemm g = { .m = m, .n = n, .k = k, .alpha = 1.0f, .beta = 0.0f, .a = mpx_a(A, MPX_BF16), .lda = k,
                   .b = mpx_a(B, MPX_BF16), .ldb = n, .c = mpx_a(C, MPX_F32), .ldc = n, .batch = 1,
                   .compute = MPX_BF16 };
    cr_assert_eq(ops->gemm(be, &g), 0, "%s", th_error(env));
    cr_assert(C[0] == 0x1p-130f && C[n] == 0.0f, "C[0] = %a, C[n] = %a", (double)C[0], (double)C[n]);
    /* the same into a bf16 C (K of one block: the kernel would round C tile by tile): the
     * fp32 results are counted before they are rounded, C's row 0 is 2^-130 in bf16 */
    uint16_t *C16 = ops->alloc(be, (size_t)m * n * 2);
    cr_assert_not_null(C16);
    g.c = mpx_a(C16, MPX_BF16);
    cr_assert_eq(ops->gemm(be, &g), 0, "%s", th_error(env));
    cr_assert(C16[0] == bits16(0x1p-130f) && C16[n] == 0, "C16[0] = 0x%04x, C16[n] = 0x%04x", C16[0], C16[n]);
    ops->free(be, C16);
    g.c = mpx_a(C, MPX_F32);
    /* a GEMM too small for the AMX path is not counted */
    g.m = 8;
    cr_assert_eq(ops->gemm(be, &g), 0, "%s", th_error(env));
    ops->free(be, A);
    ops->free(be, B);
    ops->free(be, C);
    vt->destroy(be);
    cr_assert_str_eq(th_last_note(), "subnormal census: 2 GEMMs the AMX path would take (bf16 and 8-bit); subnormal inputs 16 of "
                                     "16384, subnormal fp32 results 256 of 32768");
    th_env_free(env);
}

Test(amx, plugins_and_run_json_say_which_path_ran, .timeout = 120)
{
    tb t = open_amx(1);   /* skipped without AMX */
    tb_close(&t);
    char out[16384];
    cr_assert_eq(ts_sh(out, sizeof out, "build/bin/mpx plugins backend/cpu 2>&1"), 0, "%s", out);
    /* the default is fma (opt-in: the census found subnormal results); the line says AMX is there */
    cr_expect(strstr(out, "on this machine, with its defaults: cpu:") &&
              strstr(out, "bf16 GEMMs: fma (AMX-BF16 here: bf16_gemm = \"amx\" opts in)"),
              "mpx plugins backend/cpu does not say which path is active and that AMX is there: %s", out);
    char *dir = ts_tmpdir("amx");
    for (int census = 0; census < 2; census++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/run%d", dir, census);
        cr_assert_eq(ts_sh(out, sizeof out, "build/bin/mpx run configs/toy.cfg -s train.epochs=1 -s "
                           "'precision.plugin=\"bf16-master\"' -s model.toy.dim=128 -s model.toy.hidden=256 -s "
                           "backend.cpu.subnormal_census=%s -s 'backend.cpu.bf16_gemm=\"auto\"' --out %s 2>&1",
                           census ? "true" : "false", path),
                     0, "%s", out);
        snprintf(path, sizeof path, "%s/run%d/run.json", dir, census);
        char *rec = ts_slurp(path, NULL);
        cr_assert_not_null(rec);
        cr_expect(strstr(rec, census ? "bf16 GEMMs: fma (subnormal census)" : "bf16 GEMMs: amx"),
                  "run.json does not say which bf16 path ran (census %d)", census);
        if (census)
            cr_expect(strstr(out, "subnormal census: 64 GEMMs the AMX path would take (bf16 and 8-bit); subnormal inputs"),
                      "no census note: %s", out);
        free(rec);
    }
}

/* ---- the 8-bit GEMMs on the tiles: quantised while packed ----
 * C = A I (I the identity, quantised exactly under every recipe): each element of C is
 * one product, so any accumulation gives its bits, and C holds A as the GEMM quantised
 * it. The AMX path (quantising while it packs, or from the quantised buffer for MX blocks
 * down the stored columns) must give the fma path's bits and counts, for every recipe and
 * every layout of A and I. */
typedef struct rig8 {
    mpx_env *env;
    const mpx_ops *ops;
    void *be;
} rig8;

static rig8 open_rig8(mpx_scaling recipe, const char *bf16_gemm)
{
    mpx_precision_desc d = th_fp32_policy();
    d.scaling = recipe;
    d.amax_history_len = 4;
    rig8 r = { .env = th_env(NULL, NULL, &d) };
    char opts[128];
    snprintf(opts, sizeof opts, "threads = 2; bf16_gemm = \"%s\";", bf16_gemm);
    cr_assert_eq(th_use_cpu_backend(r.env, opts), 0, "%s", th_error(r.env));
    r.ops = r.env->host->ops(r.env, &r.be);
    return r;
}

static void gemm8(rig8 *r, int ta, int tb, const float *a, int m, int k, const float *bmat, int n, float *c)
{
    float *A = r->ops->alloc(r->be, (size_t)m * k * 4), *B = r->ops->alloc(r->be, (size_t)k * n * 4);
    float *C = r->ops->alloc(r->be, (size_t)m * n * 4);
    cr_assert(A && B && C);
    /* a holds op(A) row-major (m x k); stored transposed when ta */
    for (int i = 0; i < m; i++)
        for (int l = 0; l < k; l++) A[ta ? (size_t)l * m + i : (size_t)i * k + l] = a[(size_t)i * k + l];
    for (int l = 0; l < k; l++)
        for (int j = 0; j < n; j++) B[tb ? (size_t)j * k + l : (size_t)l * n + j] = bmat[(size_t)l * n + j];
    mpx_gemm g = { .trans_a = ta, .trans_b = tb, .m = m, .n = n, .k = k, .alpha = 1.0f, .beta = 0.0f,
                   .a = mpx_a(A, MPX_F32), .lda = ta ? m : k, .b = mpx_a(B, MPX_F32), .ldb = tb ? k : n,
                   .c = mpx_a(C, MPX_F32), .ldc = n, .batch = 1, .compute = MPX_FP8_E4M3 };
    cr_assert_eq(r->ops->gemm(r->be, &g), 0, "%s", th_error(r->env));
    memcpy(c, C, (size_t)m * n * 4);
    r->ops->free(r->be, A);
    r->ops->free(r->be, B);
    r->ops->free(r->be, C);
}

Test(amx, eight_bit_gemms_quantise_while_packing_bit_for_bit, .timeout = 120)
{
    tb t = open_amx(1);   /* skipped without AMX */
    tb_close(&t);
    const int m = 160, k = 128, n = 128;
    float *a = malloc((size_t)m * k * 4), *eye = calloc((size_t)k * n, 4), *c1 = malloc((size_t)m * n * 4),
          *c2 = malloc((size_t)m * n * 4);
    cr_assert(a && eye && c1 && c2);
    uint64_t st = 99;
    for (int i = 0; i < m * k; i++) {   /* magnitudes over 2^-12 .. 2^12: flushed, rounded and saturated values */
        double u = (double)(rng_next(&st) >> 11) * 0x1p-53;
        a[i] = (float)(ldexp(1.0 + u, (int)(rng_next(&st) % 25) - 12) * ((rng_next(&st) & 1) ? -1 : 1));
    }
    a[5] = NAN;   /* one NaN: the MX block and the per-tensor amax see it */
    for (int l = 0; l < k; l++) eye[(size_t)l * n + l] = 1.0f;
    const mpx_scaling recipes[] = { MPX_SCALING_NONE, MPX_SCALING_CURRENT, MPX_SCALING_DELAYED, MPX_SCALING_MX };
    const char *names[] = { "none", "current", "delayed", "mx" };
    for (int ri = 0; ri < 4; ri++)
        for (int ta = 0; ta < 2; ta++)
            for (int tbb = 0; tbb < 2; tbb++) {
                rig8 f = open_rig8(recipes[ri], "fma"), x = open_rig8(recipes[ri], "amx");
                for (int rep = 0; rep < 2; rep++) {   /* delayed: the second call uses the first's amax */
                    gemm8(&f, ta, tbb, a, m, k, eye, n, c1);
                    gemm8(&x, ta, tbb, a, m, k, eye, n, c2);
                }
                long bad = 0;
                for (int i = 0; i < m * n; i++)
                    bad += memcmp(&c1[i], &c2[i], 4) != 0 && !(isnan(c1[i]) && isnan(c2[i]));
                cr_expect_eq(bad, 0, "recipe %s, ta %d, tb %d: %ld of %d elements differ between fma and amx",
                             names[ri], ta, tbb, bad, m * n);
                mpx_quant_stats fa, fb, xa, xb;
                th_last_gemm_stats(f.env, &fa, &fb);
                th_last_gemm_stats(x.env, &xa, &xb);
                cr_expect(fa.n == xa.n && fa.nonzero == xa.nonzero && fa.saturated == xa.saturated &&
                          fa.flushed == xa.flushed && fb.n == xb.n && fb.nonzero == xb.nonzero &&
                          (same_bits(fa.scale, xa.scale) || (isnan(fa.scale) && isnan(xa.scale))),
                          "recipe %s, ta %d, tb %d: counts differ: fma %llu/%llu/%llu/%llu, amx %llu/%llu/%llu/%llu",
                          names[ri], ta, tbb, (unsigned long long)fa.n, (unsigned long long)fa.nonzero,
                          (unsigned long long)fa.saturated, (unsigned long long)fa.flushed, (unsigned long long)xa.n,
                          (unsigned long long)xa.nonzero, (unsigned long long)xa.saturated,
                          (unsigned long long)xa.flushed);
                cr_expect(fa.saturated > 0 || ri != 0, "the inputs saturate nothing: the test would not see it");
                th_env_free(f.env);
                th_env_free(x.env);
            }
    free(a); free(eye); free(c1); free(c2);
}
