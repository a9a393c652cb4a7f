/* Learning-rate schedules against their formulas written out here (BingBertSquad's
 * warmup_linear; DeepSpeed's WarmupLR and WarmupDecayLR with the scheduler stepping
 * after each update), what `mpx check` reports about them, and weight-decay groups. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "../core/engine/decay.h"
#include "../core/engine/schedule.h"

static mpx_schedule make(const char *type, mpx_schedule_params p)
{
    mpx_schedule s;
    char err[256] = "";
    cr_assert_eq(mpx_schedule_init(&s, type, &p, err, sizeof err), 0, "%s: %s", type, err);
    return s;
}

static void expect_lr(const mpx_schedule *s, int64_t step, double want)
{
    double got = mpx_schedule_lr(s, step);
    cr_assert(fabs(got - want) <= 1e-12 * fmax(1.0, fabs(want)) + 1e-18,
              "step %lld: lr %.17g, expected %.17g", (long long)step, got, want);
}

Test(schedule, constant)
{
    mpx_schedule s = make("constant", (mpx_schedule_params){ .base_lr = 3e-5 });
    expect_lr(&s, 0, 3e-5);
    expect_lr(&s, 12345, 3e-5);
}

/* BingBertSquad: lr = 1e-4 * warmup_linear(global_step / t_total, 0.1), global_step the
 * 0-based update count. */
Test(schedule, warmup_linear_formula)
{
    mpx_schedule s = make("warmup_linear", (mpx_schedule_params){
        .base_lr = 1e-4, .total_steps = 1000, .warmup_proportion = 0.1 });
    expect_lr(&s, 0, 0.0);                       /* the first update runs at lr 0 */
    expect_lr(&s, 50, 1e-4 * (50 / 1000.0) / 0.1);
    expect_lr(&s, 99, 1e-4 * (99 / 1000.0) / 0.1);
    expect_lr(&s, 100, 1e-4 * (1.0 - 100 / 1000.0)); /* the jump down to 0.9e-4 */
    expect_lr(&s, 999, 1e-4 * (1.0 - 999 / 1000.0));
    expect_lr(&s, 1000, 0.0);
    expect_lr(&s, 1010, 1e-4 * (1.0 - 1010 / 1000.0)); /* negative past x = 1 */
}

/* The report's run: t_total = int(87599 / 3) = 29199 counts questions, the loop runs
 * over more feature windows (29,500 here for illustration). */
Test(schedule, warmup_linear_summary_bingbert)
{
    mpx_schedule s = make("warmup_linear", (mpx_schedule_params){
        .base_lr = 1e-4, .total_steps = 29199, .warmup_proportion = 0.1 });
    mpx_schedule_summary sum;
    cr_assert_eq(mpx_schedule_summarize(&s, 29500, &sum), 0);
    cr_assert_eq(sum.first_lr, 0.0);
    /* x < 0.1 while step < 2919.9: the peak is the last warm-up step. */
    cr_assert_eq(sum.peak_step, 2919);
    cr_assert(fabs(sum.peak_lr - 1e-4 * (2919.0 / 29199.0) / 0.1) < 1e-18);
    cr_assert(sum.peak_lr < 1e-4 && sum.peak_lr > 0.9996e-4);
    cr_assert_eq(sum.first_negative_step, 29200);
    cr_assert(sum.first_negative_lr < 0);
    cr_assert_eq(sum.n_negative, 29500 - 29200);
    cr_assert(fabs(sum.last_lr - 1e-4 * (1.0 - 29499.0 / 29199.0)) < 1e-18);
    cr_assert(sum.last_lr < -1e-6 && sum.last_lr > -1.1e-6, "last lr %g", sum.last_lr);
}

/* DeepSpeed WarmupLR, log: lr = min + (max - min) * log(i + 1) / log(n) at iteration
 * i = update - 1 (update 0 at warmup_min_lr). */
Test(schedule, warmup_lr_log)
{
    mpx_schedule s = make("warmup_lr", (mpx_schedule_params){
        .warmup_min_lr = 0, .warmup_max_lr = 1e-5, .warmup_num_steps = 1000, .warmup_type = "log" });
    expect_lr(&s, 0, 0.0);
    expect_lr(&s, 1, 0.0);
    expect_lr(&s, 10, 1e-5 * log(10.0) / log(1000.0));
    expect_lr(&s, 500, 1e-5 * log(500.0) / log(1000.0));
    expect_lr(&s, 1000, 1e-5);                   /* iteration 999: log(1000) / log(1000) */
    expect_lr(&s, 20000, 1e-5);                  /* flat after warm-up */
    mpx_schedule_summary sum;
    cr_assert_eq(mpx_schedule_summarize(&s, 5000, &sum), 0);
    cr_assert_eq(sum.peak_step, 1000);
    cr_assert_eq(sum.first_negative_step, -1);
}

Test(schedule, warmup_lr_linear_with_min)
{
    mpx_schedule s = make("warmup_lr", (mpx_schedule_params){
        .warmup_min_lr = 1e-6, .warmup_max_lr = 1e-4, .warmup_num_steps = 100, .warmup_type = "linear" });
    expect_lr(&s, 0, 1e-6);
    expect_lr(&s, 51, 1e-6 + (1e-4 - 1e-6) * 50 / 100.0);
    expect_lr(&s, 100, 1e-6 + (1e-4 - 1e-6) * 99 / 100.0);
    expect_lr(&s, 101, 1e-4);
    mpx_schedule_summary sum;
    cr_assert_eq(mpx_schedule_summarize(&s, 300, &sum), 0);
    cr_assert_eq(sum.peak_step, 101);
    cr_assert_eq(sum.last_lr, 1e-4);
}

/* DeepSpeed clamps warmup_num_steps to at least 2. */
Test(schedule, warmup_lr_min_two_steps)
{
    mpx_schedule s = make("warmup_lr", (mpx_schedule_params){
        .warmup_min_lr = 0, .warmup_max_lr = 1e-3, .warmup_num_steps = 1, .warmup_type = "log" });
    expect_lr(&s, 1, 0.0);
    expect_lr(&s, 2, 1e-3);
}

/* WarmupDecayLR after warm-up: max(0, (T - i) / max(1, T - n)). */
Test(schedule, warmup_decay_lr)
{
    mpx_schedule s = make("warmup_decay_lr", (mpx_schedule_params){
        .warmup_min_lr = 0, .warmup_max_lr = 1e-4, .warmup_num_steps = 1000,
        .warmup_type = "linear", .total_num_steps = 2000 });
    expect_lr(&s, 0, 0.0);
    expect_lr(&s, 501, 1e-4 * 500 / 1000.0);
    expect_lr(&s, 1001, 1e-4);                   /* iteration 1000: (2000 - 1000) / 1000 */
    expect_lr(&s, 1501, 1e-4 * (2000 - 1500) / 1000.0);
    expect_lr(&s, 2001, 0.0);
    expect_lr(&s, 2600, 0.0);                    /* clamped at 0, never negative */
    mpx_schedule_summary sum;
    cr_assert_eq(mpx_schedule_summarize(&s, 2002, &sum), 0);
    cr_assert_eq(sum.peak_step, 1001);
    cr_assert_eq(sum.last_lr, 0.0);
    cr_assert_eq(sum.first_negative_step, -1);
}

Test(schedule, bad_parameters_name_the_key)
{
    mpx_schedule s;
    char err[256];
    cr_assert_neq(mpx_schedule_init(&s, "cosine", &(mpx_schedule_params){ 0 }, err, sizeof err), 0);
    cr_assert(strstr(err, "scheduler.type"), "%s", err);
    cr_assert_neq(mpx_schedule_init(&s, "warmup_linear",
                                    &(mpx_schedule_params){ .base_lr = 1e-4, .warmup_proportion = 0.1 },
                                    err, sizeof err), 0);
    cr_assert(strstr(err, "scheduler.total_steps"), "%s", err);
    cr_assert_neq(mpx_schedule_init(&s, "warmup_lr",
                                    &(mpx_schedule_params){ .warmup_num_steps = 10, .warmup_type = "exp" },
                                    err, sizeof err), 0);
    cr_assert(strstr(err, "scheduler.warmup_lr.warmup_type"), "%s", err);
    cr_assert_neq(mpx_schedule_init(&s, "warmup_decay_lr",
                                    &(mpx_schedule_params){ .warmup_num_steps = 10, .warmup_type = "log" },
                                    err, sizeof err), 0);
    cr_assert(strstr(err, "scheduler.warmup_decay_lr.total_num_steps"), "%s", err);
    mpx_schedule_summary sum;
    mpx_schedule c = make("constant", (mpx_schedule_params){ .base_lr = 1 });
    cr_assert_neq(mpx_schedule_summarize(&c, 0, &sum), 0);
}

static const char *const report_keys[] = {
    "optimizer.lr", "optimizer.adam.weight_decay", "scheduler.type",
    "scheduler.warmup_linear.warmup_proportion",
    "scheduler.warmup_lr.warmup_min_lr", "scheduler.warmup_lr.warmup_max_lr",
    "scheduler.warmup_lr.warmup_num_steps", "scheduler.warmup_decay_lr.warmup_max_lr",
};

static int listed(const mpx_idle_lr_key *k, size_t n, const char *key)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(k[i].key, key) == 0) return 1;
    return 0;
}

/* The report's situation: optimizer.lr acts through warmup_linear; WarmupLR's lrs never do. */
Test(schedule, idle_lr_keys_under_warmup_linear)
{
    mpx_idle_lr_key k[8];
    size_t n = mpx_schedule_idle_lr_keys("warmup_linear", report_keys, 8, k, 8);
    cr_assert_eq(n, 3);
    cr_assert(listed(k, n, "scheduler.warmup_lr.warmup_min_lr"));
    cr_assert(listed(k, n, "scheduler.warmup_lr.warmup_max_lr"));
    cr_assert(listed(k, n, "scheduler.warmup_decay_lr.warmup_max_lr"));
    cr_assert(!listed(k, n, "optimizer.lr"));
    for (size_t i = 0; i < n; i++) cr_assert(k[i].why && k[i].why[0]);
}

Test(schedule, idle_lr_keys_under_warmup_lr)
{
    mpx_idle_lr_key k[8];
    size_t n = mpx_schedule_idle_lr_keys("warmup_lr", report_keys, 8, k, 8);
    cr_assert_eq(n, 2);
    cr_assert(listed(k, n, "optimizer.lr"));
    cr_assert(listed(k, n, "scheduler.warmup_decay_lr.warmup_max_lr"));
    /* Capacity smaller than the count: the count is still the full one. */
    cr_assert_eq(mpx_schedule_idle_lr_keys("warmup_lr", report_keys, 8, k, 1), 2);
    cr_assert_eq(mpx_schedule_idle_lr_keys("constant", report_keys, 1, k, 8), 0);
}

/* BingBertSquad's groups: no_decay = ['bias', 'LayerNorm.bias', 'LayerNorm.weight']. */
static const char *const bert_names[] = {
    "bert.embeddings.word_embeddings.weight", "bert.embeddings.LayerNorm.weight",
    "bert.embeddings.LayerNorm.bias", "bert.encoder.layer.0.attention.self.query.weight",
    "bert.encoder.layer.0.attention.self.query.bias", "bert.encoder.layer.0.output.LayerNorm.weight",
    "qa_outputs.weight", "qa_outputs.bias",
};
/* A model whose defaults exempt only biases. */
static const int bias_only[] = { 0, 0, 1, 0, 1, 0, 0, 1 };

Test(decay, bingbert_substrings_override_defaults)
{
    const char *const sub[] = { "bias", "LayerNorm.bias", "LayerNorm.weight" };
    int nd[8];
    size_t matches[3];
    cr_assert_eq(mpx_decay_flags(bert_names, bias_only, 8, sub, 3, nd, matches), 5);
    const int want[] = { 0, 1, 1, 0, 1, 1, 0, 1 };
    for (int i = 0; i < 8; i++) cr_assert_eq(nd[i], want[i], "%s", bert_names[i]);
    cr_assert_eq(matches[0], 3);
    cr_assert_eq(matches[1], 1);
    cr_assert_eq(matches[2], 2);
}

Test(decay, empty_list_keeps_defaults)
{
    int nd[8];
    cr_assert_eq(mpx_decay_flags(bert_names, bias_only, 8, NULL, 0, nd, NULL), 3);
    for (int i = 0; i < 8; i++) cr_assert_eq(nd[i], bias_only[i], "%s", bert_names[i]);
}

Test(decay, list_replaces_defaults_and_reports_unmatched)
{
    const char *const sub[] = { "ln.weight" };
    int nd[8];
    size_t matches[1];
    cr_assert_eq(mpx_decay_flags(bert_names, bias_only, 8, sub, 1, nd, matches), 0);
    cr_assert_eq(matches[0], 0);
    /* the list replaced the defaults: no tensor is left without decay, biases included */
    for (int i = 0; i < 8; i++) cr_assert_eq(nd[i], 0, "%s kept its default", bert_names[i]);
    const char *const empty[] = { "" };
    cr_assert_eq(mpx_decay_flags(bert_names, bias_only, 8, empty, 1, nd, NULL), -1);
}

/* The summary bisects between breakpoints instead of walking every step (issue 15: a
 * huge train.epochs made `mpx check` run for ever): the walk, written out here, is the
 * reference over a grid of schedules and step counts around their breakpoints. */
static mpx_schedule_summary walk(const mpx_schedule *s, int64_t n)
{
    mpx_schedule_summary w = { .n_steps = n, .first_negative_step = -1 };
    w.first_lr = w.peak_lr = mpx_schedule_lr(s, 0);
    for (int64_t k = 0; k < n; k++) {
        double lr = mpx_schedule_lr(s, k);
        if (lr > w.peak_lr) { w.peak_lr = lr; w.peak_step = k; }
        if (lr < 0.0) {
            if (w.first_negative_step < 0) { w.first_negative_step = k; w.first_negative_lr = lr; }
            w.n_negative++;
        }
        w.last_lr = lr;
    }
    return w;
}

static void expect_summary_is_the_walk(const mpx_schedule *s, int64_t n, const char *what)
{
    mpx_schedule_summary got, want = walk(s, n);
    cr_assert_eq(mpx_schedule_summarize(s, n, &got), 0);
    cr_expect(got.first_lr == want.first_lr && got.peak_lr == want.peak_lr && got.peak_step == want.peak_step &&
              got.first_negative_step == want.first_negative_step && got.first_negative_lr == want.first_negative_lr &&
              got.n_negative == want.n_negative && got.last_lr == want.last_lr,
              "%s over %lld steps: peak %g at %lld (walk %g at %lld), first negative %lld (walk %lld), "
              "%lld negative (walk %lld)", what, (long long)n, got.peak_lr, (long long)got.peak_step, want.peak_lr,
              (long long)want.peak_step, (long long)got.first_negative_step, (long long)want.first_negative_step,
              (long long)got.n_negative, (long long)want.n_negative);
}

Test(schedule, summary_without_walking_equals_the_walk)
{
    static const int64_t ns[] = { 1, 2, 3, 7, 99, 100, 101, 1000, 1001, 1500, 2999 };
    static const double props[] = { 0.0, 0.1, 0.333, 0.5, 1.0 };
    static const int64_t warm[] = { 0, 1, 2, 3, 100, 999, 5000 };
    static const double mins[] = { 0.0, 2e-3 }; /* 2e-3 > max: a "warm-up" that falls */
    for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
        int64_t n = ns[i];
        mpx_schedule c = make("constant", (mpx_schedule_params){ .base_lr = 3e-5 });
        expect_summary_is_the_walk(&c, n, "constant");
        for (size_t j = 0; j < sizeof props / sizeof *props; j++)
            for (int64_t total = 1; total <= 2000; total += 666) {
                mpx_schedule s = make("warmup_linear", (mpx_schedule_params){
                    .base_lr = 1e-4, .total_steps = total, .warmup_proportion = props[j] });
                expect_summary_is_the_walk(&s, n, "warmup_linear");
            }
        for (size_t j = 0; j < sizeof warm / sizeof *warm; j++)
            for (size_t m = 0; m < 2; m++)
                for (int lin = 0; lin < 2; lin++) {
                    mpx_schedule_params p = { .warmup_min_lr = mins[m], .warmup_max_lr = 1e-3,
                                              .warmup_num_steps = warm[j], .warmup_type = lin ? "linear" : "log",
                                              .total_num_steps = 1200 };
                    mpx_schedule a = make("warmup_lr", p), b = make("warmup_decay_lr", p);
                    expect_summary_is_the_walk(&a, n, "warmup_lr");
                    expect_summary_is_the_walk(&b, n, "warmup_decay_lr");
                }
    }
}

Test(schedule, summary_of_a_huge_step_count_is_immediate, .timeout = 2)
{
    mpx_schedule s = make("warmup_linear", (mpx_schedule_params){
        .base_lr = 1e-4, .total_steps = 1000, .warmup_proportion = 0.1 });
    mpx_schedule_summary sum;
    cr_assert_eq(mpx_schedule_summarize(&s, INT64_MAX / 2, &sum), 0);
    cr_expect_eq(sum.first_negative_step, 1001);
    cr_expect_eq(sum.n_negative, INT64_MAX / 2 - 1001);
}
