/* Precision policies end to end: each policy trains the toy model; counted model-state
 * bytes per parameter; fp16-scaled skips an injected overflow and halves its scale; the
 * stall of small updates under nearest / stochastic / Kahan rounding; fp32 islands. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "../core/config/core_schema.h"
#include "../core/engine/session.h"
#include "support/test_host.h"

static const char *const policies[] = { "fp32", "amp", "fp16-scaled", "bf16-master", "pure-bf16" };

/* Runs the toy config with `extra` arguments into a fresh folder; returns its record. */
static json_t *toy_run(const char *env, const char *extra)
{
    char dir[] = "/tmp/mpx-precision-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s build/bin/mpx run configs/toy.cfg --out %s/run %s >%s/log 2>&1", env, dir, extra, dir);
    int st = system(cmd);
    char path[256];
    snprintf(path, sizeof path, "%s/run/run.json", dir);
    json_error_t e;
    json_t *j = json_load_file(path, 0, &e);
    cr_assert_not_null(j, "%s: %s", cmd, e.text);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: %s", cmd,
              json_string_value(json_object_get(j, "error")));
    return j;
}

static double metric(json_t *j, const char *name)
{
    return json_number_value(json_object_get(json_object_get(j, "metrics"), name));
}

Test(precision, every_policy_halves_the_toy_loss)
{
    for (size_t i = 0; i < sizeof policies / sizeof *policies; i++) {
        char extra[256];
        snprintf(extra, sizeof extra, "-s 'precision.plugin=\"%s\"'", policies[i]);
        json_t *j = toy_run("", extra);
        double first = metric(j, "first_loss"), final = metric(j, "final_loss");
        cr_expect_lt(final, 0.5 * first, "%s: loss %g -> %g", policies[i], first, final);
        json_decref(j);
    }
}

/* Adam keeps two moments: ZeRO paper's 16 bytes for mixed precision, DeepSpeed's
 * BF16_Optimizer 20, pure bf16 8, and 10 with a bf16 Kahan buffer. */
Test(precision, counted_bytes_per_parameter)
{
    static const struct { const char *policy, *rounding; double bytes; } want[] = {
        { "fp32", "policy", 16.0 },       { "amp", "policy", 16.0 },
        { "fp16-scaled", "policy", 16.0 }, { "bf16-master", "policy", 20.0 },
        { "pure-bf16", "policy", 8.0 },    { "pure-bf16", "kahan", 10.0 },
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        char extra[512];
        snprintf(extra, sizeof extra, "-s 'precision.plugin=\"%s\"' -s 'precision.rounding=\"%s\"' "
                 "-s 'optimizer.plugin=\"adam\"' -s optimizer.lr=1e-3 -s train.max_steps=2",
                 want[i].policy, want[i].rounding);
        json_t *j = toy_run("", extra);
        json_t *mem = json_object_get(j, "memory");
        cr_expect_eq(json_real_value(json_object_get(mem, "bytes_per_param")), want[i].bytes,
                     "%s/%s: %g bytes per parameter", want[i].policy, want[i].rounding,
                     json_real_value(json_object_get(mem, "bytes_per_param")));
        json_decref(j);
    }
}

/* Step 0 overflows by itself: fp16-scaled's loss is fp16 and the seed 2^16 is inf there
 * (DeepSpeed's effective 2^15 cap, test_upstream.c); step 3 by injection. */
Test(precision, fp16_scaled_skips_an_injected_overflow_and_halves_the_scale)
{
    json_t *j = toy_run("MPX_INJECT_OVERFLOW_AT_STEP=3", "-s 'precision.plugin=\"fp16-scaled\"' -s train.max_steps=10");
    cr_expect_eq(metric(j, "skipped_steps"), 2);
    cr_expect_eq(metric(j, "overflow_count"), 2);
    cr_expect_eq(metric(j, "updates"), 8);
    json_t *trace = json_object_get(json_object_get(j, "metrics"), "loss_scale_trace");
    /* [[0, 65536], [1, 32768], [4, 16384]]: the scale used from each step on */
    cr_assert_eq(json_array_size(trace), 3);
    cr_expect_eq(json_number_value(json_array_get(json_array_get(trace, 1), 0)), 1);
    cr_expect_eq(json_number_value(json_array_get(json_array_get(trace, 1), 1)), 32768.0);
    cr_expect_eq(json_number_value(json_array_get(json_array_get(trace, 2), 0)), 4);
    cr_expect_eq(json_number_value(json_array_get(json_array_get(trace, 2), 1)), 16384.0);
    cr_expect(isfinite(metric(j, "final_loss")));
    json_decref(j);
}

/* ---- the stall: 4,096 bf16 weights in [1, 2), an update of 2^-8 / 10 per step ------- */

static double mean_change_by(mpx_rounding mode, float update, int steps)
{
    mpx_precision_desc d = th_fp32_policy();
    d.weights = MPX_BF16;
    d.rounding = mode;
    mpx_env *env = th_env(NULL, NULL, &d);
    cr_assert_eq(th_use_cpu_backend(env, "threads = 1;"), 0, "%s", th_error(env));
    enum { N = 4096 };
    uint16_t *w = env->host->alloc(env, MPX_ROLE_WEIGHTS, N * 2, "w");
    uint16_t *comp = env->host->alloc(env, MPX_ROLE_COMPENSATION, N * 2, "comp");
    float *u = env->host->alloc(env, MPX_ROLE_SCRATCH, N * 4, "u");
    double before = 0;
    for (int i = 0; i < N; i++) {
        w[i] = mpx_f32_to_bf16(1.0f + (float)i / N); /* [1, 2): ulp 2^-7 */
        before += mpx_bf16_to_f32(w[i]);
        u[i] = update;
    }
    th_set_update_target(env, mpx_a(w, MPX_BF16), mpx_a(mode == MPX_ROUND_KAHAN ? comp : NULL, MPX_BF16));
    mpx_piece piece = { .param = 0, .offset = 0, .len = N, .tensor_numel = N, .site = 7 };
    for (int s = 0; s < steps; s++) {
        /* the test host draws with tick 0: vary the site per step for fresh draws */
        piece.site = 7 + (uint32_t)s;
        cr_assert_eq(env->host->apply_update(env, &piece, u), 0, "%s", th_error(env));
    }
    double after = 0;
    for (int i = 0; i < N; i++) after += mpx_bf16_to_f32(w[i]);
    th_env_free(env);
    return (after - before) / N;
}

static double mean_change(mpx_rounding mode) { return mean_change_by(mode, 0x1p-8f / 10, 1000); }

Test(precision, nearest_rounding_stalls_small_updates)
{
    cr_expect_eq(mean_change(MPX_ROUND_NEAREST), 0.0);
}

Test(precision, stochastic_rounding_moves_weights_by_the_sum_of_updates)
{
    double want = 1000 * 0x1p-8 / 10, got = mean_change(MPX_ROUND_STOCHASTIC);
    cr_expect_lt(fabs(got - want), 0.10 * want, "mean change %g, expected %g", got, want);
}

Test(precision, kahan_summation_keeps_the_lost_bits)
{
    double want = 1000 * 0x1p-8 / 10, got = mean_change(MPX_ROUND_KAHAN);
    cr_expect_lt(fabs(got - want), 0.01 * want, "mean change %g, expected %g", got, want);
}

/* A bf16 Kahan buffer saturates: the compensation c grows towards half a weight ulp
 * (2^-8 for w in [1, 2)), where its own ulp is 2^-16, so an update below about 2^-17 |w|
 * is lost in c itself and the weight never moves. 4x above that it is kept. */
Test(precision, kahan_buffer_saturates_below_2_to_minus_17)
{
    const int steps = 4096;
    double below = mean_change_by(MPX_ROUND_KAHAN, 0x1p-19f, steps), above = mean_change_by(MPX_ROUND_KAHAN, 0x1p-15f, steps);
    cr_log_info("bf16 weights in [1, 2), %d Kahan updates: u = 2^-19 moves them %.6g (exact %.6g), u = 2^-15 %.6g (exact %.6g)",
                steps, below, steps * 0x1p-19, above, steps * 0x1p-15);
    cr_expect_lt(below, 0.25 * steps * 0x1p-19, "u = 2^-19: moved %g of %g", below, steps * 0x1p-19);
    cr_expect_lt(fabs(above - steps * 0x1p-15), 0.05 * steps * 0x1p-15, "u = 2^-15: moved %g of %g", above, steps * 0x1p-15);
}

/* ---- fp32 islands: the config key reaches the op's dtype ------------------------------ */

static mpx_precision_desc effective(const char *islands)
{
    char o1[64], o2[96];
    snprintf(o1, sizeof o1, "precision.plugin=\"bf16-master\"");
    snprintf(o2, sizeof o2, "precision.islands=\"%s\"", islands);
    const char *ov[] = { o1, o2 };
    mpx_session s;
    char err[4096];
    cr_assert_eq(mpx_session_open(&s, NULL, 0), 0);
    cr_assert_eq(mpx_session_configure(&s, "configs/toy.cfg", ov, 2, err, sizeof err), 0, "%s", err);
    cr_assert_eq(mpx_session_start(&s, err, sizeof err), 0, "%s", err);
    mpx_precision_desc d = s.prec;
    mpx_session_close(&s);
    return d;
}

/* softmax of x in the dtype the descriptor gives its island, as the models call it */
static void softmax_as(const mpx_precision_desc *d, const float *x, float *y, int n)
{
    mpx_env *env = th_env(NULL, NULL, d);
    cr_assert_eq(th_use_cpu_backend(env, "threads = 1;"), 0, "%s", th_error(env));
    void *be;
    const mpx_ops *ops = env->host->ops(env, &be);
    mpx_dtype t = mpx_island_dtype(d, MPX_ISLAND_SOFTMAX);
    void *xin = ops->alloc(be, (size_t)n * 4), *yout = ops->alloc(be, (size_t)n * 4), *y32 = ops->alloc(be, (size_t)n * 4);
    cr_assert_eq(ops->cast(be, mpx_a((void *)x, MPX_F32), mpx_a(xin, t), (size_t)n), 0);
    mpx_arg nomask = { NULL, MPX_F32 };
    cr_assert_eq(ops->softmax_fwd(be, mpx_a(xin, t), nomask, mpx_a(yout, t), 1, 1, 1, (size_t)n, 1.0f), 0);
    cr_assert_eq(ops->cast(be, mpx_a(yout, t), mpx_a(y32, MPX_F32), (size_t)n), 0);
    memcpy(y, y32, (size_t)n * 4);
    th_env_free(env);
}

Test(precision, an_fp32_island_is_real)
{
    enum { N = 8 };
    /* logits 1/3 apart: bf16 rounds them, fp32 keeps them */
    float x[N], on[N], off[N];
    for (int i = 0; i < N; i++) x[i] = 3.0f + (float)i / 3.0f;
    mpx_precision_desc d_on = effective("softmax"), d_off = effective("none");
    cr_assert(d_on.islands & MPX_ISLAND_SOFTMAX);
    cr_assert_not(d_off.islands & MPX_ISLAND_SOFTMAX);
    softmax_as(&d_on, x, on, N);
    softmax_as(&d_off, x, off, N);
    double z = 0;
    for (int i = 0; i < N; i++) z += exp((double)x[i] - x[N - 1]);
    int differs = 0;
    for (int i = 0; i < N; i++) {
        double ref = exp((double)x[i] - x[N - 1]) / z;               /* fp32 inputs and output */
        float xb = mpx_round_bf16(x[i]);
        double zb = 0;
        for (int k = 0; k < N; k++) zb += exp((double)mpx_round_bf16(x[k]) - mpx_round_bf16(x[N - 1]));
        double refb = mpx_round_bf16((float)(exp((double)xb - mpx_round_bf16(x[N - 1])) / zb));
        cr_expect_lt(fabs(on[i] - ref), 1e-6, "island on: %d: %g vs fp32 %g", i, on[i], ref);
        cr_expect_lt(fabs(off[i] - refb), 1e-6, "island off: %d: %g vs bf16 %g", i, off[i], refb);
        differs |= fabs(ref - refb) > 1e-4;
    }
    cr_expect(differs, "the input must tell fp32 from bf16");
}

/* The BERT fixture model (2 layers, hidden 64) on a few SQuAD questions: every policy
 * brings the loss below its start within 30 steps (mean of the last five). */
Test(precision, every_policy_trains_the_bert_fixture_model)
{
    for (size_t i = 0; i < sizeof policies / sizeof *policies; i++) {
        char dir[] = "/tmp/mpx-precision-XXXXXX", cmd[1024], path[256];
        cr_assert_not_null(mkdtemp(dir));
        snprintf(cmd, sizeof cmd, "build/bin/mpx run configs/tiny_squad.cfg -s 'precision.plugin=\"%s\"' "
                 "-s train.max_steps=30 -s train.diagnostics=false --out %s/run >%s/log 2>&1", policies[i], dir, dir);
        int st = system(cmd);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s", cmd);
        snprintf(path, sizeof path, "%s/run/run.json", dir);
        json_t *j = json_load_file(path, 0, NULL);
        cr_assert_not_null(j);
        json_t *losses = json_object_get(json_object_get(j, "metrics"), "losses");
        size_t n = json_array_size(losses);
        cr_assert_eq(n, 30);
        double first = json_number_value(json_array_get(losses, 0)), last5 = 0;
        for (size_t k = n - 5; k < n; k++) last5 += json_number_value(json_array_get(losses, k)) / 5;
        cr_expect_lt(last5, first, "%s: first loss %g, mean of the last five %g", policies[i], first, last5);
        json_decref(j);
    }
}

/* precision.rounding acts on the master -> weights write-back too: bf16-master with
 * stochastic rounding trains differently from nearest, and stalls fewer updates. */
Test(precision, rounding_applies_to_the_master_write_back)
{
    json_t *a = toy_run("", "-s 'precision.plugin=\"bf16-master\"' -s 'precision.rounding=\"nearest\"'");
    json_t *b = toy_run("", "-s 'precision.plugin=\"bf16-master\"' -s 'precision.rounding=\"stochastic\"'");
    cr_expect_neq(metric(a, "final_loss"), metric(b, "final_loss"));
    json_t *da = json_object_get(json_object_get(json_object_get(a, "metrics"), "diagnostics"), "ffn");
    json_t *db = json_object_get(json_object_get(json_object_get(b, "metrics"), "diagnostics"), "ffn");
    double sa = json_number_value(json_object_get(da, "stalled_frac"));
    double sb = json_number_value(json_object_get(db, "stalled_frac"));
    cr_expect_lt(sb, sa, "stalled: nearest %g, stochastic %g", sa, sb);
    json_decref(a);
    json_decref(b);
}

Test(precision, check_refuses_an_unknown_island)
{
    int st = system("build/bin/mpx check configs/toy.cfg -s 'precision.islands=\"layernorm,softmx\"' >/dev/null 2>&1");
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 1, "status %d", st);
}
