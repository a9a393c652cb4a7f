/* A tiny-BERT training run per precision policy on the cuda backend against the same run
 * on the cpu backend (configs/tiny_squad.cfg, 4 steps, dropout on — the same Philox
 * masks on both): the loss of every step within a relative tolerance per policy (fp32
 * 1e-4; the 16-bit policies 2e-2, where one GEMM summed in another order may flip a
 * rounding that later steps carry), the same skipped steps (fp16-scaled's scaler), the
 * same loss-scale column. Skips without a device. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "support/shell.h"
#include "support/test_host.h"
#include "test_cuda_common.h"

#define STEPS 4

typedef struct row { double loss, scale; int skipped; } row;

/* step, loss, lr, grad_norm (empty on a skipped step), loss_scale, skipped, ... */
static int read_rows(const char *dir, row *r, int cap)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/metrics.csv", dir);
    char *text = ts_slurp(path, NULL);
    int n = 0;
    for (char *line = strtok(text, "\n"); line && n < cap; line = strtok(NULL, "\n")) {
        if (line[0] < '0' || line[0] > '9') continue;   /* the header */
        double f[6] = { 0 };
        char *q = line;
        for (int k = 0; k < 6 && q; k++) {
            f[k] = *q == ',' ? NAN : strtod(q, NULL);
            q = strchr(q, ',');
            if (q) q++;
        }
        r[n++] = (row){ f[1], f[4], (int)f[5] };
    }
    free(text);
    return n;
}

/* `cuda_opts` (-s options) go to the cuda side only */
static void run_policy_with(const char *policy, double tol, const char *cuda_opts)
{
    cuda_pair p;
    cuda_pair_open(&p, NULL);   /* skips without a device */
    cuda_pair_close(&p);
    if (access("datasets/data/train-v1.1.json", R_OK) != 0)
        cr_skip_test("datasets/data/train-v1.1.json missing (make data; on a device machine, carry datasets/data)");
    char *tmp = ts_tmpdir("cuda-bert");
    row r[2][STEPS];
    /* the harness self-check (test_cuda_common.h) runs the cpu backend on both sides */
    const char *self_check = getenv("MPX_TEST_DEVICE_SO");
    const char *be[2] = { "cpu", self_check && *self_check ? "cpu" : "cuda" };
    for (int s = 0; s < 2; s++) {
        char out[4096];
        int rc = ts_sh(out, sizeof out,
                       "build/bin/mpx run configs/tiny_squad.cfg -s train.max_steps=%d -s 'precision.plugin=\"%s\"' "
                       "-s 'backend.plugin=\"%s\"' %s --out %s/side%d 2>&1",
                       STEPS, policy, be[s], s && strcmp(be[s], "cuda") == 0 ? cuda_opts : "", tmp, s);
        cr_assert_eq(rc, 0, "%s on %s: %s", policy, be[s], out);
        char dir[512];
        snprintf(dir, sizeof dir, "%s/side%d", tmp, s);
        cr_assert_eq(read_rows(dir, r[s], STEPS), STEPS, "%s on %s: %d metrics rows expected", policy, be[s], STEPS);
        /* the record's backend line names the attention mode the run took */
        const char *mode = s && !strcmp(be[s], "cuda") ? strstr(cuda_opts, "attention=\"") : NULL;
        if (mode) {
            char want[64], path[600];
            snprintf(want, sizeof want, "attention %.*s", (int)strcspn(mode + 11, "\""), mode + 11);
            snprintf(path, sizeof path, "%s/run.json", dir);
            char *rec = ts_slurp(path, NULL);
            cr_expect(rec && strstr(rec, want), "%s: run.json does not say \"%s\"", policy, want);
            free(rec);
        }
        if (s && !strcmp(be[s], "cuda") && strstr(cuda_opts, "epilogue=true")) {
            char path[600];
            snprintf(path, sizeof path, "%s/run.json", dir);
            char *rec = ts_slurp(path, NULL);
            cr_expect(rec && strstr(rec, "bias epilogue on"), "%s: run.json does not say \"bias epilogue on\"", policy);
            free(rec);
        }
    }
    for (int i = 0; i < STEPS; i++) {
        double rel = fabs(r[1][i].loss - r[0][i].loss) / fabs(r[0][i].loss);
        char what[96];
        snprintf(what, sizeof what, "tiny-BERT %s%s step %d loss (relative)", policy,
                 !*cuda_opts ? "" : strstr(cuda_opts, "epilogue") ? " (bias epilogue)" : " (attention op)", i);
        errlog(what, rel, tol);
        cr_expect(rel <= tol, "%s step %d: loss cpu %.9g cuda %.9g (relative %.3g > %.3g)", policy, i, r[0][i].loss,
                  r[1][i].loss, rel, tol);
        cr_expect_eq(r[1][i].skipped, r[0][i].skipped, "%s step %d: skipped", policy, i);
        cr_expect_eq(r[1][i].scale, r[0][i].scale, "%s step %d: loss scale", policy, i);
    }
    ts_sh(NULL, 0, "rm -rf %s", tmp);
}

static void run_policy(const char *policy, double tol) { run_policy_with(policy, tol, ""); }

Test(cuda_bert, fp32_step_matches_cpu, .timeout = 120) { run_policy("fp32", 1e-4); }
Test(cuda_bert, amp_step_matches_cpu, .timeout = 120) { run_policy("amp", 2e-2); }
Test(cuda_bert, fp16_scaled_step_matches_cpu, .timeout = 120) { run_policy("fp16-scaled", 2e-2); }
Test(cuda_bert, bf16_master_step_matches_cpu, .timeout = 120) { run_policy("bf16-master", 2e-2); }
Test(cuda_bert, pure_bf16_step_matches_cpu, .timeout = 120) { run_policy("pure-bf16", 2e-2); }
/* backend.cuda.attention: the attention op (ABI 1.11) in the model's run, as issued
 * per example and batched over every example and head (cuda_attention.c) */
#define ATTN(mode) "-s 'backend.cuda.attention=\"" mode "\"'"
Test(cuda_bert, fp32_step_with_the_per_example_attention_op, .timeout = 120)
{
    run_policy_with("fp32", 1e-4, ATTN("per-example"));
}
Test(cuda_bert, fp32_step_with_the_batched_attention_op, .timeout = 120) { run_policy_with("fp32", 1e-4, ATTN("batched")); }
Test(cuda_bert, bf16_master_step_with_the_batched_attention_op, .timeout = 120)
{
    run_policy_with("bf16-master", 2e-2, ATTN("batched"));
}
Test(cuda_bert, amp_step_with_the_batched_attention_op, .timeout = 120) { run_policy_with("amp", 2e-2, ATTN("batched")); }
/* backend.cuda.epilogue: the linear layers' bias in cuBLASLt's epilogue (ABI 1.13 and
 * 1.18); another kernel than cublasGemmEx's may sum the products in another order, so the
 * runs are held to the cpu backend's tolerance, not to the default cuda run's bits */
#define EPI "-s backend.cuda.epilogue=true"
Test(cuda_bert, fp32_step_with_the_bias_epilogue, .timeout = 120) { run_policy_with("fp32", 1e-4, EPI); }
Test(cuda_bert, bf16_master_step_with_the_bias_epilogue, .timeout = 120) { run_policy_with("bf16-master", 2e-2, EPI); }
Test(cuda_bert, amp_step_with_the_bias_epilogue, .timeout = 120) { run_policy_with("amp", 2e-2, EPI); }

/* backend.cuda.fused = true changes no bit (the contract of ABI 1.10's softmax + dropout
 * and 1.17's dropout + residual + layernorm): two cuda runs, the default and the fused
 * one, print the same loss, grad-norm and loss-scale columns (9 significant digits of
 * every step's loss and gradient norm), and the fused run's record says so. */
static void fused_is_the_default(const char *policy, const char *attention)
{
    cuda_pair p;
    cuda_pair_open(&p, NULL);   /* skips without a device */
    cuda_pair_close(&p);
    if (access("datasets/data/train-v1.1.json", R_OK) != 0)
        cr_skip_test("datasets/data/train-v1.1.json missing (make data; on a device machine, carry datasets/data)");
    const char *self_check = getenv("MPX_TEST_DEVICE_SO");
    const int cuda = !(self_check && *self_check);
    char *tmp = ts_tmpdir("cuda-fused");
    char *cols[2][STEPS] = { { 0 } };
    for (int s = 0; s < 2; s++) {
        char out[4096], opts[256] = "";
        if (cuda)
            snprintf(opts, sizeof opts, "-s 'backend.cuda.attention=\"%s\"' -s backend.cuda.fused=%s", attention,
                     s ? "true" : "false");
        int rc = ts_sh(out, sizeof out,
                       "build/bin/mpx run configs/tiny_squad.cfg -s train.max_steps=%d -s 'precision.plugin=\"%s\"' "
                       "-s 'backend.plugin=\"%s\"' %s --out %s/run%d 2>&1",
                       STEPS, policy, cuda ? "cuda" : "cpu", opts, tmp, s);
        cr_assert_eq(rc, 0, "%s (fused %s): %s", policy, s ? "on" : "off", out);
        char path[600];
        snprintf(path, sizeof path, "%s/run%d/metrics.csv", tmp, s);
        char *text = ts_slurp(path, NULL);
        int n = 0;
        for (char *line = strtok(text, "\n"); line && n < STEPS; line = strtok(NULL, "\n")) {
            if (line[0] < '0' || line[0] > '9') continue;
            /* step, loss, lr, grad_norm, loss_scale: the first five columns */
            char *q = line;
            for (int k = 0; k < 5 && q; k++) q = strchr(q + (k > 0), ',');
            cols[s][n++] = strndup(line, q ? (size_t)(q - line) : strlen(line));
        }
        free(text);
        cr_assert_eq(n, STEPS, "%s: %d metrics rows expected in %s", policy, STEPS, path);
        if (cuda && s) {
            snprintf(path, sizeof path, "%s/run%d/run.json", tmp, s);
            char *rec = ts_slurp(path, NULL);
            cr_expect(rec && strstr(rec, "fused ops on"), "%s: run.json does not say \"fused ops on\"", policy);
            free(rec);
        }
    }
    for (int i = 0; i < STEPS; i++) {
        cr_expect_str_eq(cols[1][i], cols[0][i], "%s, attention %s: step %d with the fused ops differs",
                         policy, attention, i);
        free(cols[0][i]);
        free(cols[1][i]);
    }
    ts_sh(NULL, 0, "rm -rf %s", tmp);
}

Test(cuda_bert, bf16_master_with_the_fused_ops_is_the_default_run, .timeout = 120)
{
    fused_is_the_default("bf16-master", "ops");
}
Test(cuda_bert, amp_with_the_fused_ops_and_the_attention_op_is_that_op_without, .timeout = 120)
{
    fused_is_the_default("amp", "per-example");
}
