/* Per-op-class timing of a training step (see bench_profile.h). A benchmark program, not
 * a plugin: the wrapped tables and the sums are file-level state of this process. */
#define _GNU_SOURCE
#include "bench_profile.h"
#include "bench_util.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

enum {
    C_GEMM, C_ATTN_GEMM, C_ATTN_FWD, C_ATTN_BWD, C_SOFTMAX, C_SOFTMAX_DROPOUT, C_LAYERNORM, C_DROPOUT_ADD_LN, C_GELU,
    C_DROPOUT, C_BIAS,
    C_ELEMENTWISE,
    C_CAST, C_EMBEDDING, C_LOSS, C_REDUCE, C_OPTIMIZER, C_WRITE_BACK, C_MEMORY, N_CLASSES
};

static const char *const class_name[N_CLASSES] = {
    [C_GEMM] = "GEMM, linear layers (batch 1, + fused bias)",
    [C_ATTN_GEMM] = "GEMM, attention (QK^T, PV: batched)",
    [C_ATTN_FWD] = "attention core fwd (one op: QK^T, softmax, dropout, PV)",
    [C_ATTN_BWD] = "attention core bwd (one op: dP, dV, softmax bwd, dQ, dK)",
    [C_SOFTMAX] = "softmax fwd/bwd",
    [C_SOFTMAX_DROPOUT] = "softmax + attention dropout, fused",
    [C_LAYERNORM] = "layernorm fwd/bwd",
    [C_DROPOUT_ADD_LN] = "dropout + residual + layernorm, fused",
    [C_GELU] = "GELU fwd/bwd",
    [C_DROPOUT] = "dropout fwd/bwd",
    [C_BIAS] = "bias add / bias grad",
    [C_ELEMENTWISE] = "add, axpby, scale (residual, accumulate, unscale)",
    [C_CAST] = "conversions (cast)",
    [C_EMBEDDING] = "embedding fwd/bwd",
    [C_LOSS] = "cross-entropy",
    [C_REDUCE] = "reductions (overflow check, grad norm)",
    [C_OPTIMIZER] = "optimizer step (update + apply_update; all threads)",
    [C_WRITE_BACK] = "apply_update outside the optimizer",
    [C_MEMORY] = "copy, fill_zero, to_host/to_device",
};

static const mpx_ops *real;       /* the backend's table */
static mpx_ops wrapped;
static mpx_plugin_rec opt_rec;    /* the optimizer's record with step wrapped */
static int (*real_step)(void *self, mpx_env *env, const mpx_opt_step *st);
static int enabled;
static void (*sync_fn)(void);
static _Thread_local int depth;
static pthread_mutex_t sum_mu = PTHREAD_MUTEX_INITIALIZER;
static double sum_s[N_CLASSES];
static long calls[N_CLASSES];
/* Calls that hand a result to the host, each a wait for the device on a backend whose ops
 * are queued (cuda): to_host, a loss, a sum of squares, a count. */
enum { W_TO_HOST, W_LOSS, W_SUMSQ, W_COUNT, N_WAITS };
static long waits[N_WAITS];
#define WAIT(w) do { if (enabled && !depth) { pthread_mutex_lock(&sum_mu); waits[w]++; pthread_mutex_unlock(&sum_mu); } } while (0)

/* Times one call into class c; nested calls (apply_update inside the optimizer) count
 * in the outer one only. The optimizer's step may run on several threads at once
 * (train.update_threads): each thread times its own calls, and the sums add them. */
#define TIMED(c, call)                                         \
    do {                                                       \
        if (!enabled || depth) return call;                    \
        depth++;                                               \
        if (sync_fn) sync_fn();                                \
        double t0_ = now();                                    \
        int rc_ = call;                                        \
        if (sync_fn) sync_fn();                                \
        double dt_ = now() - t0_;                              \
        pthread_mutex_lock(&sum_mu);                           \
        sum_s[c] += dt_;                                       \
        calls[c]++;                                            \
        pthread_mutex_unlock(&sum_mu);                         \
        depth--;                                               \
        return rc_;                                            \
    } while (0)

static int w_to_device(void *be, void *d, const void *s, size_t n) { TIMED(C_MEMORY, real->to_device(be, d, s, n)); }
static int w_to_host(void *be, void *d, const void *s, size_t n)
{
    WAIT(W_TO_HOST);
    TIMED(C_MEMORY, real->to_host(be, d, s, n));
}
static int w_copy(void *be, void *d, const void *s, size_t n) { TIMED(C_MEMORY, real->copy(be, d, s, n)); }
static int w_fill_zero(void *be, void *p, size_t n) { TIMED(C_MEMORY, real->fill_zero(be, p, n)); }
static int w_cast(void *be, mpx_arg x, mpx_arg y, size_t n) { TIMED(C_CAST, real->cast(be, x, y, n)); }
static int w_add(void *be, mpx_arg a, mpx_arg b, mpx_arg y, size_t n) { TIMED(C_ELEMENTWISE, real->add(be, a, b, y, n)); }
static int w_axpby(void *be, float al, mpx_arg x, float bt, mpx_arg y, size_t n)
{
    TIMED(C_ELEMENTWISE, real->axpby(be, al, x, bt, y, n));
}
static int w_scale(void *be, mpx_arg x, float al, size_t n) { TIMED(C_ELEMENTWISE, real->scale(be, x, al, n)); }
/* The linear GEMMs by shape (op(A) m x k, op(B) k x n, transposes, beta != 0, compute
 * dtype): where inside the GEMM class the time goes, and each shape's rate. */
#define MAX_SHAPES 48
typedef struct shape_sum {
    int ta, tb, m, n, k, acc, compute;
    double s;
    long calls;
} shape_sum;
static shape_sum shapes[MAX_SHAPES];
static int n_shapes;

static void add_shape(const mpx_gemm *g, double dt)
{
    pthread_mutex_lock(&sum_mu);
    int i = 0;
    for (; i < n_shapes; i++) {
        const shape_sum *q = &shapes[i];
        if (q->ta == g->trans_a && q->tb == g->trans_b && q->m == g->m && q->n == g->n && q->k == g->k &&
            q->acc == (g->beta != 0.0f) && q->compute == (int)g->compute)
            break;
    }
    if (i == n_shapes && n_shapes < MAX_SHAPES)
        shapes[n_shapes++] = (shape_sum){ g->trans_a, g->trans_b, g->m, g->n, g->k, g->beta != 0.0f, (int)g->compute, 0, 0 };
    if (i < n_shapes) {
        shapes[i].s += dt;
        shapes[i].calls++;
    }
    pthread_mutex_unlock(&sum_mu);
}

/* A linear GEMM (gemm_bias: with its bias add, ABI 1.13; gemm_bias_as_c: with the bias
 * as its C, ABI 1.18) timed into the GEMM class and its shape's row. */
static int linear_timed(void *be, const mpx_gemm *g, const mpx_arg *bias, int as_c)
{
    if (sync_fn) sync_fn();
    double t0 = now();
    int rc = !bias ? real->gemm(be, g) : as_c ? real->gemm_bias_as_c(be, g, *bias) : real->gemm_bias(be, g, *bias);
    if (sync_fn) sync_fn();
    double dt = now() - t0;
    pthread_mutex_lock(&sum_mu);
    sum_s[C_GEMM] += dt;
    calls[C_GEMM]++;
    pthread_mutex_unlock(&sum_mu);
    add_shape(g, dt);
    return rc;
}
static int w_gemm(void *be, const mpx_gemm *g)
{
    if (!enabled || depth || g->batch > 1) TIMED(g->batch > 1 ? C_ATTN_GEMM : C_GEMM, real->gemm(be, g));
    return linear_timed(be, g, NULL, 0);
}
static int w_gemm_bias(void *be, const mpx_gemm *g, mpx_arg bias)
{
    if (!enabled || depth) TIMED(C_GEMM, real->gemm_bias(be, g, bias));
    return linear_timed(be, g, &bias, 0);
}
static int w_gemm_bias_as_c(void *be, const mpx_gemm *g, mpx_arg bias)
{
    if (!enabled || depth) TIMED(C_GEMM, real->gemm_bias_as_c(be, g, bias));
    return linear_timed(be, g, &bias, 1);
}
static int w_bias_add(void *be, mpx_arg x, mpx_arg b, mpx_arg y, size_t r, size_t c)
{
    TIMED(C_BIAS, real->bias_add(be, x, b, y, r, c));
}
static int w_bias_grad(void *be, mpx_arg dy, mpx_arg db, size_t r, size_t c, int acc)
{
    TIMED(C_BIAS, real->bias_grad(be, dy, db, r, c, acc));
}
static int w_ln_fwd(void *be, mpx_arg x, mpx_arg g, mpx_arg b, mpx_arg y, float *mean, float *rstd,
                    size_t r, size_t c, float eps)
{
    TIMED(C_LAYERNORM, real->layernorm_fwd(be, x, g, b, y, mean, rstd, r, c, eps));
}
static int w_ln_bwd(void *be, mpx_arg dy, mpx_arg x, mpx_arg g, const float *mean, const float *rstd,
                    mpx_arg dx, mpx_arg dg, mpx_arg db, size_t r, size_t c, int adx, int ap)
{
    TIMED(C_LAYERNORM, real->layernorm_bwd(be, dy, x, g, mean, rstd, dx, dg, db, r, c, adx, ap));
}
static int w_sm_fwd(void *be, mpx_arg x, const mpx_arg mask, mpx_arg y, size_t b, size_t h, size_t r,
                    size_t c, float sc)
{
    TIMED(C_SOFTMAX, real->softmax_fwd(be, x, mask, y, b, h, r, c, sc));
}
static int w_sm_bwd(void *be, mpx_arg dy, mpx_arg y, mpx_arg dx, size_t r, size_t c, float sc)
{
    TIMED(C_SOFTMAX, real->softmax_bwd(be, dy, y, dx, r, c, sc));
}
static int w_smd_fwd(void *be, mpx_arg x, const mpx_arg mask, mpx_arg y, mpx_arg yd, size_t b, size_t h,
                     size_t r, size_t c, float sc, float p, mpx_rng rng)
{
    TIMED(C_SOFTMAX_DROPOUT, real->softmax_dropout_fwd(be, x, mask, y, yd, b, h, r, c, sc, p, rng));
}
static int w_dsm_bwd(void *be, mpx_arg dyd, mpx_arg y, mpx_arg dx, size_t r, size_t c, float sc, float p,
                     mpx_rng rng)
{
    TIMED(C_SOFTMAX_DROPOUT, real->dropout_softmax_bwd(be, dyd, y, dx, r, c, sc, p, rng));
}
static int w_daln(void *be, mpx_arg x, float p, mpx_rng rng, mpx_arg res, mpx_arg r, mpx_arg g, mpx_arg b, mpx_arg y,
                  float *mean, float *rstd, size_t rows, size_t cols, float eps)
{
    TIMED(C_DROPOUT_ADD_LN, real->dropout_add_layernorm_fwd(be, x, p, rng, res, r, g, b, y, mean, rstd, rows, cols, eps));
}
static int w_attn_fwd(void *be, const mpx_attention *a) { TIMED(C_ATTN_FWD, real->attention_fwd(be, a)); }
static int w_attn_bwd(void *be, const mpx_attention *a) { TIMED(C_ATTN_BWD, real->attention_bwd(be, a)); }
static int w_gelu_fwd(void *be, mpx_arg x, mpx_arg y, size_t n) { TIMED(C_GELU, real->gelu_fwd(be, x, y, n)); }
static int w_gelu_bwd(void *be, mpx_arg dy, mpx_arg x, mpx_arg dx, size_t n)
{
    TIMED(C_GELU, real->gelu_bwd(be, dy, x, dx, n));
}
static int w_drop_fwd(void *be, mpx_arg x, mpx_arg y, size_t n, float p, mpx_rng rng)
{
    TIMED(C_DROPOUT, real->dropout_fwd(be, x, y, n, p, rng));
}
static int w_drop_bwd(void *be, mpx_arg dy, mpx_arg dx, size_t n, float p, mpx_rng rng)
{
    TIMED(C_DROPOUT, real->dropout_bwd(be, dy, dx, n, p, rng));
}
static int w_emb_fwd(void *be, const int32_t *ids, size_t n, mpx_arg t, size_t rows, size_t dim, mpx_arg y)
{
    TIMED(C_EMBEDDING, real->embedding_fwd(be, ids, n, t, rows, dim, y));
}
static int w_emb_bwd(void *be, const int32_t *ids, size_t n, mpx_arg dy, mpx_arg dt, size_t rows, size_t dim)
{
    TIMED(C_EMBEDDING, real->embedding_bwd(be, ids, n, dy, dt, rows, dim));
}
static int w_xent(void *be, mpx_arg lg, const int32_t *lab, size_t r, size_t c, double *loss, mpx_arg dl, float ds)
{
    if (loss) WAIT(W_LOSS);   /* none asked (MPX_OPS_LOSS_OPTIONAL): no wait */
    TIMED(C_LOSS, real->cross_entropy(be, lg, lab, r, c, loss, dl, ds));
}
static int w_sumsq(void *be, mpx_arg x, size_t n, double *out)
{
    WAIT(W_SUMSQ);
    TIMED(C_REDUCE, real->sum_squares(be, x, n, out));
}
static int w_nonfinite(void *be, mpx_arg x, size_t n, size_t *out)
{
    WAIT(W_COUNT);
    TIMED(C_REDUCE, real->count_nonfinite(be, x, n, out));
}
static int w_apply(void *be, mpx_arg w, mpx_arg comp, const float *u, size_t n, mpx_rounding mode, mpx_rng rng)
{
    TIMED(C_WRITE_BACK, real->apply_update(be, w, comp, u, n, mode, rng));
}
static int timed_step(void *self, mpx_env *env, const mpx_opt_step *st) { TIMED(C_OPTIMIZER, real_step(self, env, st)); }

/* The wall time during which some thread is inside the optimizer's step: with several
 * update threads, less than their summed time. */
static int in_step;
static double step_wall_s, step_t0;

static int w_step(void *self, mpx_env *env, const mpx_opt_step *st)
{
    if (!enabled) return real_step(self, env, st);
    pthread_mutex_lock(&sum_mu);
    if (in_step++ == 0) step_t0 = now();
    pthread_mutex_unlock(&sum_mu);
    int rc = timed_step(self, env, st);
    pthread_mutex_lock(&sum_mu);
    if (--in_step == 0) step_wall_s += now() - step_t0;
    pthread_mutex_unlock(&sum_mu);
    return rc;
}

int bench_profile_install(mpx_session *s)
{
    real = s->ops;
    memset(&wrapped, 0, sizeof wrapped);
    memcpy(&wrapped, real, real->size < sizeof wrapped ? real->size : sizeof wrapped);
    wrapped.to_device = w_to_device;
    wrapped.to_host = w_to_host;
    wrapped.copy = w_copy;
    wrapped.fill_zero = w_fill_zero;
    wrapped.cast = w_cast;
    wrapped.add = w_add;
    wrapped.axpby = w_axpby;
    wrapped.scale = w_scale;
    wrapped.gemm = w_gemm;
    wrapped.bias_add = w_bias_add;
    wrapped.bias_grad = w_bias_grad;
    wrapped.layernorm_fwd = w_ln_fwd;
    wrapped.layernorm_bwd = w_ln_bwd;
    wrapped.softmax_fwd = w_sm_fwd;
    wrapped.softmax_bwd = w_sm_bwd;
    wrapped.gelu_fwd = w_gelu_fwd;
    wrapped.gelu_bwd = w_gelu_bwd;
    wrapped.dropout_fwd = w_drop_fwd;
    wrapped.dropout_bwd = w_drop_bwd;
    wrapped.embedding_fwd = w_emb_fwd;
    wrapped.embedding_bwd = w_emb_bwd;
    wrapped.cross_entropy = w_xent;
    wrapped.sum_squares = w_sumsq;
    wrapped.count_nonfinite = w_nonfinite;
    wrapped.apply_update = w_apply;
    if (MPX_OPS_HAS(real, dropout_softmax_bwd)) {
        if (real->softmax_dropout_fwd) wrapped.softmax_dropout_fwd = w_smd_fwd;
        if (real->dropout_softmax_bwd) wrapped.dropout_softmax_bwd = w_dsm_bwd;
    }
    if (MPX_OPS_HAS(real, attention_bwd)) {
        if (real->attention_fwd) wrapped.attention_fwd = w_attn_fwd;
        if (real->attention_bwd) wrapped.attention_bwd = w_attn_bwd;
    }
    if (MPX_OPS_HAS(real, gemm_bias) && real->gemm_bias) wrapped.gemm_bias = w_gemm_bias;
    if (MPX_OPS_HAS(real, gemm_bias_as_c) && real->gemm_bias_as_c) wrapped.gemm_bias_as_c = w_gemm_bias_as_c;
    if (MPX_OPS_HAS(real, dropout_add_layernorm_fwd) && real->dropout_add_layernorm_fwd)
        wrapped.dropout_add_layernorm_fwd = w_daln;
    s->ops = &wrapped;
    mpx_instance *o = &s->inst[MPX_KIND_OPTIMIZER];
    opt_rec = *o->rec;
    real_step = opt_rec.vt.optimizer.step;
    opt_rec.vt.optimizer.step = w_step;
    o->rec = &opt_rec;
    return 0;
}

void bench_profile_set_sync(void (*fn)(void)) { sync_fn = fn; }

void bench_profile_enable(int on) { enabled = on; }

void bench_profile_reset(void)
{
    memset(sum_s, 0, sizeof sum_s);
    memset(calls, 0, sizeof calls);
    memset(waits, 0, sizeof waits);
    n_shapes = 0;
    step_wall_s = 0;
}

double bench_profile_gemm_s(void)
{
    return sum_s[C_GEMM] + sum_s[C_ATTN_GEMM] + sum_s[C_ATTN_FWD] + sum_s[C_ATTN_BWD];
}

void bench_profile_print(const char *what, int steps, double total_s)
{
    double in_ops = 0;
    for (int c = 0; c < N_CLASSES; c++) in_ops += sum_s[c];
    printf("  where %s time goes (%d profiled, %.3f s each):\n", what, steps, total_s / steps);
    for (int c = 0; c < N_CLASSES; c++) {
        if (!calls[c]) continue;
        printf("    %-52s %8.1f ms %5.1f%% %6.0f calls\n", class_name[c], 1e3 * sum_s[c] / steps,
               100.0 * sum_s[c] / total_s, (double)calls[c] / steps);
    }
    if (calls[C_OPTIMIZER])
        printf("    %-52s %8.1f ms %5.1f%%   wall (in the table above: summed over threads)\n", "optimizer step, wall",
               1e3 * step_wall_s / steps, 100.0 * step_wall_s / total_s);
    printf("    %-52s %8.1f ms %5.1f%%\n", "not in ops (model and core glue, data)",
           1e3 * (total_s - in_ops) / steps, 100.0 * (total_s - in_ops) / total_s);
    printf("    %s results handed to the host (each a wait on a device whose ops are queued): %.1f "
           "(to_host %.1f, cross-entropy losses %.1f, sums of squares %.1f, counts %.1f; the optimizer's not counted)\n",
           what, (double)(waits[0] + waits[1] + waits[2] + waits[3]) / steps, (double)waits[W_TO_HOST] / steps,
           (double)waits[W_LOSS] / steps, (double)waits[W_SUMSQ] / steps, (double)waits[W_COUNT] / steps);
    if (!n_shapes) return;
    printf("    the linear GEMMs by shape (m x n x k: C = alpha op(A) op(B) (+ beta C when acc), op(A) m x k; "
           "^T = transposed; the dtype the inputs are rounded to):\n");
    for (int i = 0; i < n_shapes; i++) {
        const shape_sum *q = &shapes[i];
        double gf = 2.0 * q->m * q->n * q->k * (double)q->calls / q->s * 1e-9;
        printf("      %5d x %5d x %5d %s%s%s %-5s %8.1f ms %5.1f%% %4.0f calls %6.1f GFLOP/s\n", q->m, q->n, q->k,
               q->ta ? "A^T" : "A  ", q->tb ? " B^T" : " B  ", q->acc ? " acc" : "    ",
               q->compute ? mpx_dtype_name((mpx_dtype)q->compute) : "fp32", 1e3 * q->s / steps,
               100.0 * q->s / total_s, (double)q->calls / steps, gf);
    }
}
