/* ABI 1.4 appended `flags` and `fused_update` to mpx_ops. A backend built for ABI 1.0
 * (build/test-plugins/backend-cpu-abi10.so: the cpu backend declaring 1.0 and the 1.0
 * op table) must still load and run, and the optimizers must take their host loops
 * with it: the toy run's metrics are bitwise those of the 1.4 cpu backend. */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/shell.h"

/* Two runs of config `cfg` for `steps` steps (plugins from build/test-plugins too), KEY set
 * to each of the two plugin names, with the `extra` options: their metrics.csv rows
 * without the timings must be the same. */
static void expect_same_runs(const char *cfg, const char *tmp, int steps, const char *key, const char *const name[2],
                             const char *extra)
{
    char out[4096], *rows[2];
    for (int i = 0; i < 2; i++) {
        int rc = ts_sh(out, sizeof out,
                       "build/bin/mpx run %s --plugin-dir build/test-plugins -s train.max_steps=%d "
                       "-s '%s=\"%s\"' %s --out %s/%d 2>&1", cfg, steps, key, name[i], extra, tmp, i);
        cr_assert_eq(rc, 0, "%s %s: %s", key, name[i], out);
        char dir[600];
        snprintf(dir, sizeof dir, "%s/%d", tmp, i);
        rows[i] = ts_metrics_rows(dir);
    }
    cr_expect_str_eq(rows[1], rows[0], "the run with %s %s differs from the one with %s", key, name[1], name[0]);
    free(rows[0]);
    free(rows[1]);
}

Test(abi_minor, a_1_0_backend_runs_as_the_1_1_one)
{
    char *tmp = ts_tmpdir("abi10"), out[4096];
    const char *const be[2] = { "cpu", "cpu-abi10" };
    expect_same_runs("configs/toy.cfg", tmp, 20, "backend.plugin", be, "-s 'optimizer.plugin=\"adam\"'");
    cr_assert_eq(ts_sh(out, sizeof out, "build/bin/mpx plugins --plugin-dir build/test-plugins 2>&1"), 0);
    cr_expect(strstr(out, "cpu-abi10") != NULL, "mpx plugins lists it: %s", out);
    ts_sh(NULL, 0, "rm -rf %s", tmp);
}

/* ABI 1.10 appended the fused softmax + dropout ops, and 1.11 the attention op (the whole
 * attention core a head at a time), which the bert model uses when the backend has them.
 * The 1.0 table has none, so the model runs the batched GEMMs, softmax_fwd and dropout_fwd
 * (and dropout_bwd and softmax_bwd) one after the other: the tiny BERT's losses and
 * gradient norms must be those of the attention op's path (to the 9 digits metrics.csv
 * keeps: the fp32 loss exactly), with fp32 activations, bf16 ones (bf16-master) and amp's
 * fp16 ones with fp32 softmax. */
Test(abi_minor, the_fused_attention_dropout_trains_as_the_two_ops)
{
    char *tmp = ts_tmpdir("abi10-fused"), sub[600];
    const char *const be[2] = { "cpu", "cpu-abi10" };
    const char *const policy[3] = { "fp32", "bf16-master", "amp" };
    for (int i = 0; i < 3; i++) {
        char extra[200];
        snprintf(sub, sizeof sub, "%s/%s", tmp, policy[i]);
        snprintf(extra, sizeof extra, "-s 'precision.plugin=\"%s\"'", policy[i]);
        expect_same_runs("configs/tiny_squad.cfg", sub, 6, "backend.plugin", be, extra);
    }
    ts_sh(NULL, 0, "rm -rf %s", tmp);
}

/* ABI 1.7 appended set_weight_gather to the model vtable. A model built for ABI 1.0
 * (build/test-plugins/model-toy-abi10.so: the toy declaring 1.0 and the 1.0 vtable) must
 * still load and train as the toy does, and zero/stage3, which cannot give it whole
 * weights, must refuse it by name in mpx check and mpx run instead of crashing. */
Test(abi_minor, a_1_0_model_trains_and_stage3_refuses_it)
{
    char *tmp = ts_tmpdir("abi10-model"), out[4096];
    const char *const model[2] = { "toy", "toy-abi10" };
    expect_same_runs("configs/toy.cfg", tmp, 10, "model.plugin", model, "");
    static const char *const cmd[2] = { "check configs/toy.cfg", "run configs/toy.cfg --out %s/z3" };
    for (int i = 0; i < 2; i++) {
        char line[1024];
        snprintf(line, sizeof line, "build/bin/mpx %s --plugin-dir build/test-plugins -s 'model.plugin=\"toy-abi10\"' "
                 "-s 'zero.plugin=\"stage3\"' 2>&1", cmd[i]);
        int rc = ts_sh(out, sizeof out, line, tmp);
        cr_expect_neq(rc, 0, "mpx %s accepted an ABI 1.0 model under zero/stage3: %s", cmd[i], out);
        cr_expect(strstr(out, "model/toy-abi10 cannot run under zero/stage3") && strstr(out, "set_weight_gather"),
                  "mpx %s: %s", cmd[i], out);
    }
    cr_assert_eq(ts_sh(out, sizeof out, "build/bin/mpx check configs/toy.cfg -s 'zero.plugin=\"stage3\"' 2>&1"), 0,
                 "the toy itself is refused: %s", out);
    ts_sh(NULL, 0, "rm -rf %s", tmp);
}

/* ABI 1.15: a backend without MPX_OPS_FORMATS (build/test-plugins/backend-cpu-noformats.so:
 * the cpu backend without the bit, as backend/cuda is) trains a 16-bit policy as the cpu
 * backend does, and refuses a policy with a number format in its descriptor, in an
 * overridden dtype or in one parameter's GEMMs before anything runs: in mpx check, in
 * mpx run (which leaves no run folder), and in mpx plugins --compat, whose table then says
 * "no" where a run would refuse. The cpu backend itself accepts each of them. */
Test(abi_minor, a_backend_without_formats_refuses_8bit_policies_before_they_run, .timeout = 240)
{
    char *tmp = ts_tmpdir("noformats"), out[65536];
    const char *const be[2] = { "cpu", "cpu-noformats" };
    expect_same_runs("configs/toy.cfg", tmp, 10, "backend.plugin", be,
                     "-s 'precision.plugin=\"bf16-master\"' -s 'optimizer.plugin=\"adam\"'");
    static const struct { const char *opts, *want; } refused[] = {
        { "-s 'precision.plugin=\"fp8-delayed\"'",
          "precision/fp8-delayed: a number format in its dtypes (weights = fp8-e4m3, gemm_in = fp8-e4m3, act = "
          "fp8-e4m3, grads = fp8-e5m2, comm = fp8-e5m2, grad_gemm_in = fp8-e5m2), and backend/cpu-noformats runs none "
          "(its op table lacks MPX_OPS_FORMATS)" },
        { "-s 'precision.plugin=\"mxfp8\"'", "precision/mxfp8: a number format in its dtypes (" },
        { "-s 'precision.plugin=\"bf16-master\"' -s 'precision.opt_state=\"fp8-e4m3\"'",
          "precision/bf16-master: a number format in its dtypes (opt_state = fp8-e4m3, opt_state_sq = fp8-e4m3), and "
          "backend/cpu-noformats runs none" },
        { "-s 'precision.plugin=\"param-fp8-test\"'", "precision/param-fp8-test: the forward GEMMs of " },
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        const char *bk[2] = { "cpu-noformats", "cpu" };
        for (int b = 0; b < 2; b++) {
            int rc = ts_sh(out, sizeof out, "build/bin/mpx check configs/toy.cfg --plugin-dir build/test-plugins "
                           "-s 'backend.plugin=\"%s\"' %s 2>&1", bk[b], refused[i].opts);
            if (b == 0) {
                cr_expect_neq(rc, 0, "%s accepted %s: %s", bk[b], refused[i].opts, out);
                cr_expect(strstr(out, refused[i].want) != NULL, "mpx check %s: %s", refused[i].opts, out);
            } else {
                cr_expect(strstr(out, "runs none") == NULL, "backend/cpu refuses %s: %s", refused[i].opts, out);
            }
        }
        int rc = ts_sh(out, sizeof out, "build/bin/mpx run configs/toy.cfg --plugin-dir build/test-plugins "
                       "-s 'backend.plugin=\"cpu-noformats\"' %s --out %s/refused-%zu 2>&1", refused[i].opts, tmp, i);
        cr_expect_neq(rc, 0, "mpx run accepted %s: %s", refused[i].opts, out);
        cr_expect(strstr(out, refused[i].want) != NULL, "mpx run %s: %s", refused[i].opts, out);
        /* the policy's dtypes are refused before the run folder exists; a parameter's GEMM
         * dtypes once the model is created, in a failed record that says why */
        if (i < 3)
            cr_expect_neq(ts_sh(NULL, 0, "test -e %s/refused-%zu", tmp, i), 0, "mpx run %s left a run folder",
                          refused[i].opts);
        else
            cr_expect_eq(ts_sh(NULL, 0, "grep -q '\"status\": \"failed\"' %s/refused-%zu/run.json && "
                               "grep -q 'the forward GEMMs of ' %s/refused-%zu/run.json", tmp, i, tmp, i), 0,
                         "mpx run %s: no failed record with the reason", refused[i].opts);
    }
    /* a sweep records the cell as skipped, with the reason, and runs the others */
    char cfg[700], root[PATH_MAX], text[2 * PATH_MAX + 512];
    cr_assert(realpath(".", root));
    snprintf(cfg, sizeof cfg, "%s/s.cfg", tmp);
    snprintf(text, sizeof text, "name = \"nf\";\nbase = \"%s/configs/toy.cfg\";\nset = (\"run.output_dir=\\\"%s/sw\\\"\", "
             "\"train.max_steps=3\", \"backend.plugin=\\\"cpu-noformats\\\"\");\naxes = ( { key = \"precision.plugin\"; "
             "values = (\"bf16-master\", \"fp8-delayed\"); } );\n", root, tmp);
    ts_write_file(cfg, text);
    cr_expect_eq(ts_sh(out, sizeof out, "build/bin/mpx sweep %s --plugin-dir build/test-plugins 2>&1", cfg), 0, "%s", out);
    cr_expect(strstr(out, "1 finished, 1 skipped, 0 failed") && strstr(out, "fp8-delayed: skipped: precision/fp8-delayed: "
              "a number format in its dtypes"), "%s", out);
    cr_assert_eq(ts_sh(out, sizeof out, "build/bin/mpx plugins --compat --plugin-dir build/test-plugins 2>&1"), 0, "%s",
                 out);
    cr_expect(strstr(out, "precision/fp8-delayed + backend/cpu-noformats: precision/fp8-delayed: a number format in "
                          "its dtypes (weights = fp8-e4m3") != NULL, "%s", out);
    cr_expect(strstr(out, "precision/mxfp8 + backend/cpu-noformats: ") != NULL, "%s", out);
    cr_expect(strstr(out, "precision/fp32 + backend/cpu-noformats") == NULL, "%s", out);
    cr_expect(strstr(out, "precision/fp8-delayed + backend/cpu: ") == NULL, "%s", out);
    /* where nvcc built backend/cuda, the table says what its run would do */
    if (strstr(out, " cuda |"))
        cr_expect(strstr(out, "precision/fp8-delayed + backend/cuda: precision/fp8-delayed: a number format in its "
                              "dtypes (weights = fp8-e4m3") != NULL && strstr(out, "and backend/cuda runs none"),
                  "%s", out);
    ts_sh(NULL, 0, "rm -rf %s", tmp);
}
