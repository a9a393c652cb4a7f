/* zero.deepspeed_bf16_reduce = "lp-grads": DeepSpeed 0.8.0-0.13.2's BF16_Optimizer at
 * several ranks (docs/RANKS.md). In DeepSpeed's source (v0.12.6 bf16_optimizer.py and
 * engine.py) each rank adds its own bf16 grads into its fp32 accumulator in backward, the
 * engine all-reduces the bf16 grads, which nothing reads, and step() clips the rank's
 * whole unreduced gradient by its own norm, steps the rank's partition of the fp32 master
 * and all-gathers the bf16 partitions. So:
 *  - after one step, partition 0 of the weights is what one rank training on rank 0's
 *    micro-batches alone computes, bit for bit (same windows, dropout ticks, seed of the
 *    backward, local norm), and the fixed reduction's partition 0 is not;
 *  - stage 0 (every rank steps the whole master on the gathered partitions of the ranks'
 *    gradients) equals stage 1 (each rank steps its slice, then the weights are gathered)
 *    bit for bit, and differs from the fixed reduction;
 *  - at one rank the switch changes nothing;
 *  - the replicas stay equal (the gather), while each rank's gradient differs from the
 *    mean (grad_divergence > 0); a replica nudged by one bit is caught by rank;
 *  - policies and stages DeepSpeed does not run through BF16_Optimizer are refused. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/shell.h"
#include "test_ranks.h"

#define TOY "configs/toy.cfg"
/* hidden 63: 9,151 parameters, uneven partitions at 2 and 3 ranks */
#define TOY_BF16 "-s train.epochs=1 -s 'optimizer.plugin=\"adam\"' -s backend.cpu.threads=1 -s model.toy.hidden=63 " \
                 "-s 'precision.plugin=\"bf16-master\"'"
#define LP " -s 'zero.deepspeed_bf16_reduce=\"lp-grads\"'"

/* elements of one rank's partition of the padded flat buffer */
static size_t part_len(size_t numel, int world) { return (numel + (size_t)world - 1) / (size_t)world; }

static int same_floats(const float *a, const float *b, size_t n) { return memcmp(a, b, n * sizeof *a) == 0; }

Test(ranks_deepspeed, first_step_partition_0_is_rank_0s_own_step, .timeout = 300)
{
    char *dir = ts_tmpdir("ds-first");
    tr_run one;
    tr_run_mpx(&one, dir, "one", TOY, TOY_BF16 " -s train.max_steps=1");
    for (int world = 2; world <= 3; world++) {
        char args[1024], name[64];
        tr_run lp, fix;
        snprintf(args, sizeof args, TOY_BF16 " -s train.max_steps=1 --ranks %d" LP, world);
        snprintf(name, sizeof name, "lp-%d", world);
        tr_run_mpx(&lp, dir, name, TOY, args);
        snprintf(args, sizeof args, TOY_BF16 " -s train.max_steps=1 --ranks %d", world);
        snprintf(name, sizeof name, "fix-%d", world);
        tr_run_mpx(&fix, dir, name, TOY, args);
        size_t n = one.n_w, p = part_len(n, world);
        cr_assert_eq(lp.n_w, n);
        cr_expect(same_floats(lp.w, one.w, p), "%d ranks, lp-grads: partition 0 is not one rank's step on rank 0's "
                  "micro-batches", world);
        cr_expect(!same_floats(lp.w + p, one.w + p, n - p), "%d ranks, lp-grads: the other partitions are rank 0's step "
                  "too", world);
        cr_expect(!same_floats(fix.w, one.w, p), "%d ranks, fixed reduction: partition 0 did not take the other ranks' "
                  "gradients", world);
        /* the same weights and windows at step 0: the same (global mean) loss */
        cr_expect_eq(lp.losses[0], fix.losses[0], "%d ranks: step 0's loss %.9g under lp-grads, %.9g fixed", world,
                     lp.losses[0], fix.losses[0]);
        tr_free(&lp);
        tr_free(&fix);
    }
    tr_free(&one);
    ts_sh(NULL, 0, "rm -rf %s", dir);
}

/* grad_divergence: one value per rank, each > 0 under lp-grads; absent under the fix. */
static void expect_grad_divergence(const tr_run *r, int world, int present, const char *what)
{
    json_t *g = json_object_get(json_object_get(r->rec, "metrics"), "grad_divergence");
    if (!present) {
        cr_expect_null(g, "%s: grad_divergence under the fixed reduction", what);
        return;
    }
    json_t *rel = json_object_get(g, "rel_l2"), *mean = json_object_get(g, "mean_rel_l2");
    cr_assert_eq(json_array_size(rel), (size_t)world, "%s: grad_divergence.rel_l2 has %zu values", what,
                 json_array_size(rel));
    for (int k = 0; k < world; k++) {
        double v = json_number_value(json_array_get(rel, (size_t)k)), m = json_number_value(json_array_get(mean, (size_t)k));
        cr_expect(v > 0 && isfinite(v) && m > 0 && isfinite(m), "%s: rank %d's gradient divergence %.3g (mean %.3g)",
                  what, k, v, m);
    }
}

static void stage0_equals_stage1(const char *cfg, const char *base, int world)
{
    char *dir = ts_tmpdir("ds-stages"), args[4096], what[64];
    tr_run s0, s1, fix;
    snprintf(args, sizeof args, "%s --ranks %d" LP, base, world);
    tr_run_mpx(&s0, dir, "s0", cfg, args);
    snprintf(args, sizeof args, "%s --ranks %d" LP " -s 'zero.plugin=\"stage1\"'", base, world);
    tr_run_mpx(&s1, dir, "s1", cfg, args);
    snprintf(args, sizeof args, "%s --ranks %d", base, world);
    tr_run_mpx(&fix, dir, "fix", cfg, args);
    snprintf(what, sizeof what, "%s at %d ranks", cfg, world);
    cr_expect(tr_bitwise_equal(&s0, &s1), "%s, lp-grads: stage 1 differs from stage 0: loss %.3g, weights %.3g", what,
              tr_loss_diff(&s1, &s0), tr_weight_rel_diff(&s1, &s0));
    double dl = tr_loss_diff(&s0, &fix), dw = tr_weight_rel_diff(&s0, &fix);
    cr_log_info("%s: lp-grads against the fixed reduction: loss %.3g, weights %.3g", what, dl, dw);
    cr_expect_gt(dw, 0, "%s: lp-grads trained the fixed reduction's weights", what);
    expect_grad_divergence(&s0, world, 1, what);
    expect_grad_divergence(&s1, world, 1, what);
    expect_grad_divergence(&fix, world, 0, what);
    tr_free(&s0);
    tr_free(&s1);
    tr_free(&fix);
    ts_sh(NULL, 0, "rm -rf %s", dir);
}

Test(ranks_deepspeed, toy_stage0_equals_stage1_at_2_ranks, .timeout = 300)
{
    stage0_equals_stage1(TOY, TOY_BF16 " -s train.max_steps=20", 2);
}

Test(ranks_deepspeed, toy_stage0_equals_stage1_at_3_ranks, .timeout = 300)
{
    stage0_equals_stage1(TOY, TOY_BF16 " -s train.max_steps=20", 3);
}

/* The tiny BERT on the first SQuAD article (written to a temp folder, not committed). */
Test(ranks_deepspeed, tiny_bert_stage0_equals_stage1_at_2_ranks, .timeout = 300)
{
    char args[2048], *dir = tr_tiny_squad_args(args, sizeof args, "-s train.max_steps=12 -s backend.cpu.threads=1 "
                                               "-s 'precision.plugin=\"bf16-master\"'");
    stage0_equals_stage1("configs/tiny_squad.cfg", args, 2);
    ts_sh(NULL, 0, "rm -rf %s", dir);
}

Test(ranks_deepspeed, at_one_rank_lp_grads_changes_nothing, .timeout = 300)
{
    char *dir = ts_tmpdir("ds-one");
    tr_run a, b;
    tr_run_mpx(&a, dir, "default", TOY, TOY_BF16 " -s train.max_steps=20");
    tr_run_mpx(&b, dir, "lp", TOY, TOY_BF16 " -s train.max_steps=20" LP);
    cr_expect(tr_bitwise_equal(&a, &b), "lp-grads at 1 rank differs: loss %.3g, weights %.3g", tr_loss_diff(&b, &a),
              tr_weight_rel_diff(&b, &a));
    /* (no divergence is measured at one rank, by construction: nothing to assert there) */
    tr_free(&a);
    tr_free(&b);
    ts_sh(NULL, 0, "rm -rf %s", dir);
}

/* The replica check reads the ranks' real weights: rank 1 flipping one bit of its first
 * weight before each measurement shows on rank 1 alone, in every trace row. */
Test(ranks_deepspeed, a_nudged_replica_is_caught_by_rank, .timeout = 300)
{
    char *dir = ts_tmpdir("ds-nudge"), out[16384], path[4096];
    int rc = ts_sh(out, sizeof out, "MPX_INJECT_REPLICA_NUDGE=1 timeout 200 build/bin/mpx run " TOY " --out %s/run "
                   TOY_BF16 " -s train.max_steps=20 -s train.log_every=10 --ranks 3 2>&1", dir);
    cr_assert_eq(rc, 0, "%s", out);
    snprintf(path, sizeof path, "%s/run/run.json", dir);
    json_t *rec = ts_load_json(path), *m = json_object_get(rec, "metrics");
    json_t *d = json_object_get(m, "replica_divergence"), *trace = json_object_get(m, "replica_divergence_trace");
    json_t *mx = json_object_get(d, "max_abs"), *rel = json_object_get(d, "rel_l2");
    cr_assert_eq(json_array_size(mx), 3);
    /* rank 0 is the reference every rank is compared with (its own entry is 0 by
     * construction); rank 2, not nudged, is what shows the check is per rank */
    for (size_t k = 1; k < 3; k++) {
        double a = json_number_value(json_array_get(mx, k)), r = json_number_value(json_array_get(rel, k));
        if (k == 1) cr_expect(a > 0 && r > 0, "rank 1 was nudged: max %.3g, relative L2 %.3g", a, r);
        else cr_expect(a == 0 && r == 0, "rank %zu was not nudged: max %.3g, relative L2 %.3g", k, a, r);
    }
    cr_expect_eq(json_array_size(trace), 2, "measured at steps 10 and 20: %zu rows", json_array_size(trace));
    for (size_t i = 0; i < json_array_size(trace); i++)
        cr_expect_gt(json_number_value(json_array_get(json_array_get(trace, i), 1)), 0);
    json_decref(rec);
    ts_sh(NULL, 0, "rm -rf %s", dir);
}

static void expect_refused(const char *args, const char *needle)
{
    char out[8192];
    int rc = ts_sh(out, sizeof out, "build/bin/mpx check " TOY " %s 2>&1", args);
    cr_expect_eq(rc, 1, "mpx check %s exited %d:\n%s", args, rc, out);
    cr_expect(strstr(out, "zero.deepspeed_bf16_reduce") && strstr(out, needle), "mpx check %s:\n%s", args, out);
}

Test(ranks_deepspeed, what_bf16_optimizer_never_ran_is_refused)
{
    expect_refused("-s 'precision.plugin=\"fp32\"'" LP, "fp32 grads");
    expect_refused("-s 'precision.plugin=\"pure-bf16\"'" LP, "no wider accumulator");
    expect_refused("-s 'precision.plugin=\"bf16-master\"' -s 'precision.loss_scale=\"static\"'" LP, "loss scale \"static\"");
    expect_refused("-s 'precision.plugin=\"bf16-master\"' -s 'zero.plugin=\"stage2\"'" LP, "stage2");
    char out[8192];
    int rc = ts_sh(out, sizeof out, "build/bin/mpx check " TOY " -s 'precision.plugin=\"bf16-master\"' -s run.ranks=2 "
                   "-s 'comm.plugin=\"mpi\"'" LP " 2>/dev/null");
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "DeepSpeed 0.8.0-0.13.2") && strstr(out, "never read"), "mpx check prints the path:\n%s", out);
}

/* The script's lr factor (REFERENCE.md): x / w below the warm-up, else 1 - x. */
static double warmup_linear(double x, double w) { return x < w ? x / w : 1.0 - x; }

/* The lr mpx check prints after `what` ("peak: lr", "last step (N): lr", ...) in sched. */
static double printed_lr(const char *sched, const char *what, long *step)
{
    const char *p = strstr(sched, what);
    cr_assert_not_null(p, "no \"%s\" in:\n%s", what, sched);
    double lr = NAN;
    const char *at;
    cr_assert_eq(sscanf(p + strlen(what), " %lf", &lr), 1, "%s", p);
    if (step) {
        at = strstr(p, " at step ");
        cr_assert(at && sscanf(at, " at step %ld", step) == 1, "%s", p);
    }
    return lr;
}

/* configs/bingbert_squad_8gpu.cfg is the launcher's arithmetic, checked against the train
 * file itself: 8 ranks of 3 windows (a global batch of 24), t_total = int(questions / 3)
 * // 8 with the questions counted here from the JSON, the script's warmup_linear at the
 * steps mpx check names, and the pre-0.13.3 path. */
Test(ranks_deepspeed, the_reports_8_gpu_launch_checks, .timeout = 60)
{
    char out[65536];
    int rc = ts_sh(out, sizeof out, "build/bin/mpx check configs/bingbert_squad_8gpu.cfg 2>/dev/null");
    cr_assert_eq(rc, 0, "%s", out);
    json_error_t e;
    json_t *squad = json_load_file("datasets/data/train-v1.1.json", 0, &e);
    cr_assert(squad, "datasets/data/train-v1.1.json: %s (make data)", e.text);
    long questions = 0;
    size_t i, j;
    json_t *article, *para;
    json_array_foreach(json_object_get(squad, "data"), i, article)
        json_array_foreach(json_object_get(article, "paragraphs"), j, para)
            questions += (long)json_array_size(json_object_get(para, "qas"));
    json_decref(squad);
    cr_assert_gt(questions, 0);

    const char *data = strstr(out, "# data: ");
    cr_assert_not_null(data, "%s", out);
    long windows = 0, batch = 0, accum = 0, ranks = 0, steps = 0, t_total = 0;
    cr_assert_eq(sscanf(data, "# data: %ld training examples (squad); batch %ld x accumulation %ld x %ld rank(s)",
                        &windows, &batch, &accum, &ranks), 4, "%s", data);
    cr_expect(batch == 3 && accum == 1 && ranks == 8, "batch %ld x %ld x %ld ranks", batch, accum, ranks);
    cr_expect_gt(windows, questions, "%ld windows from %ld questions: long contexts give several", windows, questions);
    const char *sched = strstr(out, "# schedule: ");
    cr_assert_not_null(sched);
    cr_assert_eq(sscanf(sched, "# schedule: scheduler.type = \"warmup_linear\" over %ld optimizer steps", &steps), 1,
                 "%s", sched);
    cr_expect_eq(steps, (windows + 23) / 24, "%ld windows in global batches of 24: %ld steps", windows, steps);
    const char *x = strstr(sched, "warmup_linear(step / ");
    cr_assert(x && sscanf(x, "warmup_linear(step / %ld", &t_total) == 1, "%s", sched);
    cr_expect_eq(t_total, (questions / 3) / 8, "t_total %ld, the script's int(%ld / 3) // 8 = %ld", t_total, questions,
                 (questions / 3) / 8);

    /* the lr at the steps mpx check names, from the script's formula (printed to 6 digits) */
    const double base = 1e-4, w = 0.1, T = (double)((questions / 3) / 8);
    long peak = 0, neg = 0, last = steps - 1;
    double lr = printed_lr(sched, "peak: lr", &peak), want = base * warmup_linear((double)peak / T, w);
    cr_expect(fabs(lr - want) <= 1e-5 * fabs(want), "peak lr %g at step %ld, the formula %g", lr, peak, want);
    for (long k = 0; k < steps; k++)
        cr_expect_leq(warmup_linear((double)k / T, w), warmup_linear((double)peak / T, w), "step %ld beats the peak", k);
    lr = printed_lr(sched, "first negative lr:", &neg);
    want = base * warmup_linear((double)neg / T, w);
    cr_expect(fabs(lr - want) <= 1e-5 * fabs(want) && want < 0 && warmup_linear((double)(neg - 1) / T, w) >= 0,
              "first negative lr %g at step %ld, the formula %g", lr, neg, want);
    char what[64];
    snprintf(what, sizeof what, "last step (%ld): lr", last);
    lr = printed_lr(sched, what, NULL);
    want = base * warmup_linear((double)last / T, w);
    cr_expect(fabs(lr - want) <= 1e-5 * fabs(want), "last lr %g, the formula %g", lr, want);
    cr_expect(strstr(out, "zero.deepspeed_bf16_reduce = \"lp-grads\"") && strstr(out, "each of the 8 ranks"), "%s", out);
}

/* The measurements only read the state: measuring after every step (log_every 1) or only
 * after the last gives bitwise the same run, under lp-grads (both measurements) and the
 * fixed reduction (replicas only). */
Test(ranks_deepspeed, measuring_changes_nothing, .timeout = 300)
{
    char *dir = ts_tmpdir("ds-measure");
    static const char *const paths[] = { LP, "" };
    for (int k = 0; k < 2; k++) {
        char args[1024];
        tr_run every, last;
        snprintf(args, sizeof args, TOY_BF16 " -s train.max_steps=12 --ranks 2 -s train.log_every=1%s", paths[k]);
        tr_run_mpx(&every, dir, k ? "fix-every" : "lp-every", TOY, args);
        snprintf(args, sizeof args, TOY_BF16 " -s train.max_steps=12 --ranks 2 -s train.log_every=1000%s", paths[k]);
        tr_run_mpx(&last, dir, k ? "fix-last" : "lp-last", TOY, args);
        json_t *te = json_object_get(json_object_get(every.rec, "metrics"), "replica_divergence_trace");
        json_t *tl = json_object_get(json_object_get(last.rec, "metrics"), "replica_divergence_trace");
        cr_expect(json_array_size(te) == 12 && json_array_size(tl) == 1, "%s: %zu and %zu measurements",
                  k ? "fixed" : "lp-grads", json_array_size(te), json_array_size(tl));
        /* the gradient measurement: as often under lp-grads, absent under the fix */
        json_t *ge = json_object_get(json_object_get(every.rec, "metrics"), "grad_divergence");
        json_t *gl = json_object_get(json_object_get(last.rec, "metrics"), "grad_divergence");
        if (k) cr_expect(!ge && !gl, "fixed: a gradient divergence was measured");
        else cr_expect(json_integer_value(json_object_get(ge, "measurements")) == 12 &&
                       json_integer_value(json_object_get(gl, "measurements")) == 1,
                       "lp-grads: %lld and %lld gradient measurements",
                       (long long)json_integer_value(json_object_get(ge, "measurements")),
                       (long long)json_integer_value(json_object_get(gl, "measurements")));
        cr_expect(tr_bitwise_equal(&every, &last), "%s: measuring every step changed the run: loss %.3g, weights %.3g",
                  k ? "fixed" : "lp-grads", tr_loss_diff(&every, &last), tr_weight_rel_diff(&every, &last));
        tr_free(&every);
        tr_free(&last);
    }
    ts_sh(NULL, 0, "rm -rf %s", dir);
}
