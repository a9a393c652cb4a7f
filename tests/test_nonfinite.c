/* NaN or inf in a step that no loss scaler can skip (precision.loss_scale "none": fp32,
 * bf16-master, pure-bf16) stops the run naming the step, the op and the tensor
 * (core/src/nonfinite.h); with a dynamic scale the step is skipped as before.
 *
 * The overflow is made two ways, each derived by hand:
 * - the toy model with lr = 1e30: step 0 is finite (initial weights), its update (the
 *   gradient clipped to norm 1) moves weights by up to 1e30; at step 1 the embedding
 *   lookup (op 0) still gives values below fp32/bf16's 3.4e38, and fc1's GEMM (op 1, 16
 *   products of ~1e30 · ~1e30) overflows;
 * - the tiny BERT checkpoint with one weight set to inf: step 0's first op reading it
 *   (the GEMM of layer 1's attention key) outputs inf/NaN in one column of each row. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/shell.h"

static char out[65536];

static json_t *record_at(const char *dir)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/run.json", dir);
    return ts_load_json(path);
}

static void toy_overflow_stops(const char *policy)
{
    char *d = ts_tmpdir("nonfinite"), want[256];
    int rc = ts_sh(out, sizeof out, "build/bin/mpx run configs/toy.cfg -s train.max_steps=10 -s optimizer.lr=1e30 "
                   "-s 'precision.plugin=\"%s\"' --out %s/r 2>&1", policy, d);
    cr_expect_eq(rc, 1, "%s: %s", policy, out);
    snprintf(want, sizeof want, "step 1: non-finite in forward, op 1 (gemm) output [32 x 64] %s (activation, reading fc1.weight)",
             strcmp(policy, "fp32") ? "bf16" : "fp32");
    cr_expect(strstr(out, want) != NULL, "%s: no '%s' in\n%s", policy, want, out);
    char dir[600];
    snprintf(dir, sizeof dir, "%s/r", d);
    json_t *r = record_at(dir), *m = json_object_get(r, "metrics"), *nf = json_object_get(m, "nonfinite");
    cr_expect_str_eq(json_string_value(json_object_get(r, "status")), "failed");
    const char *e = json_string_value(json_object_get(r, "error"));
    cr_expect(e && strstr(e, want), "%s: the record's error: %s", policy, e ? e : "(none)");
    cr_expect_eq(json_integer_value(json_object_get(nf, "step")), 1);
    cr_expect_str_eq(json_string_value(json_object_get(nf, "pass")), "forward");
    cr_expect_str_eq(json_string_value(json_object_get(nf, "op")), "gemm");
    cr_expect_eq(json_integer_value(json_object_get(nf, "op_index")), 1);
    cr_expect_str_eq(json_string_value(json_object_get(nf, "tensor")), "activation, reading fc1.weight");
    cr_expect_eq(json_integer_value(json_object_get(nf, "of")), 32 * 64);
    cr_expect_null(json_object_get(nf, "weights"), "the weights were finite before step 1");
    char *rows = ts_metrics_rows(dir);
    cr_expect_eq(strncmp(rows, "step,", 5), 0, "%s", rows);
    cr_expect(strchr(rows, '\n') && strstr(rows, "\n0,") && !strstr(rows, "\n1,"), "only step 0 in metrics.csv:\n%s", rows);
    free(rows);
    json_decref(r);
}

Test(nonfinite, fp32_stops_naming_the_step_the_op_and_the_tensor, .timeout = 60) { toy_overflow_stops("fp32"); }
Test(nonfinite, bf16_master_stops_naming_the_step_the_op_and_the_tensor, .timeout = 60) { toy_overflow_stops("bf16-master"); }
Test(nonfinite, pure_bf16_stops_naming_the_step_the_op_and_the_tensor, .timeout = 60) { toy_overflow_stops("pure-bf16"); }

Test(nonfinite, a_dynamic_loss_scale_skips_the_same_overflow_instead, .timeout = 60)
{
    char *d = ts_tmpdir("nonfinite"), dir[600];
    int rc = ts_sh(out, sizeof out, "build/bin/mpx run configs/toy.cfg -s train.max_steps=10 -s optimizer.lr=1e30 "
                   "-s 'precision.plugin=\"fp16-scaled\"' --out %s/r 2>&1", d);
    cr_expect_eq(rc, 0, "%s", out);
    snprintf(dir, sizeof dir, "%s/r", d);
    json_t *r = record_at(dir), *m = json_object_get(r, "metrics");
    cr_expect_str_eq(json_string_value(json_object_get(r, "status")), "finished");
    cr_expect_gt(json_integer_value(json_object_get(m, "skipped_steps")), 0);
    cr_expect_null(json_object_get(m, "nonfinite"));
    json_decref(r);
}

/* Element 0 of tensor `name` (F32) in DIR/model.safetensors set to `v`. */
static void set_weight(const char *dir, const char *name, float v)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    size_t n;
    unsigned char *b = (unsigned char *)ts_slurp(path, &n);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | b[i];
    cr_assert_lt(8 + hlen, n);
    json_error_t e;
    json_t *h = json_loadb((const char *)b + 8, hlen, 0, &e), *t = json_object_get(h, name);
    cr_assert_not_null(t, "%s: no tensor %s", path, name);
    cr_assert_str_eq(json_string_value(json_object_get(t, "dtype")), "F32");
    size_t at = 8 + hlen + (size_t)json_integer_value(json_array_get(json_object_get(t, "data_offsets"), 0));
    memcpy(b + at, &v, sizeof v); /* little-endian, as safetensors */
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(b, 1, n, f), n);
    cr_assert_eq(fclose(f), 0);
    json_decref(h);
    free(b);
}

Test(nonfinite, an_inf_weight_in_a_checkpoint_is_named_with_the_op_that_reads_it, .timeout = 120)
{
    char *d = ts_tmpdir("nonfinite"), ck[600];
    snprintf(ck, sizeof ck, "%s/tiny", d);
    cr_assert_eq(ts_sh(NULL, 0, "cp -r tests/fixtures/bert/tiny %s", ck), 0);
    const char *key = "encoder.layer.1.attention.self.key.weight"; /* the model's name for it */
    set_weight(ck, "bert.encoder.layer.1.attention.self.key.weight", INFINITY);
    int rc = ts_sh(out, sizeof out, "build/bin/mpx run configs/tiny_squad.cfg -s train.max_steps=3 "
                   "-s 'model.checkpoint=\"%s\"' --out %s/r 2>&1", ck, d);
    cr_expect_eq(rc, 1, "%s", out);
    char want[400];
    snprintf(want, sizeof want, "(activation, reading %s)", key);
    /* K = X W^T: weight element 0 feeds output column 0 of each of the 4 x 64 token rows */
    cr_expect(strstr(out, "step 0: non-finite in forward, op ") && strstr(out, "(gemm) output [256 x 64] fp32 ") &&
              strstr(out, want) && strstr(out, "): 256 of 16384 values"),
              "no 'step 0 ... gemm [256 x 64] ... %s: 256 of 16384' in\n%s", want, out);
    snprintf(want, sizeof want, "the weights were already non-finite before the step: %s (1 value)", key);
    cr_expect(strstr(out, want) != NULL, "no '%s' in\n%s", want, out);
}
