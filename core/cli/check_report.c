/* `mpx check` extras: the learning-rate schedule the run will follow over the steps its
 * data yields, and every lr-valued key that never acts (REFERENCE: BingBertSquad's
 * config holds three learning rates, and only one of them acts). */
#include "check_report.h"
#include "../config/config.h"

#include <string.h>

#include "../engine/loss_scaler.h"
#include "../engine/schedule_glue.h"
#include "../tasks/tasks.h"
#include "../engine/train.h"

static void print_schedule(FILE *out, const char *type, const mpx_schedule_params *p,
                           const mpx_schedule_summary *sm)
{
    fprintf(out, "\n# schedule: scheduler.type = \"%s\" over %lld optimizer steps\n", type,
            (long long)sm->n_steps);
    if (!strcmp(type, "constant") || !strcmp(type, "warmup_linear"))
        fprintf(out, "#   base lr (optimizer.lr): %g\n", p->base_lr);
    if (!strcmp(type, "warmup_linear"))
        fprintf(out, "#   lr = base lr x warmup_linear(step / %lld, %g)\n", (long long)p->total_steps,
                p->warmup_proportion);
    fprintf(out, "#   step 0: lr %g\n", sm->first_lr);
    fprintf(out, "#   peak: lr %g at step %lld\n", sm->peak_lr, (long long)sm->peak_step);
    if (sm->first_negative_step >= 0)
        fprintf(out, "#   first negative lr: %g at step %lld (%lld steps with lr < 0)\n", sm->first_negative_lr,
                (long long)sm->first_negative_step, (long long)sm->n_negative);
    else
        fprintf(out, "#   the lr never goes negative\n");
    fprintf(out, "#   last step (%lld): lr %g\n", (long long)sm->n_steps - 1, sm->last_lr);
}

/* lr-valued keys present in the effective configuration */
static size_t present_lr_keys(const mpx_config *cfg, const char **out, size_t cap)
{
    static const char *const candidates[] = {
        "optimizer.lr",
        "scheduler.warmup_lr.warmup_min_lr", "scheduler.warmup_lr.warmup_max_lr",
        "scheduler.warmup_decay_lr.warmup_min_lr", "scheduler.warmup_decay_lr.warmup_max_lr",
    };
    size_t n = 0;
    for (size_t i = 0; i < sizeof candidates / sizeof *candidates && n < cap; i++)
        if (mpx_config_lookup(cfg, candidates[i])) out[n++] = candidates[i];
    return n;
}

/* The effective precision descriptor, as a comment block. */
static void print_precision(FILE *out, const mpx_precision_desc *d, const mpx_format_table *fmts)
{
    static const char *rounding[] = { "nearest", "stochastic", "kahan" };
    char ost[256];
    mpx_opt_state_describe(fmts, d, ost, sizeof ost);
    fprintf(out, "\n# precision: weights %s, GEMM inputs %s, activations %s, grads %s, grad accumulator %s,\n"
            "#   master %s, optimizer state %s, communication %s, eval logits %s; loss scale \"%s\"; rounding %s\n",
            mpx_dtype_label(fmts, d->weights), mpx_dtype_label(fmts, d->gemm_in), mpx_dtype_label(fmts, d->act), mpx_dtype_label(fmts, d->grads),
            d->grad_acc == MPX_DTYPE_NONE ? "(the grads)" : mpx_dtype_label(fmts, d->grad_acc),
            d->master == MPX_DTYPE_NONE ? "none" : mpx_dtype_label(fmts, d->master), ost,
            mpx_dtype_label(fmts, d->comm), mpx_dtype_label(fmts, d->eval_logits), d->loss_scale ? d->loss_scale : "none",
            (unsigned)d->rounding < 3 ? rounding[d->rounding] : "?");
    static const char *islands[] = { "layernorm", "softmax", "loss", "residual" };
    fprintf(out, "#   fp32 islands:");
    for (int i = 0; i < 4; i++)
        if (d->islands & (1u << i)) fprintf(out, " %s", islands[i]);
    fprintf(out, "%s\n", d->islands ? "" : " none");
    if (d->scaling != MPX_SCALING_NONE || mpx_dtype_is_format(d->gemm_in) || mpx_grad_gemm_dtype(d) != d->gemm_in) {
        char sc[256];
        mpx_scaling_describe(d, sc, sizeof sc);
        fprintf(out, "#   backward GEMM inputs %s; scaling of 8-bit GEMM inputs: %s\n",
                mpx_dtype_label(fmts, mpx_grad_gemm_dtype(d)), sc);
    }
    fprintf(out, "#   master from the %s; optimizer init step %s; unscale with the scale %s\n",
            d->upstream & MPX_UPSTREAM_MASTER_FROM_WEIGHTS ? "cast weights" : "checkpoint",
            d->upstream & MPX_UPSTREAM_OPT_INIT_STEP ? "on" : "off",
            d->upstream & MPX_UPSTREAM_UNSCALE_UPDATED ? "updated" : "used");
}

/* Which gradient the ranks step on (docs/RANKS.md). */
static void print_reduction(FILE *out, const mpx_session *s, int64_t ranks)
{
    if (ranks <= 1) {
        fprintf(out, "# gradient reduction: none (1 rank)%s\n", s->set.ds_lp_grads
                ? "; zero.deepspeed_bf16_reduce = \"lp-grads\" changes nothing at 1 rank" : "");
        return;
    }
    if (s->set.ds_lp_grads) {
        fprintf(out, "# gradient reduction: DeepSpeed 0.8.0-0.13.2's BF16_Optimizer path (zero.deepspeed_bf16_reduce = "
                "\"lp-grads\"):\n#   each of the %lld ranks adds its own grads into its %s accumulator; the %s grads are "
                "all-reduced and never read;\n#   each rank steps its 1/%lld of the master on its own gradient, clipped by "
                "its own norm; the weights are gathered\n", (long long)ranks, mpx_dtype_label(&s->fmts, s->prec.grad_acc),
                mpx_dtype_label(&s->fmts, s->prec.grads), (long long)ranks);
        return;
    }
    mpx_dtype acc = s->prec.grad_acc != MPX_DTYPE_NONE ? s->prec.grad_acc : s->prec.grads;
    mpx_dtype wire = s->prec.comm != MPX_DTYPE_NONE ? s->prec.comm : acc;
    fprintf(out, "# gradient reduction: the accumulated %s gradient, all-reduced over %lld ranks in %s; every rank "
            "steps on the sum\n#   (DeepSpeed >= 0.13.3 for bf16; zero.deepspeed_bf16_reduce = \"fp32-buffer\")\n",
            mpx_dtype_label(&s->fmts, acc), (long long)ranks, mpx_dtype_label(&s->fmts, wire));
}

int mpx_check_report(mpx_session *s, FILE *out, FILE *err)
{
    char msg[4096];
    if (mpx_session_precision(s, msg, sizeof msg)) {
        fprintf(err, "mpx check: %s\n", msg);
        return 1;
    }
    print_precision(out, &s->prec, &s->fmts);
    mpx_task t;
    if (mpx_task_open(&t, s, 1, msg, sizeof msg)) {
        if (t.destroy) t.destroy(&t); /* what it read before the error */
        fprintf(err, "mpx check: cannot read the data to count steps: %s\n", msg);
        return 1;
    }
    int64_t steps;
    if (mpx_train_count_steps(s, t.n_train, &steps, msg, sizeof msg)) {
        fprintf(err, "mpx check: %s\n", msg);
        if (t.destroy) t.destroy(&t);
        return 1;
    }
    int64_t batch = 1, accum = 1, epochs = 1, total_cfg = 0;
    mpx_config_get_int(s->cfg, "train.batch_size", &batch);
    mpx_config_get_int(s->cfg, "train.gradient_accumulation_steps", &accum);
    mpx_config_get_int(s->cfg, "train.epochs", &epochs);
    mpx_config_get_int(s->cfg, "scheduler.total_steps", &total_cfg);
    int64_t ranks = 1;
    if (mpx_config_lookup(s->cfg, "run.ranks")) mpx_config_get_int(s->cfg, "run.ranks", &ranks);
    size_t n_train = t.n_train;
    if (t.destroy) t.destroy(&t);
    const char *type;
    mpx_schedule_params p;
    mpx_schedule sched;
    mpx_schedule_summary sm;
    if (mpx_lr_schedule_params(&s->set.schedule, steps, &type, &p) ||
        mpx_schedule_init(&sched, type, &p, msg, sizeof msg) ||
        mpx_schedule_summarize(&sched, steps, &sm)) {
        fprintf(err, "mpx check: schedule: %s\n", msg);
        return 1;
    }
    fprintf(out, "\n# data: %zu training examples (%s); batch %lld x accumulation %lld x %lld rank(s), %lld epoch(s)\n",
            n_train, t.name, (long long)batch, (long long)accum, (long long)ranks, (long long)epochs);
    print_reduction(out, s, ranks);
    print_schedule(out, type, &p, &sm);
    if (total_cfg > 0 && total_cfg != steps)
        fprintf(err, "mpx check: warning: scheduler.total_steps = %lld, but the data and global batch yield %lld "
                "optimizer steps: the schedule's x = step / total_steps %s 1 before the run ends\n",
                (long long)total_cfg, (long long)steps, total_cfg < steps ? "passes" : "never reaches");
    const char *present[8];
    size_t n_present = present_lr_keys(s->cfg, present, 8);
    mpx_idle_lr_key idle[8];
    size_t n_idle = mpx_schedule_idle_lr_keys(type, present, n_present, idle, 8);
    for (size_t i = 0; i < n_idle && i < 8; i++) {
        double v = 0;
        mpx_config_get_float(s->cfg, idle[i].key, &v);
        fprintf(err, "mpx check: warning: %s = %g never acts: %s\n", idle[i].key, v, idle[i].why);
    }
    char scale_idle[5][240];   /* at most 5: every scaler key idle */
    size_t n_scale = mpx_scaler_idle_keys(s->prec.loss_scale, &s->set.scaler, scale_idle[0], 5, sizeof scale_idle[0]);
    for (size_t i = 0; i < n_scale; i++) fprintf(err, "mpx check: warning: %s\n", scale_idle[i]);
    return 0;
}
