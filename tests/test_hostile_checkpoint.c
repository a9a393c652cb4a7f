/* Hostile checkpoint folders (issue 15): a config.json whose sizes disagree with its
 * model.safetensors used to allocate and initialise the weights and grads those sizes
 * imply (~20 GB, killed by the OOM killer, run.json left "running", even under mpx eval);
 * sizes within bounds whose parameter count wraps size_t overflowed a heap buffer. Now
 * the shapes are compared from the safetensors header before any allocation, sizes are
 * checked arithmetic, and the memory plan is refused with the plan in the message, by
 * mpx check as by mpx run/eval. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "support/shell.h"

static char out[16384];

/* A copy of the tiny fixture checkpoint with config.json keys replaced
 * ("KEY": VALUE, ...); without model.safetensors when `weights` is 0. */
static char *hostile_checkpoint(const char *changes, int weights)
{
    char *d = ts_tmpdir("hostile-ckpt"), path[512];
    cr_assert_eq(ts_sh(NULL, 0, "cp tests/fixtures/bert/tiny/vocab.txt %s/", d), 0);
    if (weights) cr_assert_eq(ts_sh(NULL, 0, "cp tests/fixtures/bert/tiny/model.safetensors %s/", d), 0);
    snprintf(path, sizeof path, "%s/config.json", d);
    json_t *cfg = ts_load_json("tests/fixtures/bert/tiny/config.json");
    json_error_t e;
    char text[1024];
    snprintf(text, sizeof text, "{%s}", changes);
    json_t *ch = json_loads(text, 0, &e);
    cr_assert_not_null(ch, "%s: %s", text, e.text);
    json_object_update(cfg, ch);
    cr_assert_eq(json_dump_file(cfg, path, 0), 0);
    json_decref(cfg);
    json_decref(ch);
    return d;
}

/* mpx CMD on the tiny SQuAD config from checkpoint `d`: the exit code; output in `out`. */
static int mpx_on(const char *cmd, const char *d, const char *extra)
{
    return ts_sh(out, sizeof out, "build/bin/mpx %s configs/tiny_squad.cfg -s 'model.checkpoint=\"%s\"' %s %s%s 2>&1",
                 cmd, d, extra, strcmp(cmd, "check") ? "--out " : "", strcmp(cmd, "check") ? d : "");
}

/* mpx_on with the command line's head given whole (a shell prefix before build/bin/mpx). */
static int mpx_sh(const char *head, const char *d)
{
    const int check = strstr(head, " check") != NULL;
    return ts_sh(out, sizeof out, "%s configs/tiny_squad.cfg -s 'model.checkpoint=\"%s\"' %s%s 2>&1", head, d,
                 check ? "" : "--out ", check ? "" : d);
}

static void expect_record_failed(const char *d, const char *why)
{
    char path[512];
    snprintf(path, sizeof path, "%s/run.json", d);
    json_t *j = ts_load_json(path);
    cr_expect_str_eq(json_string_value(json_object_get(j, "status")), "failed");
    const char *err = json_string_value(json_object_get(j, "error"));
    cr_expect(err && strstr(err, why), "run.json error: %s", err ? err : "(none)");
    json_decref(j);
}

static void expect_shapes_refused(const char *key, const char *tensor)
{
    char change[128], want[256];
    snprintf(change, sizeof change, "\"%s\": 16777216", key);
    char *d = hostile_checkpoint(change, 1);
    snprintf(want, sizeof want, "%s", tensor);
    /* under a 3 GB address-space cap (the tiny model trains under it): allocating first
     * (the 16M-row shapes need tens of GB) would fail otherwise than with the shape. Not
     * under AddressSanitizer (tests/sanitize.sh builds this suite and mpx with it), whose
     * shadow memory alone reserves terabytes of address space. */
#ifdef __SANITIZE_ADDRESS__
#define CAP ""
#else
#define CAP "ulimit -v 3000000; "
#endif
    static const char *const cmds[] = { CAP "build/bin/mpx check", CAP "build/bin/mpx eval", CAP "build/bin/mpx run" };
#undef CAP
    for (int i = 0; i < 3; i++) {
        int rc = mpx_sh(cmds[i], d);
        cr_expect_eq(rc, 1, "mpx %s: exit %d\n%s", cmds[i], rc, out);
        cr_expect(strstr(out, want) != NULL && strstr(out, "has shape") != NULL && strstr(out, "16777216") != NULL,
                  "mpx %s:\n%s", cmds[i], out);
        if (i) expect_record_failed(d, want);
    }
}

Test(hostile_checkpoint, a_vocab_size_the_weights_do_not_have_is_refused_before_allocating, .timeout = 30)
{
    expect_shapes_refused("vocab_size", "embeddings.word_embeddings.weight");
}

Test(hostile_checkpoint, an_intermediate_size_the_weights_do_not_have_is_refused_before_allocating, .timeout = 30)
{
    expect_shapes_refused("intermediate_size", "encoder.layer.0.intermediate.dense.");
}

/* Each size within config.json's bounds, the parameter count past 2^64: refused, named. */
Test(hostile_checkpoint, sizes_whose_parameter_count_wraps_are_refused, .timeout = 30)
{
    char *d = hostile_checkpoint("\"num_hidden_layers\": 1000, \"hidden_size\": 1073741824, \"num_attention_heads\": 1, "
                                 "\"intermediate_size\": 1073741824", 0);
    for (int i = 0; i < 2; i++) {
        int rc = mpx_on(i ? "eval" : "check", d, "");
        cr_expect_eq(rc, 1, "exit %d\n%s", rc, out);
        cr_expect(strstr(out, "its sizes overflow") != NULL, "%s", out);
    }
}

/* Sizes that fit but no machine here holds: the memory plan is the error. */
Test(hostile_checkpoint, a_memory_plan_past_the_machine_or_max_memory_is_refused_with_the_plan, .timeout = 30)
{
    char *d = hostile_checkpoint("\"num_hidden_layers\": 64, \"hidden_size\": 65536, \"num_attention_heads\": 1, "
                                 "\"intermediate_size\": 65536", 0);
    int rc = mpx_on("check", d, "");
    cr_expect_eq(rc, 1, "exit %d\n%s", rc, out);
    cr_expect(strstr(out, "more than this machine's physical memory") != NULL, "%s", out);
    /* the plan's numbers, counted here: BERT-QA with vocab 128, 64 positions, 2 types,
     * hidden H, intermediate I, L layers: embeddings H(V + P + T + 2); a layer 4H^2 + 2HI
     * + 9H + I; the head 2H + 2. fp32: 4 bytes of weights and of grads, Adam 8. */
    const unsigned long long H = 65536, I = 65536, L = 64, V = 128, P = 64, T = 2;
    const unsigned long long n = H * (V + P + T + 2) + L * (4 * H * H + 2 * H * I + 9 * H + I) + 2 * H + 2;
    char want[3][96];
    snprintf(want[0], sizeof want[0], "the model state of %llu parameters", n);
    snprintf(want[1], sizeof want[1], "(weights %.4g MB, grads %.4g MB, opt_state %.4g MB,", 4e-6 * (double)n,
             4e-6 * (double)n, 8e-6 * (double)n);
    snprintf(want[2], sizeof want[2], "host staging %.4g MB)", 4e-6 * (double)n);
    for (int k = 0; k < 3; k++) cr_expect(strstr(out, want[k]) != NULL, "no \"%s\" in:\n%s", want[k], out);
    /* the tiny model itself under a 1 MB cap */
    rc = ts_sh(out, sizeof out, "build/bin/mpx check configs/tiny_squad.cfg -s run.max_memory=1e6 2>&1");
    cr_expect_eq(rc, 1);
    cr_expect(strstr(out, "more than run.max_memory (0.001 GB)") != NULL, "%s", out);
    cr_expect_eq(ts_sh(out, sizeof out, "build/bin/mpx check configs/tiny_squad.cfg -s run.max_memory=1e9 2>&1"), 0, "%s", out);
}

/* A safetensors file of two F32 [64] tensors with this header body and `data` bytes. */
static char *safetensors_with(const char *header, size_t data)
{
    char *d = hostile_checkpoint("\"num_hidden_layers\": 0", 0), path[512];
    snprintf(path, sizeof path, "%s/model.safetensors", d);
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    uint64_t n = strlen(header);
    unsigned char len[8];
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)(n >> (8 * i));
    fwrite(len, 1, 8, f);
    fwrite(header, 1, n, f);
    for (size_t i = 0; i < data; i++) fputc(0, f);
    fclose(f);
    return d;
}

/* The format's reference implementation refuses a name given twice and byte ranges that
 * overlap or leave gaps (sorted by offset, each must start where the last ended). */
Test(hostile_checkpoint, safetensors_duplicate_names_and_overlapping_ranges_are_refused, .timeout = 30)
{
    static const struct { const char *header; size_t data; const char *want; } cases[] = {
        { "{\"embeddings.LayerNorm.weight\":{\"dtype\":\"F32\",\"shape\":[64],\"data_offsets\":[0,256]},"
          "\"embeddings.LayerNorm.weight\":{\"dtype\":\"F32\",\"shape\":[64],\"data_offsets\":[256,512]}}",
          512, "duplicate object key" },
        { "{\"embeddings.LayerNorm.weight\":{\"dtype\":\"F32\",\"shape\":[64],\"data_offsets\":[0,256]},"
          "\"embeddings.LayerNorm.bias\":{\"dtype\":\"F32\",\"shape\":[64],\"data_offsets\":[128,384]}}",
          384, "overlaps tensor" },
        { "{\"embeddings.LayerNorm.weight\":{\"dtype\":\"F32\",\"shape\":[64],\"data_offsets\":[256,512]},"
          "\"embeddings.LayerNorm.bias\":{\"dtype\":\"F32\",\"shape\":[64],\"data_offsets\":[768,1024]}}",
          1024, "leaving a gap" },
        { "{\"embeddings.LayerNorm.weight\":{\"dtype\":\"F32\",\"shape\":[64],\"data_offsets\":[0,256]}}",
          300, "the tensors cover 256 data bytes but the file holds 300" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *d = safetensors_with(cases[i].header, cases[i].data);
        int rc = mpx_on("check", d, "");
        cr_expect_eq(rc, 1, "case %zu: exit %d\n%s", i, rc, out);
        cr_expect(strstr(out, cases[i].want) != NULL && strstr(out, "model.safetensors") != NULL,
                  "case %zu: no '%s' in\n%s", i, cases[i].want, out);
        }
}

/* Issue 46: a parameter stored as F64 or BOOL passed mpx check and was refused only when
 * mpx run read it. The dtype is in the header: check refuses it as run does, naming the
 * file and the tensor. */
Test(hostile_checkpoint, an_f64_or_bool_parameter_is_refused_by_check_as_by_run, .timeout = 30)
{
    static const struct { const char *dtype; size_t bytes; } cases[] = { { "F64", 512 }, { "BOOL", 64 } };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char header[256], want[128];
        snprintf(header, sizeof header, "{\"embeddings.LayerNorm.weight\":{\"dtype\":\"%s\",\"shape\":[64],"
                 "\"data_offsets\":[0,%zu]}}", cases[i].dtype, cases[i].bytes);
        snprintf(want, sizeof want, "tensor 'embeddings.LayerNorm.weight' has dtype %s", cases[i].dtype);
        char *d = safetensors_with(header, cases[i].bytes);
        static const char *const cmds[] = { "check", "run" };
        for (int c = 0; c < 2; c++) {
            int rc = mpx_on(cmds[c], d, "");
            cr_expect_eq(rc, 1, "mpx %s, %s: exit %d\n%s", cmds[c], cases[i].dtype, rc, out);
            cr_expect(strstr(out, want) != NULL && strstr(out, "model.safetensors") != NULL,
                      "mpx %s: no \"%s\" in\n%s", cmds[c], want, out);
        }
    }
}

/* Issue 46: mpx eval skipped the memory plan that check and run enforce. Its plan counts
 * what an evaluation allocates (the weights and their staging: no grads, master or
 * optimizer state), and an evaluation over it is refused before the record is opened. */
Test(hostile_checkpoint, an_eval_over_its_memory_plan_is_refused_before_anything_is_written, .timeout = 60)
{
    char *d = ts_tmpdir("hostile-eval"), path[600];
    int rc = ts_sh(out, sizeof out, "build/bin/mpx eval configs/tiny_squad.cfg -s run.max_memory=1e5 --out %s/eval 2>&1", d);
    cr_expect_eq(rc, 1, "exit %d\n%s", rc, out);
    cr_expect(strstr(out, "mpx eval: the model state of ") && strstr(out, " to evaluate (weights ") &&
              strstr(out, "more than run.max_memory (0.0001 GB)") && !strstr(out, "opt_state") && !strstr(out, "grads"),
              "%s", out);
    static const char *const files[] = { "run.json", "metrics.csv", "predictions.json" };
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        snprintf(path, sizeof path, "%s/eval/%s", d, files[i]);
        cr_expect(access(path, F_OK) != 0, "%s was written", path);
    }
    /* 1.5 MB holds the evaluation (about 1 MB) but not the training state (about 2.2 MB) */
    rc = ts_sh(out, sizeof out, "build/bin/mpx check configs/tiny_squad.cfg -s run.max_memory=1.5e6 2>&1");
    cr_expect_eq(rc, 1, "%s", out);
    cr_expect(strstr(out, "more than run.max_memory (0.0015 GB)") && strstr(out, "opt_state"), "%s", out);
    rc = ts_sh(out, sizeof out, "build/bin/mpx eval configs/tiny_squad.cfg -s run.max_memory=1.5e6 --out %s/eval 2>&1", d);
    cr_expect_eq(rc, 0, "exit %d\n%s", rc, out);
}
