/* Forward: embeddings (word + position + token type, LayerNorm, dropout), post-LN
 * encoder layers (self-attention with the additive (1 - mask) * -10000 bias as
 * BingBertSquad, GELU erf feed-forward), QA head, mean of start and end cross-entropy.
 *
 * Dtypes (effective precision descriptor): weights in `weights`; every GEMM rounds its
 * inputs to `gemm_in`; GEMM outputs, GELU, attention and hidden dropout in `act`;
 * layernorm outputs, the softmax output (and its dropout) and the residual sums in their
 * island dtypes; logits in `act` when training (cast to the loss island for the loss),
 * in `eval_logits` at evaluation. Attention scores are scaled by 1/sqrt(head size) in
 * the GEMM (fp32 alpha, before rounding), so the softmax runs with scale 1. */
#include "bert.h"

#include <math.h>
#include <string.h>

static mpx_gemm gemm_of(const bert *m, int ta, int tb, int M, int N, int K, float alpha, bert_mat a, bert_mat b,
                        float beta, bert_mat c, int batch)
{
    mpx_gemm g = {
        .trans_a = ta, .trans_b = tb, .m = M, .n = N, .k = K, .alpha = alpha, .beta = beta,
        .a = a.p, .lda = a.ld, .stride_a = a.stride,
        .b = b.p, .ldb = b.ld, .stride_b = b.stride,
        .c = c.p, .ldc = c.ld, .stride_c = c.stride,
        .batch = batch, .compute = m->dt_gemm,
    };
    return g;
}

int bert_gemm(bert *m, int ta, int tb, int M, int N, int K, float alpha, bert_mat a, bert_mat b,
              float beta, bert_mat c, int batch)
{
    mpx_gemm g = gemm_of(m, ta, tb, M, N, K, alpha, a, b, beta, c, batch);
    return m->ops->gemm(m->be, &g);
}

/* y = b broadcast over the rows, rounded to y's dtype: the bias as addmm reads it (under
 * autocast the bias is cast to the low dtype like the other operands). */
static int fill_bias(bert *m, mpx_arg b, mpx_arg y, size_t rows, size_t cols)
{
    MPX_TRY(m->ops->fill_zero(m->be, y.p, rows * cols * mpx_dtype_size(y.t)));
    return m->ops->bias_add(m->be, y, b, y, rows, cols);
}

/* addmm: y = x W^T + b with one rounding of the sum (the GEMM adds the bias it reads
 * from y before it rounds its output). With an fp32 y the product needs no rounding of
 * its own, so the GEMM writes it (beta 0) and bias_add rounds the sum once: the same bits
 * (the chain's sum is never -0), one pass over y fewer, and the GEMM may cut K into
 * blocks (it keeps K whole when it reads C). A backend with gemm_bias (ABI 1.13) does
 * the two in one op, adding the bias as it stores y: one more pass fewer; for a 16-bit y,
 * one with gemm_bias_as_c (ABI 1.18) does the fill and the GEMM in one. */
int bert_linear_fwd(bert *m, mpx_arg x, size_t w, mpx_arg y, int T, int in, int out)
{
    if (y.t == MPX_F32) {
        mpx_gemm g = gemm_of(m, 0, 1, T, out, in, 1.0f, bert_mat_of(x, in), bert_mat_of(bert_w(m, w), in), 0.0f,
                             bert_mat_of(y, out), 1);
        if (MPX_OPS_HAS(m->ops, gemm_bias) && m->ops->gemm_bias) return m->ops->gemm_bias(m->be, &g, bert_w(m, w + 1));
        MPX_TRY(m->ops->gemm(m->be, &g));
        return m->ops->bias_add(m->be, y, bert_w(m, w + 1), y, (size_t)T, (size_t)out);
    }
    if (MPX_OPS_HAS(m->ops, gemm_bias_as_c) && m->ops->gemm_bias_as_c) {   /* the two below in one op (ABI 1.18) */
        mpx_gemm g = gemm_of(m, 0, 1, T, out, in, 1.0f, bert_mat_of(x, in), bert_mat_of(bert_w(m, w), in), 1.0f,
                             bert_mat_of(y, out), 1);
        return m->ops->gemm_bias_as_c(m->be, &g, bert_w(m, w + 1));
    }
    MPX_TRY(fill_bias(m, bert_w(m, w + 1), y, (size_t)T, (size_t)out));
    return bert_gemm(m, 0, 1, T, out, in, 1.0f, bert_mat_of(x, in), bert_mat_of(bert_w(m, w), in),
                     1.0f, bert_mat_of(y, out), 1);
}

long long bert_qkv_spacing(const bert *m, int l)
{
    const size_t *o = m->off, q = bert_layer_param(l, L_Q_W), k = bert_layer_param(l, L_K_W),
                 v = bert_layer_param(l, L_V_W);
    if (mpx_dtype_is_format(bert_param_gemm(m, q, 0)) || mpx_dtype_is_format(bert_param_gemm(m, q, 1))) return 0;
    if (o[k] <= o[q]) return 0;
    const size_t sw = o[k] - o[q];
    if (o[v] - o[k] != sw || o[k + 1] - o[q + 1] != sw || o[v + 1] - o[k + 1] != sw) return 0;
    return (long long)sw;
}

/* Q, K and V = x W^T + b: bert_linear_fwd three times, or with one batched GEMM (A at
 * stride 0) when their parameters and outputs lie at one spacing — the same arithmetic
 * element for element: a 16-bit C is filled with its bias and read (beta 1), an fp32 C is
 * written (beta 0) and bias_add rounds the sum. With fp32 outputs and the backend's
 * gemm_bias, or 16-bit outputs and its gemm_bias_as_c (each takes one matrix: its pass
 * over C saved outweighs two launches), the three linear layers stay. */
static int qkv_fwd(bert *m, int l, mpx_arg x, const bert_layer_act *a)
{
    const int T = m->cur_b * m->cur_s, H = m->cfg.hidden;
    const size_t w[3] = { bert_layer_param(l, L_Q_W), bert_layer_param(l, L_K_W), bert_layer_param(l, L_V_W) };
    const mpx_arg y[3] = { mpx_a(a->q, m->dt_act), mpx_a(a->k, m->dt_act), mpx_a(a->v, m->dt_act) };
    const long long sw = bert_qkv_spacing(m, l), sc = bert_spacing3(a->q, a->k, a->v, mpx_dtype_size(m->dt_act));
    const int f32 = m->dt_act == MPX_F32;
    if (!sw || !sc || (f32 && MPX_OPS_HAS(m->ops, gemm_bias) && m->ops->gemm_bias) ||
        (!f32 && MPX_OPS_HAS(m->ops, gemm_bias_as_c) && m->ops->gemm_bias_as_c)) {
        for (int i = 0; i < 3; i++) MPX_TRY(bert_linear_fwd(m, x, w[i], y[i], T, H, H));
        return 0;
    }
    if (!f32)
        for (int i = 0; i < 3; i++) MPX_TRY(fill_bias(m, bert_w(m, w[i] + 1), y[i], (size_t)T, (size_t)H));
    bert_mat A = bert_mat_of(x, H), B = { bert_w(m, w[0]), H, sw }, C = { y[0], H, sc };
    MPX_TRY(bert_gemm(m, 0, 1, T, H, H, 1.0f, A, B, f32 ? 0.0f : 1.0f, C, 3));
    if (f32)
        for (int i = 0; i < 3; i++) MPX_TRY(m->ops->bias_add(m->be, y[i], bert_w(m, w[i] + 1), y[i], (size_t)T, (size_t)H));
    return 0;
}

/* y = dropout(x) when on; otherwise x itself (no copy). */
static mpx_arg dropout(bert *m, mpx_arg x, void *buf, size_t n, float p, uint32_t site, int *rc)
{
    if (*rc || !m->drop_on || p <= 0.0f) return x;
    mpx_arg y = mpx_a(buf, x.t);
    mpx_rng rng = { m->env->host->seed(m->env), site, m->tick, 0 };
    *rc = m->ops->dropout_fwd(m->be, x, y, n, p, rng);
    return y;
}

/* ---- inputs ---- */

/* The task's host copy of tensor t (ABI 1.18 mpx_batch.host), or NULL. */
static const int32_t *host_copy(const mpx_batch *b, const mpx_itensor *t)
{
    if (b->size < offsetof(mpx_batch, host) + sizeof b->host || !b->host || !t) return NULL;
    return b->host[t - b->tensors];
}

static int get_input(bert *m, const mpx_batch *b, const char *name, int rows, int cols, const int32_t **out,
                     const int32_t **host)
{
    const mpx_itensor *t = mpx_batch_get(b, name);
    *host = host_copy(b, t);
    if (!t) return MPX_FAIL(m->env, "batch has no tensor '%s'", name);
    int64_t n = t->ndim == 1 ? t->shape[0] : t->ndim == 2 ? t->shape[0] * t->shape[1] : -1;
    int ok = cols ? (t->ndim == 2 && t->shape[0] == rows && t->shape[1] == cols) : n == rows;
    if ((!ok || !t->data) && cols)
        return MPX_FAIL(m->env, "batch tensor '%s' must be int32 [%d, %d] like input_ids", name, rows, cols);
    if (!ok || !t->data)
        return MPX_FAIL(m->env, "batch tensor '%s' must hold %d int32 labels (one per example)", name, rows);
    *out = t->data;
    return 0;
}

/* n int32 values on the host: the task's copy, else copied back from the backend. */
static const int32_t *on_host(bert *m, const int32_t *dev, const int32_t *host, size_t n, int *rc)
{
    if (host) return host;
    *rc = m->ops->to_host(m->be, m->h_ids, dev, n * sizeof(int32_t));
    return *rc ? NULL : m->h_ids;
}

/* Checks n int32 values against [0, limit). */
static int check_range(bert *m, const int32_t *dev, const int32_t *host, size_t n, int limit, const char *name,
                       const char *what)
{
    int rc = 0;
    const int32_t *v = on_host(m, dev, host, n, &rc);
    MPX_TRY(rc);
    for (size_t i = 0; i < n; i++)
        if (v[i] < 0 || v[i] >= limit)
            return MPX_FAIL(m->env, "batch tensor '%s'[%zu] = %d is outside [0, %d) (%s)", name, i, (int)v[i], limit,
                            what);
    return 0;
}

/* The additive mask (1 - mask) * -10000 and the position ids, made on the host. */
static int prepare_mask_positions(bert *m, const int32_t *mask, const int32_t *mask_host, int B, int S)
{
    const size_t T = (size_t)B * (size_t)S;
    int rc = 0;
    const int32_t *v = on_host(m, mask, mask_host, T, &rc);
    MPX_TRY(rc);
    float *hm = (float *)m->h_pos; /* same size as T int32 */
    for (size_t i = 0; i < T; i++) {
        if (v[i] != 0 && v[i] != 1)
            return MPX_FAIL(m->env, "batch tensor 'input_mask'[%zu] = %d (0 or 1 expected)", i, (int)v[i]);
        hm[i] = (float)(1 - v[i]) * -10000.0f;
    }
    MPX_TRY(m->ops->to_device(m->be, m->mask, hm, T * sizeof(float)));
    for (size_t i = 0; i < T; i++) m->h_pos[i] = (int32_t)(i % (size_t)S);
    return m->ops->to_device(m->be, m->pos_ids, m->h_pos, T * sizeof(int32_t));
}

static int read_inputs(bert *m, const mpx_batch *b)
{
    const mpx_itensor *ids = mpx_batch_get(b, "input_ids");
    if (!ids || ids->ndim != 2) return MPX_FAIL(m->env, "batch has no 2-D int32 tensor 'input_ids'");
    if (ids->shape[0] < 1 || ids->shape[0] > m->max_b || ids->shape[1] < 1 || ids->shape[1] > m->max_s)
        return MPX_FAIL(m->env, "batch 'input_ids' is [%lld, %lld] but bind allowed up to [%d, %d]",
                        (long long)ids->shape[0], (long long)ids->shape[1], m->max_b, m->max_s);
    const int B = (int)ids->shape[0], S = (int)ids->shape[1];
    const int32_t *mask, *h[5];
    MPX_TRY(get_input(m, b, "input_ids", B, S, &m->in_ids, &h[0]));
    MPX_TRY(get_input(m, b, "segment_ids", B, S, &m->in_seg, &h[1]));
    MPX_TRY(get_input(m, b, "input_mask", B, S, &mask, &h[2]));
    MPX_TRY(check_range(m, m->in_ids, h[0], (size_t)B * S, m->cfg.vocab, "input_ids", "vocab_size"));
    MPX_TRY(check_range(m, m->in_seg, h[1], (size_t)B * S, m->cfg.type_vocab, "segment_ids", "type_vocab_size"));
    m->has_labels = mpx_batch_get(b, "start_positions") && mpx_batch_get(b, "end_positions");
    if (m->has_labels) {
        MPX_TRY(get_input(m, b, "start_positions", B, 0, &m->labels[0], &h[3]));
        MPX_TRY(get_input(m, b, "end_positions", B, 0, &m->labels[1], &h[4]));
        MPX_TRY(check_range(m, m->labels[0], h[3], (size_t)B, S, "start_positions", "sequence length"));
        MPX_TRY(check_range(m, m->labels[1], h[4], (size_t)B, S, "end_positions", "sequence length"));
    }
    m->cur_b = B;
    m->cur_s = S;
    return prepare_mask_positions(m, mask, h[2], B, S);
}

/* ---- the network ---- */

static int embeddings(bert *m)
{
    const size_t T = (size_t)m->cur_b * m->cur_s, H = (size_t)m->cfg.hidden;
    mpx_arg e = mpx_a(m->emb, m->dt_res), t = mpx_a(m->gr, m->dt_res); /* gr: free until backward */
    const mpx_ops *o = m->ops;
    MPX_TRY(o->embedding_fwd(m->be, m->in_ids, T, bert_w(m, P_WORD), (size_t)m->cfg.vocab, H, e));
    MPX_TRY(o->embedding_fwd(m->be, m->pos_ids, T, bert_w(m, P_POS), (size_t)m->cfg.max_pos, H, t));
    MPX_TRY(o->add(m->be, e, t, e, T * H));
    MPX_TRY(o->embedding_fwd(m->be, m->in_seg, T, bert_w(m, P_TYPE), (size_t)m->cfg.type_vocab, H, t));
    MPX_TRY(o->add(m->be, e, t, e, T * H));
    MPX_TRY(o->layernorm_fwd(m->be, e, bert_w(m, P_EMB_LN_W), bert_w(m, P_EMB_LN_B), mpx_a(m->x0n, m->dt_ln),
                             m->mean0, m->rstd0, T, H, (float)m->cfg.ln_eps));
    int rc = 0;
    mpx_arg x = dropout(m, mpx_a(m->x0n, m->dt_ln), m->x0, T * H, m->p_hidden, bert_site(-1, 0), &rc);
    if (!rc && x.p != m->x0) rc = o->copy(m->be, m->x0, x.p, T * H * mpx_dtype_size(m->dt_ln));
    return rc;
}

/* Scores [b, h] = Q[b, :, h, :] K[b, :, h, :]^T / sqrt(D), one batched GEMM per example. */
static int attention_scores(bert *m, const bert_layer_act *a, mpx_arg sc)
{
    const int S = m->cur_s, H = m->cfg.hidden, NH = m->cfg.heads, D = H / NH;
    const size_t SH = (size_t)S * H, SS = (size_t)S * S;
    for (int b = 0; b < m->cur_b; b++) {
        bert_mat q = { mpx_at(mpx_a(a->q, m->dt_act), b * SH), H, D };
        bert_mat k = { mpx_at(mpx_a(a->k, m->dt_act), b * SH), H, D };
        bert_mat c = { mpx_at(sc, b * NH * SS), S, (long long)SS };
        MPX_TRY(bert_gemm(m, 0, 1, S, S, D, 1.0f / sqrtf((float)D), q, k, 0.0f, c, NH));
    }
    return 0;
}

/* ctx[b, :, h, :] = P[b, h] V[b, :, h, :] */
static int attention_context(bert *m, const bert_layer_act *a, mpx_arg p)
{
    const int S = m->cur_s, H = m->cfg.hidden, NH = m->cfg.heads, D = H / NH;
    const size_t SH = (size_t)S * H, SS = (size_t)S * S;
    for (int b = 0; b < m->cur_b; b++) {
        bert_mat pm = { mpx_at(p, b * NH * SS), S, (long long)SS };
        bert_mat v = { mpx_at(mpx_a(a->v, m->dt_act), b * SH), H, D };
        bert_mat c = { mpx_at(mpx_a(a->ctx, m->dt_act), b * SH), H, D };
        MPX_TRY(bert_gemm(m, 0, 0, S, D, S, 1.0f, pm, v, 0.0f, c, NH));
    }
    return 0;
}

static int self_attention(bert *m, int l, mpx_arg x)
{
    bert_layer_act *a = &m->act[l];
    const int T = m->cur_b * m->cur_s;
    const size_t n_probs = (size_t)T * m->cur_s * m->cfg.heads;
    MPX_TRY(qkv_fwd(m, l, x, a));
    if (m->fused_attn) {   /* the same bits as the ops below, a head at a time */
        mpx_attention at = bert_attention(m, a, l);
        if (m->forward_only) at.probs.p = NULL;   /* nothing to keep for a backward */
        return m->ops->attention_fwd(m->be, &at);
    }
    mpx_arg sc = mpx_a(m->gp1, m->dt_act), probs = mpx_a(a->probs, m->dt_sm);
    MPX_TRY(attention_scores(m, a, sc));
    if (bert_fused_attn_dropout(m)) {   /* the same bits as the two ops below, in one pass */
        mpx_arg pd = mpx_a(a->pd, probs.t);
        mpx_rng rng = { m->env->host->seed(m->env), bert_site(l, S_ATTN_PROBS), m->tick, 0 };
        MPX_TRY(m->ops->softmax_dropout_fwd(m->be, sc, mpx_a(m->mask, MPX_F32), probs, pd, (size_t)m->cur_b,
                                            (size_t)m->cfg.heads, (size_t)m->cur_s, (size_t)m->cur_s, 1.0f,
                                            m->p_attn, rng));
        return attention_context(m, a, pd);
    }
    MPX_TRY(m->ops->softmax_fwd(m->be, sc, mpx_a(m->mask, MPX_F32), probs, (size_t)m->cur_b,
                                (size_t)m->cfg.heads, (size_t)m->cur_s, (size_t)m->cur_s, 1.0f));
    int rc = 0;
    mpx_arg pd = dropout(m, probs, a->pd, n_probs, m->p_attn, bert_site(l, S_ATTN_PROBS), &rc);
    return rc ? rc : attention_context(m, a, pd);
}

/* out = LN(dropout(dense(in)) + resid); `in` is [T, n_in] act, r the residual sum kept. */
static int dense_residual_norm(bert *m, int l, size_t w, mpx_arg in, int n_in, mpx_arg resid,
                               int site, void *r, void *out, float *mean, float *rstd, size_t ln_w)
{
    const int T = m->cur_b * m->cur_s, H = m->cfg.hidden;
    const size_t n = (size_t)T * H;
    mpx_arg t = mpx_a(m->ta, m->dt_act), rs = mpx_a(r, m->dt_res);
    MPX_TRY(bert_linear_fwd(m, in, w, t, T, n_in, H));
    if (MPX_OPS_HAS(m->ops, dropout_add_layernorm_fwd) && m->ops->dropout_add_layernorm_fwd) {
        /* the three ops below in one pass, the same bits (ABI 1.17) */
        const float p = m->drop_on && !(m->p_hidden <= 0.0f) ? m->p_hidden : 0.0f;   /* as dropout() skips */
        mpx_rng rng = { m->env->host->seed(m->env), bert_site(l, site), m->tick, 0 };
        return m->ops->dropout_add_layernorm_fwd(m->be, t, p, rng, resid, rs, bert_w(m, ln_w),
                                                 bert_w(m, ln_w + 1), mpx_a(out, m->dt_ln), mean, rstd, (size_t)T,
                                                 (size_t)H, (float)m->cfg.ln_eps);
    }
    int rc = 0;
    mpx_arg d = dropout(m, t, m->tb, n, m->p_hidden, bert_site(l, site), &rc);
    MPX_TRY(rc);
    MPX_TRY(m->ops->add(m->be, d, resid, rs, n));
    return m->ops->layernorm_fwd(m->be, rs, bert_w(m, ln_w), bert_w(m, ln_w + 1), mpx_a(out, m->dt_ln),
                                 mean, rstd, (size_t)T, (size_t)H, (float)m->cfg.ln_eps);
}

static int encoder_layer(bert *m, int l, mpx_arg x)
{
    bert_layer_act *a = &m->act[l];
    const int T = m->cur_b * m->cur_s, H = m->cfg.hidden, I = m->cfg.inter;
    MPX_TRY(self_attention(m, l, x));
    MPX_TRY(dense_residual_norm(m, l, bert_layer_param(l, L_AO_W), mpx_a(a->ctx, m->dt_act), H, x,
                                S_ATTN_OUT, a->r1, a->x1, a->mean1, a->rstd1, bert_layer_param(l, L_LN1_W)));
    mpx_arg x1 = mpx_a(a->x1, m->dt_ln), ff1 = mpx_a(a->ff1, m->dt_act), gel = mpx_a(a->gel, m->dt_act);
    MPX_TRY(bert_linear_fwd(m, x1, bert_layer_param(l, L_FI_W), ff1, T, H, I));
    MPX_TRY(m->ops->gelu_fwd(m->be, ff1, gel, (size_t)T * I));
    return dense_residual_norm(m, l, bert_layer_param(l, L_FO_W), gel, I, x1, S_FFN_OUT, a->r2, a->x2,
                               a->mean2, a->rstd2, bert_layer_param(l, L_LN2_W));
}

mpx_arg bert_last_hidden(const bert *m)
{
    return m->cfg.layers ? mpx_a(m->act[m->cfg.layers - 1].x2, m->dt_ln) : mpx_a(m->x0, m->dt_ln);
}

/* start/end logits: one n = 1 GEMM per row of qa_outputs.weight, so each comes out
 * contiguous as [B, S] without a strided copy. */
static int qa_head(bert *m)
{
    const int T = m->cur_b * m->cur_s, H = m->cfg.hidden;
    const size_t hw = bert_head_param(m, 0);
    for (int i = 0; i < 2; i++) {
        mpx_arg y = mpx_a(m->logits[i], m->logits_t);
        MPX_TRY(fill_bias(m, mpx_at(bert_w(m, hw + 1), (size_t)i), y, (size_t)T, 1));
        MPX_TRY(bert_gemm(m, 0, 1, T, 1, H, 1.0f, bert_mat_of(bert_last_hidden(m), H),
                          bert_mat_of(mpx_at(bert_w(m, hw), (size_t)i * H), H), 1.0f, bert_mat_of(y, 1), 1));
    }
    return 0;
}

static int loss(bert *m, double *out)
{
    const size_t B = (size_t)m->cur_b, S = (size_t)m->cur_s;
    double l[2];
    for (int i = 0; i < 2; i++) {
        mpx_arg lg = mpx_a(m->logits[i], m->logits_t);
        if (lg.t != m->dt_loss) {
            mpx_arg c = mpx_a(m->loss_logits[i], m->dt_loss);
            MPX_TRY(m->ops->cast(m->be, lg, c, B * S));
            lg = c;
        }
        MPX_TRY(m->ops->cross_entropy(m->be, lg, m->labels[i], B, S, &l[i], mpx_a(NULL, m->dt_loss), 1.0f));
    }
    *out = 0.5 * (l[0] + l[1]);
    /* (start_loss + end_loss) / 2 of two 16-bit scalars is a 16-bit scalar */
    if (m->dt_loss == MPX_BF16) *out = mpx_round_bf16(mpx_round_bf16((float)(l[0] + l[1])) * 0.5f);
    else if (m->dt_loss == MPX_F16) *out = mpx_round_f16(mpx_round_f16((float)(l[0] + l[1])) * 0.5f);
    return 0;
}

int bert_forward(bert *m, const mpx_batch *batch, mpx_forward_out *out)
{
    if (!m->bound) return MPX_FAIL(m->env, "forward before bind");
    m->has_forward = 0;
    if (m->forward_only && batch->training)
        return MPX_FAIL(m->env, "a training batch on a model bound forward-only (no grads, no dropout buffers)");
    MPX_TRY(read_inputs(m, batch));
    m->drop_on = batch->training != 0;
    m->tick = batch->tick;
    m->logits_t = batch->training ? m->dt_act : m->dt_eval;
    /* one layer's weights at a time (gathered and released under zero/stage3) */
    MPX_TRY(bert_enter_layer(m, -1));
    MPX_TRY(bert_leave_layer(m, embeddings(m)));
    mpx_arg x = mpx_a(m->x0, m->dt_ln);
    int rc = 0;
    for (int l = 0; l < m->cfg.layers && !rc; l++) {
        m->dt_gemm = bert_param_gemm(m, bert_layer_param(l, L_Q_W), 0);
        if (!(rc = bert_enter_layer(m, l))) rc = bert_leave_layer(m, encoder_layer(m, l, x));
        x = mpx_a(m->act[l].x2, m->dt_ln);
    }
    m->dt_gemm = bert_param_gemm(m, bert_head_param(m, 0), 0);
    if (!rc && !(rc = bert_enter_layer(m, m->cfg.layers))) rc = bert_leave_layer(m, qa_head(m));
    m->dt_gemm = m->dt_gemm_fwd;
    MPX_TRY(rc);
    out->loss = NAN;
    if (m->has_labels) MPX_TRY(loss(m, &out->loss));
    out->n_outputs = 2;
    out->names[0] = "start_logits";
    out->names[1] = "end_logits";
    out->outputs[0] = mpx_a(m->logits[0], m->logits_t);
    out->outputs[1] = mpx_a(m->logits[1], m->logits_t);
    out->rows = (size_t)m->cur_b;
    out->cols = (size_t)m->cur_s;
    m->has_forward = 1;
    return 0;
}
