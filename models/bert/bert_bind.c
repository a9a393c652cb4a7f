/* bind: the dtypes of the effective precision descriptor, and every activation and
 * workspace buffer, sized once for max_batch x max_seq (role scratch).
 * Bound with no grads (bind->grads.p NULL: mpx eval) the model is forward-only: no
 * gradient workspaces, no dropout buffers, and one set of layer activations that every
 * layer reuses, since nothing is kept for a backward: a layer reads its input (the
 * previous layer's x2) for Q, K, V and the first residual, and overwrites x2 only with
 * its own last layernorm. A training batch or a backward is refused. */
#include "bert.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *scratch(bert *m, size_t bytes, const char *what, int *rc)
{
    if (*rc) return NULL;
    if (m->n_scratch == m->cap_scratch) {
        size_t cap = m->cap_scratch ? 2 * m->cap_scratch : 64;
        void **p = realloc(m->scratch, cap * sizeof *p);
        if (!p) { *rc = MPX_FAIL(m->env, "out of memory"); return NULL; }
        m->scratch = p;
        m->cap_scratch = cap;
    }
    void *p = m->env->host->alloc(m->env, MPX_ROLE_SCRATCH, bytes ? bytes : 1, what);
    if (!p) { *rc = MPX_FAIL(m->env, "cannot allocate %zu bytes for %s", bytes, what); return NULL; }
    m->scratch[m->n_scratch++] = p;
    return p;
}

static void pick_dtypes(bert *m)
{
    const mpx_precision_desc *d = m->env->host->precision(m->env);
    m->dt_w = d->weights;
    m->dt_gemm = m->dt_gemm_fwd = d->gemm_in;
    m->dt_gemm_bwd = mpx_grad_gemm_dtype(d);
    /* per-parameter choices (a policy's param_gemm hook): bert applies a layer's query
     * weight's to all of that layer's GEMMs, and the QA head weight's to the head */
    free(m->pg);
    m->pg = NULL;
    const mpx_host *h = m->env->host;
    size_t np = m->n_params;
    if (h->size >= offsetof(mpx_host, param_gemm_dtype) + sizeof(void *) && h->param_gemm_dtype &&
        (m->pg = calloc(2 * np, sizeof *m->pg)) != NULL) {
        for (size_t i = 0; i < np; i++)
            if (h->param_gemm_dtype(m->env, i, 0, &m->pg[2 * i]) || h->param_gemm_dtype(m->env, i, 1, &m->pg[2 * i + 1])) {
                free(m->pg);
                m->pg = NULL;
                break;
            }
    }
    m->dt_act = d->act;
    m->dt_grad = d->grads;
    m->dt_eval = d->eval_logits;
    m->dt_ln = mpx_island_dtype(d, MPX_ISLAND_LAYERNORM);
    m->dt_sm = mpx_island_dtype(d, MPX_ISLAND_SOFTMAX);
    m->dt_loss = mpx_island_dtype(d, MPX_ISLAND_LOSS);
    m->dt_res = mpx_island_dtype(d, MPX_ISLAND_RESIDUAL);
}

/* Whether the backend's attention op (ABI 1.11) runs every layer's attention core: it
 * has one, and no layer's attention GEMMs compute in a number format (those go through
 * the gemm op's scaled path, one op at a time). */
static int attention_op_fits(const bert *m)
{
    const mpx_ops *o = m->ops;
    if (!MPX_OPS_HAS(o, attention_bwd) || !o->attention_fwd || !o->attention_bwd) return 0;
    for (int l = 0; l < m->cfg.layers; l++)
        for (int bwd = 0; bwd < 2; bwd++)
            if (mpx_dtype_is_format(bert_param_gemm(m, bert_layer_param(l, L_Q_W), bwd))) return 0;
    return 1;
}

static int alloc_layer(bert *m, int l, size_t T, size_t probs, int *rc)
{
    bert_layer_act *a = &m->act[l];
    const size_t H = (size_t)m->cfg.hidden, I = (size_t)m->cfg.inter;
    const size_t act = mpx_dtype_size(m->dt_act), res = mpx_dtype_size(m->dt_res), ln = mpx_dtype_size(m->dt_ln);
    char what[64];
#define BUF(field, bytes, label) \
    (snprintf(what, sizeof what, "bert layer %d %s", l, label), a->field = scratch(m, bytes, what, rc))
    /* one block, so that Q, K and V are one batched GEMM's C (bert_qkv_spacing) */
    BUF(q, 3 * T * H * act, "query, key and value");
    if (a->q) {
        a->k = (char *)a->q + T * H * act;
        a->v = (char *)a->k + T * H * act;
    }
    BUF(ctx, T * H * act, "context");
    /* with the backend's attention op an evaluation forward keeps no probabilities, and
     * backward regenerates the dropped ones a head at a time (cheap in cache); the ops
     * one by one keep them: one Philox pass and one pass over [B, NH, S, S] less */
    if (!(m->fused_attn && m->forward_only)) BUF(probs, probs * mpx_dtype_size(m->dt_sm), "attention probabilities");
    if (!m->fused_attn && m->p_attn > 0.0f && !m->forward_only)
        BUF(pd, probs * mpx_dtype_size(m->dt_sm), "dropped attention probabilities");
    if (m->fused_attn && m->p_attn > 0.0f && !m->forward_only)   /* the op's mask, 1 bit an element */
        BUF(keep, probs / (size_t)m->max_s * (((size_t)m->max_s + 31) / 32) * 4, "attention dropout mask");
    BUF(r1, T * H * res, "attention residual");
    BUF(r2, T * H * res, "ffn residual");
    BUF(x1, T * H * ln, "attention layernorm");
    BUF(x2, T * H * ln, "ffn layernorm");
    BUF(mean1, T * 4, "layernorm mean");
    BUF(rstd1, T * 4, "layernorm rstd");
    BUF(mean2, T * 4, "layernorm mean");
    BUF(rstd2, T * 4, "layernorm rstd");
    BUF(ff1, T * I * act, "intermediate");
    BUF(gel, T * I * act, "gelu");
#undef BUF
    return *rc;
}

static int alloc_shared(bert *m, size_t T, size_t probs, int *rc)
{
    const size_t H = (size_t)m->cfg.hidden, I = (size_t)m->cfg.inter;
    const size_t act = mpx_dtype_size(m->dt_act), res = mpx_dtype_size(m->dt_res), ln = mpx_dtype_size(m->dt_ln);
    m->emb = scratch(m, T * H * res, "bert embedding sum", rc);
    m->x0n = scratch(m, T * H * ln, "bert embedding layernorm", rc);
    m->x0 = scratch(m, T * H * ln, "bert embedding dropout", rc);
    m->mean0 = scratch(m, T * 4, "bert embedding layernorm mean", rc);
    m->rstd0 = scratch(m, T * 4, "bert embedding layernorm rstd", rc);
    m->ta = scratch(m, T * H * act, "bert dense output", rc);
    if (!m->fused_attn) m->gp1 = scratch(m, probs * 4, "bert scores / probability grads", rc);
    m->gr = scratch(m, T * H * 4, "bert hidden grads", rc);   /* forward: the embedding temporary */
    for (int i = 0; i < 2; i++) {
        m->logits[i] = scratch(m, T * 4, "bert logits", rc);
        m->loss_logits[i] = scratch(m, T * 4, "bert loss logits", rc);
    }
    m->mask = scratch(m, T * 4, "bert attention mask", rc);
    m->pos_ids = scratch(m, T * 4, "bert position ids", rc);
    m->widen_grads = 0;
    if (m->forward_only) return *rc;
    m->tb = scratch(m, T * H * act, "bert dense dropout", rc);
    if (!m->fused_attn) m->gp2 = scratch(m, probs * 4, "bert probability grads", rc);
    void **th[] = { &m->gx, &m->ga, &m->gb, &m->gctx };
    for (size_t i = 0; i < MPX_COUNT(th); i++) *th[i] = scratch(m, T * H * 4, "bert hidden grads", rc);
    /* one block, as the activations: the weight gradients' batched GEMM reads them */
    m->gq = scratch(m, 3 * T * H * 4, "bert query, key and value grads", rc);
    if (m->gq) {
        m->gk = (char *)m->gq + T * H * 4;
        m->gv = (char *)m->gk + T * H * 4;
    }
    m->gff = scratch(m, T * I * 4, "bert intermediate grads", rc);
    m->gff2 = scratch(m, T * I * 4, "bert intermediate grads", rc);
    for (int i = 0; i < 2; i++) m->dlogits[i] = scratch(m, T * 4, "bert logit grads", rc);
    m->widen_grads = m->dt_grad == MPX_F32 && m->dt_act != MPX_F32;
    if (m->widen_grads) {
        size_t most = 0;
        for (size_t p = 0; p < m->n_params; p++) most = bert_numel(m, p) > most ? bert_numel(m, p) : most;
        m->wgrad_low = scratch(m, most * mpx_dtype_size(m->dt_act), "bert 16-bit weight grads (autocast)", rc);
    }
    return *rc;
}

int bert_bind(bert *m, const mpx_model_bind *b, int max_batch, int max_seq)
{
    if (m->bound) bert_unbind(m);
    if (max_batch < 1 || max_seq < 1)
        return MPX_FAIL(m->env, "bind: max_batch %d and max_seq %d must be positive", max_batch, max_seq);
    if (max_seq > m->cfg.max_pos)
        return MPX_FAIL(m->env, "bind: max_seq %d exceeds max_position_embeddings %d of %s",
                        max_seq, m->cfg.max_pos, m->cfg.path);
    m->ops = m->env->host->ops(m->env, &m->be);
    if (!m->ops) return MPX_FAIL(m->env, "bind: the host has no compute backend");
    pick_dtypes(m);
    m->forward_only = b->grads.p == NULL;
    m->fused_attn = attention_op_fits(m);
    if (b->weights.t != m->dt_w || (!m->forward_only && b->grads.t != m->dt_grad))
        return MPX_FAIL(m->env, "bind: weights are %s and grads %s but the precision says %s and %s",
                        mpx_dtype_name(b->weights.t), mpx_dtype_name(b->grads.t),
                        mpx_dtype_name(m->dt_w), mpx_dtype_name(m->dt_grad));
    m->W = b->weights;
    m->G = b->grads;
    m->wg = NULL;
    m->w_base = 0;
    m->off = malloc(m->n_params * sizeof *m->off);
    m->act = calloc((size_t)m->cfg.layers + 1, sizeof *m->act);
    m->h_ids = malloc((size_t)max_batch * (size_t)max_seq * sizeof(int32_t));
    m->h_pos = malloc((size_t)max_batch * (size_t)max_seq * sizeof(int32_t));
    if (!m->off || !m->act || !m->h_ids || !m->h_pos) { bert_unbind(m); return MPX_FAIL(m->env, "out of memory"); }
    memcpy(m->off, b->offsets, m->n_params * sizeof *m->off);
    m->max_b = max_batch;
    m->max_s = max_seq;
    m->bound = 1;
    const size_t T = (size_t)max_batch * (size_t)max_seq;
    const size_t probs = T * (size_t)max_seq * (size_t)m->cfg.heads;
    int rc = 0;
    for (int l = 0; l < m->cfg.layers && !rc; l++) {
        if (m->forward_only && l >= 1) m->act[l] = m->act[0];
        else alloc_layer(m, l, T, probs, &rc);
    }
    if (!rc) alloc_shared(m, T, probs, &rc);
    if (rc) bert_unbind(m);
    return rc;
}

/* A layer's parameters are contiguous in the table (bert_params.c): the embeddings, each
 * layer's L_COUNT, the head. */
int bert_enter_layer(bert *m, int l)
{
    if (!m->wg) return MPX_OK;
    size_t first = l < 0 ? 0 : bert_layer_param(l, 0);
    size_t end = l < 0 ? P_EMB_COUNT : l < m->cfg.layers ? bert_layer_param(l + 1, 0) : m->n_params;
    MPX_TRY(m->wg->gather(m->wg->ctx, first, end, &m->W));
    m->w_base = m->off[first];
    return MPX_OK;
}

int bert_leave_layer(bert *m, int rc)
{
    if (!m->wg) return rc;
    int r = m->wg->release(m->wg->ctx);
    m->W.p = NULL;
    return rc ? rc : r;
}

int bert_set_weight_gather(bert *m, const mpx_weight_gather *g)
{
    if (!m->bound) return MPX_FAIL(m->env, "set_weight_gather before bind");
    m->wg = g;
    m->W.p = NULL;
    return MPX_OK;
}

void bert_unbind(bert *m)
{
    free(m->pg);
    m->pg = NULL;
    for (size_t i = m->n_scratch; i-- > 0;) m->env->host->release(m->env, m->scratch[i]);
    free(m->scratch);
    free(m->off);
    free(m->act);
    free(m->h_ids);
    free(m->h_pos);
    m->scratch = NULL;
    m->n_scratch = m->cap_scratch = 0;
    m->off = NULL;
    m->act = NULL;
    m->wgrad_low = NULL;
    m->wg = NULL;
    m->h_ids = m->h_pos = NULL;
    m->bound = 0;
    m->has_forward = 0;
}
