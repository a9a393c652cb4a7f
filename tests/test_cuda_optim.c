/* The optimizers on device memory (ABI 1.4 fused_update, the cuda backend) against the
 * same optimizer plugins' host loops (the cpu backend), three steps on the same
 * gradients: adam (L2 and decoupled), adamw, sgd (momentum, Nesterov), lamb, with fp32
 * and bf16 optimizer state, into an fp32 master and into bf16 weights with
 * stochastic rounding (apply_update's Philox draws). The element rules are the same
 * fp32 operations on both sides, so params and states must agree bit for bit; LAMB's
 * trust ratio comes from double norms summed in another order, so its params are held
 * to a normalised error instead. The cases marked in place have the host's
 * MPX_STEP_ADD_IN_PLACE (ABI 1.12): the host loop adds each update into the fp32 param,
 * and on cuda the one-pass fused_update (ABI 1.18) does, bit for bit the same. Skips
 * without a device. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/test_host.h"
#include "test_cuda_common.h"

typedef struct ocase {
    const char *plugin, *options;
    mpx_dtype param, state;
    mpx_rounding rounding;
    int exact;
    int in_place;   /* the step has MPX_STEP_ADD_IN_PLACE */
} ocase;

#define NUMEL (1000 + 37 + 2048)

static void run_case(const ocase *oc)
{
    cuda_pair p;
    cuda_pair_open(&p, NULL);
    char so[128];
    snprintf(so, sizeof so, "build/plugins/optimizer-%s.so", oc->plugin);
    const char *why = NULL;
    const mpx_plugin_desc *d = th_load(so, &why);
    cr_assert_not_null(d, "%s: %s", so, why ? why : "");
    const mpx_optimizer_vtable *vt = d->vtable;
    mpx_precision_desc prec = th_fp32_policy();
    prec.weights = oc->param;
    prec.opt_state = oc->state;
    prec.rounding = oc->rounding;
    mpx_env *oenv[2];
    void *self[2];
    pbuf param = pb_random(&p, oc->param, NUMEL, 1, -0.5f, 0.5f), update = pb_zero(&p, MPX_F32, NUMEL);
    pbuf state[2] = { pb_zero(&p, oc->state, NUMEL), pb_zero(&p, oc->state, NUMEL) };
    for (int s = 0; s < 2; s++) {
        /* the optimizer's env shares the pair's backend: same ops, same instance */
        oenv[s] = th_env(oc->options, NULL, &prec);
        th_share_backend(oenv[s], p.side[s].env);
        cr_assert_eq(vt->create(oenv[s], &self[s]), 0, "%s create: %s", oc->plugin, th_error(oenv[s]));
        th_set_update_target(oenv[s], param.a[s], mpx_a(NULL, oc->param));
    }
    int n_state = vt->n_state(self[0]);
    const mpx_piece pieces[3] = {
        { .param = 0, .offset = 0, .len = 1000, .tensor_offset = 0, .tensor_numel = 1000, .weight_decay = 0.01f, .site = 11 },
        { .param = 1, .offset = 1000, .len = 37, .tensor_offset = 0, .tensor_numel = 37, .weight_decay = 0.0f, .site = 12 },
        { .param = 2, .offset = 1037, .len = 2048, .tensor_offset = 48, .tensor_numel = 2096, .weight_decay = 0.01f, .site = 13 },
    };
    for (int64_t step = 1; step <= 3; step++) {
        pbuf grad = pb_random(&p, MPX_F32, NUMEL, 100 + (uint64_t)step, -1e-2f, 1e-2f);
        for (int s = 0; s < 2; s++) {
            mpx_opt_step st = { .size = sizeof st, .pieces = pieces, .n_pieces = 3, .lr = 1e-3, .step = step,
                                .param = param.a[s], .grad = grad.a[s].p, .update = update.a[s].p,
                                .flags = oc->in_place ? MPX_STEP_ADD_IN_PLACE : 0 };
            for (int i = 0; i < n_state; i++) st.state[i] = state[i].a[s];
            cr_assert_eq(vt->step(self[s], oenv[s], &st), 0, "%s step %lld on %s: %s / %s", oc->plugin, (long long)step,
                         s ? "cuda" : "cpu", th_error(oenv[s]), th_error(th_backend_env(p.side[s].env)));
        }
        pb_free(&p, &grad);
    }
    char what[160];
    snprintf(what, sizeof what, "%s (%s) param %s state %s%s%s", oc->plugin, oc->options, mpx_dtype_name(oc->param),
             mpx_dtype_name(oc->state), oc->rounding == MPX_ROUND_STOCHASTIC ? " stochastic" : "",
             oc->in_place ? " in place" : "");
    if (oc->exact) {
        expect_bits(&p, &param, what);
        for (int i = 0; i < n_state; i++) expect_bits(&p, &state[i], what);
    } else {
        double e = pb_nmse(&p, &param);
        errlog(what, e, 1e-12);
        cr_expect(e <= 1e-12, "%s: params' normalised error %.3g > 1e-12", what, e);
        for (int i = 0; i < n_state; i++) expect_bits(&p, &state[i], what);   /* moments do not see the ratio */
    }
    for (int s = 0; s < 2; s++) {
        vt->destroy(self[s]);
        th_env_free(oenv[s]);
    }
    pb_free(&p, &param);
    pb_free(&p, &update);
    pb_free(&p, &state[0]);
    pb_free(&p, &state[1]);
    cuda_pair_close(&p);
}

static const char ADAM_W[] = "betas = [0.9, 0.999]; eps = 1e-8; weight_decay = 0.01; adam_w_mode = true; bias_correction = true; anyprecision = false;";
static const char ADAM_L2[] = "betas = [0.9, 0.999]; eps = 1e-8; weight_decay = 0.01; adam_w_mode = false; bias_correction = true; anyprecision = false;";
static const char ADAMW[] = "betas = [0.9, 0.999]; eps = 1e-8; weight_decay = 0.01; anyprecision = false;";
static const char SGD_M[] = "momentum = 0.9; dampening = 0.1; nesterov = false; weight_decay = 0.01;";
static const char SGD_N[] = "momentum = 0.9; dampening = 0.0; nesterov = true; weight_decay = 0.0;";
static const char LAMB[] = "betas = [0.9, 0.999]; eps = 1e-6; weight_decay = 0.01; max_coeff = 10.0; min_coeff = 0.01; bias_correction = true;";

Test(cuda_optim, adam_decoupled_and_l2) {
    run_case(&(ocase){ "adam", ADAM_W, MPX_F32, MPX_F32, MPX_ROUND_NEAREST, 1, 0 });
    run_case(&(ocase){ "adam", ADAM_L2, MPX_F32, MPX_BF16, MPX_ROUND_NEAREST, 1, 0 });
}
Test(cuda_optim, adamw_into_bf16_weights_stochastic) {
    run_case(&(ocase){ "adamw", ADAMW, MPX_F32, MPX_F32, MPX_ROUND_NEAREST, 1, 0 });
    run_case(&(ocase){ "adamw", ADAMW, MPX_BF16, MPX_BF16, MPX_ROUND_STOCHASTIC, 1, 0 });
}
Test(cuda_optim, sgd_momentum_and_nesterov) {
    run_case(&(ocase){ "sgd", SGD_M, MPX_F32, MPX_F32, MPX_ROUND_NEAREST, 1, 0 });
    run_case(&(ocase){ "sgd", SGD_N, MPX_F32, MPX_BF16, MPX_ROUND_NEAREST, 1, 0 });
}
Test(cuda_optim, lamb_trust_ratio) {
    run_case(&(ocase){ "lamb", LAMB, MPX_F32, MPX_F32, MPX_ROUND_NEAREST, 0, 0 });
    run_case(&(ocase){ "lamb", LAMB, MPX_BF16, MPX_BF16, MPX_ROUND_STOCHASTIC, 0, 0 });
}
/* the one-pass step (ABI 1.18): adam in both decay modes, adamw, sgd with momentum and
 * Nesterov, each adding into the fp32 master in the pass that computes the update */
Test(cuda_optim, one_pass_in_place) {
    run_case(&(ocase){ "adam", ADAM_W, MPX_F32, MPX_F32, MPX_ROUND_NEAREST, 1, 1 });
    run_case(&(ocase){ "adam", ADAM_L2, MPX_F32, MPX_BF16, MPX_ROUND_NEAREST, 1, 1 });
    run_case(&(ocase){ "adamw", ADAMW, MPX_F32, MPX_F32, MPX_ROUND_NEAREST, 1, 1 });
    run_case(&(ocase){ "sgd", SGD_M, MPX_F32, MPX_F32, MPX_ROUND_NEAREST, 1, 1 });
    run_case(&(ocase){ "sgd", SGD_N, MPX_F32, MPX_BF16, MPX_ROUND_NEAREST, 1, 1 });
}
