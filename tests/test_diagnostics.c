/* Diagnostics on constructed cases (stalled updates, gradient underflow) and on a run:
 * fp16 without loss scaling underflows where fp16-scaled does not. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "../core/engine/diagnostics.h"
#include "support/test_host.h"

/* 4,096 weights in [1, 2) updated once by `u` with nearest rounding; the stalled fraction. */
static double stalled_after(mpx_dtype wt, float u)
{
    enum { N = 4096 };
    mpx_precision_desc d = th_fp32_policy();
    d.weights = wt;
    mpx_env *env = th_env(NULL, NULL, &d);
    cr_assert_eq(th_use_cpu_backend(env, "threads = 1;"), 0, "%s", th_error(env));
    size_t ws = mpx_dtype_size(wt);
    void *w = env->host->alloc(env, MPX_ROLE_WEIGHTS, N * ws, "w");
    unsigned char before[N * 4];
    float *upd = env->host->alloc(env, MPX_ROLE_SCRATCH, N * 4, "u");
    for (int i = 0; i < N; i++) {
        float v = 1.0f + (float)i / N;
        if (wt == MPX_F32) ((float *)w)[i] = v;
        else ((uint16_t *)w)[i] = mpx_f32_to_bf16(v);
        upd[i] = u;
    }
    memcpy(before, w, N * ws);
    th_set_update_target(env, mpx_a(w, wt), mpx_a(NULL, wt));
    mpx_piece piece = { .param = 0, .offset = 0, .len = N, .tensor_numel = N, .site = 1 };
    cr_assert_eq(env->host->apply_update(env, &piece, upd), 0, "%s", th_error(env));
    uint64_t updated = 0, stalled = 0;
    mpx_diag_stalled(before, w, wt, upd, N, &updated, &stalled);
    cr_assert_eq(updated, N);
    th_env_free(env);
    return (double)stalled / (double)updated;
}

Test(diagnostics, updates_below_half_an_ulp_all_stall_under_nearest)
{
    /* bf16 in [1, 2): ulp 2^-7, half an ulp 2^-8 */
    cr_expect_eq(stalled_after(MPX_BF16, 0x1p-8f / 10), 1.0);
    cr_expect_eq(stalled_after(MPX_F32, 0x1p-8f / 10), 0.0);
    cr_expect_eq(stalled_after(MPX_BF16, 0x1p-6f), 0.0); /* two ulps: every weight moves */
}

Test(diagnostics, gradients_below_the_fp16_subnormals_all_underflow)
{
    enum { N = 1000 };
    float g[N];
    for (int i = 0; i < N; i++) g[i] = (i % 2 ? 1 : -1) * 1e-9f * (float)(1 + i % 7); /* < 2^-25 */
    uint64_t nz = 0, uf = 0;
    mpx_diag_underflow(g, N, MPX_F16, &nz, &uf);
    cr_expect_eq(nz, N);
    cr_expect_eq(uf, N);
    nz = uf = 0;
    mpx_diag_underflow(g, N, MPX_F32, &nz, &uf);
    cr_expect_eq(nz, N);
    cr_expect_eq(uf, 0);
    /* bf16 keeps fp32's exponent range: no underflow either */
    nz = uf = 0;
    mpx_diag_underflow(g, N, MPX_BF16, &nz, &uf);
    cr_expect_eq(uf, 0);
    /* zeros are not counted as gradients */
    float z[3] = { 0.0f, -0.0f, 1.0f };
    nz = uf = 0;
    mpx_diag_underflow(z, 3, MPX_F16, &nz, &uf);
    cr_expect_eq(nz, 1);
}

/* E5M2's smallest subnormal is 2^-16: half of it ties to even (0), anything above
 * rounds up to it; E4M3 (2^-9) loses all of them. */
Test(diagnostics, gradients_underflow_in_8bit_formats_by_their_own_subnormals)
{
    const mpx_format e5 = MPX_FORMAT_FP8_E5M2, e4 = MPX_FORMAT_FP8_E4M3;
    float g[6] = { 0x1p-17f, -0x1p-17f, 0x1.01p-17f, 0x1p-16f, 1.0f, 0.0f };
    uint64_t nz = 0, uf = 0;
    mpx_diag_underflow_fmt(g, 6, &e5, &nz, &uf);
    cr_expect_eq(nz, 5);
    cr_expect_eq(uf, 2);
    nz = uf = 0;
    mpx_diag_underflow_fmt(g, 6, &e4, &nz, &uf);
    cr_expect_eq(uf, 4);
}

Test(diagnostics, median)
{
    float v[5] = { 5, 1, 4, 2, 3 }, w[4] = { 4, 1, 3, 2 };
    cr_expect_eq(mpx_diag_median(v, 5), 3.0);
    cr_expect_eq(mpx_diag_median(w, 4), 2.5);
    cr_expect(isnan(mpx_diag_median(w, 0)));
}

/* Mean underflow over the run's diagnostic steps, all groups together, from diagnostics.csv. */
static double run_underflow(const char *policy, double *stalled)
{
    char dir[] = "/tmp/mpx-diag-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "build/bin/mpx run configs/tiny_squad.cfg --plugin-dir build/test-plugins "
             "-s 'precision.plugin=\"%s\"' -s train.max_steps=6 --out %s/run >%s/log 2>&1", policy, dir, dir);
    int st = system(cmd);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s", cmd);
    snprintf(cmd, sizeof cmd, "%s/run/diagnostics.csv", dir);
    FILE *f = fopen(cmd, "r");
    cr_assert_not_null(f);
    char line[512];
    double nz = 0, uf = 0, up = 0, sl = 0;
    cr_assert_not_null(fgets(line, sizeof line, f));
    while (fgets(line, sizeof line, f)) {
        long long step;
        char group[32];
        double n, u, m, s;
        if (sscanf(line, "%lld,%31[^,],%lf,%lf,%lf,%lf", &step, group, &n, &u, &m, &s) < 6) continue;
        nz += n;
        uf += n * u;
        up += m;
        sl += m * s;
    }
    fclose(f);
    cr_assert_gt(nz, 0);
    *stalled = sl / up;
    return uf / nz;
}

Test(diagnostics, fp16_without_loss_scaling_underflows_more_than_fp16_scaled)
{
    double st_a, st_b;   /* (fp32 is never counted as underflowing: no fp32 run to compare) */
    double noscale = run_underflow("fp16-noscale", &st_a);
    double scaled = run_underflow("fp16-scaled", &st_b);
    cr_expect_gt(noscale, 0.0, "fp16-noscale underflow %g", noscale);
    cr_expect_lt(scaled, noscale, "fp16-scaled %g vs fp16-noscale %g", scaled, noscale);
}

/* Every width the weights can have (fp8 formats, 16-bit, fp32): an element counts as
 * updated when its update is nonzero, and as stalled when it is also bit-for-bit unchanged
 * (a weight that moved by -0 vs +0, or any bit, is not stalled); counted here one byte at a
 * time. */
Test(diagnostics, stalled_counts_bitwise_equal_elements_with_nonzero_updates)
{
    enum { N = 1003 };
    const mpx_dtype types[3] = { MPX_F32, MPX_BF16, MPX_FP8_E4M3 };
    for (int t = 0; t < 3; t++) {
        size_t w = mpx_dtype_size(types[t]);
        unsigned char a[N * 4], b[N * 4];
        float upd[N];
        unsigned seed = 7u + (unsigned)t;
        for (size_t i = 0; i < N * w; i++) {
            seed = seed * 1664525u + 1013904223u;
            a[i] = b[i] = (unsigned char)(seed >> 24);
            if ((seed >> 8) % 5 == 0) b[i] ^= (unsigned char)(1u << ((seed >> 12) % 8)); /* one bit of one byte */
        }
        uint64_t want_up = 0, want_st = 0;
        for (size_t i = 0; i < N; i++) {
            upd[i] = i % 3 == 0 ? 0.0f : 1e-3f;
            if (upd[i] == 0.0f) continue;
            want_up++;
            int same = 1;
            for (size_t k = 0; k < w; k++) same &= a[i * w + k] == b[i * w + k];
            want_st += (uint64_t)same;
        }
        uint64_t up = 0, st = 0;
        mpx_diag_stalled(a, b, types[t], upd, N, &up, &st);
        cr_expect_eq(up, want_up, "width %zu: updated %llu, want %llu", w, (unsigned long long)up, (unsigned long long)want_up);
        cr_expect_eq(st, want_st, "width %zu: stalled %llu, want %llu", w, (unsigned long long)st, (unsigned long long)want_st);
        cr_expect(want_st > 0 && want_st < want_up, "the case mixes stalled and moved elements");
    }
}
