#include "schedule.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const type_names[] = { "constant", "warmup_linear", "warmup_lr", "warmup_decay_lr" };

static int parse_type(const char *type, mpx_schedule_type *out)
{
    for (size_t i = 0; i < sizeof type_names / sizeof type_names[0]; i++)
        if (type && strcmp(type, type_names[i]) == 0) { *out = (mpx_schedule_type)i; return 0; }
    return -1;
}

/* DeepSpeed's WarmupLR fields, shared by warmup_decay_lr. */
static int init_deepspeed(mpx_schedule *s, const mpx_schedule_params *p, const char *group,
                          char *err, size_t n)
{
    if (!p->warmup_type || (strcmp(p->warmup_type, "log") && strcmp(p->warmup_type, "linear"))) {
        snprintf(err, n, "scheduler.%s.warmup_type = \"%s\": expected \"log\" or \"linear\"",
                 group, p->warmup_type ? p->warmup_type : "");
        return -1;
    }
    if (p->warmup_num_steps < 0) {
        snprintf(err, n, "scheduler.%s.warmup_num_steps = %lld must be >= 0", group,
                 (long long)p->warmup_num_steps);
        return -1;
    }
    s->warmup = strcmp(p->warmup_type, "log") == 0 ? MPX_WARMUP_LOG : MPX_WARMUP_LINEAR;
    s->min_lr = p->warmup_min_lr;
    s->max_lr = p->warmup_max_lr;
    /* DeepSpeed: self.warmup_num_steps = max(2, warmup_num_steps), so log(n) > 0. */
    s->warmup_steps = p->warmup_num_steps < 2 ? 2 : p->warmup_num_steps;
    s->inv_log_warmup = 1.0 / log((double)s->warmup_steps);
    return 0;
}

int mpx_schedule_init(mpx_schedule *s, const char *type, const mpx_schedule_params *p,
                      char *err, size_t n)
{
    memset(s, 0, sizeof *s);
    if (parse_type(type, &s->type) != 0) {
        snprintf(err, n, "scheduler.type = \"%s\": expected constant, warmup_linear, warmup_lr "
                 "or warmup_decay_lr", type ? type : "");
        return -1;
    }
    s->base_lr = p->base_lr;
    switch (s->type) {
    case MPX_SCHED_CONSTANT:
        return 0;
    case MPX_SCHED_WARMUP_LINEAR:
        if (p->total_steps < 1) {
            snprintf(err, n, "scheduler.total_steps = %lld: warmup_linear needs a step count >= 1",
                     (long long)p->total_steps);
            return -1;
        }
        if (!(p->warmup_proportion >= 0.0 && p->warmup_proportion <= 1.0)) {
            snprintf(err, n, "scheduler.warmup_linear.warmup_proportion = %g outside [0, 1]",
                     p->warmup_proportion);
            return -1;
        }
        s->total_steps = p->total_steps;
        s->warmup_proportion = p->warmup_proportion;
        return 0;
    case MPX_SCHED_WARMUP_LR:
        return init_deepspeed(s, p, "warmup_lr", err, n);
    case MPX_SCHED_WARMUP_DECAY_LR:
        if (p->total_num_steps < 1) {
            snprintf(err, n, "scheduler.warmup_decay_lr.total_num_steps = %lld must be >= 1 "
                     "(0 in the config means scheduler.total_steps)",
                     (long long)p->total_num_steps);
            return -1;
        }
        s->total_num_steps = p->total_num_steps;
        return init_deepspeed(s, p, "warmup_decay_lr", err, n);
    }
    return -1;
}

/* BingBertSquad's warmup_linear(x, warmup). */
static double warmup_linear(double x, double w)
{
    return x < w ? x / w : 1.0 - x;
}

/* DeepSpeed's _get_gamma at last_batch_iteration i. */
static double deepspeed_gamma(const mpx_schedule *s, int64_t i)
{
    if (i < s->warmup_steps)
        return s->warmup == MPX_WARMUP_LOG ? s->inv_log_warmup * log((double)(i + 1))
                                           : (double)i / (double)s->warmup_steps;
    if (s->type == MPX_SCHED_WARMUP_LR) return 1.0;
    double left = (double)(s->total_num_steps - i);
    double span = (double)(s->total_num_steps - s->warmup_steps);
    double g = left / (span > 1.0 ? span : 1.0);
    return g > 0.0 ? g : 0.0;
}

double mpx_schedule_lr(const mpx_schedule *s, int64_t step)
{
    switch (s->type) {
    case MPX_SCHED_CONSTANT:
        return s->base_lr;
    case MPX_SCHED_WARMUP_LINEAR:
        return s->base_lr * warmup_linear((double)step / (double)s->total_steps, s->warmup_proportion);
    case MPX_SCHED_WARMUP_LR:
    case MPX_SCHED_WARMUP_DECAY_LR: {
        /* The scheduler steps after the update: update k runs at iteration k - 1, and
         * update 0 at the constructor's warmup_min_lr (= gamma 0). */
        int64_t i = step > 0 ? step - 1 : 0;
        return s->min_lr + (s->max_lr - s->min_lr) * deepspeed_gamma(s, i);
    }
    }
    return 0.0;
}

/* The summary without walking every step (a count from a config may be huge): each
 * schedule is monotone between its breakpoints, so a piece's peak is at an end, found
 * first by bisection, and its negative steps are a prefix or a suffix, counted by
 * bisection. */
typedef struct lr_piece { int64_t a, b; } lr_piece;

/* Non-decreasing on [a, b]: the first k with lr(k) >= v (v = lr(b) is reached). */
static int64_t first_reaching(const mpx_schedule *s, int64_t a, int64_t b, double v)
{
    while (a < b) {
        int64_t m = a + (b - a) / 2;
        if (mpx_schedule_lr(s, m) >= v) b = m; else a = m + 1;
    }
    return a;
}

/* The first k in [a, b] where pred(lr(k)) turns from false to true (b + 1 if never);
 * pred must be monotone over the piece. */
static int64_t first_true(const mpx_schedule *s, int64_t a, int64_t b, int want_negative)
{
    int64_t lo = a, hi = b + 1;
    while (lo < hi) {
        int64_t m = lo + (hi - lo) / 2;
        int neg = mpx_schedule_lr(s, m) < 0.0;
        if (neg == want_negative) hi = m; else lo = m + 1;
    }
    return lo;
}

/* The pieces over which the schedule is monotone, clipped to [0, n - 1]. */
static size_t lr_pieces(const mpx_schedule *s, int64_t n, lr_piece *out)
{
    int64_t cut[3];
    size_t nc = 0, np = 0;
    if (s->type == MPX_SCHED_WARMUP_LINEAR) {
        /* the first k with k / T >= w */
        int64_t lo = 0, hi = n;
        while (lo < hi) {
            int64_t m = lo + (hi - lo) / 2;
            if ((double)m / (double)s->total_steps >= s->warmup_proportion) hi = m; else lo = m + 1;
        }
        cut[nc++] = lo;
    } else if (s->type == MPX_SCHED_WARMUP_LR || s->type == MPX_SCHED_WARMUP_DECAY_LR) {
        cut[nc++] = 1;                    /* updates 0 and 1 both run at iteration 0 */
        cut[nc++] = s->warmup_steps + 1;  /* iteration warmup_steps: the warm-up is over */
    }
    int64_t a = 0;
    for (size_t i = 0; i <= nc; i++) {
        int64_t b = i < nc ? cut[i] - 1 : n - 1;
        if (b > n - 1) b = n - 1;
        if (b >= a) out[np++] = (lr_piece){ a, b };
        if (b + 1 > a) a = b + 1;
    }
    return np;
}

int mpx_schedule_follows_updates(const mpx_schedule *s)
{
    return s->type == MPX_SCHED_WARMUP_LR || s->type == MPX_SCHED_WARMUP_DECAY_LR;
}

int mpx_schedule_summarize(const mpx_schedule *s, int64_t n_steps, mpx_schedule_summary *out)
{
    memset(out, 0, sizeof *out);
    if (n_steps < 1) return -1;
    out->n_steps = n_steps;
    out->first_negative_step = -1;
    out->first_lr = mpx_schedule_lr(s, 0);
    out->peak_lr = out->first_lr;
    out->last_lr = mpx_schedule_lr(s, n_steps - 1);
    lr_piece pieces[4];
    size_t np = lr_pieces(s, n_steps, pieces);
    for (size_t i = 0; i < np; i++) {
        int64_t a = pieces[i].a, b = pieces[i].b;
        double la = mpx_schedule_lr(s, a), lb = mpx_schedule_lr(s, b);
        int rising = la <= lb;
        int64_t peak_k = rising ? first_reaching(s, a, b, lb) : a;
        double peak = rising ? lb : la;
        if (peak > out->peak_lr) { out->peak_lr = peak; out->peak_step = peak_k; }
        /* negative steps: a prefix of a rising piece, a suffix of a falling one */
        int64_t neg_a = rising ? a : first_true(s, a, b, 1);
        int64_t neg_b = rising ? first_true(s, a, b, 0) - 1 : b;
        if (neg_b < neg_a) continue;
        if (out->first_negative_step < 0) {
            out->first_negative_step = neg_a;
            out->first_negative_lr = mpx_schedule_lr(s, neg_a);
        }
        out->n_negative += neg_b - neg_a + 1;
    }
    return 0;
}

/* The scheduler sub-groups with lr-valued keys, and those keys. */
static const char *const lr_groups[] = { "warmup_lr", "warmup_decay_lr" };
static const char *const lr_leaves[] = { "warmup_min_lr", "warmup_max_lr" };

/* If `key` is scheduler.GROUP.LEAF with an lr-valued LEAF, returns GROUP's index. */
static int scheduler_lr_group(const char *key)
{
    static const char prefix[] = "scheduler.";
    if (strncmp(key, prefix, sizeof prefix - 1) != 0) return -1;
    const char *rest = key + sizeof prefix - 1;
    for (int g = 0; g < 2; g++) {
        size_t len = strlen(lr_groups[g]);
        if (strncmp(rest, lr_groups[g], len) != 0 || rest[len] != '.') continue;
        for (int l = 0; l < 2; l++)
            if (strcmp(rest + len + 1, lr_leaves[l]) == 0) return g;
    }
    return -1;
}

size_t mpx_schedule_idle_lr_keys(const char *type, const char *const *present, size_t n_present,
                                 mpx_idle_lr_key *out, size_t cap)
{
    mpx_schedule_type t;
    if (parse_type(type, &t) != 0) t = MPX_SCHED_CONSTANT;
    int deepspeed = t == MPX_SCHED_WARMUP_LR || t == MPX_SCHED_WARMUP_DECAY_LR;
    int selected_group = t == MPX_SCHED_WARMUP_LR ? 0 : t == MPX_SCHED_WARMUP_DECAY_LR ? 1 : -1;
    size_t n = 0;
    for (size_t i = 0; i < n_present; i++) {
        const char *why = NULL;
        int g = scheduler_lr_group(present[i]);
        if (deepspeed && strcmp(present[i], "optimizer.lr") == 0)
            why = "the DeepSpeed schedule sets every update's lr (warmup_min_lr .. warmup_max_lr)";
        else if (g >= 0 && g != selected_group)
            why = "its scheduler sub-group is not the selected scheduler.type";
        if (!why) continue;
        if (n < cap) out[n] = (mpx_idle_lr_key){ present[i], why };
        n++;
    }
    return n;
}
