/* bert-qa's low-precision policies against PyTorch computing the same precision on the
 * CPU (tests/fixtures/bert/make_autocast_fixture.py), beside the float64 reference of
 * make_fixture.py: `amp` against torch.autocast (bf16, and fp16 with a loss scale), the
 * whole-model bf16 cast (DeepSpeed's bf16 engine: bf16-master's forward and backward)
 * against model.bfloat16(). Both sides round at nearly the same places but not always in
 * the same order (fused vs separate ops, thread-blocked sums), so the test asks two
 * things of the logits, the loss and every gradient:
 *   - mpx is closer to the low-precision reference than to fp32 (the rounding modelled
 *     is the one PyTorch does, not noise of its own);
 *   - the distance to the low-precision reference is below a bound set from that
 *     format's precision: a quarter of its unit roundoff times a small depth factor
 *     (see BOUND), far under the fp32 distance. */
#include "test_bert_util.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TINY "tests/fixtures/bert/tiny"
#define TINY_REF "tests/fixtures/bert/tiny_ref.safetensors"
#define FX_DIR "tests/fixtures/bert/"

static mpx_precision_desc policy(mpx_dtype w, mpx_dtype low, uint32_t islands)
{
    mpx_precision_desc d = th_fp32_policy();
    d.weights = d.grads = w;
    d.gemm_in = d.act = d.eval_logits = low;
    d.islands = islands;
    return d;
}

/* zero in exact arithmetic (the fixture's gradient is rounding noise): no relative error */
static int exact_zero(const char *gname)
{
    return strstr(gname, "key.bias") || !strcmp(gname, "grad.qa_outputs.bias") ||
           strstr(gname, "layer.1.output.LayerNorm.bias");
}

typedef struct worst { double lowp, fp32; const char *what; } worst;

/* amp: a rounding at the same places as autocast. mpx must be closer to the autocast
 * reference than to fp32, and within `bound` of it. Whole-model bf16: PyTorch's own
 * rounding order differs (its bf16 ops round where mpx's fused ones do not), so the two
 * are independent bf16 computations: mpx must be as close to fp32 as PyTorch's bf16
 * model is, within a factor `bound`. */
typedef enum mode { SAME_ROUNDING, AS_ACCURATE } mode;

static void compare(const char *policy_name, const char *tensor, const float *got, size_t n,
                    const float *lowp, const float *fp32, mode md, double bound, worst *w)
{
    double el = rel_err(got, lowp, n), e32 = rel_err(got, fp32, n);
    if (md == SAME_ROUNDING) {
        cr_expect_lt(el, e32, "%s %s: %.3g from the low-precision reference, %.3g from fp32: not closer",
                     policy_name, tensor, el, e32);
        cr_expect_leq(el, bound, "%s %s: %.3g from the low-precision reference > %.3g", policy_name, tensor, el, bound);
        if (el > w->lowp) { w->lowp = el; w->fp32 = e32; w->what = tensor; }
        return;
    }
    double et = rel_err(lowp, fp32, n);
    cr_expect_leq(e32, bound * et, "%s %s: %.3g from fp32, PyTorch's bf16 model %.3g: more than %g times as far",
                  policy_name, tensor, e32, et, bound);
    if (e32 / et > w->lowp) { w->lowp = e32 / et; w->fp32 = e32; w->what = tensor; }
}

/* query.bias's gradient is the row sum of dQ, which nearly cancels (its norm is 1/30 of
 * value.bias's here; key.bias's cancels exactly): a relative error of it measures the
 * cancellation, not the rounding. */
static int near_cancelling(const char *gname) { return strstr(gname, "query.bias") != NULL; }

static void check(const char *name, mpx_precision_desc d, float loss_scale, const char *lowp_file, mode md,
                  double bound)
{
    tb_model t;
    cr_assert_eq(tb_create_prec(&t, TINY, NULL, &d), 0, "%s", tb_error(&t));
    cr_assert_eq(tb_init(&t, 1), 0, "%s", tb_error(&t));
    cr_assert_eq(tb_bind(&t, 2, 32), 0, "%s", tb_error(&t));
    fx_file *fx = fx_open(TINY_REF), *lp = fx_open(lowp_file);
    tb_batch b;
    tb_ref_batch(&t, fx, &b, 1, 1, 0);
    mpx_forward_out o = { .size = sizeof o };
    cr_assert_eq(t.vt->forward(t.m, &b.b, &o), 0, "%s: %s", name, tb_error(&t));
    worst w = { 0, 0, "" };
    for (int i = 0; i < 2; i++) {
        float got[64];
        size_t n;
        const float *ref = fx_f32(fx, o.names[i], &n), *low = fx_f32(lp, o.names[i], NULL);
        cr_assert(n <= 64 && low);
        tb_to_f32(&t, o.outputs[i], n, got);
        compare(name, o.names[i], got, n, low, ref, md, bound, &w);
    }
    cr_assert_eq(t.vt->backward(t.m, &b.b, loss_scale, 0), 0, "%s: %s", name, tb_error(&t));
    static char names[64][160];
    for (size_t i = 0; i < t.n_params && i < 64; i++) {
        snprintf(names[i], sizeof names[i], "grad.%s", t.vt->param(t.m, i)->name);
        if (exact_zero(names[i]) || near_cancelling(names[i])) continue;
        size_t n;
        const float *ref = fx_f32(fx, names[i], &n), *low = fx_f32(lp, names[i], NULL);
        cr_assert(ref && low, "%s missing", names[i]);
        float *got = malloc(n * 4);
        cr_assert_not_null(got);
        tb_to_f32(&t, mpx_at(t.g, t.off[i]), n, got);
        for (size_t k = 0; k < n; k++) got[k] /= loss_scale;
        compare(name, names[i], got, n, low, ref, md, bound, &w);
        free(got);
    }
    if (md == SAME_ROUNDING)
        cr_log_info("%s: worst %s, %.3g from the low-precision reference, %.3g from fp32", name, w.what, w.lowp, w.fp32);
    else
        cr_log_info("%s: worst %s, %.3g from fp32, %.3g times PyTorch's bf16 model's distance", name, w.what, w.fp32, w.lowp);
    tb_batch_free(&t, &b);
    fx_close(lp);
    fx_close(fx);
    tb_free(&t);
}

static const uint32_t amp_islands = MPX_ISLAND_LAYERNORM | MPX_ISLAND_SOFTMAX | MPX_ISLAND_LOSS | MPX_ISLAND_RESIDUAL;

/* BOUND(u): u is the format's unit roundoff (bf16 2^-8, fp16 2^-11). The tiny BERT's
 * deepest gradient passes about 30 rounded ops; independent roundings add in quadrature,
 * so two implementations that round at the same places but sum in different orders stay
 * within about sqrt(30) u ~ 6 u of each other. */
#define BOUND(u) (6.0 * (u))

Test(bert_lowp, amp_bf16_is_autocast_bf16)
{
    check("amp bf16", policy(MPX_F32, MPX_BF16, amp_islands), 1.0f, FX_DIR "tiny_autocast_bf16.safetensors",
          SAME_ROUNDING, BOUND(0x1p-8));
}

Test(bert_lowp, amp_fp16_is_autocast_fp16)
{
    check("amp fp16", policy(MPX_F32, MPX_F16, amp_islands), 1024.0f, FX_DIR "tiny_autocast_fp16.safetensors",
          SAME_ROUNDING, BOUND(0x1p-11));
}

Test(bert_lowp, whole_model_bf16_is_model_bfloat16)
{
    check("bf16 model", policy(MPX_BF16, MPX_BF16, 0), 1.0f, FX_DIR "tiny_bf16_model.safetensors", AS_ACCURATE,
          1.5);
}

/* ---- item 2: under amp the weight and bias gradients are 16-bit values ---- */

static int is_linear(const char *name)
{
    return (strstr(name, "dense.") || strstr(name, "self.") || strstr(name, "qa_outputs.")) && !strstr(name, "LayerNorm");
}

/* autocast's linear backward outputs 16-bit dW and db, widened into the fp32 .grad: with
 * one micro-batch every element of them is a 16-bit number, and with a scale beyond
 * fp16's range they overflow (what GradScaler detects), though fp32 grads could hold it. */
Test(bert_lowp, amp_linear_grads_are_widened_16_bit_values)
{
    for (int k = 0; k < 2; k++) {
        mpx_dtype low = k ? MPX_F16 : MPX_BF16;
        mpx_precision_desc d = policy(MPX_F32, low, amp_islands);
        tb_model t;
        cr_assert_eq(tb_create_prec(&t, TINY, NULL, &d), 0, "%s", tb_error(&t));
        cr_assert_eq(tb_init(&t, 1), 0, "%s", tb_error(&t));
        cr_assert_eq(tb_bind(&t, 2, 32), 0, "%s", tb_error(&t));
        fx_file *fx = fx_open(TINY_REF);
        tb_batch b;
        tb_ref_batch(&t, fx, &b, 1, 1, 0);
        mpx_forward_out o = { .size = sizeof o };
        for (int big = 0; big < (low == MPX_F16 ? 2 : 1); big++) {
            cr_assert_eq(t.vt->forward(t.m, &b.b, &o), 0, "%s", tb_error(&t));
            cr_assert_eq(t.vt->backward(t.m, &b.b, big ? 0x1p20f : 1.0f, 0), 0, "%s", tb_error(&t));
            size_t linear = 0, not16 = 0, nonfinite = 0;
            for (size_t i = 0; i < t.n_params; i++) {
                if (!is_linear(t.vt->param(t.m, i)->name)) continue;
                const float *g = (const float *)t.g.p + t.off[i];
                for (size_t e = 0; e < tb_numel(&t, i); e++, linear++) {
                    float r = low == MPX_BF16 ? mpx_round_bf16(g[e]) : mpx_round_f16(g[e]);
                    not16 += isfinite(g[e]) && r != g[e];
                    nonfinite += !isfinite(g[e]);
                }
            }
            cr_expect_eq(not16, 0, "%s: %zu of %zu linear grads are not %s values", mpx_dtype_name(low), not16, linear,
                         mpx_dtype_name(low));
            if (big) cr_expect_gt(nonfinite, 0, "fp16 at scale 2^20: no overflow in the linear grads");
            else cr_expect_eq(nonfinite, 0);
        }
        tb_batch_free(&t, &b);
        fx_close(fx);
        tb_free(&t);
    }
}
