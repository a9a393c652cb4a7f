/* The locate pass of a non-finite step (nonfinite.h). */
#include "nonfinite.h"
#include "host.h"

#include "format_table.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct locate {
    mpx_session *s;
    mpx_ops real;            /* the backend's functions, called by the wrappers */
    int backward;
    long op_no[2];           /* ops seen in each pass (over the step's micro-batches) */
    char op_param[160];      /* the parameter the current op reads, if any */
    char last_param[160];    /* the last parameter an op read, for ops on activations */
    int found;
    char what[1536];         /* the first op whose output is non-finite */
    json_t *j;               /* the same as data */
    /* what the step's first run advanced, put back at the end so that it counts once */
    mpx_scaling_mark scaling;
    struct mpx_gemm_in_group gemm_in[MPX_GROUP_COUNT + 1];
} locate;

static locate *active; /* set only while a pass runs (nonfinite.h) */

int mpx_nonfinite_own_ops(mpx_session *s, char *err, size_t errlen)
{
    mpx_ops *own = calloc(1, sizeof *own);
    if (!own) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    size_t n = s->ops->size < sizeof *own ? s->ops->size : sizeof *own; /* never more than the backend has */
    memcpy(own, s->ops, n);
    s->ops_own = own;
    s->ops = own;
    return 0;
}

void mpx_nonfinite_free_ops(mpx_session *s)
{
    free(s->ops_own);
    s->ops_own = NULL;
}

/* The parameter whose weights (or gradient) `p` points into: its index, or -1. `buf`
 * holds the flat elements [base, base + len) (stage 3 keeps only its slice of the weights). */
static long param_at(const mpx_session *s, mpx_arg buf, size_t base, size_t len, const void *p)
{
    size_t sz = mpx_dtype_size(buf.t);
    const char *c = p, *b = buf.p;
    if (!b || !sz || c < b || c >= b + len * sz) return -1;
    size_t el = base + (size_t)(c - b) / sz;
    if (el >= s->numel) return -1; /* the padding */
    for (size_t i = s->n_params; i-- > 0;)
        if (s->offsets[i] <= el) return (long)i;
    return -1;
}

static const char *param_name(const mpx_session *s, long i)
{
    const mpx_instance *m = &s->inst[MPX_KIND_MODEL];
    return m->rec->vt.model.param(m->self, (size_t)i)->name;
}

/* What `p` is: "weights NAME", "gradient of NAME", or NULL for an activation. */
static int tensor_role(const mpx_session *s, const void *p, char *buf, size_t len)
{
    long i;
    if (!p) return 0;
    if ((i = param_at(s, s->weights, s->weights_base, s->weights_len, p)) >= 0)
        return snprintf(buf, len, "%s", param_name(s, i)), 1;
    if (s->wg_held) {   /* stage 3: the layer's weights, gathered for this op */
        mpx_arg held = s->wg_whole.p ? mpx_at(s->wg_whole, s->wg_lo) : s->wg_buf;
        if ((i = param_at(s, held, s->wg_lo, s->wg_hi - s->wg_lo, p)) >= 0)
            return snprintf(buf, len, "%s", param_name(s, i)), 1;
    }
    if ((i = param_at(s, s->grads, 0, s->numel, p)) >= 0) return snprintf(buf, len, "gradient of %s", param_name(s, i)), 2;
    if ((i = param_at(s, s->grad_acc, 0, s->numel, p)) >= 0) return snprintf(buf, len, "gradient of %s", param_name(s, i)), 2;
    return 0;
}

/* An input the op reads: a parameter read is remembered (for the ops after it). */
static void reads(mpx_arg in)
{
    char name[160];
    if (in.p && tensor_role(active->s, in.p, name, sizeof name) == 1) {
        snprintf(active->op_param, sizeof active->op_param, "%s", name);
        snprintf(active->last_param, sizeof active->last_param, "%s", name);
    }
}

static size_t count_bad(mpx_arg x, size_t n)
{
    size_t bad = 0;
    if (!x.p || !n || active->real.count_nonfinite(active->s->be, x, n, &bad)) return 0; /* a format it cannot count */
    return bad;
}

/* After an op: the first output with non-finite values is the finding. */
static void output(const char *op, mpx_arg y, size_t n, size_t bad, const char *shape)
{
    locate *L = active;
    if (L->found || !bad) return;
    L->found = 1;
    const char *pass = L->backward ? "backward" : "forward";
    char tensor[200], where[400];
    int role = tensor_role(L->s, y.p, tensor, sizeof tensor);
    if (role) snprintf(where, sizeof where, "%s", tensor);
    else if (L->op_param[0]) snprintf(where, sizeof where, "activation, reading %s", L->op_param);
    else if (L->last_param[0]) snprintf(where, sizeof where, "activation, after %s", L->last_param);
    else snprintf(where, sizeof where, "activation, before any parameter");
    snprintf(L->what, sizeof L->what, "non-finite in %s, op %ld (%s) output %s %s (%s): %zu of %zu values", pass,
             L->op_no[L->backward], op, shape, mpx_dtype_label(&L->s->fmts, y.t), where, bad, n);
    L->j = json_pack("{s:s, s:I, s:s, s:s, s:s, s:s, s:I, s:I}", "pass", pass, "op_index",
                     (json_int_t)L->op_no[L->backward], "op", op, "tensor", where, "shape", shape, "dtype",
                     mpx_dtype_label(&L->s->fmts, y.t), "nonfinite", (json_int_t)bad, "of", (json_int_t)n);
}

static void next_op(void)
{
    active->op_no[active->backward]++;
    active->op_param[0] = 0;
}

static void checked(const char *op, mpx_arg y, size_t n, const char *shape)
{
    if (!active->found) output(op, y, n, count_bad(y, n), shape);
    next_op();
}

static void shape2(char *buf, size_t len, size_t r, size_t c) { snprintf(buf, len, "[%zu x %zu]", r, c); }

#define REAL active->real

static int w_cast(void *be, mpx_arg x, mpx_arg y, size_t n)
{
    int rc = REAL.cast(be, x, y, n);
    char sh[64];
    reads(x);
    shape2(sh, sizeof sh, 1, n);
    if (!rc) checked("cast", y, n, sh);
    return rc;
}

static int w_add(void *be, mpx_arg a, mpx_arg b, mpx_arg y, size_t n)
{
    int rc = REAL.add(be, a, b, y, n);
    char sh[64];
    shape2(sh, sizeof sh, 1, n);
    if (!rc) checked("add", y, n, sh);
    return rc;
}

static int w_axpby(void *be, float al, mpx_arg x, float bt, mpx_arg y, size_t n)
{
    int rc = REAL.axpby(be, al, x, bt, y, n);
    char sh[64];
    shape2(sh, sizeof sh, 1, n);
    if (!rc) checked("axpby", y, n, sh);
    return rc;
}

static int w_scale(void *be, mpx_arg x, float al, size_t n)
{
    int rc = REAL.scale(be, x, al, n);
    char sh[64];
    shape2(sh, sizeof sh, 1, n);
    if (!rc) checked("scale", x, n, sh);
    return rc;
}

/* A batch whose items are different parameters or their gradients (a model's Q, K and V
 * as one call) rather than slices of one activation (attention's heads). */
static int per_param_batch(const mpx_gemm *g)
{
    char name[160];
    if (g->batch < 2) return 0;
    return (g->stride_a && tensor_role(active->s, g->a.p, name, sizeof name)) ||
           (g->stride_b && tensor_role(active->s, g->b.p, name, sizeof name)) ||
           (g->stride_c && tensor_role(active->s, g->c.p, name, sizeof name));
}

static int w_gemm(void *be, const mpx_gemm *g)
{
    if (per_param_batch(g)) {   /* an item at a time: each its own op, named by its parameter */
        for (int b = 0; b < g->batch; b++) {
            mpx_gemm one = *g;
            one.a = mpx_at(g->a, (size_t)b * (size_t)g->stride_a);
            one.b = mpx_at(g->b, (size_t)b * (size_t)g->stride_b);
            one.c = mpx_at(g->c, (size_t)b * (size_t)g->stride_c);
            one.stride_a = one.stride_b = one.stride_c = 0;
            one.batch = 1;
            MPX_TRY(w_gemm(be, &one));
        }
        return 0;
    }
    int rc = REAL.gemm(be, g);
    reads(g->a);
    reads(g->b);
    if (rc) return rc;
    size_t bad = 0, n = (size_t)g->m * (size_t)g->n * (size_t)(g->batch > 0 ? g->batch : 1);
    for (int b = 0; b < (g->batch > 0 ? g->batch : 1) && !active->found; b++)
        for (int r = 0; r < g->m; r++)
            bad += count_bad(mpx_at(g->c, (size_t)b * (size_t)g->stride_c + (size_t)r * (size_t)g->ldc), (size_t)g->n);
    char sh[96];
    if (g->batch > 1) snprintf(sh, sizeof sh, "[%d x %d x %d]", g->batch, g->m, g->n);
    else shape2(sh, sizeof sh, (size_t)g->m, (size_t)g->n);
    output(g->batch > 1 ? "batched gemm" : "gemm", g->c, n, bad, sh);
    next_op();
    return rc;
}

static int w_bias_add(void *be, mpx_arg x, mpx_arg bias, mpx_arg y, size_t r, size_t c)
{
    int rc = REAL.bias_add(be, x, bias, y, r, c);
    char sh[64];
    reads(bias);
    shape2(sh, sizeof sh, r, c);
    if (!rc) checked("bias_add", y, r * c, sh);
    return rc;
}

static int w_bias_grad(void *be, mpx_arg dy, mpx_arg db, size_t r, size_t c, int acc)
{
    int rc = REAL.bias_grad(be, dy, db, r, c, acc);
    char sh[64];
    shape2(sh, sizeof sh, 1, c);
    if (!rc) checked("bias_grad", db, c, sh);
    return rc;
}

static int w_ln_fwd(void *be, mpx_arg x, mpx_arg g, mpx_arg b, mpx_arg y, float *mean, float *rstd, size_t r,
                    size_t c, float eps)
{
    int rc = REAL.layernorm_fwd(be, x, g, b, y, mean, rstd, r, c, eps);
    char sh[64];
    reads(g);
    shape2(sh, sizeof sh, r, c);
    if (!rc) checked("layernorm_fwd", y, r * c, sh);
    return rc;
}

static int w_ln_bwd(void *be, mpx_arg dy, mpx_arg x, mpx_arg g, const float *mean, const float *rstd, mpx_arg dx,
                    mpx_arg dg, mpx_arg db, size_t r, size_t c, int acc_dx, int acc_p)
{
    int rc = REAL.layernorm_bwd(be, dy, x, g, mean, rstd, dx, dg, db, r, c, acc_dx, acc_p);
    char sh[64];
    reads(g);
    if (rc) return rc;
    shape2(sh, sizeof sh, r, c);
    if (!active->found) output("layernorm_bwd", dx, r * c, count_bad(dx, r * c), sh);
    shape2(sh, sizeof sh, 1, c);
    if (!active->found) output("layernorm_bwd", dg, c, count_bad(dg, c), sh);
    if (!active->found) output("layernorm_bwd", db, c, count_bad(db, c), sh);
    next_op();
    return rc;
}

static int w_softmax_fwd(void *be, mpx_arg x, const mpx_arg mask, mpx_arg y, size_t b, size_t h, size_t r, size_t c,
                         float scale)
{
    int rc = REAL.softmax_fwd(be, x, mask, y, b, h, r, c, scale);
    char sh[96];
    snprintf(sh, sizeof sh, "[%zu x %zu x %zu x %zu]", b, h, r, c);
    if (!rc) checked("softmax_fwd", y, b * h * r * c, sh);
    return rc;
}

static int w_softmax_bwd(void *be, mpx_arg dy, mpx_arg y, mpx_arg dx, size_t r, size_t c, float scale)
{
    int rc = REAL.softmax_bwd(be, dy, y, dx, r, c, scale);
    char sh[64];
    shape2(sh, sizeof sh, r, c);
    if (!rc) checked("softmax_bwd", dx, r * c, sh);
    return rc;
}

static int w_gelu_fwd(void *be, mpx_arg x, mpx_arg y, size_t n)
{
    int rc = REAL.gelu_fwd(be, x, y, n);
    char sh[64];
    shape2(sh, sizeof sh, 1, n);
    if (!rc) checked("gelu_fwd", y, n, sh);
    return rc;
}

static int w_gelu_bwd(void *be, mpx_arg dy, mpx_arg x, mpx_arg dx, size_t n)
{
    int rc = REAL.gelu_bwd(be, dy, x, dx, n);
    char sh[64];
    shape2(sh, sizeof sh, 1, n);
    if (!rc) checked("gelu_bwd", dx, n, sh);
    return rc;
}

static int w_dropout_fwd(void *be, mpx_arg x, mpx_arg y, size_t n, float p, mpx_rng rng)
{
    int rc = REAL.dropout_fwd(be, x, y, n, p, rng);
    char sh[64];
    shape2(sh, sizeof sh, 1, n);
    if (!rc) checked("dropout_fwd", y, n, sh);
    return rc;
}

static int w_dropout_bwd(void *be, mpx_arg dy, mpx_arg dx, size_t n, float p, mpx_rng rng)
{
    int rc = REAL.dropout_bwd(be, dy, dx, n, p, rng);
    char sh[64];
    shape2(sh, sizeof sh, 1, n);
    if (!rc) checked("dropout_bwd", dx, n, sh);
    return rc;
}

static int w_emb_fwd(void *be, const int32_t *ids, size_t n_ids, mpx_arg table, size_t rows, size_t dim, mpx_arg y)
{
    int rc = REAL.embedding_fwd(be, ids, n_ids, table, rows, dim, y);
    char sh[64];
    reads(table);
    shape2(sh, sizeof sh, n_ids, dim);
    if (!rc) checked("embedding_fwd", y, n_ids * dim, sh);
    return rc;
}

static int w_emb_bwd(void *be, const int32_t *ids, size_t n_ids, mpx_arg dy, mpx_arg dt, size_t rows, size_t dim)
{
    int rc = REAL.embedding_bwd(be, ids, n_ids, dy, dt, rows, dim);
    char sh[64];
    shape2(sh, sizeof sh, rows, dim);
    if (!rc) checked("embedding_bwd", dt, rows * dim, sh);
    return rc;
}

static int w_cross_entropy(void *be, mpx_arg logits, const int32_t *labels, size_t rows, size_t cols, double *loss,
                           mpx_arg dlogits, float dscale)
{
    int rc = REAL.cross_entropy(be, logits, labels, rows, cols, loss, dlogits, dscale);
    char sh[64];
    if (rc) return rc;
    shape2(sh, sizeof sh, rows, cols);
    if (dlogits.p && !active->found) output("cross_entropy", dlogits, rows * cols, count_bad(dlogits, rows * cols), sh);
    if (!active->found && loss && !isfinite(*loss)) {   /* a backward may pass none (MPX_OPS_LOSS_OPTIONAL) */
        /* the loss itself, a host double: named as an fp32 scalar */
        output("cross_entropy", mpx_a(NULL, MPX_F32), 1, 1, "loss");
    }
    next_op();
    return rc;
}

/* Non-finite weights before the step (this rank's, at stage 3 its slice): the first such
 * parameter and how many values. */
static int bad_weights(const mpx_session *s, char *buf, size_t len)
{
    size_t params = 0, first_bad = 0, wb = s->weights_base, we = s->weights_base + s->weights_len;
    long first = -1;
    for (size_t i = 0; i < s->n_params; i++) {
        size_t lo = s->offsets[i] > wb ? s->offsets[i] : wb, hi = s->offsets[i + 1] < we ? s->offsets[i + 1] : we, bad = 0;
        if (lo >= hi || s->ops->count_nonfinite(s->be, mpx_at(s->weights, lo - wb), hi - lo, &bad) || !bad) continue;
        if (first < 0) { first = (long)i; first_bad = bad; }
        params++;
    }
    if (first < 0) return 0;
    snprintf(buf, len, "; the weights were already non-finite before the step: %s (%zu value%s)%s", param_name(s, first),
             first_bad, first_bad == 1 ? "" : "s", params > 1 ? ", and more parameters" : "");
    return 1;
}

int mpx_nonfinite_begin(mpx_session *s, char *err, size_t errlen)
{
    if (!s->ops_own || active) {
        snprintf(err, errlen, "the non-finite locate pass cannot run here");
        return -1;
    }
    locate *L = calloc(1, sizeof *L);
    if (!L) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (mpx_scaling_mark_save(&s->scaling, &L->scaling)) {
        free(L);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    memcpy(L->gemm_in, s->gemm_in, sizeof L->gemm_in);
    L->s = s;
    L->real = *s->ops_own;
    mpx_ops *o = s->ops_own;
    o->cast = w_cast;
    o->add = w_add;
    o->axpby = w_axpby;
    o->scale = w_scale;
    o->gemm = w_gemm;
    o->bias_add = w_bias_add;
    o->bias_grad = w_bias_grad;
    o->layernorm_fwd = w_ln_fwd;
    o->layernorm_bwd = w_ln_bwd;
    o->softmax_fwd = w_softmax_fwd;
    o->softmax_bwd = w_softmax_bwd;
    o->gelu_fwd = w_gelu_fwd;
    o->gelu_bwd = w_gelu_bwd;
    o->dropout_fwd = w_dropout_fwd;
    o->dropout_bwd = w_dropout_bwd;
    o->embedding_fwd = w_emb_fwd;
    o->embedding_bwd = w_emb_bwd;
    o->cross_entropy = w_cross_entropy;
    if (MPX_OPS_HAS(o, dropout_softmax_bwd)) {   /* fused ops off: the model runs each op alone */
        o->softmax_dropout_fwd = NULL;
        o->dropout_softmax_bwd = NULL;
    }
    if (MPX_OPS_HAS(o, gemm_bias)) o->gemm_bias = NULL;   /* gemm, then bias_add: each checked */
    if (MPX_OPS_HAS(o, gemm_bias_as_c)) o->gemm_bias_as_c = NULL;   /* the bias fill, then gemm */
    if (MPX_OPS_HAS(o, dropout_add_layernorm_fwd)) o->dropout_add_layernorm_fwd = NULL;   /* the three alone */
    active = L;
    return 0;
}

void mpx_nonfinite_phase(int backward)
{
    if (!active) return;
    active->backward = backward;
    if (!backward) active->last_param[0] = 0;
}

void mpx_nonfinite_end(mpx_session *s, int64_t step, double loss, json_t *metrics, char *err, size_t errlen)
{
    locate *L = active;
    if (!L) return;
    *s->ops_own = L->real;
    active = NULL;
    mpx_scaling_mark_restore(&s->scaling, &L->scaling);
    memcpy(s->gemm_in, L->gemm_in, sizeof s->gemm_in);
    char weights[400] = "";
    bad_weights(s, weights, sizeof weights);
    char loss_txt[64];
    snprintf(loss_txt, sizeof loss_txt, "%.6g", loss);
    if (L->found)
        snprintf(err, errlen, "step %lld: %s%s (loss %s; precision.loss_scale \"none\" cannot skip it: stopped)",
                 (long long)step, L->what, weights, loss_txt);
    else
        snprintf(err, errlen, "step %lld: non-finite %s, but no op of this rank's forward or backward made one "
                 "(another rank's, or the reduction's)%s (precision.loss_scale \"none\" cannot skip it: stopped)",
                 (long long)step, isfinite(loss) ? "gradient" : "loss", weights);
    json_t *j = L->j ? L->j : json_object();
    json_object_set_new(j, "step", json_integer(step));
    if (weights[0]) json_object_set_new(j, "weights", json_string(weights + 2));
    json_object_set_new(metrics, "nonfinite", j);
    free(L);
}
