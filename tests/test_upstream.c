/* Where a policy computes as the upstream system it names (issue 14): DeepSpeed's lr
 * scheduler not stepping on a skipped step; warmup_decay_lr.total_num_steps = 0; the
 * fp16 loss capping DeepSpeed's scale at 2^15; unscaling with the updated scale on a
 * growth step; the master built from the cast weights; the construction-time
 * zero-gradient optimizer step. Expected values are derived by hand from the upstream
 * code (named in docs/PRECISION-POLICIES.md), not read back from mpx. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "../core/engine/session.h"
#include "../core/engine/train.h"

#define MAX_ROWS 64

typedef struct run_out {
    json_t *rec;
    int n;                       /* metrics.csv rows */
    double lr[MAX_ROWS], grad_norm[MAX_ROWS], scale[MAX_ROWS], skipped[MAX_ROWS];
} run_out;

/* `mpx run configs/toy.cfg` with `extra` into a fresh folder: its record and metrics rows. */
static run_out toy_run(const char *env, const char *extra)
{
    char dir[] = "/tmp/mpx-upstream-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char cmd[2048], path[256];
    snprintf(cmd, sizeof cmd, "%s build/bin/mpx run configs/toy.cfg --out %s/run -s train.diagnostics=false %s >%s/log 2>&1",
             env, dir, extra, dir);
    int st = system(cmd);
    snprintf(path, sizeof path, "%s/run/run.json", dir);
    json_error_t e;
    run_out r = { .rec = json_load_file(path, 0, &e) };
    cr_assert_not_null(r.rec, "%s: %s", cmd, e.text);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: %s", cmd,
              json_string_value(json_object_get(r.rec, "error")));
    snprintf(path, sizeof path, "%s/run/metrics.csv", dir);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s", path);
    char line[512];
    cr_assert_not_null(fgets(line, sizeof line, f)); /* step,loss,lr,grad_norm,loss_scale,skipped,... */
    cr_assert(strncmp(line, "step,loss,lr,grad_norm,loss_scale,skipped", 41) == 0, "header %s", line);
    while (r.n < MAX_ROWS && fgets(line, sizeof line, f)) {
        double v[6]; /* an empty field (no grad norm on a skipped step) reads as NaN */
        char *p = line;
        for (int c = 0; c < 6; c++) {
            char *end;
            v[c] = strtod(p, &end);
            if (end == p) v[c] = NAN;
            p = strchr(p, ',');
            cr_assert(p || c == 5, "row %s", line);
            if (p) p++;
        }
        r.lr[r.n] = v[2];
        r.grad_norm[r.n] = v[3];
        r.scale[r.n] = v[4];
        r.skipped[r.n] = v[5];
        r.n++;
    }
    fclose(f);
    return r;
}

static json_t *metric(const run_out *r, const char *name)
{
    return json_object_get(json_object_get(r->rec, "metrics"), name);
}

/* ---- item 1: schedules on skipped steps ---- */

/* warmup_lr, linear over 10 steps to 1e-2: update u (0-based) runs at gamma(max(0, u - 1))
 * = max(0, u - 1) / 10. Step 2 overflows: DeepSpeed's engine does not step the scheduler,
 * so step 3 runs at step 2's lr. */
Test(schedule_skip, warmup_lr_does_not_advance_on_a_skipped_step)
{
    run_out r = toy_run("MPX_INJECT_OVERFLOW_AT_STEP=2",
                        "-s train.max_steps=6 -s 'scheduler.type=\"warmup_lr\"' "
                        "-s scheduler.warmup_lr.warmup_max_lr=1e-2 -s scheduler.warmup_lr.warmup_num_steps=10 "
                        "-s 'scheduler.warmup_lr.warmup_type=\"linear\"'");
    cr_assert_eq(r.n, 6);
    const double want[6] = { 0, 0, 1e-3, 1e-3, 2e-3, 3e-3 }; /* updates before each step: 0 1 2 2 3 4 */
    for (int k = 0; k < 6; k++)
        cr_expect(fabs(r.lr[k] - want[k]) <= 1e-12, "step %d: lr %.9g, want %.9g", k, r.lr[k], want[k]);
    cr_expect_eq(r.skipped[2], 1);
    json_decref(r.rec);
}

/* warmup_linear (BingBertSquad's global_step) follows the loop step, skipped or not:
 * lr = 0.05 * f(k / 10) with f(x) = x / 0.5 below 0.5. */
Test(schedule_skip, warmup_linear_still_follows_the_loop_step)
{
    run_out r = toy_run("MPX_INJECT_OVERFLOW_AT_STEP=2",
                        "-s train.max_steps=5 -s scheduler.total_steps=10 -s 'scheduler.type=\"warmup_linear\"' "
                        "-s scheduler.warmup_linear.warmup_proportion=0.5");
    cr_assert_eq(r.n, 5);
    for (int k = 0; k < 5; k++) {
        double want = 0.05 * ((double)k / 10.0) / 0.5;
        cr_expect(fabs(r.lr[k] - want) <= 1e-12, "step %d: lr %.9g, want %.9g", k, r.lr[k], want);
    }
    json_decref(r.rec);
}

/* total_num_steps = 0 means scheduler.total_steps (here the 10 steps of the run):
 * update 9 runs at i = 8, gamma = (10 - 8) / (10 - 2) = 0.25. */
Test(schedule_skip, warmup_decay_lr_total_num_steps_zero_is_the_run_length)
{
    run_out r = toy_run("", "-s train.max_steps=10 -s 'scheduler.type=\"warmup_decay_lr\"' "
                            "-s scheduler.warmup_decay_lr.warmup_max_lr=1e-2 "
                            "-s scheduler.warmup_decay_lr.warmup_num_steps=2 "
                            "-s scheduler.warmup_decay_lr.total_num_steps=0");
    cr_assert_eq(r.n, 10);
    cr_expect(fabs(r.lr[9] - 0.25e-2) <= 1e-12, "lr %.9g", r.lr[9]);
    json_decref(r.rec);
}

/* ---- item 3: the fp16 loss caps DeepSpeed's scale at 2^15 ---- */

/* fp16-scaled computes its loss in fp16 (no loss island): the backward seed 2^16 is inf
 * in fp16, so every step at 2^16 overflows. FP16_Optimizer._update_scale with window 3:
 * step 0 overflows (2^16 -> 2^15); the scale doubles after steps 4 and 9 (3 clean steps
 * since the overflow, less one, a multiple of the window), and steps 5 and 10 overflow. */
Test(fp16_loss, deepspeed_scale_is_capped_at_2_15_with_a_skip_at_each_growth)
{
    run_out r = toy_run("", "-s 'precision.plugin=\"fp16-scaled\"' -s train.max_steps=12 -s precision.loss_scale_window=3");
    json_t *ov = metric(&r, "overflow_steps");
    cr_assert_eq(json_array_size(ov), 3, "overflow steps: %s", json_dumps(ov, JSON_COMPACT));
    const int want[3] = { 0, 5, 10 };
    for (int i = 0; i < 3; i++) {
        cr_expect_eq(json_integer_value(json_array_get(json_array_get(ov, (size_t)i), 0)), want[i]);
        cr_expect_eq(json_number_value(json_array_get(json_array_get(ov, (size_t)i), 1)), 65536.0);
    }
    for (int k = 0; k < r.n; k++) cr_expect_leq(r.scale[k], 65536.0, "step %d scale %g", k, r.scale[k]);
    json_decref(r.rec);
    /* with an fp32 loss island the same scale trains */
    r = toy_run("", "-s 'precision.plugin=\"fp16-scaled\"' -s train.max_steps=3 -s 'precision.islands=\"loss\"'");
    cr_expect_eq(json_integer_value(metric(&r, "skipped_steps")), 0);
    json_decref(r.rec);
}

/* ---- item 4: unscale with the updated scale on a growth step ---- */

/* The scale doubles after step 4's overflow check (window 3 as above); FP16_Optimizer
 * then divides step 4's gradient by the doubled scale, so its unscaled norm is exactly
 * half of what the scale the step used gives (a power of two: exact). Earlier steps agree. */
Test(unscale, growth_step_divides_by_the_updated_scale)
{
    const char *base = "-s 'precision.plugin=\"fp16-scaled\"' -s train.max_steps=5 -s precision.loss_scale_window=3";
    char extra[512];
    run_out ds = toy_run("", base);
    snprintf(extra, sizeof extra, "%s -s 'precision.unscale_with=\"used\"'", base);
    run_out used = toy_run("", extra);
    cr_assert_eq(ds.n, 5);
    cr_assert_eq(used.n, 5);
    for (int k = 1; k < 4; k++)
        cr_expect_eq(ds.grad_norm[k], used.grad_norm[k], "step %d: %.9g vs %.9g", k, ds.grad_norm[k], used.grad_norm[k]);
    cr_expect_eq(ds.grad_norm[4] * 2.0, used.grad_norm[4], "step 4: %.9g vs %.9g", ds.grad_norm[4], used.grad_norm[4]);
    json_decref(ds.rec);
    json_decref(used.rec);
}

/* ---- item 4: master from the cast weights; the construction-time step ---- */

static void open_session(mpx_session *s, const char *const *ovr, size_t n)
{
    const char *dirs[] = { "build/plugins", "build/test-plugins" };
    char err[4096] = "";
    cr_assert_eq(mpx_session_open(s, dirs, 2), 0);
    int rc = mpx_session_configure(s, "configs/toy.cfg", ovr, n, err, sizeof err);
    if (!rc) rc = mpx_session_check_compat(s, err, sizeof err);
    if (!rc) rc = mpx_session_start(s, err, sizeof err);
    if (!rc) rc = mpx_session_alloc_state(s, 4, 8, err, sizeof err);
    cr_assert_eq(rc, 0, "%s", err);
}

static float weight(const mpx_session *s, size_t i)
{
    return mpx_bf16_to_f32(((const uint16_t *)s->weights.p)[i]);
}

Test(master, starts_as_the_cast_weights_unless_master_init_is_checkpoint)
{
    const char *ovr[] = { "precision.plugin=\"bf16-master\"", "precision.master_init=\"checkpoint\"" };
    for (int from_ckpt = 0; from_ckpt < 2; from_ckpt++) {
        mpx_session s;
        open_session(&s, ovr, from_ckpt ? 2 : 1);
        const float *master = s.master.p;
        size_t differ = 0;
        for (size_t i = 0; i < s.numel; i++) {
            cr_assert_eq(mpx_f32_to_bf16(master[i]), ((const uint16_t *)s.weights.p)[i], "element %zu", i);
            differ += master[i] != weight(&s, i);
        }
        if (from_ckpt) cr_expect_gt(differ, s.numel / 2, "%zu of %zu master values off the bf16 grid", differ, s.numel);
        else cr_expect_eq(differ, 0);
        mpx_session_close(&s);
    }
}

/* FusedAdam (adam_w_mode) on a zero gradient: m = v = 0, so the update is the decoupled
 * decay alone, p -= lr * wd * p, on the decayed tensors; the bf16 weights stay. */
Test(init_step, decays_the_master_once_and_leaves_weights_and_moments)
{
    const char *ovr[] = { "precision.plugin=\"bf16-master\"", "optimizer.plugin=\"adam\"", "optimizer.lr=0.1",
                          "optimizer.adam.weight_decay=0.5" };
    mpx_session s;
    open_session(&s, ovr, 4);
    float *before = malloc(s.numel * sizeof *before);
    uint16_t *w0 = malloc(s.numel * 2);
    cr_assert(before && w0);
    memcpy(before, s.master.p, s.numel * sizeof *before);
    memcpy(w0, s.weights.p, s.numel * 2);
    char err[1024];
    cr_assert_eq(mpx_train_init_step(&s, 0.1, err, sizeof err), 0, "%s", err);
    size_t decayed = 0;
    for (size_t k = 0; k < s.n_pieces; k++) {
        const mpx_piece *p = &s.pieces[k];
        for (size_t i = p->offset; i < p->offset + p->len; i++) {
            double want = (double)before[i] * (1.0 - 0.1 * p->weight_decay);
            float got = ((const float *)s.master.p)[i];
            cr_assert(fabs(got - want) <= 2e-7 * fabs(want), "param %zu element %zu: %.9g, want %.9g",
                      p->param, i, got, want);
            decayed += p->weight_decay != 0.0f && before[i] != 0.0f;
        }
    }
    cr_expect_gt(decayed, 0);
    cr_expect_eq(memcmp(w0, s.weights.p, s.numel * 2), 0, "the bf16 weights were written back");
    for (int st = 0; st < s.n_state; st++)
        for (size_t i = 0; i < s.numel; i++) cr_assert_eq(((const float *)s.state[st].p)[i], 0.0f);
    free(before);
    free(w0);
    mpx_session_close(&s);
}

/* ABI 1.0 policies still load; what was their padding is not read as `upstream`. */
Test(abi, a_1_0_policy_has_no_upstream_details)
{
    const char *ovr[] = { "precision.plugin=\"abi10\"" };
    mpx_session s;
    open_session(&s, ovr, 1);
    cr_expect_eq(s.prec.upstream, 0u);
    const float *master = s.master.p;
    size_t differ = 0;
    for (size_t i = 0; i < s.numel; i++) differ += master[i] != weight(&s, i);
    cr_expect_gt(differ, 0, "the master should start from the fp32 init, not the cast weights");
    mpx_session_close(&s);
    const char *ovr2[] = { "precision.plugin=\"abi10\"", "precision.master_init=\"weights\"" };
    open_session(&s, ovr2, 2);
    cr_expect_eq(s.prec.upstream, (uint32_t)MPX_UPSTREAM_MASTER_FROM_WEIGHTS, "the core key still applies");
    mpx_session_close(&s);
}
