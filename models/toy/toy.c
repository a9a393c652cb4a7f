/* model/toy: a two-layer perceptron over token embeddings, the worked example of a
 * model plugin and the fast model of the tests.
 *
 *   x      = concat_l embed[ids[b, l]]          [B, L*D]
 *   h      = x · fc1.weight^T + fc1.bias        [B, H]
 *   a      = gelu(h)
 *   logits = a · fc2.weight^T + fc2.bias        [B, C]
 *   loss   = mean_b cross_entropy(logits[b], labels[b])
 *
 * Sizes come from the data (data.toy.seq_len, vocab, classes) and the toy's own options. */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/mpx.h"
#include "mpx/init.h"

enum { P_EMBED, P_FC1_W, P_FC1_B, P_FC2_W, P_FC2_B, N_PARAMS };

typedef struct toy {
    mpx_env *env;
    const mpx_ops *ops;
    void *be;
    const mpx_precision_desc *prec;
    int64_t seq_len, vocab, classes, dim, hidden;
    float init_std;
    mpx_param_info params[N_PARAMS];
    mpx_model_bind bind;
    const mpx_weight_gather *wg;  /* zero/stage3: weights gathered per layer (ABI 1.7), else NULL */
    size_t w_base;                /* element of the flat weights where bind.weights starts */
    int max_batch;
    void *x, *h, *a, *logits;     /* activations */
    void *dlogits, *da, *dh, *dx; /* their grads */
} toy;

static const mpx_option toy_options[] = {
    { "dim", MPX_OPT_INT, "16", 1, 4096, NULL, "embedding width D", 0 },
    { "hidden", MPX_OPT_INT, "64", 1, 65536, NULL, "hidden width H of the perceptron", 0 },
    { "init_std", MPX_OPT_FLOAT, "0.1", 0, 10, NULL, "std of the normal initialisation of weights", 0 },
};

static void set_param(mpx_param_info *p, const char *name, int64_t d0, int64_t d1,
                      mpx_group group, int no_decay, mpx_init init, float std, uint32_t site)
{
    *p = (mpx_param_info){ .name = name, .ndim = d1 ? 2 : 1, .shape = { d0, d1 },
                           .layer = -1, .group = group, .no_decay = no_decay,
                           .init = init, .init_std = std, .site = site };
}

static int toy_create(mpx_env *env, void **self)
{
    const mpx_host *h = env->host;
    toy *t = calloc(1, sizeof *t);
    if (!t) return MPX_ERR_NOMEM;
    t->env = env;
    double std = 0;
    int rc = h->opt_int(env, "data.toy.seq_len", &t->seq_len);
    if (!rc) rc = h->opt_int(env, "data.toy.vocab", &t->vocab);
    if (!rc) rc = h->opt_int(env, "data.toy.classes", &t->classes);
    if (!rc) rc = h->opt_int(env, "dim", &t->dim);
    if (!rc) rc = h->opt_int(env, "hidden", &t->hidden);
    if (!rc) rc = h->opt_float(env, "init_std", &std);
    if (rc) { free(t); return rc; }
    t->init_std = (float)std;
    int64_t in = t->seq_len * t->dim;
    set_param(&t->params[P_EMBED], "embed.weight", t->vocab, t->dim, MPX_GROUP_EMBEDDING, 0, MPX_INIT_NORMAL, t->init_std, 1);
    set_param(&t->params[P_FC1_W], "fc1.weight", t->hidden, in, MPX_GROUP_FFN, 0, MPX_INIT_NORMAL, t->init_std, 2);
    set_param(&t->params[P_FC1_B], "fc1.bias", t->hidden, 0, MPX_GROUP_FFN, 1, MPX_INIT_ZEROS, 0, 3);
    set_param(&t->params[P_FC2_W], "fc2.weight", t->classes, t->hidden, MPX_GROUP_HEAD, 0, MPX_INIT_NORMAL, t->init_std, 4);
    set_param(&t->params[P_FC2_B], "fc2.bias", t->classes, 0, MPX_GROUP_HEAD, 1, MPX_INIT_ZEROS, 0, 5);
    *self = t;
    return MPX_OK;
}

static void toy_destroy(void *self)
{
    toy *t = self;
    if (!t) return;
    void *bufs[] = { t->x, t->h, t->a, t->logits, t->dlogits, t->da, t->dh, t->dx };
    for (size_t i = 0; i < MPX_COUNT(bufs); i++)
        if (bufs[i]) t->env->host->release(t->env, bufs[i]);
    free(t);
}

static size_t toy_n_params(void *self) { (void)self; return N_PARAMS; }
static const mpx_param_info *toy_param(void *self, size_t i) { return &((toy *)self)->params[i]; }
static size_t toy_n_sites(void *self) { (void)self; return 0; }
static const mpx_site *toy_site(void *self, size_t i) { (void)self; (void)i; return NULL; }

static int toy_init_weights(void *self, float *flat, const size_t *offsets, uint64_t seed)
{
    toy *t = self;
    for (int i = 0; i < N_PARAMS; i++)
        mpx_init_param(&t->params[i], flat + offsets[i], seed);
    return MPX_OK;
}

static void *scratch(toy *t, size_t elems, const char *what)
{
    return t->env->host->alloc(t->env, MPX_ROLE_SCRATCH, elems * 4, what);
}

static int toy_bind(void *self, const mpx_model_bind *bind, int max_batch, int max_seq)
{
    toy *t = self;
    (void)max_seq;
    t->bind = *bind;
    t->wg = NULL;
    t->w_base = 0;
    t->max_batch = max_batch;
    t->prec = t->env->host->precision(t->env);
    t->ops = t->env->host->ops(t->env, &t->be);
    size_t b = (size_t)max_batch;
    size_t in = (size_t)(t->seq_len * t->dim);
    /* fp32-sized so any activation dtype fits */
    t->x = scratch(t, b * in, "toy x");
    t->h = scratch(t, b * (size_t)t->hidden, "toy h");
    t->a = scratch(t, b * (size_t)t->hidden, "toy a");
    t->logits = scratch(t, b * (size_t)t->classes, "toy logits");
    t->dlogits = scratch(t, b * (size_t)t->classes, "toy dlogits");
    t->da = scratch(t, b * (size_t)t->hidden, "toy da");
    t->dh = scratch(t, b * (size_t)t->hidden, "toy dh");
    t->dx = scratch(t, b * in, "toy dx");
    if (!t->x || !t->h || !t->a || !t->logits || !t->dlogits || !t->da || !t->dh || !t->dx)
        return MPX_ERR_NOMEM;
    return MPX_OK;
}

static mpx_arg weight(toy *t, int i) { return mpx_at(t->bind.weights, t->bind.offsets[i] - t->w_base); }

/* ZeRO-3 (zero/stage3, ABI 1.7): parameters [first, end) readable through weight() until
 * release_params. With whole weights (no gather hook) both do nothing. */
static int gather_params(toy *t, int first, int end)
{
    if (!t->wg) return MPX_OK;
    MPX_TRY(t->wg->gather(t->wg->ctx, (size_t)first, (size_t)end, &t->bind.weights));
    t->w_base = t->bind.offsets[first];
    return MPX_OK;
}

/* Gives the gathered parameters back; returns rc, or the release's failure. */
static int release_params(toy *t, int rc)
{
    if (!t->wg) return rc;
    int r = t->wg->release(t->wg->ctx);
    t->bind.weights.p = NULL;
    return rc ? rc : r;
}

#ifndef MPX_TOY_AS_ABI_1_0
static int toy_set_weight_gather(void *self, const mpx_weight_gather *g)
{
    toy *t = self;
    t->wg = g;
    t->bind.weights.p = NULL;
    return MPX_OK;
}
#endif

static mpx_arg grad(toy *t, int i) { return mpx_at(t->bind.grads, t->bind.offsets[i]); }

/* C[m×n] = A[m×k] · B^T (B stored n×k), as nn.Linear does. */
static int linear(toy *t, mpx_arg a, mpx_arg w, mpx_arg c, int m, int n, int k)
{
    mpx_gemm g = { .trans_a = 0, .trans_b = 1, .m = m, .n = n, .k = k, .alpha = 1, .beta = 0,
                   .a = a, .lda = k, .b = w, .ldb = k, .c = c, .ldc = n, .batch = 1,
                   .compute = t->prec->gemm_in };
    return t->ops->gemm(t->be, &g);
}

static int batch_inputs(toy *t, const mpx_batch *batch, const mpx_itensor **ids,
                        const mpx_itensor **labels, int *rows)
{
    *ids = mpx_batch_get(batch, "input_ids");
    *labels = mpx_batch_get(batch, "labels");
    if (!*ids || (*ids)->ndim != 2 || (*ids)->shape[1] != t->seq_len)
        return MPX_FAIL(t->env, "toy: batch needs input_ids of shape [B, %lld]", (long long)t->seq_len);
    *rows = (int)(*ids)->shape[0];
    if (*rows > t->max_batch)
        return MPX_FAIL(t->env, "toy: batch of %d rows exceeds the bound size %d", *rows, t->max_batch);
    return MPX_OK;
}

static int toy_forward(void *self, const mpx_batch *batch, mpx_forward_out *out)
{
    toy *t = self;
    const mpx_itensor *ids, *labels;
    int B;
    MPX_TRY(batch_inputs(t, batch, &ids, &labels, &B));
    mpx_dtype act = t->prec->act;
    mpx_dtype loss_t = mpx_island_dtype(t->prec, MPX_ISLAND_LOSS);
    int in = (int)(t->seq_len * t->dim), H = (int)t->hidden, C = (int)t->classes;
    const mpx_ops *o = t->ops;
    /* one layer's parameters at a time (under zero/stage3 each is gathered, then released) */
    MPX_TRY(gather_params(t, P_EMBED, P_FC1_W));
    MPX_TRY(release_params(t, o->embedding_fwd(t->be, ids->data, (size_t)B * (size_t)t->seq_len, weight(t, P_EMBED),
                                               (size_t)t->vocab, (size_t)t->dim, mpx_a(t->x, act))));
    MPX_TRY(gather_params(t, P_FC1_W, P_FC2_W));
    int rc = linear(t, mpx_a(t->x, act), weight(t, P_FC1_W), mpx_a(t->h, act), B, H, in);
    if (!rc) rc = o->bias_add(t->be, mpx_a(t->h, act), weight(t, P_FC1_B), mpx_a(t->h, act), (size_t)B, (size_t)H);
    MPX_TRY(release_params(t, rc));
    MPX_TRY(o->gelu_fwd(t->be, mpx_a(t->h, act), mpx_a(t->a, act), (size_t)B * (size_t)H));
    mpx_dtype logit_t = batch->training ? loss_t : t->prec->eval_logits;
    MPX_TRY(gather_params(t, P_FC2_W, N_PARAMS));
    rc = linear(t, mpx_a(t->a, act), weight(t, P_FC2_W), mpx_a(t->logits, logit_t), B, C, H);
    if (!rc) rc = o->bias_add(t->be, mpx_a(t->logits, logit_t), weight(t, P_FC2_B), mpx_a(t->logits, logit_t),
                              (size_t)B, (size_t)C);
    MPX_TRY(release_params(t, rc));
    out->loss = NAN;
    if (labels) {
        mpx_arg none = { NULL, loss_t };
        MPX_TRY(o->cross_entropy(t->be, mpx_a(t->logits, logit_t), labels->data, (size_t)B,
                                 (size_t)C, &out->loss, none, 1.0f));
    }
    out->n_outputs = 1;
    out->names[0] = "logits";
    out->outputs[0] = mpx_a(t->logits, logit_t);
    out->rows = (size_t)B;
    out->cols = (size_t)C;
    return MPX_OK;
}

/* dW (+)= dY^T · X : [n×k] from dY [m×n] and X [m×k] */
static int weight_grad(toy *t, mpx_arg dy, mpx_arg x, mpx_arg dw, int m, int n, int k, int acc)
{
    mpx_gemm g = { .trans_a = 1, .trans_b = 0, .m = n, .n = k, .k = m, .alpha = 1,
                   .beta = acc ? 1.0f : 0.0f, .a = dy, .lda = n, .b = x, .ldb = k,
                   .c = dw, .ldc = k, .batch = 1, .compute = t->prec->gemm_in };
    return t->ops->gemm(t->be, &g);
}

/* dX = dY · W : [m×k] from dY [m×n] and W [n×k] */
static int input_grad(toy *t, mpx_arg dy, mpx_arg w, mpx_arg dx, int m, int n, int k)
{
    mpx_gemm g = { .trans_a = 0, .trans_b = 0, .m = m, .n = k, .k = n, .alpha = 1, .beta = 0,
                   .a = dy, .lda = n, .b = w, .ldb = k, .c = dx, .ldc = k, .batch = 1,
                   .compute = t->prec->gemm_in };
    return t->ops->gemm(t->be, &g);
}

static int toy_backward(void *self, const mpx_batch *batch, float loss_scale, int accumulate)
{
    toy *t = self;
    const mpx_itensor *ids, *labels;
    int B;
    MPX_TRY(batch_inputs(t, batch, &ids, &labels, &B));
    if (!labels) return MPX_FAIL(t->env, "toy: backward needs a batch with labels");
    mpx_dtype act = t->prec->act;
    mpx_dtype loss_t = mpx_island_dtype(t->prec, MPX_ISLAND_LOSS);
    int in = (int)(t->seq_len * t->dim), H = (int)t->hidden, C = (int)t->classes;
    const mpx_ops *o = t->ops;
    double loss;
    MPX_TRY(o->cross_entropy(t->be, mpx_a(t->logits, loss_t), labels->data, (size_t)B, (size_t)C,
                             &loss, mpx_a(t->dlogits, act), loss_scale));
    MPX_TRY(weight_grad(t, mpx_a(t->dlogits, act), mpx_a(t->a, act), grad(t, P_FC2_W), B, C, H, accumulate));
    MPX_TRY(o->bias_grad(t->be, mpx_a(t->dlogits, act), grad(t, P_FC2_B), (size_t)B, (size_t)C, accumulate));
    /* the weights again for the input gradients (the embedding's backward needs none) */
    MPX_TRY(gather_params(t, P_FC2_W, N_PARAMS));
    MPX_TRY(release_params(t, input_grad(t, mpx_a(t->dlogits, act), weight(t, P_FC2_W), mpx_a(t->da, act), B, C, H)));
    MPX_TRY(o->gelu_bwd(t->be, mpx_a(t->da, act), mpx_a(t->h, act), mpx_a(t->dh, act), (size_t)B * (size_t)H));
    MPX_TRY(weight_grad(t, mpx_a(t->dh, act), mpx_a(t->x, act), grad(t, P_FC1_W), B, H, in, accumulate));
    MPX_TRY(o->bias_grad(t->be, mpx_a(t->dh, act), grad(t, P_FC1_B), (size_t)B, (size_t)H, accumulate));
    MPX_TRY(gather_params(t, P_FC1_W, P_FC2_W));
    MPX_TRY(release_params(t, input_grad(t, mpx_a(t->dh, act), weight(t, P_FC1_W), mpx_a(t->dx, act), B, H, in)));
    mpx_arg dembed = grad(t, P_EMBED);
    if (!accumulate)
        MPX_TRY(o->fill_zero(t->be, dembed.p, (size_t)(t->vocab * t->dim) * mpx_dtype_size(dembed.t)));
    return o->embedding_bwd(t->be, ids->data, (size_t)B * (size_t)t->seq_len, mpx_a(t->dx, act),
                            dembed, (size_t)t->vocab, (size_t)t->dim);
}

static int toy_save(void *self, const char *dir, const float *flat, const size_t *offsets)
{
    (void)flat; (void)offsets; (void)dir;
    return MPX_FAIL(((toy *)self)->env, "toy: saving checkpoints is not supported (set train.save_model = false)");
}

static int toy_set_grads(void *self, mpx_arg grads)
{
    ((toy *)self)->bind.grads = grads;
    return MPX_OK;
}

/* -DMPX_TOY_AS_ABI_1_0 (tests/plugins.mk, test-only): the toy as a model built for ABI 1.0,
 * named toy-abi10, whose vtable ends before set_weight_gather: it must still load and
 * train, and zero/stage3 must refuse it. */
#ifdef MPX_TOY_AS_ABI_1_0
#define TOY_VTABLE_SIZE offsetof(mpx_model_vtable, set_weight_gather)
#define TOY_NAME "toy-abi10"
#define TOY_HEADER .abi_major = 1, .abi_minor = 0, .size = sizeof(mpx_plugin_desc)
#else
#define TOY_VTABLE_SIZE sizeof(mpx_model_vtable)
#define TOY_NAME "toy"
#define TOY_HEADER MPX_DESC_HEADER
#endif

static const mpx_model_vtable toy_vtable = {
    .size = TOY_VTABLE_SIZE,
    .create = toy_create, .destroy = toy_destroy,
    .n_params = toy_n_params, .param = toy_param,
    .n_sites = toy_n_sites, .site = toy_site,
    .init_weights = toy_init_weights, .bind = toy_bind,
    .forward = toy_forward, .backward = toy_backward, .save = toy_save,
    .set_grads = toy_set_grads,
#ifndef MPX_TOY_AS_ABI_1_0
    .set_weight_gather = toy_set_weight_gather,
#endif
};

static const mpx_plugin_desc toy_desc = {
    TOY_HEADER,
    .kind = MPX_KIND_MODEL,
    .name = TOY_NAME,
    .version = "1.0.0",
    .summary = "two-layer perceptron over token embeddings; trains in seconds (tests, worked example)",
    .options = toy_options,
    .n_options = MPX_COUNT(toy_options),
    .vtable = &toy_vtable,
};

MPX_PLUGIN_ENTRY { (void)host; return &toy_desc; }
