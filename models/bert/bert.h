/* bert-qa internals shared by the plugin's files.
 *
 *   bert_config.c      config.json -> bert_config
 *   safetensors.c      the safetensors reader/writer (safetensors.h)
 *   bert_params.c      the parameter table and the dropout sites
 *   bert_checkpoint.c  init_weights (checkpoint, seeded init) and save
 *   bert_bind.c        activation and workspace buffers (role scratch)
 *   bert_forward.c     forward: embeddings, encoder layers, QA head, loss
 *   bert_backward.c    backward of all of it into the flat grads buffer
 *   bert_plugin.c      descriptor, options, vtable
 */
#ifndef MPX_BERT_H
#define MPX_BERT_H

#include <math.h>

#include <mpx/mpx.h>

typedef struct bert_config {
    int vocab, hidden, layers, heads, inter, max_pos, type_vocab;
    int pad_id;               /* pad_token_id: its embedding row gets no gradient (-1: none) */
    double ln_eps, hidden_dropout, attn_dropout, init_range;
    char *text;               /* config.json as read, written back by save */
    char *path;               /* for messages */
} bert_config;

int bert_config_read(mpx_env *env, const char *path, bert_config *cfg);
void bert_config_free(bert_config *cfg);

/* Parameter indices: 5 embedding tensors, 16 per layer, 2 for the QA head. */
enum {
    P_WORD = 0, P_POS, P_TYPE, P_EMB_LN_W, P_EMB_LN_B, P_EMB_COUNT
};
enum {
    L_Q_W = 0, L_Q_B, L_K_W, L_K_B, L_V_W, L_V_B, L_AO_W, L_AO_B, L_LN1_W, L_LN1_B,
    L_FI_W, L_FI_B, L_FO_W, L_FO_B, L_LN2_W, L_LN2_B, L_COUNT
};
/* Dropout sites: one on the embeddings, three per layer. */
enum { S_ATTN_PROBS = 0, S_ATTN_OUT, S_FFN_OUT, S_PER_LAYER };

#define BERT_DROPOUT_SITE_BASE 0x100u   /* dropout site k has id BASE + k */
#define BERT_PARAM_SITE_BASE 0x10000u   /* parameter i has site BASE + i */

/* Activations kept for backward, one set per layer. */
typedef struct bert_layer_act {
    void *q, *k, *v, *ctx;    /* [T, H] act */
    void *probs;              /* [B, NH, S, S] softmax dtype, before dropout */
    void *pd;                 /* [B, NH, S, S] softmax dtype, after dropout (kept for
                                 backward when attention dropout is on; else NULL) */
    uint32_t *keep;           /* with the backend's attention op and attention dropout on:
                                 its mask, B NH S ceil(S / 32) words (mpx_attention.keep) */
    void *r1, *r2;            /* [T, H] residual dtype: layernorm inputs */
    void *x1, *x2;            /* [T, H] layernorm dtype: outputs */
    float *mean1, *rstd1, *mean2, *rstd2;
    void *ff1, *gel;          /* [T, I] act: before and after GELU */
} bert_layer_act;

typedef struct bert {
    mpx_env *env;
    bert_config cfg;
    char *ckpt_dir, *extra_tensors;
    int random_init;
    int freeze_pad_row;       /* zero the pad_token_id row's gradient (HF padding_idx) */
    float p_hidden, p_attn;

    size_t n_params;
    mpx_param_info *params;
    size_t n_sites;
    mpx_site *sites;
    char *names;              /* one block holding every param and site name */

    /* bound state */
    const mpx_ops *ops;
    void *be;
    int bound;
    mpx_dtype dt_gemm_fwd, dt_gemm_bwd; /* GEMM compute dtypes; dt_gemm is the one in use */
    mpx_dtype *pg;         /* [n_params][2] per-parameter GEMM dtypes from the host (ABI 1.3), or NULL */
    int forward_only;         /* bound with no grads (mpx eval): see bert_bind.c */
    int fused_attn;           /* the backend's attention_fwd/_bwd run the attention core (bind) */
    mpx_dtype dt_w, dt_gemm, dt_act, dt_ln, dt_sm, dt_loss, dt_res, dt_grad, dt_eval;
    mpx_arg W, G;
    size_t *off;
    const mpx_weight_gather *wg; /* zero/stage3: weights gathered a layer at a time (ABI 1.7), else NULL */
    size_t w_base;            /* element of the flat weights where W starts (gathered: its range's first) */
    int max_b, max_s;

    void **scratch;           /* every scratch allocation, for release */
    size_t n_scratch, cap_scratch;

    bert_layer_act *act;
    void *emb, *x0n, *x0;     /* [T, H]: embedding sum (res), LN out, dropout out (ln) */
    float *mean0, *rstd0;
    void *ta, *tb;            /* [T, H] act temporaries */
    void *gp1, *gp2;          /* [B, NH, S, S] 4-byte elements: scores / their grads */
    void *gx, *gr, *ga, *gb, *gq, *gk, *gv, *gctx; /* [T, H] grads */
    void *gff, *gff2;         /* [T, I] grads */
    void *logits[2];          /* [T] start / end, as output (act or eval dtype) */
    void *loss_logits[2];     /* [T] in the loss dtype when that differs */
    void *dlogits[2];         /* [T] act dtype: the logits' gradient as it enters the head */
    /* amp (fp32 grads, 16-bit activations): autocast's weight and bias gradients are
     * 16-bit matmul / sum outputs, widened into the fp32 grads; this holds one tensor's */
    int widen_grads;
    void *wgrad_low;          /* [largest weight tensor] act dtype, or NULL */
    float *mask;              /* [B, S] additive fp32 */
    int32_t *pos_ids;         /* [B, S] backend */
    int32_t *h_ids, *h_pos;   /* host copies for validation and position ids */

    /* the last forward */
    int cur_b, cur_s, drop_on, has_labels, has_forward;
    mpx_dtype logits_t;
    uint32_t tick;
    const int32_t *labels[2];
    const int32_t *in_ids, *in_seg;
} bert;

/* bert_params.c */
int bert_params_build(bert *m);
void bert_params_free(bert *m);
size_t bert_layer_param(int layer, int which);
size_t bert_head_param(const bert *m, int which); /* 0 weight, 1 bias */
int bert_find_param(const bert *m, const char *name);

/* bert_checkpoint.c */
/* Shapes in the checkpoint's safetensors headers against config.json's, nothing read
 * or allocated beyond the headers. */
int bert_check_checkpoint(const bert *m);
int bert_init_weights(bert *m, float *flat, const size_t *offsets, uint64_t seed);
int bert_save(bert *m, const char *dir, const float *flat, const size_t *offsets);
void bert_init_normal(float *dst, size_t n, float std, uint64_t seed, uint32_t site);

/* bert_bind.c */
int bert_bind(bert *m, const mpx_model_bind *b, int max_batch, int max_seq);
void bert_unbind(bert *m);

/* ZeRO-3 (zero/stage3, ABI 1.7): the parameters of layer l (-1: the embeddings; l =
 * layers: the QA head) readable through bert_w until bert_leave_layer, which returns rc
 * or the release's failure. With whole weights (no gather hook) neither does anything. */
int bert_enter_layer(bert *m, int l);
int bert_leave_layer(bert *m, int rc);
int bert_set_weight_gather(bert *m, const mpx_weight_gather *g);

/* bert_forward.c / bert_backward.c */
int bert_forward(bert *m, const mpx_batch *batch, mpx_forward_out *out);
int bert_backward(bert *m, const mpx_batch *batch, float loss_scale, int accumulate);

/* GEMM helpers shared by forward and backward (bert_forward.c). C = alpha op(A) op(B) + beta C
 * with the precision's GEMM compute dtype; strides for batched calls (batch = 1: plain). */
typedef struct bert_mat { mpx_arg p; int ld; long long stride; } bert_mat;
/* The GEMM dtype the policy chose for parameter w (forward or backward), or the default. */
static inline mpx_dtype bert_param_gemm(const bert *m, size_t w, int backward)
{
    return m->pg ? m->pg[2 * w + (backward ? 1 : 0)] : backward ? m->dt_gemm_bwd : m->dt_gemm_fwd;
}
int bert_gemm(bert *m, int ta, int tb, int M, int N, int K, float alpha, bert_mat a, bert_mat b,
              float beta, bert_mat c, int batch);
static inline bert_mat bert_mat_of(mpx_arg p, int ld) { bert_mat r = { p, ld, 0 }; return r; }
/* y[T, out] = x[T, in] W^T (+ bias) with W [out, in] parameter `w` (bias `w + 1`) */
int bert_linear_fwd(bert *m, mpx_arg x, size_t w, mpx_arg y, int T, int in, int out);
/* Layer l's Q, K and V as one batched GEMM (batch 3, the input at stride 0): the spacing,
 * in elements, of their weights in the flat buffers (the same for the biases and the
 * gradients, which share the offsets), or 0 when the three do not lie at one spacing or
 * the layer's GEMMs compute in a number format (scaled per tensor: one call each). The
 * batched call is the three calls' arithmetic element for element; on the cpu backend the
 * same bits (tests/bitwise-runs.sh), on cuda cuBLAS may pick another kernel for it. */
long long bert_qkv_spacing(const bert *m, int l);
/* Elements from a to b if b - a = c - b (a, b, c: buffers of `es`-byte elements), else 0. */
static inline long long bert_spacing3(const void *a, const void *b, const void *c, size_t es)
{
    const char *x = a, *y = b, *z = c;
    if (!x || y <= x || z - y != y - x || (size_t)(y - x) % es) return 0;
    return (long long)((size_t)(y - x) / es);
}
/* The last layer's output (the embeddings' when there are no layers), layernorm dtype. */
mpx_arg bert_last_hidden(const bert *m);
/* Dropout site id of layer l's place s (S_*), or of the embeddings (l = -1). */
static inline uint32_t bert_site(int l, int s)
{
    return BERT_DROPOUT_SITE_BASE + (l < 0 ? 0u : 1u + (uint32_t)l * S_PER_LAYER + (uint32_t)s);
}

/* The attention dropout is on and the backend fuses it with the softmax (ABI 1.10, the
 * same bits as the two ops; the non-finite locate pass clears the fused ops so that it
 * sees each op alone). */
static inline int bert_fused_attn_dropout(const bert *m)
{
    return m->drop_on && m->p_attn > 0.0f && MPX_OPS_HAS(m->ops, dropout_softmax_bwd) &&
           m->ops->softmax_dropout_fwd && m->ops->dropout_softmax_bwd;
}

/* The attention core of layer l as one mpx_attention (ABI 1.11), the fields forward and
 * backward share; the caller sets probs (and the gradients). */
static inline mpx_attention bert_attention(const bert *m, const bert_layer_act *a, int l)
{
    const int H = m->cfg.hidden, NH = m->cfg.heads;
    mpx_attention at = {
        .size = sizeof at, .batch = m->cur_b, .heads = NH, .seq = m->cur_s, .head_dim = H / NH, .ld = H,
        .q = mpx_a(a->q, m->dt_act), .k = mpx_a(a->k, m->dt_act), .v = mpx_a(a->v, m->dt_act),
        .ctx = mpx_a(a->ctx, m->dt_act), .mask = mpx_a(m->mask, MPX_F32), .probs = mpx_a(a->probs, m->dt_sm),
        .scores_t = m->dt_act, .ds_t = m->dt_act, .compute = m->dt_gemm,
        .scale = 1.0f / sqrtf((float)(H / NH)), .p = m->drop_on ? m->p_attn : 0.0f,
        .rng = { m->env->host->seed(m->env), bert_site(l, S_ATTN_PROBS), m->tick, 0 },
        .keep = a->keep,
    };
    return at;
}

/* Shorthands used by forward and backward. */
static inline mpx_arg bert_w(const bert *m, size_t p) { return mpx_at(m->W, m->off[p] - m->w_base); }
static inline mpx_arg bert_g(const bert *m, size_t p) { return mpx_at(m->G, m->off[p]); }
static inline size_t bert_numel(const bert *m, size_t p)
{
    size_t n = 1;
    for (int d = 0; d < m->params[p].ndim; d++) n *= (size_t)m->params[p].shape[d];
    return n;
}

#endif
