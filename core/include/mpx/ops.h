/* The op API: what a compute backend offers models, the optimizer path and the core.
 *
 * Every array argument is an mpx_arg: a backend pointer plus the dtype it is stored in.
 * Each op reads and writes the dtypes its caller names and accumulates internally in
 * fp32 (DESIGN, Numerics rules): a 16-bit input is widened exactly, every intermediate
 * is fp32, each output is rounded once, to nearest even, to its dtype. A GEMM is
 * "round inputs to `compute`, multiply-accumulate in fp32, round the output".
 * Layout is row-major throughout. Pointers are backend memory (host memory on the CPU
 * backend); host-side scalars (losses, norms, flags) are plain C pointers.
 * Ops return MPX_OK, or MPX_ERR_UNSUPPORTED for a dtype combination they lack (with a
 * message through the host), never crash on one.
 * Append-only: new ops go at the end of mpx_ops.
 */
#ifndef MPX_OPS_H
#define MPX_OPS_H

#include "mpx/abi.h"

typedef struct mpx_arg {
    void *p;
    mpx_dtype t;
} mpx_arg;

static inline mpx_arg mpx_a(void *p, mpx_dtype t) { mpx_arg a = { p, t }; return a; }

/* Element i of an array of dtype t, as a pointer (for offsets into flat buffers). */
static inline mpx_arg mpx_at(mpx_arg a, size_t i)
{
    mpx_arg r = { (char *)a.p + i * mpx_dtype_size(a.t), a.t };
    return r;
}

/* C = alpha * op(A) · op(B) + beta * C, for `batch` matrices at the given strides
 * (elements). op(A) is m×k, op(B) is k×n, C is m×n, all row-major with leading
 * dimensions lda/ldb/ldc. Inputs are rounded to `compute` (MPX_F32, MPX_F16 or
 * MPX_BF16) before the fp32 multiply, so an fp32-stored weight can feed an fp16 GEMM
 * (autocast). With beta != 0 the old C is read in its dtype. */
typedef struct mpx_gemm {
    int trans_a, trans_b;
    int m, n, k;
    float alpha, beta;
    mpx_arg a; int lda; long long stride_a;
    mpx_arg b; int ldb; long long stride_b;
    mpx_arg c; int ldc; long long stride_c;
    int batch;            /* 1 for a plain GEMM */
    mpx_dtype compute;
} mpx_gemm;

/* Philox 4x32-10 stream position (DESIGN, Numerics rules): key = run seed; counter =
 * (element / 4 as 64 bits, site, step * accumulation_steps + micro_batch). `offset` is
 * the element index of the op's first element within the stream, so a tensor split in
 * pieces (ZeRO shards) draws the same numbers as the whole tensor. */
typedef struct mpx_rng {
    uint64_t seed;
    uint32_t site;
    uint32_t tick;        /* step * accumulation_steps + micro_batch */
    uint64_t offset;      /* element index of p[0] in the stream */
} mpx_rng;

typedef enum mpx_rounding {
    MPX_ROUND_NEAREST = 0,
    MPX_ROUND_STOCHASTIC = 1,
    MPX_ROUND_KAHAN = 2,
} mpx_rounding;

/* ---- ABI 1.11: self-attention's core in one op (mpx_ops.attention_fwd / _bwd) ----
 * Head h of example b uses the [seq, head_dim] blocks X_bh = X[b * seq + i, h * head_dim + c]
 * (rows ld apart) of q, k, v, ctx and of the gradients dq, dk, dv, dctx; probs and the
 * dropout stream are [batch, heads, seq, seq]. With G(ta, tb, alpha, A, B -> C) the gemm
 * op (batch 1, beta 0, compute `compute`, C in the named dtype), the two ops are exactly:
 *   fwd: S  = G(0, 1, scale, Q_bh, K_bh)                    in scores_t
 *        P  = softmax_fwd(S, mask, scale 1)                 in probs.t, kept in probs
 *        Pd = dropout_fwd(P, p, rng)                        in probs.t (P when p = 0)
 *        ctx_bh = G(0, 0, 1, Pd, V_bh)                      in ctx.t
 *   bwd: dPd = G(0, 1, 1, dctx_bh, V_bh)                    in probs.t
 *        dv_bh = G(1, 0, 1, Pd, dctx_bh)                    in dv.t (Pd from probs, as fwd)
 *        dS = softmax_bwd(dropout_bwd(dPd, p, rng), P, 1)   in ds_t (dropout_softmax_bwd's bits)
 *        dq_bh = G(0, 0, scale, dS, K_bh)                   in dq.t
 *        dk_bh = G(1, 0, scale, dS, Q_bh)                   in dk.t
 * fwd with probs.p NULL keeps nothing (an evaluation forward). mask: fp32 additive
 * [batch, seq], p NULL for none. Outputs must not overlap inputs. */
typedef struct mpx_attention {
    uint32_t size;                 /* sizeof(mpx_attention) of the caller */
    int batch, heads, seq, head_dim;
    int ld;                        /* row stride (elements) of q, k, v, ctx, dq, dk, dv, dctx */
    mpx_arg q, k, v, ctx;
    mpx_arg mask;
    mpx_arg probs;
    mpx_dtype scores_t, ds_t, compute;
    float scale, p;                /* the scores' scale (1 / sqrt(head_dim)), the dropout's p */
    mpx_rng rng;                   /* element i of [batch, heads, seq, seq] draws rng.offset + i */
    mpx_arg dctx, dq, dk, dv;      /* bwd only */
    /* Optional (NULL: none): batch * heads * seq * ((seq + 31) / 32) words for the dropout's
     * mask, in a layout of the backend's: fwd with p > 0 may fill it and bwd then read the
     * mask from it instead of drawing it from the stream again (the same mask). A bwd
     * with `keep` must follow the fwd that filled it, with the same shapes, p and rng. */
    uint32_t *keep;
} mpx_attention;

/* ---- ABI 1.4: the optimizer rules on backend memory ----
 * One piece of one tensor, every buffer backend memory at the piece's first element.
 * The arithmetic is the host optimizers' exactly (plugins/optimizer/): fp32 throughout,
 * the state read widened and written back rounded to nearest even in its dtype, the
 * fp32 update written to `update` (the host's apply_update then rounds it into the
 * weights or master, so rounding keeps its one owner).
 *   ADAM: L2 mode (!adam_w_mode): g += wd p;  m = b1 m + omb1 g;  v = b2 v + (omb2 g) g;
 *         u = (m / bc1) / (sqrt(v / bc2) + eps);  adam_w_mode: u += wd p;  update = neg_lr u
 *   SGD:  d = g + wd p (wd != 0);  momentum != 0: buf = first ? d : momentum buf + omd d,
 *         d = nesterov ? d + momentum buf : buf;  update = neg_lr d
 *   LAMB: m, v as ADAM;  update = m / (sqrt(v) + eps) + wd p (the raw update; the caller
 *         scales it by the trust ratio with `scale`); norms[0] = sum p², norms[1] = sum u²
 *         (host doubles, out). */
typedef enum mpx_fused_rule {
    MPX_FUSED_ADAM = 0,
    MPX_FUSED_SGD = 1,
    MPX_FUSED_LAMB = 2,
} mpx_fused_rule;

typedef struct mpx_fused_update {
    uint32_t size;            /* sizeof(mpx_fused_update) as the caller knows it */
    mpx_fused_rule rule;
    size_t n;                 /* elements of the piece */
    mpx_arg param;            /* fp32 master or the weights (fp32/fp16/bf16) */
    const float *grad;        /* fp32 */
    mpx_arg state[2];         /* fp32 or bf16; ADAM/LAMB: m, v; SGD: momentum buffer (if any) */
    float *update;            /* fp32 out */
    float weight_decay;
    float b1, b2, one_minus_b1, one_minus_b2, eps;   /* ADAM, LAMB */
    float bc1, bc2;                                  /* ADAM */
    float neg_lr;                                    /* ADAM, SGD */
    int adam_w_mode;                                 /* ADAM */
    float momentum, one_minus_dampening;             /* SGD */
    int nesterov, first_step;                        /* SGD */
    double norms[2];                                 /* LAMB, out */
    /* ABI 1.18 (read only when `size` covers it, and only by a backend whose flags have
     * MPX_OPS_FUSED_ADD_IN_PLACE): ADAM and SGD add their update into the fp32 `param`,
     * param = param + update in fp32 (apply_update's nearest into fp32, bit for bit), in
     * the same pass, and `update` is not written: the one-pass step. The caller sets it
     * only where the host granted MPX_STEP_ADD_IN_PLACE (mpx/optimizer.h); LAMB ignores
     * it (its trust ratio needs the whole update first). */
    int add_in_place;
} mpx_fused_update;

#define MPX_OPS_DEVICE_MEMORY 1u
/* ABI 1.15: the backend's GEMMs compute in, and its buffers store, the number formats of
 * ABI 1.2 (mpx/formats.h: fp8, fp6, fp4, MX and declared formats). A backend built
 * against 1.15 or later without this bit is refused, before anything runs, with a policy
 * that puts a format in any of its descriptor's dtypes or in a parameter's GEMM dtypes
 * (`mpx check`, `mpx plugins --compat`); one built earlier is taken to have them (it
 * refuses at the op). */
#define MPX_OPS_FORMATS 2u
/* ABI 1.18: fused_update honours mpx_fused_update.add_in_place (an older backend reads a
 * shorter struct and would leave param alone, so optimizers ask only with this bit). */
#define MPX_OPS_FUSED_ADD_IN_PLACE 4u
/* ABI 1.18: cross_entropy takes loss == NULL when only dlogits is wanted (a backward):
 * nothing is returned, and the backend need not wait for the device. */
#define MPX_OPS_LOSS_OPTIONAL 8u

typedef struct mpx_ops {
    uint32_t size;

    /* ---- memory ---- */
    void *(*alloc)(void *be, size_t bytes);          /* zero-filled; NULL on failure */
    void (*free)(void *be, void *p);
    int (*to_device)(void *be, void *dst, const void *src, size_t bytes);
    int (*to_host)(void *be, void *dst, const void *src, size_t bytes);
    int (*copy)(void *be, void *dst, const void *src, size_t bytes);
    int (*fill_zero)(void *be, void *p, size_t bytes);

    /* ---- elementwise ---- */
    /* y = x converted (round to nearest even) */
    int (*cast)(void *be, mpx_arg x, mpx_arg y, size_t n);
    /* y = a + b (residual add); y may alias a or b */
    int (*add)(void *be, mpx_arg a, mpx_arg b, mpx_arg y, size_t n);
    /* y = alpha * x + beta * y */
    int (*axpby)(void *be, float alpha, mpx_arg x, float beta, mpx_arg y, size_t n);
    /* x *= alpha in place */
    int (*scale)(void *be, mpx_arg x, float alpha, size_t n);

    /* ---- GEMM ---- */
    int (*gemm)(void *be, const mpx_gemm *g);

    /* y[r, c] = x[r, c] + bias[c]; y may alias x */
    int (*bias_add)(void *be, mpx_arg x, mpx_arg bias, mpx_arg y, size_t rows, size_t cols);
    /* dbias[c] (+)= sum_r dy[r, c]   (accumulate != 0 adds to the old value) */
    int (*bias_grad)(void *be, mpx_arg dy, mpx_arg dbias, size_t rows, size_t cols, int accumulate);

    /* ---- layernorm over the last dimension ---- */
    /* y = (x - mean) * rstd * gamma + beta; mean and rstd (fp32, `rows` each) are saved */
    int (*layernorm_fwd)(void *be, mpx_arg x, mpx_arg gamma, mpx_arg beta, mpx_arg y,
                         float *mean, float *rstd, size_t rows, size_t cols, float eps);
    /* dx (+)= ..., dgamma (+)= ..., dbeta (+)= ... */
    int (*layernorm_bwd)(void *be, mpx_arg dy, mpx_arg x, mpx_arg gamma,
                         const float *mean, const float *rstd,
                         mpx_arg dx, mpx_arg dgamma, mpx_arg dbeta,
                         size_t rows, size_t cols, int accumulate_dx, int accumulate_params);

    /* ---- attention softmax ---- */
    /* x: [batch, heads, rows, cols]; mask: fp32 additive, [batch, cols] (NULL p = none).
     * y = softmax(scale * x + mask[b, :]) over cols. */
    int (*softmax_fwd)(void *be, mpx_arg x, const mpx_arg mask, mpx_arg y,
                       size_t batch, size_t heads, size_t rows, size_t cols, float scale);
    /* dx = scale * y * (dy - sum_c dy * y) */
    int (*softmax_bwd)(void *be, mpx_arg dy, mpx_arg y, mpx_arg dx,
                       size_t n_rows, size_t cols, float scale);

    /* ---- GELU, erf form ---- */
    int (*gelu_fwd)(void *be, mpx_arg x, mpx_arg y, size_t n);
    int (*gelu_bwd)(void *be, mpx_arg dy, mpx_arg x, mpx_arg dx, size_t n);  /* dx = dy * gelu'(x) */

    /* ---- dropout: keep with probability 1 - p, scale kept by 1 / (1 - p).
     * The mask is regenerated from `rng` in backward, never stored. Element i draws
     * word e % 4 of Philox(counter = (e / 4, site, tick)) with e = rng.offset + i,
     * uniform u = (x >> 8) * 2^-24,
     * kept when u >= p. */
    int (*dropout_fwd)(void *be, mpx_arg x, mpx_arg y, size_t n, float p, mpx_rng rng);
    int (*dropout_bwd)(void *be, mpx_arg dy, mpx_arg dx, size_t n, float p, mpx_rng rng);

    /* ---- embeddings ---- */
    /* y[i, :] = table[ids[i], :]; ids are int32 backend memory, each in [0, table_rows) */
    int (*embedding_fwd)(void *be, const int32_t *ids, size_t n_ids, mpx_arg table,
                         size_t table_rows, size_t dim, mpx_arg y);
    /* dtable[ids[i], :] += dy[i, :] (scatter-add; repeated ids accumulate) */
    int (*embedding_bwd)(void *be, const int32_t *ids, size_t n_ids, mpx_arg dy,
                         mpx_arg dtable, size_t table_rows, size_t dim);

    /* ---- loss: cross-entropy over positions (start or end logits) ----
     * logits [rows, cols]; labels int32 [rows] in [0, cols). *loss = mean over rows
     * (computed with an fp32 log-sum-exp). If dlogits.p is non-NULL it receives
     * dscale * (softmax - onehot) / rows.
     * loss may be NULL (ABI 1.18) only where flags has MPX_OPS_LOSS_OPTIONAL: then dlogits
     * must be given, and nothing is written to the host.
     * With fp16/bf16 logits (ABI 1.1), as PyTorch's cross_entropy on a 16-bit tensor:
     * logp = round(x - lse) in the logits' dtype, *loss = round(mean(-logp[label])),
     * d = round(dscale / rows), dlogits = round(exp(logp) * d - onehot * d). */
    int (*cross_entropy)(void *be, mpx_arg logits, const int32_t *labels, size_t rows,
                         size_t cols, double *loss, mpx_arg dlogits, float dscale);

    /* ---- reductions (results to host) ---- */
    int (*sum_squares)(void *be, mpx_arg x, size_t n, double *out);  /* fp32 partials, double total */
    int (*count_nonfinite)(void *be, mpx_arg x, size_t n, size_t *out);

    /* ---- weight update (the host's apply_update) ----
     * w[i] = round(w[i] + u[i]) with `mode`; KAHAN keeps its compensation in `comp`
     * (same dtype as w): y = u - c; t = w + y; c = (t - w) - y; w = t, all in fp32
     * then stored. STOCHASTIC rounds with the Philox stream of `rng`. */
    int (*apply_update)(void *be, mpx_arg w, mpx_arg comp, const float *u, size_t n,
                        mpx_rounding mode, mpx_rng rng);

    /* ---- ABI 1.4 (read only when `size` covers them) ---- */

    /* MPX_OPS_* bits. MPX_OPS_DEVICE_MEMORY: backend memory is not host-addressable, so
     * a plugin must not dereference backend pointers (optimizers use fused_update).
     * MPX_OPS_FORMATS (ABI 1.15): the number formats run here (see its definition). */
    uint32_t flags;

    /* One optimizer piece on backend memory (see mpx_fused_update); NULL when the
     * backend has none (its memory is then host-addressable, and optimizers use their
     * host loops). */
    int (*fused_update)(void *be, mpx_fused_update *f);

    /* ---- ABI 1.10 (read only when `size` covers them; NULL when the backend has none,
     * and the caller then runs the two ops one after the other) ----
     * The attention probabilities' softmax and dropout in one pass over each row, bit
     * for bit the two ops in sequence: y = softmax_fwd(x, mask, scale) stored in y's
     * dtype, then yd = dropout_fwd(y as stored, p, rng) (softmax_fwd's shapes, dropout's
     * stream: element i of the [batch, heads, rows, cols] tensor draws rng.offset + i).
     * yd may be y, and y or yd may be x, when their dtypes are the same; otherwise the
     * three must not overlap. */
    int (*softmax_dropout_fwd)(void *be, mpx_arg x, const mpx_arg mask, mpx_arg y, mpx_arg yd,
                               size_t batch, size_t heads, size_t rows, size_t cols, float scale,
                               float p, mpx_rng rng);
    /* dx = softmax_bwd(dyd', y, scale) with dyd' = dropout_bwd(dyd, p, rng) rounded to
     * dyd's dtype, bit for bit the two ops in sequence. dx may be dyd when both have the
     * same dtype (the op refuses the same pointer with another dtype); otherwise dx must
     * not overlap dyd or y. */
    int (*dropout_softmax_bwd)(void *be, mpx_arg dyd, mpx_arg y, mpx_arg dx, size_t n_rows,
                               size_t cols, float scale, float p, mpx_rng rng);

    /* ---- ABI 1.11 (read only when `size` covers them; NULL when the backend has none,
     * and the caller then runs the ops of mpx_attention's comment one after the other) ----
     * Self-attention's core, forward and backward, bit for bit those ops; see
     * mpx_attention. What is saved is memory traffic: a backend may run one head at a
     * time with its [seq, seq] intermediates in cache, and regenerate the dropped
     * probabilities in backward instead of keeping them. */
    int (*attention_fwd)(void *be, const mpx_attention *a);
    int (*attention_bwd)(void *be, const mpx_attention *a);

    /* ---- ABI 1.13 (read only when `size` covers it; NULL when the backend has none,
     * and the caller then runs the two ops one after the other) ----
     * A linear layer's forward, bit for bit gemm(g) then bias_add(g->c, bias, g->c,
     * g->m, g->n): g->batch must be 1, g->beta 0 and g->ldc g->n (C's rows contiguous,
     * as bias_add reads them); bias holds g->n values. What is saved is a pass over C:
     * a backend may add the bias as it stores C's tiles. */
    int (*gemm_bias)(void *be, const mpx_gemm *g, mpx_arg bias);

    /* ---- ABI 1.17 (read only when `size` covers it; NULL when the backend has none, and
     * the caller then runs the three ops one after the other) ----
     * A post-LN block's tail in one pass over each row, bit for bit
     *   d = dropout_fwd(x, p, rng) stored in x's dtype (p = 0: no dropout, d = x),
     *   r = add(d, resid) stored in r's dtype (kept: the backward reads it),
     *   y = layernorm_fwd(r as stored, gamma, beta, mean, rstd, eps);
     * x, resid, r and y are [rows, cols], element i of x draws rng.offset + i. r may be x
     * or resid when their dtypes are the same; y must not overlap x, resid or r. What is
     * saved is d's and r's trips through memory. */
    int (*dropout_add_layernorm_fwd)(void *be, mpx_arg x, float p, mpx_rng rng, mpx_arg resid, mpx_arg r,
                                     mpx_arg gamma, mpx_arg beta, mpx_arg y, float *mean, float *rstd,
                                     size_t rows, size_t cols, float eps);

    /* ---- ABI 1.18 (read only when `size` covers it; NULL when the backend has none, and
     * the caller then runs the ops one after the other) ----
     * A linear layer's forward as addmm computes it into a C of any dtype: C filled with
     * the bias broadcast over its rows and rounded to C's dtype (fill_zero, then
     * bias_add(C, bias, C, g->m, g->n)), then gemm(g) with g->beta = 1, which reads that
     * C: one rounding of product plus bias. g->batch must be 1, g->beta 1 and g->ldc
     * g->n; bias holds g->n values. What is saved is the fill's two passes over C and the
     * GEMM's read of it: a backend may add the bias in its GEMM's epilogue. The rounding
     * is the ops'; the GEMM's summation order is the backend's GEMM's (the cuda backend's
     * may pick another cuBLAS kernel for it than for gemm: not bit for bit that op there,
     * within its bound, docs/CUDA.md). */
    int (*gemm_bias_as_c)(void *be, const mpx_gemm *g, mpx_arg bias);
} mpx_ops;

/* True when the table `o` reaches field `f` (a table older than 1.4 stops before `flags`). */
#define MPX_OPS_HAS(o, f) ((o)->size >= offsetof(mpx_ops, f) + sizeof((o)->f))

/* Backend plugins (kind MPX_KIND_BACKEND) point their descriptor's vtable here. */
typedef struct mpx_backend_vtable {
    uint32_t size;
    /* Options (e.g. threads) come through env. */
    int (*create)(mpx_env *env, void **be);
    void (*destroy)(void *be);
    const mpx_ops *ops;
    /* A line describing the device/threads, for run records. */
    const char *(*describe)(void *be);
    /* ABI 1.16 (optional; NULL, or a backend built before 1.16: `ops`). The op table of
     * this instance, for a backend whose options switch optional ops on or off (the cuda
     * backend's `attention`). Its required ops and `flags` must be those of `ops`, which
     * the core reads before any instance exists (mpx check, mpx plugins --compat). */
    const mpx_ops *(*instance_ops)(void *be);
} mpx_backend_vtable;

#endif
