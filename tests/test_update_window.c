/* The update window by window (train.update_chunk, core/engine/update_window.c) against
 * the whole-shard path (train.update_chunk = 0, the step as it was before windows):
 * every policy and rounding mode, every optimizer, ZeRO stages 1 and 2 at 2 ranks —
 * the loss curve, gradient norms, diagnostics rows and the saved training state
 * (weights, master, moments, Kahan buffer) must be bitwise equal. A window of 37
 * elements cuts the toy's tensors mid-way at offsets that are not multiples of 4 (the
 * Philox block), so stochastic rounding is checked across cuts. Then the counted fp32
 * step buffers: one window's, not the model's, with figures derived by hand. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/shell.h"

#define WINDOW 37

/* One toy run into DIR/NAME with train.update_chunk = chunk. With `state`, it saves its
 * training state every 6 steps and dies at the start of step 19 (the fault hook), so
 * that the state after 18 steps stays in the folder (a finished run removes it). */
static void toy_run(const char *dir, const char *name, int chunk, const char *ranks, const char *extra, int state)
{
    char out[4096];
    int rc = ts_sh(out, sizeof out,
                   "%s build/bin/mpx run configs/toy.cfg %s -s train.max_steps=20 -s train.log_every=3 "
                   "-s train.update_chunk=%d %s %s --out %s/%s 2>&1",
                   state ? "MPX_FAULT_AT_STEP=19" : "", ranks, chunk, state ? "-s train.checkpoint_every=6" : "",
                   extra, dir, name);
    if (state) cr_assert_neq(rc, 0, "%s (chunk %d) did not die at step 19: %s", extra, chunk, out);
    else cr_assert_eq(rc, 0, "%s (chunk %d): %s", extra, chunk, out);
}

static void expect_same_file(const char *dir, const char *a, const char *b, const char *file, const char *what)
{
    cr_expect(ts_same_file(dir, a, b, file), "%s: %s differs between the whole-shard and windowed update", what, file);
}

static json_t *memory_of(const char *dir, const char *name)
{
    char p[700];
    snprintf(p, sizeof p, "%s/%s/run.json", dir, name);
    json_t *r = ts_load_json(p);
    json_t *m = json_incref(json_object_get(r, "memory"));
    json_decref(r);
    cr_assert_not_null(m, "%s: no memory record", p);
    return m;
}

static long long mem_int(json_t *m, const char *key)
{
    json_t *v = json_object_get(m, key);
    cr_assert(json_is_integer(v), "memory.%s missing", key);
    return (long long)json_integer_value(v);
}

/* Runs `extra` whole and windowed; compares; returns the windowed run's window size. */
static long long compare(const char *dir, const char *tag, const char *ranks, const char *extra, int with_state)
{
    char a[64], b[64];
    snprintf(a, sizeof a, "%s-whole", tag);
    snprintf(b, sizeof b, "%s-window", tag);
    toy_run(dir, a, 0, ranks, extra, 0);
    toy_run(dir, b, WINDOW, ranks, extra, 0);
    char da[700], db[700];
    snprintf(da, sizeof da, "%s/%s", dir, a);
    snprintf(db, sizeof db, "%s/%s", dir, b);
    char *ra = ts_metrics_rows(da), *rb = ts_metrics_rows(db);
    cr_expect_str_eq(rb, ra, "%s: loss, lr or grad_norm differ", extra);
    free(ra);
    free(rb);
    expect_same_file(dir, a, b, "diagnostics.csv", extra);
    if (with_state) {
        char sa[80], sb[80];
        snprintf(sa, sizeof sa, "%s-state", a);
        snprintf(sb, sizeof sb, "%s-state", b);
        toy_run(dir, sa, 0, ranks, extra, 1);
        toy_run(dir, sb, WINDOW, ranks, extra, 1);
        expect_same_file(dir, sa, sb, "train_state/state.bin", extra);
    }
    json_t *m = memory_of(dir, b);
    long long w = mem_int(m, "update_window_elements");
    json_decref(m);
    return w;
}

static const char *const elementwise[] = {
    "-s 'precision.plugin=\"fp32\"'",   /* the toy's SGD with momentum */
    "-s 'precision.plugin=\"amp\"' -s 'optimizer.plugin=\"adam\"'",
    "-s 'precision.plugin=\"fp16-scaled\"' -s 'optimizer.plugin=\"adam\"'",
    "-s 'precision.plugin=\"bf16-master\"' -s 'optimizer.plugin=\"adam\"' -s 'precision.rounding=\"stochastic\"'",
    "-s 'precision.plugin=\"pure-bf16\"' -s 'optimizer.plugin=\"adam\"'",
    "-s 'precision.plugin=\"pure-bf16\"' -s 'optimizer.plugin=\"adamw\"' -s 'precision.rounding=\"stochastic\"'",
    "-s 'precision.plugin=\"pure-bf16\"' -s 'optimizer.plugin=\"adam\"' -s 'precision.rounding=\"kahan\"'",
    "-s 'precision.plugin=\"pure-bf16\"' -s 'optimizer.plugin=\"adam\"' -s optimizer.adam.anyprecision=true",
    "-s 'precision.plugin=\"pure-bf16\"' -s 'optimizer.plugin=\"sgd\"'",
    "-s 'precision.plugin=\"pure-bf16\"' -s 'optimizer.plugin=\"adam\"' -s 'precision.loss_scale=\"pytorch\"'",
};

Test(update_window, bitwise_equal_to_the_whole_shard_for_every_policy_and_optimizer)
{
    char *dir = ts_tmpdir("upd-window");
    for (size_t i = 0; i < sizeof elementwise / sizeof *elementwise; i++) {
        char tag[16];
        snprintf(tag, sizeof tag, "c%zu", i);
        cr_expect_eq(compare(dir, tag, "", elementwise[i], 1), WINDOW, "%s: not windowed", elementwise[i]);
    }
    /* LAMB's trust ratio needs whole tensors (no MPX_OPT_ELEMENTWISE): one window, the shard */
    long long w = compare(dir, "lamb", "", "-s 'precision.plugin=\"pure-bf16\"' -s 'optimizer.plugin=\"lamb\"'", 1);
    cr_expect_gt(w, WINDOW, "LAMB was cut into windows of %lld", w);
    ts_sh(NULL, 0, "rm -rf %s", dir);
}

Test(update_window, bitwise_equal_at_zero_stages_1_and_2, .timeout = 120)
{
    char *dir = ts_tmpdir("upd-window-ranks");
    compare(dir, "s1", "--ranks 2",
            "-s 'zero.plugin=\"stage1\"' -s 'precision.plugin=\"bf16-master\"' -s 'optimizer.plugin=\"adam\"' "
            "-s 'precision.rounding=\"stochastic\"'", 0);
    compare(dir, "s2", "--ranks 2",
            "-s 'zero.plugin=\"stage2\"' -s 'precision.plugin=\"pure-bf16\"' -s 'optimizer.plugin=\"adam\"' "
            "-s 'precision.rounding=\"stochastic\"'", 0);
    ts_sh(NULL, 0, "rm -rf %s", dir);
}

/* The core's fp32 step buffers as counted: pure-bf16 without loss scaling holds one
 * window of fp32 gradient and one of update (2 x 4 x 37 bytes), against 2 x 4 bytes per
 * parameter for the whole shard; fp32 grads need no copy (4 x 37, the update); loss
 * scaling keeps the whole fp32 gradient (4 per parameter + 4 x 37). Model state per
 * parameter stays 8 (2 + 2 + 4), 10 with the Kahan buffer. */
Test(update_window, counted_step_buffers_are_one_window)
{
    char *dir = ts_tmpdir("upd-window-bytes");
    struct { const char *extra; int chunk; long long want_per_param, want_fixed; double bpp; } c[] = {
        { "-s 'precision.plugin=\"pure-bf16\"' -s 'optimizer.plugin=\"adam\"'", WINDOW, 0, 8 * WINDOW, 8.0 },
        { "-s 'precision.plugin=\"pure-bf16\"' -s 'optimizer.plugin=\"adam\"'", 0, 8, 0, 8.0 },
        { "-s 'precision.plugin=\"pure-bf16\"' -s 'optimizer.plugin=\"adam\"' -s 'precision.rounding=\"kahan\"'",
          WINDOW, 0, 8 * WINDOW, 10.0 },
        { "-s 'precision.plugin=\"fp32\"' -s 'optimizer.plugin=\"adam\"'", WINDOW, 0, 4 * WINDOW, 16.0 },
        { "-s 'precision.plugin=\"fp16-scaled\"' -s 'optimizer.plugin=\"adam\"'", WINDOW, 4, 4 * WINDOW, 16.0 },
    };
    for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
        char name[16];
        snprintf(name, sizeof name, "b%zu", i);
        toy_run(dir, name, c[i].chunk, "", c[i].extra, 0);
        json_t *m = memory_of(dir, name);
        long long n = mem_int(m, "n_params"), got = mem_int(m, "update_buffers_bytes");
        cr_expect_eq(got, c[i].want_per_param * n + c[i].want_fixed, "%s, chunk %d: %lld bytes of fp32 step buffers",
                     c[i].extra, c[i].chunk, got);
        cr_expect_eq(json_real_value(json_object_get(m, "bytes_per_param")), c[i].bpp, "%s: bytes per parameter",
                     c[i].extra);
        cr_expect_gt(mem_int(m, "rss_peak_bytes"), 0);
        json_decref(m);
    }
    ts_sh(NULL, 0, "rm -rf %s", dir);
}
