#include "train.h"
#include "train_step.h"

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
#include "divergence.h"
#include "loss_scaler.h"
#include "launch.h"
#include "nonfinite.h"
#include "opt_threads.h"
#include "../record/notes.h"
#include "schedule_glue.h"
#include "shard.h"
#include "train_state.h"
#include "update_window.h"
#include "weight_gather.h"

int mpx_train_count_steps(const mpx_session *s, size_t n_train, int64_t *steps, char *err, size_t errlen)
{
    const train_cfg c = s->set;
    if (!c.train_ok || c.batch < 1 || c.accum < 1) {
        snprintf(err, errlen, "train: incomplete configuration");
        return -1;
    }
    /* An epoch counts global batches (docs/RANKS.md): every rank reads every micro-batch
     * of a step, batch x accumulation x ranks examples. Under a launch run.ranks is the
     * launched count (cmd_run.c), so `mpx check` and every rank count the same steps. */
    int64_t ranks = c.ranks;
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

/* MPX_INJECT_REPLICA_NUDGE=R: rank R flips the lowest bit of its first weight before each
 * replica-divergence measurement (divergence.h), as a replica drifting apart would, to
 * test that the measurement reads the ranks' real weights. */
static int nudge_replica(mpx_session *s)
{
    const char *e = getenv("MPX_INJECT_REPLICA_NUDGE");
    if (!e || !*e || strtol(e, NULL, 10) != s->rank || s->weights_base != 0) return 0;
    unsigned char b[4];
    size_t sz = mpx_dtype_size(s->weights.t);
    if (sz > sizeof b || s->ops->to_host(s->be, b, s->weights.p, sz)) return -1;
    b[0] ^= 1; /* little-endian: the last bit of the significand */
    return s->ops->to_device(s->be, s->weights.p, b, sz);
}

static void progress(int64_t step, int64_t total, double loss, double lr, double tok_s, double eta)
{
    if (!isatty(STDERR_FILENO)) return;
    int m = (int)(eta / 60), sec = (int)eta % 60;
    fprintf(stderr, "\rstep %lld/%lld  loss %.4f  lr %.3g  %.0f tok/s  ETA %d:%02d   ",
            (long long)step + 1, (long long)total, loss, lr, tok_s, m, sec);
    if (step + 1 == total) fputc('\n', stderr);
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
    int rc = mpx_train_accumulate(s, t, c, step, scale, &off, &again, &tokens, rerun_err, sizeof rerun_err);
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
        if (mpx_train_accumulate(s, t, &c, step, scale, diag, &loss, &tokens, err, errlen)) return -1;
        mpx_arg acc = s->grad_acc.p ? s->grad_acc : s->grads;
        if (injects_overflow(step, s->rank) && inject_inf(s, acc)) {
            snprintf(err, errlen, "step %lld: cannot inject the overflow", (long long)step);
            return -1;
        }
        if (mpx_shard_reduce_grads(s, err, errlen)) return -1;
        const int due = mpx_divergence_due(s, step, total);
        if (due && mpx_divergence_grads(s, step, metrics, err, errlen)) return -1;
        int overflow = 0, skip = 0;
        /* without loss scaling the scale stays 1: the norm is the check's (check_overflow) */
        if (mpx_train_check_overflow(s, step, !strcmp(lsp->preset, "none") && scale == 1.0, &overflow, &norm, err, errlen))
            return -1;
        if ((overflow || !isfinite(loss)) && !injects_overflow(step, -1) && !strcmp(lsp->preset, "none"))
            return stop_on_nonfinite(s, t, &c, step, pos, scale, loss, diag, metrics, err, errlen);
        if (mpx_scaler_update(lsp, overflow, step, &skip, err, errlen)) return -1;
        if (!skip) {
            /* FP16_Optimizer.step updates cur_scale before unscale_and_clip_grads reads it */
            double unscale = s->prec.upstream & MPX_UPSTREAM_UNSCALE_UPDATED ? lsp->scale : scale;
            if (mpx_train_update(s, &c, unscale, ++updates + init_steps, lr, diag, &norm, err, errlen)) {
                snprintf(err + strlen(err), errlen - strlen(err), " (step %lld)", (long long)step);
                return -1;
            }
        } else {
            skipped++;
            json_array_append_new(overflows, json_pack("[I, f]", (json_int_t)step, scale));
        }
        if (due && nudge_replica(s)) {
            snprintf(err, errlen, "step %lld: MPX_INJECT_REPLICA_NUDGE failed", (long long)step);
            return -1;
        }
        if (due && mpx_divergence_replicas(s, step + 1, metrics, err, errlen)) return -1;
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
    const train_cfg *c = &s->set;
    if (!c->train_ok) { snprintf(err, errlen, "train: incomplete configuration"); return -1; }
    int64_t total;
    if (mpx_train_count_steps(s, t->n_train, &total, err, errlen)) return -1;
    mpx_loss_scaler ls;
    if (mpx_scaler_init(&ls, s->prec.loss_scale, &s->set.scaler, err, errlen)) return -1;
    char idle[5][240];   /* at most 5: every scaler key idle */
    size_t n_idle = mpx_scaler_idle_keys(s->prec.loss_scale, &s->set.scaler, idle[0], 5, sizeof idle[0]);
    for (size_t i = 0; s->rank == 0 && i < n_idle; i++) mpx_note("%s", idle[i]);
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
    if (!rc) rc = train_steps(s, t, rec, c, total, &ls, &sched, &diag, progress_j, &pr, metrics, err, errlen);
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

