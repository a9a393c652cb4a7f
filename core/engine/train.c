#include "train.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clip.h"
#include "diagnostics.h"
#include "loss_scaler.h"
#include "launch.h"
#include "nonfinite.h"
#include "opt_threads.h"
#include "schedule_glue.h"
#include "shard.h"
#include "train_state.h"
#include "update_window.h"
#include "weight_gather.h"

typedef struct train_cfg {
    int64_t batch, accum, epochs, max_steps, log_every, eval_every, checkpoint_every;
    double clip;
} train_cfg;

static int read_train_cfg(const mpx_session *s, train_cfg *c)
{
    int rc = mpx_config_get_int(s->cfg, "train.batch_size", &c->batch);
    rc |= mpx_config_get_int(s->cfg, "train.gradient_accumulation_steps", &c->accum);
    rc |= mpx_config_get_int(s->cfg, "train.epochs", &c->epochs);
    rc |= mpx_config_get_int(s->cfg, "train.max_steps", &c->max_steps);
    rc |= mpx_config_get_int(s->cfg, "train.log_every", &c->log_every);
    rc |= mpx_config_get_float(s->cfg, "train.gradient_clipping", &c->clip);
    rc |= mpx_config_get_int(s->cfg, "eval.every", &c->eval_every);
    c->checkpoint_every = 0;
    if (mpx_config_lookup(s->cfg, "train.checkpoint_every"))
        rc |= mpx_config_get_int(s->cfg, "train.checkpoint_every", &c->checkpoint_every);
    return rc;
}

int mpx_train_count_steps(const mpx_session *s, size_t n_train, int64_t *steps, char *err, size_t errlen)
{
    train_cfg c;
    if (read_train_cfg(s, &c) || c.batch < 1 || c.accum < 1) {
        snprintf(err, errlen, "train: incomplete configuration");
        return -1;
    }
    /* An epoch counts global batches (docs/RANKS.md): every rank reads every micro-batch
     * of a step, batch x accumulation x ranks examples. Under a launch run.ranks is the
     * launched count (cmd_run.c), so `mpx check` and every rank count the same steps. */
    int64_t ranks = 1;
    if (mpx_config_lookup(s->cfg, "run.ranks") && mpx_config_get_int(s->cfg, "run.ranks", &ranks)) ranks = 1;
    if (ranks < 1) ranks = 1;
    int64_t per_rank, per_step, per_epoch, n_micro, micro;
    if (__builtin_mul_overflow(c.batch, c.accum, &per_rank) || __builtin_mul_overflow(per_rank, ranks, &per_step) ||
        __builtin_mul_overflow(c.accum, ranks, &n_micro) || n_train > (size_t)INT64_MAX / 2) {
        snprintf(err, errlen, "train.batch_size x train.gradient_accumulation_steps x run.ranks (%lld x %lld x %lld) "
                 "overflows", (long long)c.batch, (long long)c.accum, (long long)ranks);
        return -1;
    }
    per_epoch = ((int64_t)n_train + per_step - 1) / per_step;
    if (c.max_steps > 0) *steps = c.max_steps;
    else if (__builtin_mul_overflow(c.epochs, per_epoch, steps)) *steps = INT64_MAX;
    /* the Philox counter of a micro-batch is 32 bits: step x (accumulation x ranks) + micro-batch */
    if (__builtin_mul_overflow(*steps, n_micro, &micro) || micro > (int64_t)UINT32_MAX + 1) {
        snprintf(err, errlen, "%s asks for %s%lld optimizer steps of %lld micro-batches: more than the 2^32 "
                 "micro-batches a run can count (the random streams' 32-bit counter)",
                 c.max_steps > 0 ? "train.max_steps" : "train.epochs", *steps == INT64_MAX ? "over " : "",
                 (long long)*steps, (long long)n_micro);
        return -1;
    }
    return 0;
}

int64_t mpx_train_total_steps(const mpx_session *s, size_t n_train)
{
    int64_t steps;
    char err[256];
    return mpx_train_count_steps(s, n_train, &steps, err, sizeof err) ? -1 : steps;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The fault hook: MPX_FAULT_AT_STEP=N dies at the start of step N (0-based) on SIGABRT,
 * as a crash would, after the record says which step it reached; with
 * MPX_FAULT_SIGNAL=KILL on SIGKILL, as the OOM killer would (the record stays "running");
 * with MPX_FAULT_SIGNAL=STOP it stops itself there (SIGSTOP) and goes on when continued;
 * with MPX_FAULT_RANK=R only rank R dies, leaving its error beside the record. */
static void maybe_fault(int64_t step, mpx_record *rec, int rank)
{
    const char *only = getenv("MPX_FAULT_RANK");
    if (only && *only && strtol(only, NULL, 10) != rank) return;
    static int64_t fault = -2;
    if (fault == -2) {
        const char *e = getenv("MPX_FAULT_AT_STEP");
        fault = e && *e ? strtoll(e, NULL, 10) : -1;
    }
    if (step != fault) return;
    mpx_record_sync(rec);
    const char *sig = getenv("MPX_FAULT_SIGNAL"); /* KILL: as the OOM killer, no handler runs */
    if (sig && !strcmp(sig, "STOP")) { /* held here for a parent to act on (sweep_fault.c), then goes on */
        raise(SIGSTOP);
        return;
    }
    int kill9 = sig && !strcmp(sig, "KILL");
    char msg[128];
    snprintf(msg, sizeof msg, "MPX_FAULT_AT_STEP=%lld: died at step %lld on %s", (long long)step, (long long)step,
             kill9 ? "SIGKILL" : "SIGABRT");
    if (rank != 0) mpx_launch_rank_error(rec->dir, rank, msg);
    fprintf(stderr, "mpx: MPX_FAULT_AT_STEP=%lld: dying now%s\n", (long long)step, kill9 ? " (SIGKILL)" : "");
    if (kill9) raise(SIGKILL);
    abort();
}

/* MPX_INJECT_OVERFLOW_AT_STEP=N[,M...]: an inf in the first gradient element at those
 * steps (after backward), to test loss-scale handling end to end; with
 * MPX_INJECT_OVERFLOW_RANK=R only on rank R (every rank must still skip). rank < 0: on
 * any rank (what every rank knows alike). MPX_INJECT_VALUE=X puts X there instead (a
 * float, rounded to the gradient's dtype): a large finite X is no overflow, though its
 * square is past FLT_MAX (check_overflow). */
static int injects_overflow(int64_t step, int rank)
{
    const char *r = getenv("MPX_INJECT_OVERFLOW_RANK");
    if (rank >= 0 && r && *r && strtol(r, NULL, 10) != rank) return 0;
    const char *e = getenv("MPX_INJECT_OVERFLOW_AT_STEP");
    while (e && *e) {
        char *end;
        long long v = strtoll(e, &end, 10);
        if (end == e) break;
        if (v == step) return 1;
        e = *end == ',' ? end + 1 : end;
    }
    return 0;
}

static int inject_inf(mpx_session *s, mpx_arg g)
{
    const char *e = getenv("MPX_INJECT_VALUE");
    float v = e && *e ? strtof(e, NULL) : INFINITY;
    uint16_t h = g.t == MPX_F16 ? mpx_f32_to_f16(v) : mpx_f32_to_bf16(v);
    return s->ops->to_device(s->be, g.p, g.t == MPX_F32 ? (const void *)&v : (const void *)&h, mpx_dtype_size(g.t));
}

static void progress(int64_t step, int64_t total, double loss, double lr, double tok_s, double eta)
{
    if (!isatty(STDERR_FILENO)) return;
    int m = (int)(eta / 60), sec = (int)eta % 60;
    fprintf(stderr, "\rstep %lld/%lld  loss %.4f  lr %.3g  %.0f tok/s  ETA %d:%02d   ",
            (long long)step + 1, (long long)total, loss, lr, tok_s, m, sec);
    if (step + 1 == total) fputc('\n', stderr);
}

/* The gradient backward starts from: scale / accum. When the loss itself is 16-bit (no
 * loss island, 16-bit activations) it is the gradient of a 16-bit tensor, as
 * DeepSpeed's `loss.float() * cur_scale` backpropagated into the fp16 loss: the scale
 * is rounded to that dtype first (2^16 becomes inf in fp16: that step overflows), and
 * the division by the accumulation steps rounds again. */
static float round_to(mpx_dtype t, float x)
{
    return t == MPX_BF16 ? mpx_round_bf16(x) : t == MPX_F16 ? mpx_round_f16(x) : x;
}

static float backward_seed(const mpx_session *s, double scale, int64_t accum)
{
    mpx_dtype t = mpx_island_dtype(&s->prec, MPX_ISLAND_LOSS);
    if (t == MPX_F32) return (float)(scale / (double)accum);
    float r = round_to(t, (float)scale);
    return round_to(t, r / (float)accum);
}

/* Forward and backward over this rank's micro-batches of the global batch (shard.h);
 * returns the mean loss over every rank's micro-batches. */
static int accumulate(mpx_session *s, mpx_task *t, const train_cfg *c, int64_t step, double scale,
                      mpx_diagnostics *diag, double *loss, int64_t *tokens, char *err, size_t errlen)
{
    mpx_instance *m = &s->inst[MPX_KIND_MODEL];
    const mpx_model_vtable *mv = &m->rec->vt.model;
    int64_t world = s->world > 0 ? s->world : 1, n_global = c->accum * world;
    double sums[2] = { 0, 0 }; /* loss, tokens */
    const float seed = backward_seed(s, scale, n_global);
    for (int64_t g = 0; g < n_global; g++) {
        mpx_batch b;
        int64_t tok = 0;
        /* every rank reads every micro-batch, so the data order is one rank's */
        if (t->next(t, s, (int)c->batch, &b, &tok, err, errlen)) return -1;
        if (g / c->accum != s->rank) continue;
        int64_t micro = g % c->accum;
        s->tick = (uint32_t)(step * n_global + g);
        b.tick = s->tick;
        b.training = 1;
        mpx_forward_out fo = { .size = sizeof fo };
        mpx_nonfinite_phase(0);
        int failed = mv->forward(m->self, &b, &fo);
        mpx_nonfinite_phase(1);
        if (failed || mv->backward(m->self, &b, seed, s->grad_acc.p ? 0 : micro > 0)) {
            mpx_session_error(s, MPX_KIND_MODEL, err, errlen);
            snprintf(err + strlen(err), errlen - strlen(err), " (step %lld)", (long long)step);
            return -1;
        }
        if (mpx_diag_after_backward(diag, s, micro, c->accum)) {
            snprintf(err, errlen, "step %lld: diagnostics failed", (long long)step);
            return -1;
        }
        /* a wider accumulator than the grads (bf16-master: fp32) is summed by the core */
        if (s->grad_acc.p &&
            s->ops->axpby(s->be, 1.0f, s->grads, micro ? 1.0f : 0.0f, s->grad_acc, s->numel)) {
            snprintf(err, errlen, "step %lld: accumulating gradients failed", (long long)step);
            return -1;
        }
        sums[0] += fo.loss / (double)n_global;
        sums[1] += (double)tok;
    }
    /* the update's tick (stochastic rounding) is the step's last micro-batch on every rank */
    s->tick = (uint32_t)(step * n_global + n_global - 1);
    if (world > 1 && mpx_core_host.allreduce_sum(&s->inst[MPX_KIND_COMM].env.pub, sums, 2)) {
        snprintf(err, errlen, "step %lld: reducing the loss over the ranks failed", (long long)step);
        return -1;
    }
    *loss = sums[0];
    *tokens = (int64_t)sums[1];
    return 0;
}

/* The optimizer's view of the step's gradient: fp32, unscaled, clipped. Returns the
 * pre-clip global norm: the one check_overflow took already when *norm is not NaN. */
static int prepare_grad(mpx_session *s, const train_cfg *c, double scale, double *norm,
                        char *err, size_t errlen)
{
    mpx_arg red = mpx_shard_reduced(s);
    mpx_arg g32 = mpx_a(s->grad32, MPX_F32);
    size_t n = s->shard_len;
    int rc = 0;
    if (g32.p != red.p) rc = s->ops->cast(s->be, red, g32, n);
    if (!rc && scale != 1.0) rc = s->ops->scale(s->be, g32, (float)(1.0 / scale), n);
    if (rc) {
        snprintf(err, errlen, "unscaling the gradient into fp32 failed");
        return rc;
    }
    /* each rank adds its equal slice's squares (shard.h), the clip acts on its own slice */
    size_t off, len;
    mpx_shard_norm_slice(s, &off, &len);
    mpx_grad_buf part = { mpx_at(g32, off), len }, all = { g32, n };
    if (isnan(*norm) && mpx_grad_norm(s->ops, s->be, &part, 1, mpx_core_host.allreduce_sum,
                                      &s->inst[MPX_KIND_COMM].env.pub, norm, err, errlen))
        return -1;
    return mpx_clip_by_norm(s->ops, s->be, &all, 1, c->clip, *norm, NULL, err, errlen);
}

static int gather_weights(mpx_session *s, char *err, size_t errlen)
{
    mpx_instance *z = &s->inst[MPX_KIND_ZERO], *c = &s->inst[MPX_KIND_COMM];
    if (z->rec->vt.zero.gather_weights(z->self, c->self, &c->rec->vt.comm, s->weights, s->numel_pad)) {
        mpx_session_error(s, MPX_KIND_ZERO, err, errlen);
        return -1;
    }
    return 0;
}

static int optimizer_step(mpx_session *s, int64_t update_no, double lr, int diag_active, char *err, size_t errlen)
{
    mpx_opt_step st = { .size = sizeof st, .pieces = s->pieces, .n_pieces = s->n_pieces,
                        .lr = lr, .step = update_no,
                        .param = s->master.p ? s->master : mpx_shard_weights(s),
                        .grad = s->grad32, .update = s->update, .flags = mpx_opt_step_flags(s, diag_active) };
    for (int i = 0; i < s->n_state; i++) { st.state[i] = s->state[i]; st.state_scale[i] = s->state_scale[i]; }
    if (mpx_opt_run(s, &st, 0, err, errlen)) return -1;
    /* master -> weights with the policy's rounding, then every rank's weights whole again */
    if (s->master.p && mpx_write_back_master(s, 0, s->shard_len, s->pieces, s->n_pieces, s->update)) {
        snprintf(err, errlen, "writing the master weights back failed");
        return -1;
    }
    return gather_weights(s, err, errlen);
}

/* Unscale, clip, the optimizer, the write-back and the gather: over the whole shard, or
 * window by window (update_window.h; bitwise the same). */
static int update_step(mpx_session *s, const train_cfg *c, double unscale, int64_t update_no, double lr,
                       mpx_diagnostics *diag, double *norm, char *err, size_t errlen)
{
    double coef = 1.0;   /* windows without a whole fp32 gradient are clipped as they are cast */
    if (!s->grad32 && unscale != 1.0) { /* no such copy only without loss scaling (update_window.c) */
        snprintf(err, errlen, "unscaling by %g without an fp32 gradient copy (precision.loss_scale = \"none\")", unscale);
        return -1;
    }
    if (s->grad32 ? prepare_grad(s, c, unscale, norm, err, errlen) : mpx_update_norm(s, c->clip, norm, &coef, err, errlen))
        return -1;
    if (mpx_diag_before_update(diag, s)) { snprintf(err, errlen, "diagnostics failed"); return -1; }
    if (!s->upd.on) return optimizer_step(s, update_no, lr, diag && diag->active, err, errlen);
    if (mpx_update_windows(s, coef, update_no, lr, diag, err, errlen)) return -1;
    return gather_weights(s, err, errlen);
}

/* DeepSpeed's FP16_Optimizer and BF16_Optimizer take one optimizer step on zero
 * gradients when they are built (initialize_optimizer_states), at the optimizer's
 * configured lr: Adam's step counter starts at 1 and decoupled decay shrinks the master
 * once; the 16-bit weights are not written back. */
int mpx_train_init_step(mpx_session *s, double lr, char *err, size_t errlen)
{
    if (s->upd.on) return mpx_update_windows_zero_grad(s, lr, err, errlen);
    mpx_opt_step st = { .size = sizeof st, .pieces = s->pieces, .n_pieces = s->n_pieces,
                        .lr = lr, .step = 1, .param = s->master.p ? s->master : mpx_shard_weights(s),
                        .grad = s->grad32, .update = s->update, .flags = mpx_opt_step_flags(s, 0) };
    for (int i = 0; i < s->n_state; i++) { st.state[i] = s->state[i]; st.state_scale[i] = s->state_scale[i]; }
    if (s->ops->fill_zero(s->be, s->grad32, s->shard_len * sizeof(float))) {
        snprintf(err, errlen, "optimizer init step: zeroing the fp32 gradient failed");
        return -1;
    }
    if (mpx_opt_run(s, &st, 0, err, errlen)) {
        snprintf(err + strlen(err), errlen - strlen(err), " (the zero-gradient init step)");
        return -1;
    }
    return 0;
}

/* Whether any rank's gradient slice holds an inf or a NaN. When the unscaled fp32
 * gradient is the reduced one itself (fp32 gradients, or bf16's fp32 accumulator, and no
 * loss scaling: `fused`), the check is the gradient norm's own pass: every square is
 * non-negative, so an inf or a NaN makes the sum of squares inf or NaN, and a finite sum
 * means every element is finite. Only a non-finite sum is looked into element by element
 * (finite squares can still add up past FLT_MAX), so the answer is count_nonfinite's.
 * *norm gets that norm (prepare_grad then takes it as it is, the same call on the same
 * data), else NaN. */
static int check_overflow(mpx_session *s, int64_t step, int fused, int *overflow, double *norm, char *err,
                          size_t errlen)
{
    size_t bad = 0, off, len;
    *norm = NAN;
    mpx_shard_norm_slice(s, &off, &len);
    mpx_arg whole = mpx_shard_reduced(s), red = mpx_at(whole, off);
    if (fused && s->grad32 && s->grad32 == whole.p && red.t == MPX_F32) {
        mpx_grad_buf part = { red, len };
        if (mpx_grad_norm(s->ops, s->be, &part, 1, mpx_core_host.allreduce_sum, &s->inst[MPX_KIND_COMM].env.pub,
                          norm, err, errlen)) {
            snprintf(err + strlen(err), errlen - strlen(err), " (step %lld, the overflow check)", (long long)step);
            return -1;
        }
        if (isfinite(*norm)) {
            *overflow = 0;
            return 0;
        }
    }
    int rc = s->ops->count_nonfinite(s->be, red, len, &bad);
    double flag = bad ? 1.0 : 0.0; /* every rank skips the same step */
    if (rc || mpx_core_host.allreduce_sum(&s->inst[MPX_KIND_COMM].env.pub, &flag, 1)) {
        snprintf(err, errlen, "step %lld: overflow check failed", (long long)step);
        return -1;
    }
    *overflow = flag > 0;
    if (*overflow) *norm = NAN;   /* a skipped step has no norm (metrics.csv: empty) */
    return 0;
}

/* One optimizer step exactly as mpx_train takes it (micro-batches, overflow check,
 * unscale and clip, optimizer, write-back), at loss scale `scale` and learning rate
 * `lr`, for benchmarks (tests/bench_step.c). Returns 0; *skipped says whether an
 * overflow skipped the update. */
int mpx_train_one_step(mpx_session *s, mpx_task *t, int64_t step, double lr, double scale,
                       mpx_diagnostics *diag, double *loss, int *skipped, char *err, size_t errlen)
{
    train_cfg c;
    if (read_train_cfg(s, &c)) { snprintf(err, errlen, "train: incomplete configuration"); return -1; }
    int64_t tokens;
    double norm = NAN;
    mpx_diagnostics off = { 0 };
    if (!diag) diag = &off;
    if (mpx_diag_begin_step(diag, s, step, step + 1)) { snprintf(err, errlen, "diagnostics failed"); return -1; }
    if (accumulate(s, t, &c, step, scale, diag, loss, &tokens, err, errlen)) return -1;
    if (mpx_shard_reduce_grads(s, err, errlen)) return -1;
    if (check_overflow(s, step, scale == 1.0, skipped, &norm, err, errlen)) return -1;
    if (!*skipped && update_step(s, &c, scale, step + 1, lr, diag, &norm, err, errlen)) return -1;
    return mpx_diag_end_step(diag, s, step, !*skipped);
}

/* A NaN or inf in the step with no loss scaler to skip it (precision.loss_scale "none";
 * an injected overflow still skips: it tests the skip path): the step's micro-batches
 * again, from the data position it started at, with every op checked (nonfinite.h);
 * always -1, err naming the step, the op and the tensor. */
static int stop_on_nonfinite(mpx_session *s, mpx_task *t, const train_cfg *c, int64_t step, const uint64_t pos[2],
                             double scale, double loss, mpx_diagnostics *diag, json_t *metrics, char *err, size_t errlen)
{
    mpx_diagnostics off = { 0 };
    double again;
    int64_t tokens;
    /* the step's diagnostics row, as a skipped step's: what went in before the NaN */
    if (mpx_diag_end_step(diag, s, step, 0)) {
        snprintf(err, errlen, "step %lld: diagnostics failed", (long long)step);
        return -1;
    }
    if (!t->seek || t->seek(t, s, pos, err, errlen) || mpx_nonfinite_begin(s, err, errlen)) return -1;
    char rerun_err[1024] = "";
    int rc = accumulate(s, t, c, step, scale, &off, &again, &tokens, rerun_err, sizeof rerun_err);
    mpx_nonfinite_end(s, step, loss, metrics, err, errlen);
    if (rc) snprintf(err + strlen(err), errlen - strlen(err), " (the locate pass failed: %s)", rerun_err);
    return -1;
}

enum { COL_STEP, COL_LOSS, COL_LR, COL_GRAD_NORM, COL_SCALE, COL_SKIPPED, COL_TOKENS_S, COL_ELAPSED, N_COLS };
const char *const mpx_metrics_columns[N_COLS] = {
    "step", "loss", "lr", "grad_norm", "loss_scale", "skipped", "tokens_per_s", "elapsed_s",
};
const size_t mpx_n_metrics_columns = N_COLS;

/* An evaluation after `steps` steps, appended to metrics.evals. */
static int evaluate_during(mpx_session *s, mpx_task *t, json_t *metrics, int64_t steps, char *err, size_t errlen)
{
    json_t *m = json_object();
    if (t->evaluate(t, s, m, NULL, err, errlen)) { json_decref(m); return -1; }
    json_object_set_new(m, "step", json_integer(steps));
    json_t *evals = json_object_get(metrics, "evals");
    if (!evals) json_object_set_new(metrics, "evals", evals = json_array());
    json_array_append_new(evals, m);
    return 0;
}

/* The steps themselves, with the state mpx_train set up. */
static int train_steps(mpx_session *s, mpx_task *t, mpx_record *rec, const train_cfg *cp, int64_t total,
                       mpx_loss_scaler *lsp, mpx_lr_schedule *sched, mpx_diagnostics *diag, json_t *progress_j,
                       mpx_train_progress *pr, json_t *metrics, char *err, size_t errlen)
{
    const train_cfg c = *cp;
    json_t *trace = pr->trace, *losses = pr->losses, *overflows = pr->overflows;
    double t0 = now_s() - pr->elapsed, first_loss = pr->first_loss, last_loss = pr->last_loss;
    int64_t updates = pr->updates, skipped = pr->skipped, tokens_total = pr->tokens_total;
    /* the construction-time step counts in the optimizer's step number, resumed or not;
     * a resumed run's master and moments already hold its effect */
    const int64_t init_steps = s->prec.upstream & MPX_UPSTREAM_OPT_INIT_STEP ? 1 : 0;
    if (init_steps && pr->step == 0 && mpx_train_init_step(s, sched->base_lr, err, errlen)) return -1;
    for (int64_t step = pr->step; step < total; step++) {
        json_object_set_new(progress_j, "step", json_integer(step));
        maybe_fault(step, rec, s->rank);
        double ts = now_s(), loss, norm = NAN, lr = mpx_lr_at(sched, step, updates);
        int64_t tokens;
        double scale = lsp->scale;
        if (mpx_diag_begin_step(diag, s, step, total)) { snprintf(err, errlen, "step %lld: diagnostics failed", (long long)step); return -1; }
        uint64_t pos[2] = { 0, 0 }; /* where the step's data starts, for a locate pass */
        if (t->position) t->position(t, pos);
        if (accumulate(s, t, &c, step, scale, diag, &loss, &tokens, err, errlen)) return -1;
        mpx_arg acc = s->grad_acc.p ? s->grad_acc : s->grads;
        if (injects_overflow(step, s->rank) && inject_inf(s, acc)) {
            snprintf(err, errlen, "step %lld: cannot inject the overflow", (long long)step);
            return -1;
        }
        if (mpx_shard_reduce_grads(s, err, errlen)) return -1;
        int overflow = 0, skip = 0;
        /* without loss scaling the scale stays 1: the norm is the check's (check_overflow) */
        if (check_overflow(s, step, !strcmp(lsp->preset, "none") && scale == 1.0, &overflow, &norm, err, errlen))
            return -1;
        if ((overflow || !isfinite(loss)) && !injects_overflow(step, -1) && !strcmp(lsp->preset, "none"))
            return stop_on_nonfinite(s, t, &c, step, pos, scale, loss, diag, metrics, err, errlen);
        if (mpx_scaler_update(lsp, overflow, step, &skip, err, errlen)) return -1;
        if (!skip) {
            /* FP16_Optimizer.step updates cur_scale before unscale_and_clip_grads reads it */
            double unscale = s->prec.upstream & MPX_UPSTREAM_UNSCALE_UPDATED ? lsp->scale : scale;
            if (update_step(s, &c, unscale, ++updates + init_steps, lr, diag, &norm, err, errlen)) {
                snprintf(err + strlen(err), errlen - strlen(err), " (step %lld)", (long long)step);
                return -1;
            }
        } else {
            skipped++;
            json_array_append_new(overflows, json_pack("[I, f]", (json_int_t)step, scale));
        }
        if (lsp->scale != scale)
            json_array_append_new(trace, json_pack("[I, f]", (json_int_t)step + 1, lsp->scale));
        if (mpx_diag_end_step(diag, s, step, !skip)) { snprintf(err, errlen, "step %lld: diagnostics failed", (long long)step); return -1; }
        mpx_scaling_end_step(&s->scaling);   /* delayed scaling: histories roll (taken or skipped) */
        tokens_total += tokens;
        double dt = now_s() - ts, elapsed = now_s() - t0;
        if (isnan(first_loss)) first_loss = loss;
        last_loss = loss;
        json_array_append_new(losses, isfinite(loss) ? json_real(loss) : json_null()); /* JSON has no NaN */
        if (!isfinite(loss) && !json_object_get(metrics, "first_nonfinite_loss_step"))
            json_object_set_new(metrics, "first_nonfinite_loss_step", json_integer(step));
        double row[N_COLS] = { (double)step, loss, lr, norm, scale, skip, (double)tokens / dt, elapsed };
        if (mpx_record_row(rec, row)) {
            snprintf(err, errlen, "step %lld: cannot append to %s/metrics.csv: %s", (long long)step, rec->dir, strerror(errno));
            return -1;
        }
        progress(step, total, loss, lr, (double)tokens_total / elapsed, elapsed / (double)(step + 1) * (double)(total - step - 1));
        if (c.log_every > 0 && (step + 1) % c.log_every == 0 && mpx_record_sync(rec)) {
            snprintf(err, errlen, "step %lld: cannot write %s: %s", (long long)step, rec->json_path, strerror(errno));
            return -1;
        }
        if (c.eval_every > 0 && (step + 1) % c.eval_every == 0 && step + 1 < total) {
            /* rank 0 evaluates alone: at stage 3 every rank first gathers the weights for it */
            if (mpx_wgather_begin_whole(s, err, errlen)) return -1;
            int erc = s->rank == 0 ? evaluate_during(s, t, metrics, step + 1, err, errlen) : 0;
            mpx_wgather_end_whole(s);
            if (erc) return -1;
        }
        if (c.checkpoint_every > 0 && (step + 1) % c.checkpoint_every == 0 && step + 1 < total) {
            *pr = (mpx_train_progress){ step + 1, total, updates, skipped, tokens_total, first_loss, last_loss,
                                        now_s() - t0, trace, losses, overflows };
            if (mpx_train_state_save(s, t, rec, lsp, diag, pr, metrics, err, errlen)) return -1;
            mpx_record_sync(rec);
        }
    }
    json_object_set_new(progress_j, "step", json_integer(total));
    double elapsed = now_s() - t0;
    json_object_set_new(metrics, "steps", json_integer(total));
    json_object_set_new(metrics, "updates", json_integer(updates));
    json_object_set_new(metrics, "skipped_steps", json_integer(skipped));
    json_object_set_new(metrics, "overflow_count", json_integer(lsp->overflows));
    json_object_set(metrics, "loss_scale_trace", trace);
    json_object_set(metrics, "overflow_steps", overflows); /* [step, scale used] of each skipped step */
    json_object_set_new(metrics, "first_loss", json_real(first_loss));
    json_object_set_new(metrics, "final_loss", json_real(last_loss));
    double tail;
    if (!mpx_tail_loss_mean(losses, &tail)) json_object_set_new(metrics, "final_loss_mean", json_real(tail));
    json_object_set(metrics, "losses", losses);
    json_object_set_new(metrics, "train_seconds", json_real(elapsed));
    json_object_set_new(metrics, "tokens_per_s", json_real(elapsed > 0 ? (double)tokens_total / elapsed : 0));
    return 0;
}

int mpx_train(mpx_session *s, mpx_task *t, mpx_record *rec, json_t *metrics, char *err, size_t errlen)
{
    return mpx_train_resume(s, t, rec, metrics, NULL, err, errlen);
}

int mpx_train_resume(mpx_session *s, mpx_task *t, mpx_record *rec, json_t *metrics, const char *from,
                     char *err, size_t errlen)
{
    train_cfg c;
    if (read_train_cfg(s, &c)) { snprintf(err, errlen, "train: incomplete configuration"); return -1; }
    int64_t total;
    if (mpx_train_count_steps(s, t->n_train, &total, err, errlen)) return -1;
    mpx_loss_scaler ls;
    if (mpx_scaler_init(&ls, s->prec.loss_scale, s->cfg, err, errlen)) return -1;
    mpx_lr_schedule sched;
    if (mpx_lr_schedule_open(&sched, s, total, err, errlen)) return -1;
    json_t *progress_j = json_object();
    json_object_set_new(rec->root, "progress", progress_j);
    json_object_set_new(progress_j, "total_steps", json_integer(total));
    mpx_diagnostics diag = { 0 }; /* rank 0's: of its slice of the state, beside its record */
    if (s->rank == 0 && mpx_diag_open(&diag, s, rec->dir, err, errlen)) {
        mpx_diag_close(&diag, s);
        mpx_lr_schedule_close(&sched);
        return -1;
    }
    json_t *trace = json_array(), *losses = json_array(), *overflows = json_array();
    json_array_append_new(trace, json_pack("[I, f]", (json_int_t)0, ls.scale));
    mpx_train_progress pr = { .total = total, .first_loss = NAN, .last_loss = NAN,
                              .trace = trace, .losses = losses, .overflows = overflows };
    int rc = from ? mpx_train_state_load(from, s, t, rec, &ls, &diag, &pr, metrics, err, errlen) : 0;
    if (!rc) rc = train_steps(s, t, rec, &c, total, &ls, &sched, &diag, progress_j, &pr, metrics, err, errlen);
    json_decref(trace);
    json_decref(losses);
    json_decref(overflows);
    mpx_diag_summary(&diag, metrics);
    if (s->prec.scaling != MPX_SCALING_NONE)
        json_object_set_new(metrics, "scaling", mpx_scaling_state_json(&s->scaling, &s->fmts));
    json_t *pj = json_object_get(rec->root, "precision");
    if (s->param_gemm && json_is_object(pj)) {   /* the policy's per-parameter choices (ABI 1.3) */
        const mpx_instance *m = &s->inst[MPX_KIND_MODEL];
        json_t *o = json_object();
        for (size_t i = 0; i < s->n_params; i++) {
            mpx_dtype f = s->param_gemm[2 * i], b = s->param_gemm[2 * i + 1];
            if (f == s->prec.gemm_in && b == mpx_grad_gemm_dtype(&s->prec)) continue;
            json_object_set_new(o, m->rec->vt.model.param(m->self, i)->name,
                                json_pack("[s, s]", mpx_dtype_label(&s->fmts, f), mpx_dtype_label(&s->fmts, b)));
        }
        json_object_set_new(pj, "param_gemm", o);
    }
    mpx_diag_close(&diag, s);
    mpx_lr_schedule_close(&sched);
    return rc;
}

