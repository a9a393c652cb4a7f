/* Backward of bert_forward for the batch of the last forward: the gradient of
 * loss * loss_scale written (or added, accumulate != 0) into the flat grads buffer.
 * Every activation gradient has the dtype of its forward tensor; dropout masks are
 * regenerated from the same Philox position (site, tick) as in forward, never stored;
 * the dropped attention probabilities are the ones forward kept (bert_bind.c). */
#include "bert.h"

#include <math.h>

/* dW [out, in] (+)= dy^T x and db [out] (+)= sum_rows dy, into the grads `gw`, `gb`.
 * Under amp they are what autocast makes them: the matmul and the sum output 16-bit
 * values (one rounding each), which AccumulateGrad widens into the fp32 .grad. */
static int weight_grads(bert *m, mpx_arg dy, mpx_arg x, mpx_arg gw, mpx_arg gb, int T, int in, int out, int acc)
{
    if (!m->widen_grads) {
        MPX_TRY(bert_gemm(m, 1, 0, out, in, T, 1.0f, bert_mat_of(dy, out), bert_mat_of(x, in),
                          acc ? 1.0f : 0.0f, bert_mat_of(gw, in), 1));
        return m->ops->bias_grad(m->be, dy, gb, (size_t)T, (size_t)out, acc);
    }
    mpx_arg low = mpx_a(m->wgrad_low, m->dt_act);
    MPX_TRY(bert_gemm(m, 1, 0, out, in, T, 1.0f, bert_mat_of(dy, out), bert_mat_of(x, in), 0.0f, bert_mat_of(low, in), 1));
    MPX_TRY(m->ops->axpby(m->be, 1.0f, low, acc ? 1.0f : 0.0f, gw, (size_t)out * in));
    MPX_TRY(m->ops->bias_grad(m->be, dy, low, (size_t)T, (size_t)out, 0));
    return m->ops->axpby(m->be, 1.0f, low, acc ? 1.0f : 0.0f, gb, (size_t)out);
}

/* dx [T, in] (beta: add to it) = dy W; dW (+)= dy^T x; db (+)= sum_rows dy. */
static int linear_bwd(bert *m, mpx_arg dy, mpx_arg x, size_t w, mpx_arg dx, float beta_dx,
                      int T, int in, int out, int acc)
{
    if (dx.p)
        MPX_TRY(bert_gemm(m, 0, 0, T, in, out, 1.0f, bert_mat_of(dy, out), bert_mat_of(bert_w(m, w), in),
                          beta_dx, bert_mat_of(dx, in), 1));
    return weight_grads(m, dy, x, bert_g(m, w), bert_g(m, w + 1), T, in, out, acc);
}

/* The gradient of a dropout's input, of dtype `t`, from `dy` (the output's gradient,
 * possibly of the residual dtype): a cast when the dtypes differ, then the mask. */
static int dropout_bwd(bert *m, mpx_arg dy, mpx_dtype t, void *cast_buf, void *out_buf, size_t n,
                       float p, uint32_t site, mpx_arg *dx)
{
    if (dy.t != t) {
        MPX_TRY(m->ops->cast(m->be, dy, mpx_a(cast_buf, t), n));
        dy = mpx_a(cast_buf, t);
    }
    *dx = dy;
    if (!m->drop_on || p <= 0.0f) return 0;
    mpx_rng rng = { m->env->host->seed(m->env), site, m->tick, 0 };
    *dx = mpx_a(out_buf, t);
    return m->ops->dropout_bwd(m->be, dy, *dx, n, p, rng);
}

static int ln_bwd(bert *m, mpx_arg dy, void *x, size_t w, const float *mean, const float *rstd, int acc)
{
    const size_t T = (size_t)m->cur_b * m->cur_s, H = (size_t)m->cfg.hidden;
    return m->ops->layernorm_bwd(m->be, dy, mpx_a(x, m->dt_res), bert_w(m, w), mean, rstd,
                                 mpx_a(m->gr, m->dt_res), bert_g(m, w), bert_g(m, w + 1), T, H, 0, acc);
}

/* ---- head ---- */

static int head_bwd(bert *m, float loss_scale, int acc)
{
    const int T = m->cur_b * m->cur_s, H = m->cfg.hidden;
    const size_t hw = bert_head_param(m, 0);
    const mpx_arg xl = bert_last_hidden(m), gx = mpx_a(m->gx, m->dt_ln);
    for (int i = 0; i < 2; i++) {
        mpx_arg lg = m->logits_t == m->dt_loss ? mpx_a(m->logits[i], m->dt_loss) : mpx_a(m->loss_logits[i], m->dt_loss);
        /* the loss's gradient reaches the head through the cast of the logits to the loss
         * dtype: in the logits' (act) dtype, one rounding */
        mpx_arg dl = mpx_a(m->dlogits[i], m->dt_act);
        double unused;   /* forward returned the loss: a backend that can skips it (ABI 1.18), and its wait */
        const int no_loss = MPX_OPS_HAS(m->ops, flags) && (m->ops->flags & MPX_OPS_LOSS_OPTIONAL);
        MPX_TRY(m->ops->cross_entropy(m->be, lg, m->labels[i], (size_t)m->cur_b, (size_t)m->cur_s,
                                      no_loss ? NULL : &unused, dl, 0.5f * loss_scale));
        MPX_TRY(bert_gemm(m, 0, 0, T, H, 1, 1.0f, bert_mat_of(dl, 1), bert_mat_of(mpx_at(bert_w(m, hw), (size_t)i * H), H),
                          i ? 1.0f : 0.0f, bert_mat_of(gx, H), 1));
        MPX_TRY(weight_grads(m, dl, xl, mpx_at(bert_g(m, hw), (size_t)i * H), mpx_at(bert_g(m, hw + 1), (size_t)i),
                             T, H, 1, acc));
    }
    /* qa_outputs' input gradient is one matmul over both rows (K = 2, fp32 accumulation)
     * whose output is act-dtype; a wider gx (amp's fp32 layernorm) gets it widened */
    if (gx.t != m->dt_act) {
        mpx_arg low = mpx_a(m->ga, m->dt_act);
        MPX_TRY(m->ops->cast(m->be, gx, low, (size_t)T * H));
        MPX_TRY(m->ops->cast(m->be, low, gx, (size_t)T * H));
    }
    return 0;
}

/* ---- attention ---- */

/* dPd = dctx V^T and dV = Pd^T dctx, per example, batched over heads. */
static int attention_context_bwd(bert *m, const bert_layer_act *a, mpx_arg pd, mpx_arg dpd)
{
    const int S = m->cur_s, H = m->cfg.hidden, NH = m->cfg.heads, D = H / NH;
    const size_t SH = (size_t)S * H, SS = (size_t)S * S;
    for (int b = 0; b < m->cur_b; b++) {
        bert_mat dctx = { mpx_at(mpx_a(m->gctx, m->dt_act), b * SH), H, D };
        bert_mat v = { mpx_at(mpx_a(a->v, m->dt_act), b * SH), H, D };
        bert_mat dp = { mpx_at(dpd, b * NH * SS), S, (long long)SS };
        bert_mat p = { mpx_at(pd, b * NH * SS), S, (long long)SS };
        bert_mat dv = { mpx_at(mpx_a(m->gv, m->dt_act), b * SH), H, D };
        MPX_TRY(bert_gemm(m, 0, 1, S, S, D, 1.0f, dctx, v, 0.0f, dp, NH));
        MPX_TRY(bert_gemm(m, 1, 0, S, D, S, 1.0f, p, dctx, 0.0f, dv, NH));
    }
    return 0;
}

/* dQ = dS K / sqrt(D) and dK = dS^T Q / sqrt(D). */
static int attention_scores_bwd(bert *m, const bert_layer_act *a, mpx_arg ds)
{
    const int S = m->cur_s, H = m->cfg.hidden, NH = m->cfg.heads, D = H / NH;
    const size_t SH = (size_t)S * H, SS = (size_t)S * S;
    const float scale = 1.0f / sqrtf((float)D);
    for (int b = 0; b < m->cur_b; b++) {
        bert_mat dsm = { mpx_at(ds, b * NH * SS), S, (long long)SS };
        bert_mat q = { mpx_at(mpx_a(a->q, m->dt_act), b * SH), H, D };
        bert_mat k = { mpx_at(mpx_a(a->k, m->dt_act), b * SH), H, D };
        bert_mat dq = { mpx_at(mpx_a(m->gq, m->dt_act), b * SH), H, D };
        bert_mat dk = { mpx_at(mpx_a(m->gk, m->dt_act), b * SH), H, D };
        MPX_TRY(bert_gemm(m, 0, 0, S, D, S, scale, dsm, k, 0.0f, dq, NH));
        MPX_TRY(bert_gemm(m, 1, 0, S, D, S, scale, dsm, q, 0.0f, dk, NH));
    }
    return 0;
}

/* From gctx (the context's gradient) to gq, gk, gv. */
static int attention_core_bwd(bert *m, int l)
{
    const bert_layer_act *a = &m->act[l];
    if (m->fused_attn) {   /* the same bits as the ops below, a head at a time */
        mpx_attention at = bert_attention(m, a, l);
        at.dctx = mpx_a(m->gctx, m->dt_act);
        at.dq = mpx_a(m->gq, m->dt_act);
        at.dk = mpx_a(m->gk, m->dt_act);
        at.dv = mpx_a(m->gv, m->dt_act);
        return m->ops->attention_bwd(m->be, &at);
    }
    const size_t n_probs = (size_t)m->cur_b * m->cur_s * m->cur_s * m->cfg.heads;
    const int drop = m->drop_on && m->p_attn > 0.0f;
    mpx_arg probs = mpx_a(a->probs, m->dt_sm), pd = drop ? mpx_a(a->pd, m->dt_sm) : probs;
    mpx_rng rng = { m->env->host->seed(m->env), bert_site(l, S_ATTN_PROBS), m->tick, 0 };
    mpx_arg g1 = mpx_a(m->gp1, m->dt_sm), dp = g1;
    MPX_TRY(attention_context_bwd(m, a, pd, g1));
    if (drop && bert_fused_attn_dropout(m)) {   /* the same bits as the two ops below */
        mpx_arg ds = mpx_a(m->gp2, m->dt_act);
        MPX_TRY(m->ops->dropout_softmax_bwd(m->be, g1, probs, ds, n_probs / (size_t)m->cur_s,
                                            (size_t)m->cur_s, 1.0f, m->p_attn, rng));
        return attention_scores_bwd(m, a, ds);
    }
    if (drop) {
        dp = mpx_a(m->gp2, m->dt_sm);
        MPX_TRY(m->ops->dropout_bwd(m->be, g1, dp, n_probs, m->p_attn, rng));
    }
    mpx_arg ds = mpx_a(dp.p == m->gp1 ? m->gp2 : m->gp1, m->dt_act);
    MPX_TRY(m->ops->softmax_bwd(m->be, dp, probs, ds, n_probs / (size_t)m->cur_s, (size_t)m->cur_s, 1.0f));
    return attention_scores_bwd(m, a, ds);
}

/* ---- one layer: gx holds the gradient of its output, then of its input ---- */

static int ffn_bwd(bert *m, int l, int acc)
{
    const bert_layer_act *a = &m->act[l];
    const int T = m->cur_b * m->cur_s, H = m->cfg.hidden, I = m->cfg.inter;
    const size_t n = (size_t)T * H;
    mpx_arg df2, gff = mpx_a(m->gff, m->dt_act), gff2 = mpx_a(m->gff2, m->dt_act);
    MPX_TRY(ln_bwd(m, mpx_a(m->gx, m->dt_ln), a->r2, bert_layer_param(l, L_LN2_W), a->mean2, a->rstd2, acc));
    MPX_TRY(dropout_bwd(m, mpx_a(m->gr, m->dt_res), m->dt_act, m->ga, m->gb, n, m->p_hidden,
                        bert_site(l, S_FFN_OUT), &df2));
    MPX_TRY(linear_bwd(m, df2, mpx_a(a->gel, m->dt_act), bert_layer_param(l, L_FO_W), gff, 0.0f, T, I, H, acc));
    MPX_TRY(m->ops->gelu_bwd(m->be, gff, mpx_a(a->ff1, m->dt_act), gff2, (size_t)T * I));
    mpx_arg dx1 = mpx_a(m->gq, m->dt_act);
    MPX_TRY(linear_bwd(m, gff2, mpx_a(a->x1, m->dt_ln), bert_layer_param(l, L_FI_W), dx1, 0.0f, T, H, I, acc));
    return m->ops->add(m->be, dx1, mpx_a(m->gr, m->dt_res), mpx_a(m->gx, m->dt_ln), n);
}

/* The backward of Q, K and V's linear layers into dx (their three input gradients summed
 * in that order): linear_bwd three times, or, when bert_qkv_spacing allows (and autocast
 * does not widen the weight gradients one tensor at a time), the three weight gradients
 * as one batched GEMM (the input at stride 0), the same arithmetic element for element. */
static int qkv_bwd(bert *m, int l, mpx_arg x, mpx_arg dx, int acc)
{
    const int T = m->cur_b * m->cur_s, H = m->cfg.hidden;
    const size_t w[3] = { bert_layer_param(l, L_Q_W), bert_layer_param(l, L_K_W), bert_layer_param(l, L_V_W) };
    const mpx_arg dy[3] = { mpx_a(m->gq, m->dt_act), mpx_a(m->gk, m->dt_act), mpx_a(m->gv, m->dt_act) };
    const long long sw = bert_qkv_spacing(m, l), sd = bert_spacing3(m->gq, m->gk, m->gv, mpx_dtype_size(m->dt_act));
    if (!sw || !sd || m->widen_grads) {
        for (int i = 0; i < 3; i++) MPX_TRY(linear_bwd(m, dy[i], x, w[i], dx, i ? 1.0f : 0.0f, T, H, H, acc));
        return 0;
    }
    for (int i = 0; i < 3; i++)
        MPX_TRY(bert_gemm(m, 0, 0, T, H, H, 1.0f, bert_mat_of(dy[i], H), bert_mat_of(bert_w(m, w[i]), H),
                          i ? 1.0f : 0.0f, bert_mat_of(dx, H), 1));
    bert_mat A = { dy[0], H, sd }, B = bert_mat_of(x, H), C = { bert_g(m, w[0]), H, sw };
    MPX_TRY(bert_gemm(m, 1, 0, H, H, T, 1.0f, A, B, acc ? 1.0f : 0.0f, C, 3));
    for (int i = 0; i < 3; i++) MPX_TRY(m->ops->bias_grad(m->be, dy[i], bert_g(m, w[i] + 1), (size_t)T, (size_t)H, acc));
    return 0;
}

static int attention_bwd(bert *m, int l, mpx_arg x, int acc)
{
    const bert_layer_act *a = &m->act[l];
    const int T = m->cur_b * m->cur_s, H = m->cfg.hidden;
    const size_t n = (size_t)T * H;
    mpx_arg da, dx = mpx_a(m->gb, m->dt_act);
    MPX_TRY(ln_bwd(m, mpx_a(m->gx, m->dt_ln), a->r1, bert_layer_param(l, L_LN1_W), a->mean1, a->rstd1, acc));
    MPX_TRY(dropout_bwd(m, mpx_a(m->gr, m->dt_res), m->dt_act, m->ga, m->gb, n, m->p_hidden,
                        bert_site(l, S_ATTN_OUT), &da));
    MPX_TRY(linear_bwd(m, da, mpx_a(a->ctx, m->dt_act), bert_layer_param(l, L_AO_W),
                       mpx_a(m->gctx, m->dt_act), 0.0f, T, H, H, acc));
    MPX_TRY(attention_core_bwd(m, l));
    MPX_TRY(qkv_bwd(m, l, x, dx, acc));
    return m->ops->add(m->be, dx, mpx_a(m->gr, m->dt_res), mpx_a(m->gx, m->dt_ln), n);
}

/* ---- embeddings ---- */

static int embeddings_bwd(bert *m, int acc)
{
    const size_t T = (size_t)m->cur_b * m->cur_s, H = (size_t)m->cfg.hidden;
    mpx_arg dx0n;
    MPX_TRY(dropout_bwd(m, mpx_a(m->gx, m->dt_ln), m->dt_ln, m->ga, m->gb, T * H, m->p_hidden,
                        bert_site(-1, 0), &dx0n));
    MPX_TRY(ln_bwd(m, dx0n, m->emb, P_EMB_LN_W, m->mean0, m->rstd0, acc));
    const size_t tables[3] = { P_WORD, P_POS, P_TYPE };
    const int32_t *ids[3] = { m->in_ids, m->pos_ids, m->in_seg };
    const size_t rows[3] = { (size_t)m->cfg.vocab, (size_t)m->cfg.max_pos, (size_t)m->cfg.type_vocab };
    mpx_arg gr = mpx_a(m->gr, m->dt_res);
    for (int i = 0; i < 3; i++) {
        if (!acc)
            MPX_TRY(m->ops->fill_zero(m->be, bert_g(m, tables[i]).p, bert_numel(m, tables[i]) * mpx_dtype_size(m->dt_grad)));
        MPX_TRY(m->ops->embedding_bwd(m->be, ids[i], T, gr, bert_g(m, tables[i]), rows[i], H));
    }
    /* nn.Embedding(padding_idx = pad_token_id), as Hugging Face builds BERT: the padding
     * row is never updated, so its gradient is zero (with or without accumulation).
     * BingBertSquad's NVIDIA modeling has no padding_idx: off by default. */
    if (!m->freeze_pad_row || m->cfg.pad_id < 0) return 0;
    mpx_arg row = mpx_at(bert_g(m, P_WORD), (size_t)m->cfg.pad_id * H);
    return m->ops->fill_zero(m->be, row.p, H * mpx_dtype_size(m->dt_grad));
}

static int backward_all(bert *m, const mpx_batch *batch, float loss_scale, int accumulate)
{
    if (m->forward_only) return MPX_FAIL(m->env, "backward on a model bound forward-only (no grads)");
    if (!m->has_forward || !m->has_labels)
        return MPX_FAIL(m->env, "backward needs a forward with start_positions and end_positions first");
    if (batch && batch->tick != m->tick)
        return MPX_FAIL(m->env, "backward for tick %u but the last forward was tick %u", batch->tick, m->tick);
    const int acc = accumulate != 0;
    /* each layer's weights gathered again for its backward under zero/stage3 */
    m->dt_gemm = bert_param_gemm(m, bert_head_param(m, 0), 1);
    MPX_TRY(bert_enter_layer(m, m->cfg.layers));
    MPX_TRY(bert_leave_layer(m, head_bwd(m, loss_scale, acc)));
    for (int l = m->cfg.layers - 1; l >= 0; l--) {
        mpx_arg x = l ? mpx_a(m->act[l - 1].x2, m->dt_ln) : mpx_a(m->x0, m->dt_ln);
        m->dt_gemm = bert_param_gemm(m, bert_layer_param(l, L_Q_W), 1);
        MPX_TRY(bert_enter_layer(m, l));
        int rc = ffn_bwd(m, l, acc);
        if (!rc) rc = attention_bwd(m, l, x, acc);
        MPX_TRY(bert_leave_layer(m, rc));
    }
    MPX_TRY(bert_enter_layer(m, -1));
    return bert_leave_layer(m, embeddings_bwd(m, acc));
}

/* The backward GEMMs compute in the policy's grad_gemm_in (E5M2 for fp8 HYBRID), or
 * what its per-parameter choice gave each layer (backward_all sets them). */
int bert_backward(bert *m, const mpx_batch *batch, float loss_scale, int accumulate)
{
    m->dt_gemm = m->dt_gemm_bwd;
    int rc = backward_all(m, batch, loss_scale, accumulate);
    m->dt_gemm = m->dt_gemm_fwd;
    return rc;
}
