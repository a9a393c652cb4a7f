/* One optimizer step: the micro-batches' forward and backward into the accumulator,
 * the gradient reduction's overflow check, unscale and clip, the optimizer over the
 * shard (whole or window by window) and the weights written back and gathered. The
 * training loop (train.c) and the benchmarks (mpx_train_one_step) take it. */
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
#include "loss_scaler.h"
#include "launch.h"
#include "nonfinite.h"
#include "opt_threads.h"
#include "schedule_glue.h"
#include "shard.h"
#include "train_state.h"
#include "update_window.h"
#include "weight_gather.h"

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
int mpx_train_accumulate(mpx_session *s, mpx_task *t, const train_cfg *c, int64_t step, double scale,
                         mpx_diagnostics *diag, double *loss, int64_t *tokens, char *err, size_t errlen)
{
    mpx_instance *m = &s->inst[MPX_KIND_MODEL];
    const mpx_model_vtable *mv = &m->rec->vt.model;
    int64_t world = s->world > 0 ? s->world : 1, n_global = c->accum * world;
    double sums[2] = { 0, 0 }; /* loss, tokens */
    /* every micro-batch's loss over the global batch, its gradients summed over the ranks;
     * under lp_unread over this rank's micro-batches only (DeepSpeed scales the loss by
     * the accumulation steps and leaves the averaging over ranks to the all-reduce, whose
     * result nothing reads) */
    const float seed = backward_seed(s, scale, s->lp_unread ? c->accum : n_global);
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

/* BF16_Optimizer's norm under lp_unread: of this rank's whole unreduced fp32 gradient,
 * with no all-reduce over the ranks (get_global_norm_of_tensors reduces over the
 * model-parallel group only), so each rank clips by its own norm. */
static int local_norm(mpx_session *s, double *norm, char *err, size_t errlen)
{
    mpx_grad_buf all = { s->grad_acc, s->numel_pad };
    return mpx_grad_norm(s->ops, s->be, &all, 1, NULL, NULL, norm, err, errlen);
}

/* Stage 0 under lp_unread: BF16_Optimizer partitions the fp32 master over the ranks even
 * without ZeRO; each rank steps its partition on its own clipped gradient and the bf16
 * partitions are all-gathered (update_lp_params). Here every rank holds the whole master,
 * so it steps the whole of it on a gradient whose partition q is rank q's: the same
 * update, element for element, as stage 1's partitioned step and gather. */
static int gather_partitions(mpx_session *s, char *err, size_t errlen)
{
    if (!s->lp_unread || s->shard_len != s->numel_pad) return 0;
    size_t chunk = s->numel_pad / (size_t)s->world;
    mpx_arg g = mpx_a(s->grad32, MPX_F32);
    mpx_instance *c = &s->inst[MPX_KIND_COMM];
    if (c->rec->vt.comm.allgather(c->self, mpx_at(g, (size_t)s->rank * chunk), g, chunk)) {
        mpx_session_error(s, MPX_KIND_COMM, err, errlen);
        snprintf(err + strlen(err), errlen - strlen(err), " (gathering each rank's gradient partition)");
        return -1;
    }
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
    if (isnan(*norm) && (s->lp_unread ? local_norm(s, norm, err, errlen)
                                      : mpx_grad_norm(s->ops, s->be, &part, 1, mpx_core_host.allreduce_sum,
                                                      &s->inst[MPX_KIND_COMM].env.pub, norm, err, errlen)))
        return -1;
    if (mpx_clip_by_norm(s->ops, s->be, &all, 1, c->clip, *norm, NULL, err, errlen)) return -1;
    return gather_partitions(s, err, errlen);
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
int mpx_train_update(mpx_session *s, const train_cfg *c, double unscale, int64_t update_no, double lr,
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
int mpx_train_check_overflow(mpx_session *s, int64_t step, int fused, int *overflow, double *norm, char *err,
                             size_t errlen)
{
    size_t bad = 0, off, len;
    *norm = NAN;
    mpx_shard_norm_slice(s, &off, &len);
    mpx_arg whole = mpx_shard_reduced(s), red = mpx_at(whole, off);
    if (s->lp_unread) { /* each rank's own gradient, whole (and no loss scaling: session.c) */
        red = s->grad_acc;
        len = s->numel_pad;
        if (local_norm(s, norm, err, errlen)) {
            snprintf(err + strlen(err), errlen - strlen(err), " (step %lld, the overflow check)", (long long)step);
            return -1;
        }
        /* a finite sum of squares: every element is finite (below); the flag is still shared */
        if (isfinite(*norm)) len = 0;
    } else if (fused && s->grad32 && s->grad32 == whole.p && red.t == MPX_F32) {
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
    int rc = len ? s->ops->count_nonfinite(s->be, red, len, &bad) : 0;
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
    const train_cfg *c = &s->set;
    if (!c->train_ok) { snprintf(err, errlen, "train: incomplete configuration"); return -1; }
    int64_t tokens;
    double norm = NAN;
    mpx_diagnostics off = { 0 };
    if (!diag) diag = &off;
    if (mpx_diag_begin_step(diag, s, step, step + 1)) { snprintf(err, errlen, "diagnostics failed"); return -1; }
    if (mpx_train_accumulate(s, t, c, step, scale, diag, loss, &tokens, err, errlen)) return -1;
    if (mpx_shard_reduce_grads(s, err, errlen)) return -1;
    if (mpx_train_check_overflow(s, step, scale == 1.0, skipped, &norm, err, errlen)) return -1;
    if (!*skipped && mpx_train_update(s, c, scale, step + 1, lr, diag, &norm, err, errlen)) return -1;
    return mpx_diag_end_step(diag, s, step, !*skipped);
}
