/* Data-parallel ranks over OpenMPI (comm/mpi, zero/stage1..3, mpx run --ranks):
 *  - the ring all-reduce rounds once per hop, in NCCL's order (hand-derived bit patterns
 *    that summing in fp32 and rounding once cannot give);
 *  - for every policy, stages 1, 2 and 3 at 2 and 3 ranks give bitwise the loss curve
 *    and final weights of stage 0 at that rank count (the same ring chunks, so every
 *    element is summed in the same order; stage 3's gathers only copy), on the toy (with
 *    a parameter count that 2 and 3 do not divide) and on the tiny BERT;
 *  - stage 0 at N ranks matches one rank with N times the accumulation (the same
 *    windows, the same dropout ticks) within an fp32 tolerance;
 *  - counted bytes per parameter equal the ZeRO formulas with each policy's buffers;
 *  - an overflow on one rank makes every rank skip; a dying rank fails the run, with
 *    its error in the record; a run started by mpirun joins. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/shell.h"
#include "test_ranks.h"

/* ---- the collectives --------------------------------------------------------------- */

/* The values of R<rank> <name> ... on every rank (asserting they agree), in out. */
static size_t line_values(const char *text, const char *name, int world, unsigned long *out, size_t cap)
{
    size_t n = 0;
    for (int r = 0; r < world; r++) {
        char key[64];
        snprintf(key, sizeof key, "R%d %s ", r, name);
        const char *p = strstr(text, key);
        cr_assert_not_null(p, "no line '%s' in:\n%s", key, text);
        p += strlen(key);
        size_t k = 0;
        unsigned long v[64];
        while (*p && *p != '\n' && k < 64) {
            char *end;
            v[k++] = strtoul(p, &end, 16);
            p = end;
        }
        if (r == 0) { memcpy(out, v, k * sizeof *v); n = k; }
        else {
            cr_expect_eq(k, n, "%s: rank %d printed %zu values, rank 0 %zu", name, r, k, n);
            for (size_t i = 0; i < k && i < cap; i++) cr_expect_eq(v[i], out[i], "%s: rank %d differs from rank 0 at %zu", name, r, i);
        }
    }
    return n;
}

Test(ranks, ring_allreduce_rounds_per_hop_in_nccl_order, .timeout = 120)
{
    static char out[65536];
    int rc = ts_sh(out, sizeof out, TR_MPIRUN " -np 3 build/tests/bin/ranks_ring_check 2>&1");
    cr_assert_eq(rc, 0, "ranks_ring_check failed:\n%s", out);
    /* Element i gets 1.0 from one rank and half an ulp of 1.0 from the two others; in
     * NCCL's order the big value is added at position i mod 3. Added first or second, every
     * half-ulp meets 1.0 alone and rounds back to it (tie to even): 1.0. Added last, the two
     * half-ulps have summed exactly to one ulp first: 1 + ulp. Summing in fp32 and rounding
     * once gives 1 + ulp everywhere. */
    static const char *const names[] = { "f16", "bf16", "f32" };
    static const unsigned long one[] = { 0x3c00, 0x3f80, 0x3f800000 };
    for (int k = 0; k < 3; k++) {
        unsigned long v[64];
        char name[32];
        snprintf(name, sizeof name, "sum_%s", names[k]);
        size_t n = line_values(out, name, 3, v, 64);
        cr_assert_eq(n, 7);
        for (size_t i = 0; i < n; i++)
            cr_expect_eq(v[i], one[k] + (i % 3 == 2), "%s[%zu] = %#lx, want %#lx", name, i, v[i], one[k] + (i % 3 == 2));
        /* reduce-scatter: rank r's recv is chunk r of the same pattern */
        snprintf(name, sizeof name, "rs_%s", names[k]);
        for (int r = 0; r < 3; r++) {
            char key[64];
            snprintf(key, sizeof key, "R%d %s ", r, name);
            const char *p = strstr(out, key);
            cr_assert_not_null(p, "no %s", key);
            p += strlen(key);
            for (int j = 0; j < 3; j++) {
                char *end;
                unsigned long x = strtoul(p, &end, 16);
                p = end;
                cr_expect_eq(x, one[k] + (j == 2), "%s rank %d [%d] = %#lx", name, r, j, x);
            }
        }
        snprintf(name, sizeof name, "ag_%s", names[k]);
        n = line_values(out, name, 3, v, 64);
        cr_assert_eq(n, 6);
        for (size_t i = 0; i < n; i++) cr_expect_eq(v[i], 0x100 * (i / 2) + i % 2 + 1, "%s[%zu]", name, i);
    }
    unsigned long b[2];
    cr_assert_eq(line_values(out, "bcast", 3, b, 2), 2);
    cr_expect_eq(b[0], 2);
    cr_expect_eq(b[1], 0xabcd0002);
    /* host values in rank order: (1e16 + 1) - 1e16 = 0 (1e16 + 1 ties back to 1e16); a
     * pairwise or other order could give 1 */
    for (int r = 0; r < 3; r++) {
        char key[32];
        snprintf(key, sizeof key, "R%d host ", r);
        const char *p = strstr(out, key);
        cr_assert_not_null(p);
        double s, m;
        cr_assert_eq(sscanf(p + strlen(key), "%lf %lf", &s, &m), 2);
        cr_expect_eq(s, 0.0, "rank %d: host sum %.17g", r, s);
        cr_expect_eq(m, 2.0, "rank %d: host max %.17g", r, m);
    }
}

/* ---- whole runs: every stage equals stage 0 ---------------------------------------- */

/* Bytes per element of each policy's buffers (docs/PRECISION-POLICIES.md), Adam. */
typedef struct policy_bytes { const char *name; int w, g, acc, master, state; } policy_bytes;
static const policy_bytes policies[] = {
    { "fp32", 4, 4, 0, 0, 4 }, { "amp", 4, 4, 0, 0, 4 }, { "fp16-scaled", 2, 2, 0, 4, 4 },
    { "bf16-master", 2, 2, 4, 4, 4 }, { "pure-bf16", 2, 2, 0, 0, 2 },
};

/* The ZeRO paper's per-rank model state (stage 1: 4 + 12/N for mixed precision; stage 2:
 * 2 + 14/N; stage 3: 16/N) with each policy's own buffers: weights (below stage 3),
 * grads (below stage 2) and the accumulator whole, the rest over N; P is the parameter
 * count padded to a multiple of N. */
static double formula(const policy_bytes *p, int stage, int ranks, double numel, double padded)
{
    double shard = padded / ranks, opt = p->master + 2.0 * p->state, acc_t = p->acc ? p->acc : p->g;
    double whole = stage == 0 ? p->w + p->g + p->acc + opt : stage == 1 ? p->w + p->g + p->acc
                 : stage == 2 ? p->w + p->acc : p->acc;
    double part = stage == 0 ? 0 : stage == 1 ? opt : stage == 2 ? opt + acc_t : opt + acc_t + p->w;
    return (whole * padded + part * shard) / numel;
}

static void check_memory(const tr_run *r, const policy_bytes *p, int stage, int ranks)
{
    json_t *m = json_object_get(r->rec, "memory");
    double numel = (double)json_integer_value(json_object_get(m, "n_params"));
    double padded = ceil(numel / ranks) * ranks;
    cr_expect_eq(json_integer_value(json_object_get(m, "padding_elements")), (json_int_t)(padded - numel),
                 "%s stage %d ranks %d: padding", p->name, stage, ranks);
    json_t *per = json_object_get(m, "per_rank");
    cr_assert_eq(json_array_size(per), (size_t)ranks);
    double want = formula(p, stage, ranks, numel, padded);
    for (int k = 0; k < ranks; k++) {
        double got = json_real_value(json_object_get(json_array_get(per, (size_t)k), "bytes_per_param"));
        cr_expect(fabs(got - want) < 1e-9, "%s stage %d ranks %d rank %d: %.6f bytes/param, formula %.6f",
                  p->name, stage, ranks, k, got, want);
        /* each rank's own peak resident set (after the evaluation), not rank 0's alone */
        json_int_t rss = json_integer_value(json_array_get(json_object_get(m, "ranks_rss_peak_bytes"), (size_t)k));
        cr_expect_gt(rss, 1 << 20, "%s stage %d ranks %d rank %d: rss_peak_bytes %lld", p->name, stage, ranks, k,
                     (long long)rss);
    }
}

/* fp32 tolerance of N ranks against one rank with N × accumulation: the same terms,
 * summed in another order (each rank's accumulated micro-batches, then the ring), so each
 * gradient element differs by a few fp32 ulps of its terms, and the loss curve by ~1e-7.
 * The weights drift further, because Adam divides each update by the element's own
 * gradient magnitude: where a gradient nearly cancels (terms of 1e-1 summing to 1e-7),
 * a reordering error is a large part of it and the element's update (~lr) changes sign
 * or size. So the weights are compared by relative L2 distance, which that handful of
 * elements barely moves (measured at 20 steps: toy ~1e-6, tiny BERT ~1e-4), with a
 * bound of 1e-3; a wrong window, tick or scale moves the loss at once. */
#define FP32_LOSS_TOL 1e-5
#define FP32_WEIGHT_TOL 1e-3
/* 16-bit policies: N ranks round their partial sums per hop where one rank accumulates in
 * one buffer, so the runs part by rounding; measured at 2 and 3 ranks on the toy and the
 * tiny BERT: loss at most 0.0078 (pure-bf16, bf16-master), weights at most 0.0355
 * (pure-bf16 on the toy). Another data order and dropout (run.seed 7 for the one-rank
 * run) moves the toy's loss by 0.135-0.203 and its weights by 1.41-1.43, so these bounds,
 * about 4 and 3 times the rounding, catch a rank reading the wrong windows or ticks. */
#define LOWP_LOSS_TOL 0.03
#define LOWP_WEIGHT_TOL 0.1

/* The final evaluation (rank 0's; at stage 3 on the weights gathered for it) is stage 0's. */
static void expect_same_eval(const tr_run *z, const tr_run *s0, const char *what)
{
    static const char *const keys[] = { "eval_loss", "accuracy", "exact_match", "f1" };
    json_t *mz = json_object_get(z->rec, "metrics"), *m0 = json_object_get(s0->rec, "metrics");
    int n = 0;
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        json_t *x = json_object_get(mz, keys[i]), *y = json_object_get(m0, keys[i]);
        if (!x && !y) continue;
        n++;
        cr_expect(x && y && json_number_value(x) == json_number_value(y), "%s: %s %.17g, stage 0 %.17g", what, keys[i],
                  x ? json_number_value(x) : NAN, y ? json_number_value(y) : NAN);
    }
    cr_expect_gt(n, 0, "%s: no evaluation metric in the record", what);
}

static void stages_equal_stage0(const char *cfg, const char *base, const policy_bytes *p)
{
    char *dir = ts_tmpdir("ranks");
    for (int ranks = 2; ranks <= 3; ranks++) {
        char args[4096], name[64];
        tr_run one, s0;
        snprintf(args, sizeof args, "%s -s 'precision.plugin=\"%s\"' -s train.gradient_accumulation_steps=%d", base, p->name, ranks);
        snprintf(name, sizeof name, "one-%d", ranks);
        tr_run_mpx(&one, dir, name, cfg, args);
        snprintf(args, sizeof args, "%s -s 'precision.plugin=\"%s\"' --ranks %d", base, p->name, ranks);
        snprintf(name, sizeof name, "s0-%d", ranks);
        tr_run_mpx(&s0, dir, name, cfg, args);
        check_memory(&s0, p, 0, ranks);
        double dl = tr_loss_diff(&s0, &one), dw = tr_weight_rel_diff(&s0, &one);
        cr_log_info("%s %s: %d ranks vs 1 rank: loss %.3g, weights %.3g (relative L2)", cfg, p->name, ranks, dl, dw);
        int fp32 = !strcmp(p->name, "fp32");
        cr_expect_lt(dl, fp32 ? FP32_LOSS_TOL : LOWP_LOSS_TOL, "%s %s: %d ranks vs 1: loss differs by %.3g", cfg, p->name,
                     ranks, dl);
        cr_expect_lt(dw, fp32 ? FP32_WEIGHT_TOL : LOWP_WEIGHT_TOL, "%s %s: %d ranks vs 1: weights differ by %.3g", cfg,
                     p->name, ranks, dw);
        for (int stage = 1; stage <= 3; stage++) {
            tr_run z;
            snprintf(args, sizeof args, "%s -s 'precision.plugin=\"%s\"' --ranks %d -s 'zero.plugin=\"stage%d\"'",
                     base, p->name, ranks, stage);
            snprintf(name, sizeof name, "s%d-%d", stage, ranks);
            tr_run_mpx(&z, dir, name, cfg, args);
            cr_expect(tr_bitwise_equal(&z, &s0), "%s %s stage %d at %d ranks differs from stage 0: loss %.3g, weights %.3g",
                      cfg, p->name, stage, ranks, tr_loss_diff(&z, &s0), tr_weight_rel_diff(&z, &s0));
            check_memory(&z, p, stage, ranks);
            snprintf(name, sizeof name, "%s stage %d at %d ranks", p->name, stage, ranks);
            expect_same_eval(&z, &s0, name);
            tr_free(&z);
        }
        tr_free(&one);
        tr_free(&s0);
    }
    ts_sh(NULL, 0, "rm -rf %s", dir);
}

#define TOY "configs/toy.cfg"
/* one backend thread per rank: the ranks share the machine's cores */
#define TOY_ARGS "-s train.max_steps=20 -s train.epochs=1 -s 'optimizer.plugin=\"adam\"' -s backend.cpu.threads=1"
/* hidden 63: 9,151 parameters, so the shards are uneven at 2 ranks (1 padding element)
 * and at 3 (2), and every stage must pad, count the padding and still match stage 0 */
#define TOY_UNEVEN TOY_ARGS " -s model.toy.hidden=63"

Test(ranks, toy_fp32, .timeout = 300) { stages_equal_stage0(TOY, TOY_UNEVEN, &policies[0]); }
Test(ranks, toy_amp, .timeout = 300) { stages_equal_stage0(TOY, TOY_UNEVEN, &policies[1]); }
Test(ranks, toy_fp16_scaled, .timeout = 300) { stages_equal_stage0(TOY, TOY_UNEVEN, &policies[2]); }
Test(ranks, toy_bf16_master, .timeout = 300) { stages_equal_stage0(TOY, TOY_UNEVEN, &policies[3]); }
Test(ranks, toy_pure_bf16, .timeout = 300) { stages_equal_stage0(TOY, TOY_UNEVEN, &policies[4]); }

/* The tiny BERT on the first SQuAD article (written to a temp folder, not committed). */
static void tiny(const policy_bytes *p)
{
    char args[2048], *dir = tr_tiny_squad_args(args, sizeof args, "-s train.max_steps=20 -s backend.cpu.threads=1");
    stages_equal_stage0("configs/tiny_squad.cfg", args, p);
    ts_sh(NULL, 0, "rm -rf %s", dir);
}

Test(ranks, tiny_bert_fp32, .timeout = 300) { tiny(&policies[0]); }
Test(ranks, tiny_bert_amp, .timeout = 300) { tiny(&policies[1]); }
Test(ranks, tiny_bert_fp16_scaled, .timeout = 300) { tiny(&policies[2]); }
Test(ranks, tiny_bert_bf16_master, .timeout = 300) { tiny(&policies[3]); }
Test(ranks, tiny_bert_pure_bf16, .timeout = 300) { tiny(&policies[4]); }

/* An epoch counts global batches (DeepSpeed: train_batch_size = micro x accumulation x
 * world): the toy's 2,048 examples in batches of 32 on 2 ranks are 2048 / (32 x 2) = 32
 * steps an epoch, as one rank with accumulation 2 takes, and those two runs train the same
 * weights. (Counting one rank's batch, 64 steps, ran two epochs of data for one.) */
Test(ranks, an_epoch_at_2_ranks_counts_global_batches, .timeout = 300)
{
    char *dir = ts_tmpdir("ranks-epoch");
    static const char base[] = "-s train.epochs=1 -s train.max_steps=0 -s 'optimizer.plugin=\"adam\"' "
                               "-s backend.cpu.threads=1 -s data.toy.examples=2048 -s train.batch_size=32";
    char args[1024];
    tr_run one, two;
    snprintf(args, sizeof args, "%s -s train.gradient_accumulation_steps=2", base);
    tr_run_mpx(&one, dir, "one", TOY, args);
    snprintf(args, sizeof args, "%s --ranks 2", base);
    tr_run_mpx(&two, dir, "two", TOY, args);
    json_t *m1 = json_object_get(one.rec, "metrics"), *m2 = json_object_get(two.rec, "metrics");
    cr_expect_eq(json_integer_value(json_object_get(m1, "steps")), 32, "one rank, accumulation 2: %lld steps",
                 (long long)json_integer_value(json_object_get(m1, "steps")));
    cr_expect_eq(json_integer_value(json_object_get(m2, "steps")), 32, "2 ranks: %lld steps for one epoch",
                 (long long)json_integer_value(json_object_get(m2, "steps")));
    double dw = tr_weight_rel_diff(&two, &one);
    cr_expect_lt(dw, FP32_WEIGHT_TOL, "an epoch at 2 ranks and at accumulation 2 differ: weights %.3g", dw);
    tr_free(&one);
    tr_free(&two);
    ts_sh(NULL, 0, "rm -rf %s", dir);
}

/* ---- precision across ranks, failures, joining ------------------------------------- */

/* An inf in rank 1's gradient lands, after the reduce-scatter, in rank 0's slice only
 * (element 0): ranks 1 and 2 skip because the overflow flag is reduced. With fp32 (loss
 * scale none, a non-finite gradient skips the step) the run must then match one rank
 * with the same overflow, within the fp32 tolerance, and differ from a run without it. */
Test(ranks, overflow_on_one_rank_skips_every_rank, .timeout = 300)
{
    char *dir = ts_tmpdir("ranks-ovf");
    tr_run one, mine, clean;
    setenv("MPX_INJECT_OVERFLOW_AT_STEP", "3", 1);
    tr_run_mpx(&one, dir, "one", TOY, TOY_ARGS " -s train.gradient_accumulation_steps=3");
    setenv("MPX_INJECT_OVERFLOW_RANK", "1", 1);
    tr_run_mpx(&mine, dir, "rank1", TOY, TOY_ARGS " --ranks 3 -s 'zero.plugin=\"stage2\"'");
    unsetenv("MPX_INJECT_OVERFLOW_AT_STEP");
    unsetenv("MPX_INJECT_OVERFLOW_RANK");
    tr_run_mpx(&clean, dir, "clean", TOY, TOY_ARGS " --ranks 3 -s 'zero.plugin=\"stage2\"'");
    json_t *m = json_object_get(mine.rec, "metrics");
    cr_expect_eq(json_integer_value(json_object_get(m, "skipped_steps")), 1);
    cr_expect_eq(json_integer_value(json_array_get(json_array_get(json_object_get(m, "overflow_steps"), 0), 0)), 3);
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(one.rec, "metrics"), "skipped_steps")), 1);
    double dw = tr_weight_rel_diff(&mine, &one), dclean = tr_weight_rel_diff(&clean, &one);
    cr_log_info("overflow on rank 1: vs 1 rank %.3g; without the overflow %.3g", dw, dclean);
    cr_expect_lt(dw, FP32_WEIGHT_TOL, "ranks 1 and 2 did not skip like rank 0: weights differ by %.3g", dw);
    cr_expect_gt(dclean, 10 * dw, "the skipped step changed nothing (%.3g against %.3g)", dclean, dw);
    tr_free(&one);
    tr_free(&mine);
    tr_free(&clean);
    ts_sh(NULL, 0, "rm -rf %s", dir);
}

/* The training state with ranks: 20 straight steps against 12 with a checkpoint every 5,
 * a crash of every rank at step 12, `mpx run --resume` (from step 10) and the rest,
 * bitwise — at 3 ranks with uneven shards at stage 3, where every rank holds only slices
 * of the weights, the fp32 master and the optimizer state (the checkpoint holds them
 * whole: rank 0 writes what the ranks all-gather, each rank reads back its own slice),
 * with fp16-scaled's loss scaler. */
Test(ranks, a_run_at_3_ranks_resumes_bitwise, .timeout = 300)
{
    char *dir = ts_tmpdir("ranks-resume"), out[16384], from[4096];
    static const char args[] = TOY_UNEVEN " -s 'precision.plugin=\"fp16-scaled\"' -s 'zero.plugin=\"stage3\"' --ranks 3 "
                               "-s train.checkpoint_every=5";
    tr_run straight, resumed;
    tr_run_mpx(&straight, dir, "straight", TOY, args);
    int rc = ts_sh(out, sizeof out, "MPX_FAULT_AT_STEP=12 timeout 200 build/bin/mpx run " TOY " --out %s/resumed %s 2>&1",
                   dir, args);
    cr_assert_eq(rc, 1, "the crashed run exited %d:\n%s", rc, out);
    snprintf(from, sizeof from, "--resume %s/resumed", dir);
    tr_run_mpx(&resumed, dir, "resumed", from, "");
    json_t *res = json_array_get(json_object_get(resumed.rec, "resumed"), 0);
    cr_expect_eq(json_integer_value(json_object_get(res, "step")), 10, "run.json says where it resumed");
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(resumed.rec, "memory"), "zero_stage")), 3);
    cr_expect(tr_bitwise_equal(&resumed, &straight), "resumed at 3 ranks differs: loss %.3g, weights %.3g",
              tr_loss_diff(&resumed, &straight), tr_weight_rel_diff(&resumed, &straight));
    tr_free(&straight);
    tr_free(&resumed);
    ts_sh(NULL, 0, "rm -rf %s", dir);
}

Test(ranks, a_dying_rank_fails_the_run_with_its_error, .timeout = 120)
{
    char *dir = ts_tmpdir("ranks-die"), out[16384], path[4096];
    int rc = ts_sh(out, sizeof out, "MPX_FAULT_AT_STEP=2 MPX_FAULT_RANK=1 timeout 100 build/bin/mpx run " TOY
                   " --out %s/run " TOY_ARGS " --ranks 2 2>&1", dir);
    cr_expect_eq(rc, 1, "mpx run exited %d (124: it hung):\n%s", rc, out);
    snprintf(path, sizeof path, "%s/run/run.json", dir);
    json_t *rec = ts_load_json(path);
    cr_expect_str_eq(json_string_value(json_object_get(rec, "status")), "failed");
    const char *err = json_string_value(json_object_get(rec, "error"));
    cr_assert_not_null(err);
    cr_expect(strstr(err, "rank 1") && strstr(err, "MPX_FAULT_AT_STEP=2"), "error: %s", err);
    json_decref(rec);
    ts_sh(NULL, 0, "rm -rf %s", dir);
}

/* A launch of one process (mpirun -np 1, srun -n 1: the launcher's variables say a world
 * of 1) with run.ranks = 2 is refused before a record is written; before, it trained
 * alone while counting its steps for 2 ranks, and its record said run.ranks = 2. */
Test(ranks, a_launch_of_one_process_is_not_two_ranks, .timeout = 60)
{
    char *dir = ts_tmpdir("ranks-one"), out[16384];
    static const char *const worlds[] = { "OMPI_COMM_WORLD_SIZE=1 OMPI_COMM_WORLD_RANK=0", "PMI_SIZE=1 PMI_RANK=0",
                                          "SLURM_STEP_NUM_TASKS=1 SLURM_PROCID=0" };
    for (size_t i = 0; i < sizeof worlds / sizeof *worlds; i++) {
        int rc = ts_sh(out, sizeof out, "env %s build/bin/mpx run " TOY " --out %s/run " TOY_ARGS " --ranks 2 2>&1",
                       worlds[i], dir);
        cr_expect_eq(rc, 1, "%s: %s", worlds[i], out);
        cr_expect(strstr(out, "started by a launcher as 1 process") && strstr(out, "run.ranks = 2"), "%s: %s", worlds[i],
                  out);
        cr_expect_neq(ts_sh(NULL, 0, "test -e %s/run/run.json", dir), 0, "%s: a record was written", worlds[i]);
    }
    ts_sh(NULL, 0, "rm -rf %s", dir);
}

Test(ranks, a_run_started_by_mpirun_joins, .timeout = 120)
{
    char *dir = ts_tmpdir("ranks-join"), out[16384], path[4096];
    int rc = ts_sh(out, sizeof out, TR_MPIRUN " -np 2 build/bin/mpx run " TOY " --out %s/run " TOY_ARGS " 2>&1", dir);
    cr_assert_eq(rc, 0, "%s", out);
    snprintf(path, sizeof path, "%s/run/run.json", dir);
    json_t *rec = ts_load_json(path);
    cr_expect_str_eq(json_string_value(json_object_get(rec, "status")), "finished");
    json_t *eff = json_object_get(json_object_get(rec, "config"), "effective");
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(eff, "run"), "ranks")), 2);
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(eff, "comm"), "plugin")), "mpi");
    cr_expect_eq(json_array_size(json_object_get(json_object_get(rec, "memory"), "per_rank")), 2);
    json_decref(rec);
    ts_sh(NULL, 0, "rm -rf %s", dir);
}

/* `mpx run --ranks 2` in the background, sent `sig` once it has taken a step; then up to
 * 30 s for mpirun and the ranks to end (under the sanitizer suite each one's exit-time
 * leak check takes seconds). Expects the launcher's exit status `code`, no process of the
 * run left, and the record "killed". */
static void signal_launch(const char *sig, int code, const char *what)
{
    char *dir = ts_tmpdir("ranks-signal"), out[16384], path[4096], want[32];
    int rc = ts_sh(out, sizeof out,
                   "build/bin/mpx run " TOY " --out %s/run " TOY_ARGS " -s train.max_steps=1000000 --ranks 2 "
                   ">%s/log 2>&1 & pid=$!; "
                   "for i in $(seq 600); do grep -q '\"step\": [1-9]' %s/run/run.json 2>/dev/null && break; sleep 0.1; done; "
                   "kill -%s $pid; wait $pid; echo \"exit $?\"; "
                   "for i in $(seq 300); do pgrep -f -- '^((/[^ ]*/)?mpirun |/[^ ]*/bin/mpx run ).*--out %s/run' >/dev/null "
                   "|| break; sleep 0.1; done; "
                   "pgrep -f -- '^((/[^ ]*/)?mpirun |/[^ ]*/bin/mpx run ).*--out %s/run' >/dev/null && echo left || echo none",
                   dir, dir, dir, sig, dir, dir);
    cr_assert_eq(rc, 0, "%s", out);
    snprintf(want, sizeof want, "exit %d", code);
    cr_expect(strstr(out, want), "%s: the launcher did not end on SIG%s: %s", what, sig, out);
    cr_expect(strstr(out, "none"), "%s: mpirun or a rank outlived the launcher: %s", what, out);
    snprintf(path, sizeof path, "%s/run/run.json", dir);
    json_t *rec = ts_load_json(path);
    const char *status = json_string_value(json_object_get(rec, "status"));
    if (!status || strcmp(status, "killed")) {
        snprintf(path, sizeof path, "%s/log", dir);
        char *log = ts_slurp(path, NULL);
        cr_expect_fail("%s: the record says %s (error: %s); the launch's output:\n%s", what, status ? status : "nothing",
                       json_string_value(json_object_get(rec, "error")), log);
        free(log);
    }
    json_decref(rec);
    ts_sh(NULL, 0, "pkill -KILL -f -- '[-]-out %s/run'; rm -rf %s", dir, dir);
}

/* A signal to `mpx run --ranks` (a sweep stopping its cells, ^C) reaches mpirun and its
 * ranks: the record says "killed" (a sweep runs the cell again) and no rank is left. */
Test(ranks, a_stopped_launch_stops_its_ranks, .timeout = 120) { signal_launch("TERM", 143, "SIGTERM"); }

/* SIGKILL to `mpx run --ranks` (no handler runs): mpirun gets SIGTERM from the kernel as
 * its parent dies (PR_SET_PDEATHSIG) and stops its ranks, so none trains on as an orphan;
 * rank 0 marks the record "killed". */
Test(ranks, a_killed_launcher_takes_its_ranks_with_it, .timeout = 120) { signal_launch("KILL", 137, "SIGKILL"); }

/* fp8-delayed reduces its gradients in fp8-e5m2 by default, which no communicator here
 * sums: at 2 ranks `mpx check` refuses it, naming the key to set (before: it passed
 * check and every run died with "zero/stage0: failed (no message)"). With a bf16 reduction
 * it trains at stage 0 and stage 1, where the 8-bit weights are all-gathered as bytes,
 * and the two are bitwise the same. */
Test(ranks, fp8_delayed_at_2_ranks_reduces_in_bf16, .timeout = 300)
{
    char out[16384];
    int rc = ts_sh(out, sizeof out, "build/bin/mpx check configs/tiny_squad.cfg -s 'precision.plugin=\"fp8-delayed\"' "
                   "-s run.ranks=2 2>&1 >/dev/null");
    cr_expect_eq(rc, 1, "%s", out);
    cr_expect(strstr(out, "fp8-e5m2") && strstr(out, "precision.comm_dtype = \"bf16\""), "%s", out);
    char *dir = ts_tmpdir("ranks-fp8");
    static const char args[] = "-s 'precision.plugin=\"fp8-delayed\"' -s 'precision.comm_dtype=\"bf16\"' --ranks 2 "
                               "-s backend.cpu.threads=1 -s train.max_steps=6 -s train.log_every=3";
    char a1[1024];
    tr_run s0, s1;
    tr_run_mpx(&s0, dir, "s0", "configs/tiny_squad.cfg", args);
    snprintf(a1, sizeof a1, "%s -s 'zero.plugin=\"stage1\"'", args);
    tr_run_mpx(&s1, dir, "s1", "configs/tiny_squad.cfg", a1);
    cr_expect(tr_bitwise_equal(&s0, &s1), "fp8-delayed stage 1 differs from stage 0: loss %.3g, weights %.3g",
              tr_loss_diff(&s1, &s0), tr_weight_rel_diff(&s1, &s0));
    tr_free(&s0);
    tr_free(&s1);
    ts_sh(NULL, 0, "rm -rf %s", dir);
}

/* `mpx run --ranks 2` in the background, and mpirun alone sent `sig` once a step is
 * done; then the launcher's exit (1: the run did not finish) and no process of the run
 * left. Returns the record, and its folder in *dir (for end_mpirun_kill). */
static json_t *kill_mpirun_alone(const char *sig, const char *name, char **dir)
{
    char out[16384], path[4096];
    *dir = ts_tmpdir(name);
    int rc = ts_sh(out, sizeof out,
                   "build/bin/mpx run " TOY " --out %s/run " TOY_ARGS " -s train.max_steps=1000000 --ranks 2 "
                   ">%s/log 2>&1 & pid=$!; "
                   "for i in $(seq 600); do grep -q '\"step\": [1-9]' %s/run/run.json 2>/dev/null && echo stepped "
                   "&& break; sleep 0.1; done; "
                   /* mpirun, or the sanitizer suite's wrapper's exec of /usr/bin/mpirun */
                   "pkill -%s -f -- '^(/[^ ]*/)?mpirun .*--out %s/run' || kill -KILL $pid; "
                   "wait $pid; echo \"exit $?\"; sleep 2; "
                   "pgrep -f -- '^((/[^ ]*/)?mpirun |/[^ ]*/bin/mpx run ).*--out %s/run' >/dev/null && echo left || echo none",
                   *dir, *dir, *dir, sig, *dir, *dir);
    cr_assert_eq(rc, 0, "%s", out);
    if (!strstr(out, "stepped\n")) {
        ts_sh(NULL, 0, "pkill -KILL -f -- '[-]-out %s/run'", *dir);
        cr_assert_fail("SIG%s to mpirun: no step within 60 s, nothing to stop: %s", sig, out);
    }
    cr_expect(strstr(out, "exit 1\n"), "SIG%s to mpirun: the launcher's exit: %s", sig, out);
    cr_expect(strstr(out, "none"), "SIG%s to mpirun: a rank outlived the launcher: %s", sig, out);
    snprintf(path, sizeof path, "%s/run/run.json", *dir);
    return ts_load_json(path);
}

static void end_mpirun_kill(json_t *rec, char *dir)
{
    json_decref(rec);
    ts_sh(NULL, 0, "pkill -KILL -f -- '[-]-out %s/run'; rm -rf %s", dir, dir);
}

/* kill -9 of mpirun: its ranks outlive it for a moment and used to overwrite the
 * launcher's word (a record left "running"). The launcher, their subreaper, now waits
 * for every rank to end before it writes: the record says "killed" (mpirun was stopped
 * from outside and no rank left an error: a sweep runs the cell again; it said "failed"
 * before), names mpirun's status, and stays so; no rank is left. */
Test(ranks, a_killed_mpirun_leaves_the_launchers_record_final, .timeout = 120)
{
    char *dir;
    json_t *rec = kill_mpirun_alone("KILL", "ranks-mpirun9", &dir);
    cr_expect_str_eq(json_string_value(json_object_get(rec, "status")), "killed");
    cr_expect_eq(json_integer_value(json_object_get(rec, "mpirun_status")), 137);
    cr_expect_eq(json_integer_value(json_object_get(rec, "signal")), 9);
    const char *err = json_string_value(json_object_get(rec, "error"));
    cr_expect(err && strstr(err, "mpirun was stopped by SIGKILL"), "error: %s", err ? err : "(none)");
    end_mpirun_kill(rec, dir);
}

/* A killed cell run again whose mpirun fails before any rank has started (here an mpirun
 * that only exits 1): the record still holds the earlier launch's "killed" by signal 15,
 * which the launcher must not read as this launch's rank 0 being stopped (before: "mpirun
 * exited with status 1 after stopping rank 0 with signal 15"). */
Test(ranks, an_earlier_launchs_record_is_not_this_launchs_word, .timeout = 60)
{
    char *dir = ts_tmpdir("ranks-stale"), out[16384], path[4096];
    snprintf(path, sizeof path, "%s/bin/mpirun", dir);
    cr_assert_eq(ts_sh(NULL, 0, "mkdir -p %s/bin %s/run", dir, dir), 0);
    ts_write_file(path, "#!/bin/sh\necho 'this mpirun starts nothing' >&2\nexit 1\n");
    cr_assert_eq(ts_sh(NULL, 0, "chmod +x %s", path), 0);
    snprintf(path, sizeof path, "%s/run/run.json", dir);
    ts_write_file(path, "{\"status\": \"killed\", \"signal\": 15, \"error\": \"the earlier launch\"}\n");
    int rc = ts_sh(out, sizeof out, "PATH=%s/bin:$PATH build/bin/mpx run " TOY " --out %s/run " TOY_ARGS " --ranks 2 2>&1",
                   dir, dir);
    cr_expect_eq(rc, 1, "%s", out);
    json_t *rec = ts_load_json(path);
    const char *err = json_string_value(json_object_get(rec, "error"));
    cr_expect_str_eq(json_string_value(json_object_get(rec, "status")), "failed");
    cr_expect(err && !strstr(err, "rank 0") && strstr(err, "mpirun exited with status 1"), "error: %s",
              err ? err : "(none)");
    cr_expect_null(json_object_get(rec, "signal"), "the earlier launch's signal is still in the record");
    json_decref(rec);
    ts_sh(NULL, 0, "rm -rf %s", dir);
}

/* kill (SIGTERM) of mpirun alone: mpirun stops rank 0, whose record says "killed", and
 * exits with status 1, as it would after a rank died without an error. The launcher
 * cannot tell the two apart: the record says "failed" (a sweep does not loop on a rank
 * that dies each time), and its error names both readings and the signal rank 0 got
 * (before: "a rank died before it could say why"). */
Test(ranks, a_stopped_mpirun_says_what_it_cannot_tell, .timeout = 120)
{
    char *dir;
    json_t *rec = kill_mpirun_alone("TERM", "ranks-mpirun15", &dir);
    cr_expect_str_eq(json_string_value(json_object_get(rec, "status")), "failed");
    cr_expect_eq(json_integer_value(json_object_get(rec, "mpirun_status")), 1);
    const char *err = json_string_value(json_object_get(rec, "error"));
    cr_expect(err && strstr(err, "mpirun was stopped from outside") && strstr(err, "rank died without leaving an error") &&
              strstr(err, "signal 15") && strstr(err, "--retry-failed"), "error: %s", err ? err : "(none)");
    end_mpirun_kill(rec, dir);
}
