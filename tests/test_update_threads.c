/* The optimizer's update on several threads (train.update_threads, core/engine/opt_threads.c)
 * against one thread: the cut of a step's pieces into groups, element by element
 * against the uncut pieces (enumerated); then toy runs on 1, 2 and 3 threads — fp32
 * (SGD with momentum), bf16-master with stochastic rounding, pure-bf16 with Kahan and
 * with stochastic rounding, AnyPrecisionAdamW — whose loss curves, gradient norms,
 * diagnostics and saved training state (weights, master, moments, Kahan buffer) must be
 * bitwise equal, over the whole shard and in update windows of 37 elements (groups of a
 * few elements, cut at offsets that are not multiples of the Philox block of 4). */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/engine/opt_threads.h"
#include "support/shell.h"

static mpx_piece piece(size_t param, size_t offset, size_t len, size_t tensor_offset, size_t numel, float wd,
                       uint32_t site)
{
    return (mpx_piece){ .param = param, .offset = offset, .len = len, .tensor_offset = tensor_offset,
                        .tensor_numel = numel, .weight_decay = wd, .site = site };
}

static void expect_piece(const mpx_piece *got, const mpx_piece *want, const char *what)
{
    cr_expect(got->param == want->param && got->offset == want->offset && got->len == want->len &&
                  got->tensor_offset == want->tensor_offset && got->tensor_numel == want->tensor_numel &&
                  got->weight_decay == want->weight_decay && got->site == want->site,
              "%s: got param %zu offset %zu len %zu tensor_offset %zu numel %zu wd %g site %u, want param %zu "
              "offset %zu len %zu tensor_offset %zu numel %zu wd %g site %u",
              what, got->param, got->offset, got->len, got->tensor_offset, got->tensor_numel, got->weight_decay,
              got->site, want->param, want->offset, want->len, want->tensor_offset, want->tensor_numel,
              want->weight_decay, want->site);
}

/* Worked by hand: 20 elements in 4 groups of 5; the first tensor's piece starts at
 * element 5 of its tensor, so its second part starts at 10. */
Test(update_threads, a_cut_piece_keeps_its_tensor_and_says_where_it_starts)
{
    mpx_piece in[3] = { piece(0, 0, 10, 5, 20, 0.01f, 7), piece(1, 10, 3, 0, 3, 0.0f, 8),
                        piece(2, 13, 7, 2, 9, 0.01f, 9) };
    mpx_piece out[6];
    size_t first[4], count[4];
    size_t n = mpx_split_pieces(in, 3, 20, 4, out, first, count);
    cr_assert_eq(n, 5, "%zu cut pieces", n);
    const size_t want_first[4] = { 0, 1, 2, 4 }, want_count[4] = { 1, 1, 2, 1 };
    for (int g = 0; g < 4; g++)
        cr_expect(first[g] == want_first[g] && count[g] == want_count[g], "group %d: pieces [%zu, +%zu)", g,
                  first[g], count[g]);
    const mpx_piece want[5] = { piece(0, 0, 5, 5, 20, 0.01f, 7), piece(0, 5, 5, 10, 20, 0.01f, 7),
                                piece(1, 10, 3, 0, 3, 0.0f, 8), piece(2, 13, 2, 2, 9, 0.01f, 9),
                                piece(2, 15, 5, 4, 9, 0.01f, 9) };
    for (size_t i = 0; i < n; i++) {
        char what[32];
        snprintf(what, sizeof what, "cut piece %zu", i);
        expect_piece(&out[i], &want[i], what);
    }
}

/* Every layout of up to 5 pieces of 0..4 elements (gaps between them as the flat
 * buffer may have), cut into 1..9 groups: each element keeps its flat offset, its
 * tensor, its place in the tensor and the tensor's site and decay, in order; groups
 * differ in size by at most one element; no cut piece is empty. */
Test(update_threads, every_element_keeps_its_place_for_any_layout_and_group_count)
{
    enum { MAXP = 5, MAXL = 4 };
    size_t layouts = 0;
    for (size_t np = 1; np <= MAXP; np++) {
        size_t combos = 1;
        for (size_t i = 0; i < np; i++) combos *= MAXL + 1;
        for (size_t c = 0; c < combos; c++) {
            mpx_piece in[MAXP];
            size_t total = 0, flat = 3, code = c;
            for (size_t i = 0; i < np; i++, code /= MAXL + 1) {
                size_t len = code % (MAXL + 1);
                in[i] = piece(10 + i, flat, len, i, len + 2 * i + 1, (float)i * 0.5f, (uint32_t)(100 + i));
                flat += len + (i % 2); /* a gap after every other piece */
                total += len;
            }
            if (total < 1) continue;
            layouts++;
            /* the reference: each element's (param, flat offset, tensor index), in order */
            size_t ref[MAXP * MAXL][3], k = 0;
            for (size_t i = 0; i < np; i++)
                for (size_t e = 0; e < in[i].len; e++, k++)
                    ref[k][0] = in[i].param, ref[k][1] = in[i].offset + e, ref[k][2] = in[i].tensor_offset + e;
            for (size_t groups = 1; groups <= 9 && groups <= total; groups++) {
                mpx_piece out[MAXP + 9];
                size_t first[9], count[9];
                size_t n = mpx_split_pieces(in, np, total, groups, out, first, count);
                cr_assert_leq(n, np + groups - 1);
                size_t e = 0, lo = total, hi = 0;
                for (size_t g = 0; g < groups; g++) {
                    size_t size = 0;
                    cr_assert_eq(first[g], g ? first[g - 1] + count[g - 1] : 0, "groups are contiguous");
                    for (size_t j = first[g]; j < first[g] + count[g]; j++) {
                        const mpx_piece *p = &out[j];
                        cr_assert_gt(p->len, 0, "an empty cut piece (layout %zu, %zu groups)", c, groups);
                        const mpx_piece *src = &in[p->param - 10];
                        cr_assert(p->tensor_numel == src->tensor_numel && p->site == src->site &&
                                      p->weight_decay == src->weight_decay,
                                  "a cut piece lost its tensor's fields");
                        cr_assert_leq(p->tensor_offset + p->len, p->tensor_numel);
                        for (size_t x = 0; x < p->len; x++, e++)
                            cr_assert(ref[e][0] == p->param && ref[e][1] == p->offset + x &&
                                          ref[e][2] == p->tensor_offset + x,
                                      "layout %zu, %zu groups: element %zu is (%zu, %zu, %zu), want (%zu, %zu, %zu)",
                                      c, groups, e, p->param, p->offset + x, p->tensor_offset + x, ref[e][0],
                                      ref[e][1], ref[e][2]);
                        size += p->len;
                    }
                    lo = size < lo ? size : lo;
                    hi = size > hi ? size : hi;
                }
                cr_assert_eq(e, total, "the groups hold %zu of %zu elements", e, total);
                cr_assert_leq(hi - lo, 1, "group sizes %zu..%zu", lo, hi);
            }
        }
    }
    cr_expect_gt(layouts, 3000, "%zu layouts", layouts);
}

/* One toy run into DIR/NAME: 20 steps on `threads` update threads; with `state`, it
 * saves its training state every 6 steps and dies at the start of step 19, so that the
 * state after 18 steps stays in the folder (a finished run removes it). */
static void toy_run(const char *dir, const char *name, int threads, const char *extra, int state)
{
    char out[4096];
    int rc = ts_sh(out, sizeof out,
                   "%s build/bin/mpx run configs/toy.cfg -s train.max_steps=20 -s train.log_every=3 "
                   "-s train.update_threads=%d %s %s --out %s/%s 2>&1",
                   state ? "MPX_FAULT_AT_STEP=19" : "", threads, state ? "-s train.checkpoint_every=6" : "", extra,
                   dir, name);
    if (state) cr_assert_neq(rc, 0, "%s (%d threads) did not die at step 19: %s", extra, threads, out);
    else cr_assert_eq(rc, 0, "%s (%d threads): %s", extra, threads, out);
}

static long long threads_used(const char *dir, const char *name)
{
    char p[700];
    snprintf(p, sizeof p, "%s/%s/run.json", dir, name);
    json_t *r = ts_load_json(p);
    json_t *v = json_object_get(json_object_get(r, "memory"), "update_threads");
    cr_assert(json_is_integer(v), "%s: no memory.update_threads", p);
    long long n = (long long)json_integer_value(v);
    json_decref(r);
    return n;
}

static void expect_same_file(const char *dir, const char *a, const char *b, const char *file, const char *what)
{
    cr_expect(ts_same_file(dir, a, b, file), "%s: %s differs between %s and %s", what, file, a, b);
}

/* `extra` on 1, 2 and 3 threads: all bitwise as the first; each ran on the threads asked. */
static void compare_threads(const char *dir, const char *tag, const char *extra)
{
    char name[3][64], state[3][64], rows[3][700];
    char *r[3];
    for (int t = 0; t < 3; t++) {
        snprintf(name[t], sizeof name[t], "%s-t%d", tag, t + 1);
        snprintf(state[t], sizeof state[t], "%s-t%d-state", tag, t + 1);
        toy_run(dir, name[t], t + 1, extra, 0);
        toy_run(dir, state[t], t + 1, extra, 1);
        cr_expect_eq(threads_used(dir, name[t]), t + 1, "%s: the update did not run on %d threads", extra, t + 1);
        snprintf(rows[t], sizeof rows[t], "%s/%s", dir, name[t]);
        r[t] = ts_metrics_rows(rows[t]);
    }
    for (int t = 1; t < 3; t++) {
        cr_expect_str_eq(r[t], r[0], "%s: loss, lr or grad_norm differ on %d threads", extra, t + 1);
        expect_same_file(dir, name[0], name[t], "diagnostics.csv", extra);
        expect_same_file(dir, state[0], state[t], "train_state/state.bin", extra);
    }
    for (int t = 0; t < 3; t++) free(r[t]);
}

static const char *const policies[] = {
    "-s 'precision.plugin=\"fp32\"'", /* the toy's SGD with momentum */
    "-s 'precision.plugin=\"bf16-master\"' -s 'optimizer.plugin=\"adam\"' -s 'precision.rounding=\"stochastic\"'",
    "-s 'precision.plugin=\"pure-bf16\"' -s 'optimizer.plugin=\"adam\"' -s 'precision.rounding=\"kahan\"'",
    "-s 'precision.plugin=\"pure-bf16\"' -s 'optimizer.plugin=\"adamw\"' -s 'precision.rounding=\"stochastic\"'",
    "-s 'precision.plugin=\"pure-bf16\"' -s 'optimizer.plugin=\"adam\"' -s optimizer.adam.anyprecision=true",
};

/* Every policy on 1, 2 and 3 threads with train.update_chunk = chunk (0: the whole shard). */
static void compare_policies(const char *tag, int chunk)
{
    char *dir = ts_tmpdir(tag);
    for (size_t i = 0; i < sizeof policies / sizeof *policies; i++) {
        char name[16], extra[512];
        snprintf(name, sizeof name, "p%zu", i);
        snprintf(extra, sizeof extra, "-s train.update_chunk=%d %s", chunk, policies[i]);
        compare_threads(dir, name, extra);
    }
    ts_sh(NULL, 0, "rm -rf %s", dir);
}

Test(update_threads, bitwise_equal_to_one_thread_over_the_whole_shard, .timeout = 120)
{
    compare_policies("upd-threads", 0);
}

Test(update_threads, bitwise_equal_to_one_thread_in_windows_of_37, .timeout = 120)
{
    compare_policies("upd-threads-win", 37);
}

/* LAMB (trust ratios need whole tensors) and 8-bit optimizer state (one scale per tensor
 * from the whole piece's amax) stay on one thread whatever is asked. */
Test(update_threads, lamb_and_scaled_state_stay_on_one_thread)
{
    char *dir = ts_tmpdir("upd-threads-one");
    toy_run(dir, "lamb", 3, "-s 'precision.plugin=\"pure-bf16\"' -s 'optimizer.plugin=\"lamb\"'", 0);
    cr_expect_eq(threads_used(dir, "lamb"), 1, "LAMB ran on several threads");
    toy_run(dir, "fp8", 3, "-s 'optimizer.plugin=\"adam\"' -s 'precision.opt_state=\"fp8-e4m3\"'", 0);
    cr_expect_eq(threads_used(dir, "fp8"), 1, "8-bit optimizer state ran on several threads");
    ts_sh(NULL, 0, "rm -rf %s", dir);
}

/* The refuse optimizer (tests/plugins/opt_refuse.c) fails on every piece of fc1.weight
 * (parameter 1: 8192 of the toy's 9288 elements, so on 3 threads nearly every group
 * fails at once, each naming where its piece starts). The error must be the one of one
 * thread, whole: the group holding the tensor's first element. */
static void refuse_run(const char *dir, const char *name, const char *plugin, int threads, int param, char *out,
                       size_t len, int want_fail)
{
    int rc = ts_sh(out, len,
                   "build/bin/mpx run configs/toy.cfg --plugin-dir build/test-plugins -s train.max_steps=3 "
                   "-s train.update_chunk=0 -s train.update_threads=%d -s 'optimizer.plugin=\"%s\"' "
                   "-s optimizer.%s.refuse_param=%d --out %s/%s 2>&1",
                   threads, plugin, plugin, param, dir, name);
    if (want_fail) cr_assert_neq(rc, 0, "%s on %d threads did not fail: %s", plugin, threads, out);
    else cr_assert_eq(rc, 0, "%s on %d threads: %s", plugin, threads, out);
}

static void refusal_line(const char *out, char *line, size_t len)
{
    const char *p = strstr(out, "refusing");
    cr_assert_not_null(p, "no refusal in: %s", out);
    while (p > out && p[-1] != '\n') p--;
    size_t n = strcspn(p, "\n");
    cr_assert_lt(n, len);
    memcpy(line, p, n);
    line[n] = 0;
}

Test(update_threads, the_first_failing_group_is_reported_whole)
{
    char *dir = ts_tmpdir("upd-threads-err");
    char out[8192], one[1024], three[1024];
    refuse_run(dir, "e1", "refuse", 1, 1, out, sizeof out, 1);
    refusal_line(out, one, sizeof one);
    cr_expect(strstr(one, "optimizer/refuse: refusing parameter 1 from element 0 of its tensor (opt_refuse.c:"),
              "one thread: %s", one);
    for (int i = 0; i < 5; i++) { /* five tries: which group fails first in time varies */
        char name[16];
        snprintf(name, sizeof name, "e3-%d", i);
        refuse_run(dir, name, "refuse", 3, 1, out, sizeof out, 1);
        refusal_line(out, three, sizeof three);
        cr_expect_str_eq(three, one, "three threads: \"%s\", one thread: \"%s\"", three, one);
    }
    refuse_run(dir, "ok", "refuse", 3, -1, out, sizeof out, 0);
    cr_expect_eq(threads_used(dir, "ok"), 3, "refuse did not run on 3 threads");
    ts_sh(NULL, 0, "rm -rf %s", dir);
}

/* refuse18 is the same code claiming ABI 1.8, with the same flag bits: MPX_OPT_CONCURRENT
 * means nothing before 1.9, so it runs on one thread. */
Test(update_threads, an_abi_1_8_optimizer_stays_on_one_thread)
{
    char *dir = ts_tmpdir("upd-threads-18");
    char out[8192];
    refuse_run(dir, "r18", "refuse18", 3, -1, out, sizeof out, 0);
    cr_expect_eq(threads_used(dir, "r18"), 1, "an ABI 1.8 optimizer ran on several threads");
    ts_sh(NULL, 0, "rm -rf %s", dir);
}

/* ZeRO stage 2 at 2 ranks: the second rank's slice starts inside a tensor, so its first
 * piece already has a tensor_offset, which its cut parts add to (stochastic rounding
 * without a master copy draws by it). 1 and 3 threads: the same loss curve and norms. */
Test(update_threads, bitwise_equal_at_zero_stage_2_on_2_ranks, .timeout = 120)
{
    char *dir = ts_tmpdir("upd-threads-ranks");
    char out[4096], path[2][700];
    char *rows[2];
    for (int i = 0; i < 2; i++) {
        int threads = i ? 3 : 1;
        int rc = ts_sh(out, sizeof out,
                       "build/bin/mpx run configs/toy.cfg --ranks 2 -s train.max_steps=20 -s train.log_every=3 "
                       "-s train.update_threads=%d -s 'zero.plugin=\"stage2\"' -s 'precision.plugin=\"pure-bf16\"' "
                       "-s 'optimizer.plugin=\"adam\"' -s 'precision.rounding=\"stochastic\"' --out %s/r%d 2>&1",
                       threads, dir, threads);
        cr_assert_eq(rc, 0, "%d threads at 2 ranks: %s", threads, out);
        snprintf(path[i], sizeof path[i], "%s/r%d", dir, threads);
        rows[i] = ts_metrics_rows(path[i]);
    }
    cr_expect_str_eq(rows[1], rows[0], "stage 2 at 2 ranks: loss, lr or grad_norm differ on 3 threads");
    char name[16];
    snprintf(name, sizeof name, "r3");
    cr_expect_eq(threads_used(dir, name), 3, "the update did not run on 3 threads at 2 ranks");
    free(rows[0]);
    free(rows[1]);
    ts_sh(NULL, 0, "rm -rf %s", dir);
}
