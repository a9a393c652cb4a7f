/* Scaling recipes and 8-bit formats in the CPU backend.
 *  - delayed scaling (core/engine/scaling.c) reproduces the reference trace of Transformer
 *    Engine's amax_and_scale_update on a fixed amax sequence
 *    (tests/fixtures/scaling/make_delayed_trace.py: TE's algorithm transcribed to numpy,
 *    TE itself needs CUDA), for E4M3/E5M2, several history lengths, both algorithms and
 *    margins; current scaling by hand;
 *  - formats as storage: a cast into fp8-e4m3 takes 1 byte per element and rounds as
 *    mpx/formats.h (which test_formats holds against ml_dtypes);
 *  - GEMMs with an 8-bit compute dtype: MX block scaling against the OCP MX v1.0 rules
 *    computed here independently (frexp for the shared exponent), per-tensor current
 *    and delayed scaling against q(x * s) / s with the recipe's s. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/engine/scaling.h"
#include "test_host.h"

static float hexf(json_t *s)
{
    uint32_t u = (uint32_t)strtoul(json_string_value(s), NULL, 16);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static int same_float(float a, float b) { return memcmp(&a, &b, 4) == 0; }

Test(delayed, reproduces_transformer_engine_trace)
{
    json_error_t jerr;
    json_t *root = json_load_file("tests/fixtures/scaling/delayed_trace.json", 0, &jerr);
    cr_assert(root, "delayed_trace.json:%d: %s", jerr.line, jerr.text);
    json_t *amax = json_object_get(root, "amax"), *cases = json_object_get(root, "cases");
    cr_assert_eq(json_array_size(cases), 10);
    static const mpx_format e4 = MPX_FORMAT_FP8_E4M3, e5 = MPX_FORMAT_FP8_E5M2;
    for (size_t c = 0; c < json_array_size(cases); c++) {
        json_t *k = json_array_get(cases, c);
        int is_e4 = !strcmp(json_string_value(json_object_get(k, "format")), "fp8-e4m3");
        mpx_precision_desc d = { .size = sizeof d, .scaling = MPX_SCALING_DELAYED,
            .amax_history_len = (int32_t)json_integer_value(json_object_get(k, "amax_history_len")),
            .amax_algo = strcmp(json_string_value(json_object_get(k, "amax_compute_algo")), "max")
                             ? MPX_AMAX_MOST_RECENT : MPX_AMAX_MAX,
            .margin = (int32_t)json_integer_value(json_object_get(k, "margin")) };
        mpx_scaling_state st;
        mpx_scaling_init(&st, &d);
        json_t *used = json_object_get(k, "scales_used");
        static const int key = 0;
        for (size_t t = 0; t < json_array_size(amax); t++) {
            float s;
            cr_assert_eq(mpx_scaling_get(&st, is_e4 ? MPX_FP8_E4M3 : MPX_FP8_E5M2, is_e4 ? &e4 : &e5, &key, "x",
                                         hexf(json_array_get(amax, t)), &s), 0);
            float want = hexf(json_array_get(used, t));
            cr_expect(same_float(s, want), "case %zu (len %d, margin %d) step %zu: scale %a, TE %a", c,
                      d.amax_history_len, d.margin, t, s, want);
            mpx_scaling_end_step(&st);
        }
        float s;
        cr_assert_eq(mpx_scaling_get(&st, is_e4 ? MPX_FP8_E4M3 : MPX_FP8_E5M2, is_e4 ? &e4 : &e5, &key, "x", 1.0f, &s), 0);
        cr_expect(same_float(s, hexf(json_object_get(k, "final_scale"))), "case %zu final scale %a", c, s);
        cr_expect_eq(st.n, 1u, "one tensor, one entry");
        mpx_scaling_free(&st);
    }
    json_decref(root);
}

Test(current, scale_is_max_over_amax_now)
{
    cr_expect_eq(mpx_current_scale(2.0f, 448.0f, 0), 224.0f);
    cr_expect_eq(mpx_current_scale(2.0f, 448.0f, 3), 28.0f);
    cr_expect_eq(mpx_current_scale(0.0f, 448.0f, 0), 1.0f);
    cr_expect_eq(mpx_current_scale(INFINITY, 57344.0f, 0), 1.0f);
}

/* ---- the backend ---- */

typedef struct rig {
    mpx_env *env;
    const mpx_ops *ops;
    void *be;
    float *a, *I, *c;      /* fixed buffers: delayed scaling keys tensors by address */
} rig;

#define RIG_MAX (5 * 80)

static rig open_rig(mpx_scaling recipe)
{
    mpx_precision_desc d = th_fp32_policy();
    d.scaling = recipe;
    d.amax_history_len = 4;
    rig r = { .env = th_env(NULL, NULL, &d) };
    cr_assert_eq(th_use_cpu_backend(r.env, "threads = 2;"), 0, "%s", th_error(r.env));
    r.ops = r.env->host->ops(r.env, &r.be);
    cr_assert_not_null(r.ops);
    r.a = r.ops->alloc(r.be, RIG_MAX * 4);
    r.I = r.ops->alloc(r.be, 80 * 80 * 4);
    r.c = r.ops->alloc(r.be, RIG_MAX * 4);
    cr_assert(r.a && r.I && r.c);
    return r;
}

static float urand(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

Test(storage, fp8_cast_takes_one_byte_and_rounds_as_the_header)
{
    rig r = open_rig(MPX_SCALING_NONE);
    const size_t n = 5000;
    float *x = r.ops->alloc(r.be, n * 4), *back = r.ops->alloc(r.be, n * 4);
    uint8_t *q = r.ops->alloc(r.be, n);
    uint64_t seed = 7;
    for (size_t i = 0; i < n; i++) x[i] = urand(&seed) * 600.0f;
    static const mpx_format e4 = MPX_FORMAT_FP8_E4M3;
    cr_assert_eq(mpx_dtype_size(MPX_FP8_E4M3), 1u);
    cr_assert_eq(r.ops->cast(r.be, mpx_a(x, MPX_F32), mpx_a(q, MPX_FP8_E4M3), n), 0, "%s", th_error(r.env));
    cr_assert_eq(r.ops->cast(r.be, mpx_a(q, MPX_FP8_E4M3), mpx_a(back, MPX_F32), n), 0, "%s", th_error(r.env));
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(q[i], mpx_fmt_encode(&e4, x[i]), "element %zu: %g", i, x[i]);
        float want = mpx_fmt_decode(&e4, q[i]);
        cr_assert(same_float(back[i], want) || (isnan(back[i]) && isnan(want)));
    }
    th_env_free(r.env);
}

/* C = A · I with A m×k: C holds A as the GEMM quantized it (B = I quantizes exactly:
 * every block holds one 1 or nothing; per tensor, 1 -> fmt_max). */
static void gemm_identity(rig *r, const float *A, int m, int k, mpx_dtype t, float *C)
{
    float *a = r->a, *I = r->I, *c = r->c;
    memcpy(a, A, (size_t)m * k * 4);
    memset(I, 0, (size_t)k * k * 4);
    for (int i = 0; i < k; i++) I[(size_t)i * k + i] = 1.0f;
    mpx_gemm g = { .m = m, .n = k, .k = k, .alpha = 1.0f, .beta = 0.0f, .a = mpx_a(a, MPX_F32), .lda = k,
                   .b = mpx_a(I, MPX_F32), .ldb = k, .c = mpx_a(c, MPX_F32), .ldc = k, .batch = 1, .compute = t };
    cr_assert_eq(r->ops->gemm(r->be, &g), 0, "%s", th_error(r->env));
    memcpy(C, c, (size_t)m * k * 4);
}

Test(mx, gemm_quantizes_32_blocks_along_k_with_e8m0_scales)
{
    rig r = open_rig(MPX_SCALING_MX);
    const int m = 5, k = 80;             /* 2 full blocks and one of 16 per row */
    float A[5 * 80], C[5 * 80];
    uint64_t seed = 3;
    for (int i = 0; i < m * k; i++) A[i] = urand(&seed) * ldexpf(1.0f, (i / 7) % 40 - 20);
    A[3] = 0.0f;
    for (int i = 32; i < 64; i++) A[i] = 0.0f;   /* an all-zero block */
    static const mpx_format fmts[2] = { MPX_FORMAT_FP8_E4M3, MPX_FORMAT_FP8_E5M2 };
    const mpx_dtype ts[2] = { MPX_FP8_E4M3, MPX_FP8_E5M2 };
    const int emax[2] = { 8, 15 };
    for (int f = 0; f < 2; f++) {
        gemm_identity(&r, A, m, k, ts[f], C);
        for (int row = 0; row < m; row++)
            for (int b0 = 0; b0 < k; b0 += 32) {
                int b1 = b0 + 32 < k ? b0 + 32 : k;
                double amax = 0;
                for (int j = b0; j < b1; j++) amax = fmax(amax, fabs(A[row * k + j]));
                int e;
                frexp(amax, &e);              /* amax = f * 2^e, f in [0.5, 1): floor(log2) = e - 1 */
                int X = amax > 0 ? e - 1 - emax[f] : -127;
                if (X < -127) X = -127;
                for (int j = b0; j < b1; j++) {
                    float v = (float)ldexp(A[row * k + j], -X);
                    float want = (float)ldexp(mpx_fmt_decode(&fmts[f], mpx_fmt_encode_sat(&fmts[f], v)), X);
                    cr_expect(C[row * k + j] == want, "%s row %d col %d: %a -> %a, want %a (X = %d)",
                              fmts[f].name, row, j, A[row * k + j], C[row * k + j], want, X);
                }
            }
    }
    th_env_free(r.env);
}

Test(per_tensor, current_and_delayed_scales_reach_the_gemm)
{
    static const mpx_format e4 = MPX_FORMAT_FP8_E4M3;
    const int m = 4, k = 48;
    float A[4 * 48], C[4 * 48];
    uint64_t seed = 11;
    float amax = 0;
    for (int i = 0; i < m * k; i++) { A[i] = urand(&seed) * 3e-3f; amax = fmaxf(amax, fabsf(A[i])); }
    for (int pass = 0; pass < 2; pass++) {
        rig r = open_rig(pass ? MPX_SCALING_DELAYED : MPX_SCALING_CURRENT);
        /* delayed: the first step uses scale 1 (values deep in the subnormals); after
         * the step the scale is 448 / amax as for current scaling */
        for (int step = 0; step < (pass ? 2 : 1); step++) {
            gemm_identity(&r, A, m, k, MPX_FP8_E4M3, C);
            float s = pass && step == 0 ? 1.0f : 448.0f / amax;
            /* B = I per tensor: amax 1 -> scale sb = 448 (delayed, first step: 1), exact in
             * E4M3; the GEMM multiplies by alpha (1/s)(1/sb) */
            float sb = pass && step == 0 ? 1.0f : 448.0f;
            float alpha = 1.0f * (1.0f / s) * (1.0f / sb);
            for (int i = 0; i < m * k; i++) {
                float want = alpha * (mpx_fmt_decode(&e4, mpx_fmt_encode_sat(&e4, A[i] * s)) * sb);
                cr_expect(fabsf(C[i] - want) <= 2e-7f * fabsf(want), "%s step %d [%d]: %a, want %a",
                          pass ? "delayed" : "current", step, i, C[i], want);
            }
            th_scaling_end_step(r.env);
        }
        th_env_free(r.env);
    }
}

/* What the GEMM reports of its inputs' rounding (ABI 1.8, for the diagnostics), against
 * counts derived by hand from E4M3's limits: largest finite 448, smallest subnormal 2^-9
 * (so 2^-10, a tie, rounds to even: 0). Without a recipe (scale 1): 1000 and -600
 * saturate, 1e-5 and 2^-10 flush to zero, 3e-3 (a subnormal), 0.5 and 448 stay, the zero
 * and the NaN are not counted as non-zero; B = I has k non-zero ones, none lost. With
 * current scaling (448 / amax) nothing saturates and only what stays below 2^-10 after
 * scaling flushes. */
Test(stats, gemm_counts_saturated_and_flushed_inputs)
{
    const int m = 1, k = 10;
    const float A[10] = { 1000.0f, -600.0f, 1e-5f, 0x1p-10f, 3e-3f, 0.5f, 448.0f, 0.0f, NAN, -0.25f };
    float C[10];
    for (int pass = 0; pass < 2; pass++) {
        rig r = open_rig(pass ? MPX_SCALING_CURRENT : MPX_SCALING_NONE);
        gemm_identity(&r, A, m, k, MPX_FP8_E4M3, C);
        mpx_quant_stats a, b;
        cr_assert_eq(th_last_gemm_stats(r.env, &a, &b), 1, "one report per GEMM");
        cr_expect_eq(a.n, 10u);
        cr_expect_eq(a.nonzero, 8u, "non-zero: %llu", (unsigned long long)a.nonzero);
        cr_expect_eq(b.n, 100u);
        cr_expect_eq(b.nonzero, 10u);
        cr_expect_eq(b.saturated + b.flushed, 0u);
        if (!pass) {
            cr_expect_eq(a.saturated, 2u, "saturated: %llu", (unsigned long long)a.saturated);
            cr_expect_eq(a.flushed, 2u, "flushed: %llu", (unsigned long long)a.flushed);
            cr_expect_eq(a.scale, 1.0f);
        } else {
            /* the NaN makes amax NaN: current scaling then keeps scale 1 (mpx_current_scale) */
            cr_expect_eq(a.scale, 1.0f, "scale %g", a.scale);
            cr_expect_eq(a.saturated, 2u);
        }
        th_env_free(r.env);
    }
    /* current scaling without the NaN: scale 448 / 1000 = 0.448; 1000 -> 448 exactly at
     * the limit (not above it), 1e-5 -> 4.5e-6 and 2^-10 -> 4.4e-4 flush, 3e-3 -> 1.3e-3
     * rounds to 2^-9 (kept) */
    float B[10];
    memcpy(B, A, sizeof B);
    B[8] = 0.125f;
    rig r = open_rig(MPX_SCALING_CURRENT);
    gemm_identity(&r, B, m, k, MPX_FP8_E4M3, C);
    mpx_quant_stats a, b;
    th_last_gemm_stats(r.env, &a, &b);
    cr_expect_eq(a.nonzero, 9u);
    cr_expect_eq(a.saturated, 0u, "saturated: %llu", (unsigned long long)a.saturated);
    cr_expect_eq(a.flushed, 2u, "flushed: %llu", (unsigned long long)a.flushed);
    cr_expect(fabsf(a.scale - 0.448f) < 1e-6f, "scale %g", a.scale);
    th_env_free(r.env);
}

/* ---- fp8_accumulate = "h100" / "h100-fast" (tests/fixtures/gemm/make_mmaemu_fixture.py) ----
 * The accumulators mmaemu 0.1.0 computes for an H100 (profile hopper, split-K 1), bitwise:
 * E4M3 and E5M2 operands decoded by mpx/formats.h, C = A B^T with alpha 1 in fp32, no
 * scaling recipe (the values are fp8 values already). The default fp32 accumulation
 * differs from the H100's on most outputs (a 13-bit truncation per 32-product block). */

static float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static void check_h100_mode(const char *mode, const char *key, int expect_equal)
{
    json_error_t jerr;
    json_t *root = json_load_file("tests/fixtures/gemm/mmaemu_h100.json", 0, &jerr);
    cr_assert(root, "mmaemu_h100.json: %s", jerr.text);
    mpx_precision_desc d = th_fp32_policy();
    d.scaling = MPX_SCALING_NONE;
    mpx_env *env = th_env(NULL, NULL, &d);
    char opts[128];
    snprintf(opts, sizeof opts, "threads = 1; fp8_accumulate = \"%s\";", mode);
    cr_assert_eq(th_use_cpu_backend(env, opts), 0, "%s", th_error(env));
    void *be;
    const mpx_ops *ops = env->host->ops(env, &be);
    size_t same = 0, total = 0;
    json_t *cases = json_object_get(root, "cases");
    for (size_t ci = 0; ci < json_array_size(cases); ci++) {
        json_t *c = json_array_get(cases, ci);
        int m = (int)json_integer_value(json_object_get(c, "m")), n = (int)json_integer_value(json_object_get(c, "n"));
        int k = (int)json_integer_value(json_object_get(c, "k"));
        int e5 = !strcmp(json_string_value(json_object_get(c, "format")), "e5m2");
        static const mpx_format e4m3 = MPX_FORMAT_FP8_E4M3, e5m2 = MPX_FORMAT_FP8_E5M2;
        const mpx_format *f = e5 ? &e5m2 : &e4m3;
        float *A = ops->alloc(be, (size_t)m * k * 4), *B = ops->alloc(be, (size_t)n * k * 4), *C = ops->alloc(be, (size_t)m * n * 4);
        cr_assert(A && B && C);
        for (int i = 0; i < m * k; i++) A[i] = mpx_fmt_decode(f, (uint32_t)json_integer_value(json_array_get(json_object_get(c, "a"), (size_t)i)));
        for (int i = 0; i < n * k; i++) B[i] = mpx_fmt_decode(f, (uint32_t)json_integer_value(json_array_get(json_object_get(c, "b"), (size_t)i)));
        mpx_gemm g = { .m = m, .n = n, .k = k, .alpha = 1.0f, .beta = 0.0f, .a = mpx_a(A, MPX_F32), .lda = k,
                       .b = mpx_a(B, MPX_F32), .ldb = k, .trans_b = 1, .c = mpx_a(C, MPX_F32), .ldc = n, .batch = 1,
                       .compute = e5 ? MPX_FP8_E5M2 : MPX_FP8_E4M3 };
        cr_assert_eq(ops->gemm(be, &g), 0, "%s", th_error(env));
        json_t *want = json_object_get(c, key);
        for (int i = 0; i < m * n; i++) {
            float w = bits_f32((uint32_t)json_integer_value(json_array_get(want, (size_t)i)));
            if (expect_equal)
                cr_assert(memcmp(&C[i], &w, 4) == 0, "%s %s (%s) output %d: %a, H100 per mmaemu %a", mode,
                          json_string_value(json_object_get(c, "name")), key, i, C[i], w);
            same += memcmp(&C[i], &w, 4) == 0;
            total++;
        }
        ops->free(be, A);
        ops->free(be, B);
        ops->free(be, C);
    }
    if (!expect_equal)
        cr_expect(same * 2 < total, "fp32 accumulation equals the H100's on %zu of %zu outputs", same, total);
    cr_log_info("fp8_accumulate = %s against mmaemu's %s accumulators: %zu of %zu outputs bitwise equal", mode, key, same, total);
    th_env_free(env);
    json_decref(root);
}

Test(h100, slow_accumulation_matches_mmaemu_bitwise) { check_h100_mode("h100", "slow", 1); }
Test(h100, fast_accumulation_matches_mmaemu_bitwise) { check_h100_mode("h100-fast", "fast", 1); }
Test(h100, fp32_accumulation_is_not_the_h100s) { check_h100_mode("fp32", "slow", 0); }

/* The mode refuses what an H100 has no fp8 GEMM for: MX block scales, 6- and 4-bit formats. */
Test(h100, refuses_mx_and_other_formats)
{
    mpx_precision_desc d = th_fp32_policy();
    d.scaling = MPX_SCALING_MX;
    mpx_env *env = th_env(NULL, NULL, &d);
    cr_assert_eq(th_use_cpu_backend(env, "threads = 1; fp8_accumulate = \"h100\";"), 0, "%s", th_error(env));
    void *be;
    const mpx_ops *ops = env->host->ops(env, &be);
    float *x = ops->alloc(be, 64 * 4), *y = ops->alloc(be, 64 * 4);
    cr_assert(x && y);
    mpx_gemm g = { .m = 1, .n = 1, .k = 64, .alpha = 1.0f, .a = mpx_a(x, MPX_F32), .lda = 64, .b = mpx_a(x, MPX_F32),
                   .ldb = 1, .c = mpx_a(y, MPX_F32), .ldc = 1, .batch = 1, .compute = MPX_FP8_E4M3 };
    cr_expect_neq(ops->gemm(be, &g), 0);
    cr_expect(strstr(th_error(th_backend_env(env)), "MX"), "%s", th_error(th_backend_env(env)));
    th_env_free(env);
}

/* ---- the vectorised quantisation (cpu_quant.c) against the header's encoder ----
 * C = A B with K = 1 and B = ones: C's column 0 holds each A value as the GEMM quantised
 * it. A holds every fp32 high half with eight low halves (ties, their neighbours, the
 * ends of each binade's half-step), 524,288 values through each built-in format; each
 * must be bit for bit mpx_fmt_decode(mpx_fmt_encode_sat(x)) (NaN for NaN), and the
 * counts those of the scalar rule (count_quant). */
Test(quantize, every_high_half_matches_the_header_bit_for_bit, .timeout = 120)
{
    static const uint16_t lows[8] = { 0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff, 0x1234, 0xc000 };
    static const mpx_format fmts[5] = { MPX_FORMAT_FP8_E4M3, MPX_FORMAT_FP8_E5M2, MPX_FORMAT_FP6_E3M2,
                                        MPX_FORMAT_FP6_E2M3, MPX_FORMAT_FP4_E2M1 };
    static const mpx_dtype dts[5] = { MPX_FP8_E4M3, MPX_FP8_E5M2, MPX_FP6_E3M2, MPX_FP6_E2M3, MPX_FP4_E2M1 };
    const int m = 65536 * 8, n = 16;
    rig r = open_rig(MPX_SCALING_NONE);
    float *a = r.ops->alloc(r.be, (size_t)m * 4), *ones = r.ops->alloc(r.be, (size_t)n * 4);
    float *c = r.ops->alloc(r.be, (size_t)m * n * 4);
    cr_assert(a && ones && c);
    for (int i = 0; i < m; i++) {
        uint32_t u = (uint32_t)(i >> 3) << 16 | lows[i & 7];
        memcpy(&a[i], &u, 4);
    }
    for (int j = 0; j < n; j++) ones[j] = 1.0f;
    for (int f = 0; f < 5; f++) {
        mpx_gemm g = { .m = m, .n = n, .k = 1, .alpha = 1.0f, .beta = 0.0f, .a = mpx_a(a, MPX_F32), .lda = 1,
                       .b = mpx_a(ones, MPX_F32), .ldb = n, .c = mpx_a(c, MPX_F32), .ldc = n, .batch = 1,
                       .compute = dts[f] };
        cr_assert_eq(r.ops->gemm(r.be, &g), 0, "%s", th_error(r.env));
        uint64_t nz = 0, sat = 0, fl = 0;
        long bad = 0;
        for (int i = 0; i < m; i++) {
            float want = mpx_fmt_decode(&fmts[f], mpx_fmt_encode_sat(&fmts[f], a[i])), got = c[(size_t)i * n];
            /* (a zero's sign is the GEMM's: +0 + -0 products give +0) */
            if (!(same_float(got, want) || (got == 0.0f && want == 0.0f) || (isnan(got) && isnan(want))) && bad++ < 5)
                cr_log_error("%s: x = %a (0x%08x): got %a, the header %a", fmts[f].name, (double)a[i],
                             (unsigned)((uint32_t)(i >> 3) << 16 | lows[i & 7]), (double)got, (double)want);
            if (a[i] != 0.0f && !isnan(a[i])) {
                nz++;
                if (mpx_fmt_saturates(&fmts[f], a[i])) sat++;
                else if (want == 0.0f) fl++;
            }
        }
        cr_expect_eq(bad, 0, "%s: %ld of %d values differ from the header's rounding", fmts[f].name, bad, m);
        mpx_quant_stats sa, sb;
        cr_assert_eq(th_last_gemm_stats(r.env, &sa, &sb), f + 1, "one report per GEMM");
        cr_expect(sa.n == (uint64_t)m && sa.nonzero == nz && sa.saturated == sat && sa.flushed == fl,
                  "%s counts: n %llu nonzero %llu saturated %llu flushed %llu; the scalar rule: %d %llu %llu %llu",
                  fmts[f].name, (unsigned long long)sa.n, (unsigned long long)sa.nonzero,
                  (unsigned long long)sa.saturated, (unsigned long long)sa.flushed, m, (unsigned long long)nz,
                  (unsigned long long)sat, (unsigned long long)fl);
    }
    th_env_free(r.env);
}

/* The same reference when K runs down the stored columns (op(A) = A^T, 40 rows: the
 * vectorised blocks take 16 columns at a time, the rest one by one), with a NaN that
 * makes its block NaN and leaves the other columns of its group as they are. */
Test(mx, blocks_down_stored_columns_match_the_reference)
{
    rig r = open_rig(MPX_SCALING_MX);
    const int m = 40, k = 80;
    float *A = malloc((size_t)m * k * 4), *C = malloc((size_t)m * k * 4);
    float *At = r.ops->alloc(r.be, (size_t)m * k * 4), *I = r.ops->alloc(r.be, (size_t)k * k * 4);
    float *Cd = r.ops->alloc(r.be, (size_t)m * k * 4);
    cr_assert(A && C && At && I && Cd);
    uint64_t seed = 5;
    for (int i = 0; i < m * k; i++) A[i] = urand(&seed) * ldexpf(1.0f, (i / 7) % 40 - 20);
    for (int j = 32; j < 64; j++) A[3 * k + j] = 0.0f;   /* an all-zero block */
    A[20 * k + 5] = NAN;   /* row 20's first block NaN (and, through the product with I's zeros, all of C's row 20) */
    for (int i = 0; i < m; i++)
        for (int l = 0; l < k; l++) At[(size_t)l * m + i] = A[(size_t)i * k + l];
    for (int l = 0; l < k; l++) I[(size_t)l * k + l] = 1.0f;
    static const mpx_format e4 = MPX_FORMAT_FP8_E4M3;
    mpx_gemm g = { .trans_a = 1, .m = m, .n = k, .k = k, .alpha = 1.0f, .beta = 0.0f, .a = mpx_a(At, MPX_F32),
                   .lda = m, .b = mpx_a(I, MPX_F32), .ldb = k, .c = mpx_a(Cd, MPX_F32), .ldc = k, .batch = 1,
                   .compute = MPX_FP8_E4M3 };
    cr_assert_eq(r.ops->gemm(r.be, &g), 0, "%s", th_error(r.env));
    memcpy(C, Cd, (size_t)m * k * 4);
    for (int row = 0; row < m; row++)
        for (int b0 = 0; b0 < k; b0 += 32) {
            int b1 = b0 + 32 < k ? b0 + 32 : k, nan = row == 20;
            double amax = 0;
            for (int j = b0; j < b1; j++) amax = fmax(amax, fabs(A[row * k + j]));
            int e;
            frexp(amax, &e);
            int X = amax > 0 ? e - 1 - 8 : -127;
            if (X < -127) X = -127;
            for (int j = b0; j < b1; j++) {
                float v = (float)ldexp(A[row * k + j], -X);
                float want = (float)ldexp(mpx_fmt_decode(&e4, mpx_fmt_encode_sat(&e4, v)), X);
                if (nan) cr_expect(isnan(C[row * k + j]), "row %d col %d: a NaN row gave %a", row, j, C[row * k + j]);
                else cr_expect(C[row * k + j] == want, "row %d col %d: %a -> %a, want %a (X = %d)", row, j,
                               A[row * k + j], C[row * k + j], want, X);
            }
        }
    free(A);
    free(C);
    th_env_free(r.env);
}

/* Batched 8-bit GEMMs (attention) spread their items over the threads, each thread
 * quantising its own items: the bits and counts of one thread, which quantises the whole
 * operand first, for every recipe (the per-tensor scale is the whole batch's either way). */
static void batched8(mpx_scaling recipe, int threads, int ta, int tb, float *out, mpx_quant_stats *sa)
{
    mpx_precision_desc d = th_fp32_policy();
    d.scaling = recipe;
    d.amax_history_len = 4;
    mpx_env *env = th_env(NULL, NULL, &d);
    char opts[64];
    snprintf(opts, sizeof opts, "threads = %d;", threads);
    cr_assert_eq(th_use_cpu_backend(env, opts), 0, "%s", th_error(env));
    void *be;
    const mpx_ops *ops = env->host->ops(env, &be);
    const int m = 64, n = 32, k = 96, batch = 8;
    uint16_t *A = ops->alloc(be, (size_t)batch * m * k * 2), *B = ops->alloc(be, (size_t)batch * k * n * 2);
    float *C = ops->alloc(be, (size_t)batch * m * n * 4);
    cr_assert(A && B && C);
    uint64_t seed = 11;
    for (int i = 0; i < batch * m * k; i++) A[i] = mpx_f32_to_bf16(urand(&seed) * ldexpf(1.0f, i % 23 - 11));
    for (int i = 0; i < batch * k * n; i++) B[i] = mpx_f32_to_bf16(urand(&seed) * 4.0f);
    mpx_gemm g = { .trans_a = ta, .trans_b = tb, .m = m, .n = n, .k = k, .alpha = 1.0f, .beta = 0.0f,
                   .a = mpx_a(A, MPX_BF16), .lda = ta ? m : k, .stride_a = (long long)m * k, .b = mpx_a(B, MPX_BF16),
                   .ldb = tb ? k : n, .stride_b = (long long)k * n, .c = mpx_a(C, MPX_F32), .ldc = n,
                   .stride_c = (long long)m * n, .batch = batch, .compute = MPX_FP8_E4M3 };
    cr_assert_eq(ops->gemm(be, &g), 0, "%s", th_error(env));
    memcpy(out, C, (size_t)batch * m * n * 4);
    mpx_quant_stats sb;
    th_last_gemm_stats(env, sa, &sb);
    th_env_free(env);
}

Test(batched, items_quantised_per_thread_match_one_thread)
{
    const mpx_scaling recipes[] = { MPX_SCALING_NONE, MPX_SCALING_CURRENT, MPX_SCALING_MX };
    const int nc = 8 * 64 * 32;
    float *c1 = malloc(nc * 4), *c2 = malloc(nc * 4);
    cr_assert(c1 && c2);
    for (int r = 0; r < 3; r++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                mpx_quant_stats s1, s2;
                batched8(recipes[r], 1, ta, tb, c1, &s1);
                batched8(recipes[r], 2, ta, tb, c2, &s2);
                cr_expect_eq(memcmp(c1, c2, (size_t)nc * 4), 0, "recipe %d ta %d tb %d: 1 and 2 threads differ", r, ta, tb);
                cr_expect(s1.n == s2.n && s1.nonzero == s2.nonzero && s1.saturated == s2.saturated &&
                          s1.flushed == s2.flushed && (s1.scale == s2.scale || (isnan(s1.scale) && isnan(s2.scale))),
                          "recipe %d ta %d tb %d: counts differ (%llu/%llu/%llu vs %llu/%llu/%llu)", r, ta, tb,
                          (unsigned long long)s1.nonzero, (unsigned long long)s1.saturated,
                          (unsigned long long)s1.flushed, (unsigned long long)s2.nonzero,
                          (unsigned long long)s2.saturated, (unsigned long long)s2.flushed);
            }
    free(c1);
    free(c2);
}
