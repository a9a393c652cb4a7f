/* Self-attention's core in one op (ABI 1.11, mpx_attention in mpx/ops.h), in the
 * instance's op table when backend.cuda.attention is not "ops" (ABI 1.16 instance_ops):
 *
 *  "per-example": exactly the calls the bert model makes without the op (bert_forward.c,
 *      bert_backward.c): per example one strided-batched GEMM over the heads (cuda_gemm),
 *      and over the whole [batch, heads, seq, seq] tensor one softmax_fwd and one
 *      dropout_fwd (backward: dropout_bwd, then softmax_bwd). The bits are the ops' (the
 *      contract); what changes is memory: an evaluation forward keeps no probabilities,
 *      and backward regenerates the dropped ones from the Philox stream.
 *  "batched": the same row ops, and each GEMM as one cublasGemmBatchedEx call over every
 *      example and head, its pointer arrays filled on the device: 6 cuBLAS calls a layer
 *      and step instead of 6 x batch (2,304 at batch 32 on bert-base). An operand stored
 *      in another dtype than `compute` is converted whole first (rounded to nearest even,
 *      as cuda_gemm does per call), and a C neither `compute` nor fp32 goes through an fp32
 *      workspace rounded once. cuBLAS may pick other kernels for these calls than for the
 *      strided batches, so GEMM outputs may differ from "per-example"'s in the order of
 *      their fp32 sums (the suites' GEMM bound covers that).
 *
 * With backend.cuda.fused = true either mode runs the softmax and its
 * dropout as one kernel (forward and backward), the same bits as the two.
 *
 * The dropout mask words of mpx_attention.keep are neither filled nor read: backward
 * draws the mask again (the same bits). Neither mode has run on a GPU yet (docs/CUDA.md). */
#include "cuda_internal.h"
#include "../common/attention_args.h"

#include <string.h>

/* An operand of the op: element (b, h) of the batch of matrices starts at
 * (b * ex_rows + h * head_rows) * ld + h * head_cols; the whole tensor is rows x cols
 * (leading dimension ld). Head-interleaved [batch * seq, ld] tensors (q, k, v, ctx and
 * their gradients) have head_cols = head_dim; [batch, heads, seq, seq] ones head_rows = seq. */
typedef struct att_op {
    mpx_arg x;
    int ld;
    long long ex_rows, head_rows, head_cols;
    size_t rows;
    int cols;
} att_op;

static att_op interleaved(const mpx_attention *a, mpx_arg x)
{
    return (att_op){ x, a->ld, a->seq, 0, a->head_dim, (size_t)a->batch * (size_t)a->seq, a->heads * a->head_dim };
}

static att_op square(const mpx_attention *a, mpx_arg x)
{
    long long S = a->seq;
    return (att_op){ x, a->seq, (long long)a->heads * S, S, 0, (size_t)a->batch * (size_t)a->heads * (size_t)S,
                     a->seq };
}

/* Element offset of example b's first head, and between two heads of one example. */
static size_t ex_offset(const att_op *o, int b) { return (size_t)b * (size_t)o->ex_rows * (size_t)o->ld; }
static long long head_stride(const att_op *o) { return o->head_rows * o->ld + o->head_cols; }

static cudaDataType_t blas_type(mpx_dtype t) { return t == MPX_F16 ? CUDA_R_16F : t == MPX_BF16 ? CUDA_R_16BF : CUDA_R_32F; }

/* The operand in `compute`: itself, or the whole tensor converted into workspace `slot`
 * (compact: ld becomes cols, the offsets follow). */
static int in_compute(cuda_be *be, mpx_dtype compute, att_op *o, int slot)
{
    if (o->x.t == compute) return MPX_OK;
    void *w = cuda_ws(be, slot, (o->rows ? o->rows : 1) * (size_t)o->cols * mpx_dtype_size(compute));
    if (!w) return MPX_ERR_NOMEM;
    MPX_TRY(cuda_convert_matrix(be, o->x, (int)o->rows, o->cols, o->ld, 0, 1, mpx_a(w, compute), MPX_F32, 0));
    o->x = mpx_a(w, compute);
    o->ld = o->cols;
    return MPX_OK;
}

/* C[b, h] = alpha op(A[b, h]) op(B[b, h]) (beta 0) over every example and head in one
 * cublasGemmBatchedEx call; row-major C = op(A) op(B) is column-major C^T = op(B)^T
 * op(A)^T, so cuBLAS gets B first (as cuda_gemm). */
static int batched_gemm(cuda_be *be, const mpx_attention *a, int ta, int tb, int m, int n, int k, float alpha,
                        att_op A, att_op B, att_op C)
{
    const int count = a->batch * a->heads;
    MPX_TRY(in_compute(be, a->compute, &A, 0));
    MPX_TRY(in_compute(be, a->compute, &B, 1));
    att_op out = C;
    int direct = C.x.t == a->compute || C.x.t == MPX_F32;
    if (!direct) {   /* an fp32 workspace, rounded once into C after the GEMM */
        void *w = cuda_ws(be, 6, (C.rows ? C.rows : 1) * (size_t)C.cols * sizeof(float));
        if (!w) return MPX_ERR_NOMEM;
        out.x = mpx_a(w, MPX_F32);
        out.ld = C.cols;
    }
    void **ptr = cuda_ws(be, 9, 3 * (size_t)count * sizeof(void *));
    if (!ptr) return MPX_ERR_NOMEM;
    const att_op *ops[3] = { &A, &B, &out };
    for (int i = 0; i < 3; i++) {
        size_t es = mpx_dtype_size(ops[i]->x.t);
        MPX_TRY(cuda_fill_pointers(be, ptr + (size_t)i * (size_t)count, ops[i]->x.p,
                                   ops[i]->ex_rows * ops[i]->ld * (long long)es, head_stride(ops[i]) * (long long)es,
                                   a->batch, a->heads));
    }
    const float beta = 0.0f;
    cublasComputeType_t comp = be->tf32 && a->compute == MPX_F32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cudaDataType_t it = blas_type(a->compute);
    cublasStatus_t s = be->api.gemm_batched_ex(
        be->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha,
        (const void *const *)(ptr + count), it, B.ld, (const void *const *)ptr, it, A.ld, &beta,
        ptr + 2 * (size_t)count, blas_type(out.x.t), out.ld, count, comp, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS)
        return CUDA_FAIL(be, "cuda attention: batched gemm %dx%dx%d over %d (%s -> %s): cuBLAS: %s", m, n, k, count,
                         mpx_dtype_name(a->compute), mpx_dtype_name(C.x.t), be->api.status_string(s));
    if (!direct)
        MPX_TRY(cuda_convert_matrix(be, C.x, (int)C.rows, C.cols, C.ld, 0, 1, out.x, MPX_F32, 1));
    return MPX_OK;
}

/* G(ta, tb, alpha, A, B -> C) of mpx_attention's comment for every head: as the model
 * issues it (a strided batch over one example's heads, per example), or batched. */
static int att_gemm(cuda_be *be, const mpx_attention *a, int ta, int tb, int m, int n, int k, float alpha,
                    att_op A, att_op B, att_op C)
{
    if (be->attention == CUDA_ATTN_BATCHED) return batched_gemm(be, a, ta, tb, m, n, k, alpha, A, B, C);
    for (int b = 0; b < a->batch; b++) {
        mpx_gemm g = { .trans_a = ta, .trans_b = tb, .m = m, .n = n, .k = k, .alpha = alpha, .beta = 0.0f,
                       .a = mpx_at(A.x, ex_offset(&A, b)), .lda = A.ld, .stride_a = head_stride(&A),
                       .b = mpx_at(B.x, ex_offset(&B, b)), .ldb = B.ld, .stride_b = head_stride(&B),
                       .c = mpx_at(C.x, ex_offset(&C, b)), .ldc = C.ld, .stride_c = head_stride(&C),
                       .batch = a->heads, .compute = a->compute };
        MPX_TRY(cuda_gemm(be, &g));
    }
    return MPX_OK;
}

static size_t bigger(size_t x, size_t y) { return x > y ? x : y; }

/* Shapes, dtypes and pointers (attention_args.h, as the cpu backend's op). */
static int check(cuda_be *be, const mpx_attention *a, int bwd, const char *op)
{
    attention_buf bufs[ATTENTION_BUFS];
    int n_bufs = 0;
    char why[256];
    if (attention_args(a, bwd, bufs, &n_bufs, why, sizeof why)) return CUDA_FAIL(be, "cuda %s: %s", op, why);
    for (int i = 0; i < n_bufs; i++)   /* an optional buffer is checked when given */
        if (bufs[i].a.p || !bufs[i].optional) CUDA_CHECK(be, op, bufs[i].name, bufs[i].a, bufs[i].n);
    CUDA_CHECK(be, op, "compute dtype", mpx_a(NULL, a->compute), 0);
    return MPX_OK;
}

int cuda_attention_fwd(void *vbe, const mpx_attention *a)
{
    cuda_be *be = vbe;
    MPX_TRY(check(be, a, 0, "attention_fwd"));
    const int S = a->seq, D = a->head_dim;
    const size_t n = (size_t)a->batch * (size_t)a->heads * (size_t)S * (size_t)S;
    if (!n) return MPX_OK;
    const size_t ps = mpx_dtype_size(a->probs.t);
    /* slot 7: the scores, then the dropped probabilities; slot 8: the probabilities when
     * the caller keeps none (an evaluation forward) */
    void *w7 = cuda_ws(be, 7, n * bigger(mpx_dtype_size(a->scores_t), ps));
    if (!w7) return MPX_ERR_NOMEM;
    mpx_arg sc = mpx_a(w7, a->scores_t), y = a->probs;
    if (!y.p) {
        void *w8 = cuda_ws(be, 8, n * ps);
        if (!w8) return MPX_ERR_NOMEM;
        y = mpx_a(w8, a->probs.t);
    }
    MPX_TRY(att_gemm(be, a, 0, 1, S, S, D, a->scale, interleaved(a, a->q), interleaved(a, a->k), square(a, sc)));
    mpx_arg yd = y;
    if (a->p > 0.0f && be->fused && (sc.t == y.t || a->probs.p)) {
        /* in one pass: the dropped probabilities over the scores when their dtypes agree
         * (the op's aliasing rule), else in slot 8 (y is then the caller's) */
        void *d = sc.t == y.t ? w7 : cuda_ws(be, 8, n * ps);
        if (!d) return MPX_ERR_NOMEM;
        yd = mpx_a(d, y.t);
        MPX_TRY(cuda_softmax_dropout_fwd(be, sc, a->mask, y, yd, (size_t)a->batch, (size_t)a->heads, (size_t)S,
                                         (size_t)S, 1.0f, a->p, a->rng));
    } else {
        MPX_TRY(cuda_softmax_fwd(be, sc, a->mask, y, (size_t)a->batch, (size_t)a->heads, (size_t)S, (size_t)S, 1.0f));
        if (a->p > 0.0f) {   /* the scores are spent */
            yd = mpx_a(w7, a->probs.t);
            MPX_TRY(cuda_dropout_fwd(be, y, yd, n, a->p, a->rng));
        }
    }
    return att_gemm(be, a, 0, 0, S, D, S, 1.0f, square(a, yd), interleaved(a, a->v), interleaved(a, a->ctx));
}

int cuda_attention_bwd(void *vbe, const mpx_attention *a)
{
    cuda_be *be = vbe;
    MPX_TRY(check(be, a, 1, "attention_bwd"));
    const int S = a->seq, D = a->head_dim;
    const size_t n = (size_t)a->batch * (size_t)a->heads * (size_t)S * (size_t)S;
    if (!n) return MPX_OK;
    const size_t ps = mpx_dtype_size(a->probs.t), ds = mpx_dtype_size(a->ds_t);
    /* slot 8: the dropped probabilities, then the dropout's backward; slot 7: their
     * gradient, then the scores' (slot 8 when there is no dropout) */
    void *w7 = cuda_ws(be, 7, n * bigger(ps, ds));
    void *w8 = w7 ? cuda_ws(be, 8, n * bigger(ps, ds)) : NULL;
    if (!w7 || !w8) return MPX_ERR_NOMEM;
    mpx_arg y = a->probs, yd = y, dyd = mpx_a(w7, a->probs.t);
    if (a->p > 0.0f) {
        yd = mpx_a(w8, a->probs.t);
        MPX_TRY(cuda_dropout_fwd(be, y, yd, n, a->p, a->rng));
    }
    att_op dctx = interleaved(a, a->dctx);
    MPX_TRY(att_gemm(be, a, 0, 1, S, S, D, 1.0f, dctx, interleaved(a, a->v), square(a, dyd)));
    MPX_TRY(att_gemm(be, a, 1, 0, S, D, S, 1.0f, square(a, yd), dctx, interleaved(a, a->dv)));
    mpx_arg dy = dyd, dsc = mpx_a(w8, a->ds_t);
    if (a->p > 0.0f && be->fused) {   /* in one pass, into the spent dropped probabilities */
        MPX_TRY(cuda_dropout_softmax_bwd(be, dyd, y, dsc, n / (size_t)S, (size_t)S, 1.0f, a->p, a->rng));
    } else {
        if (a->p > 0.0f) {   /* the dropped probabilities are spent: their dropout's backward goes there */
            dy = mpx_a(w8, a->probs.t);
            MPX_TRY(cuda_dropout_bwd(be, dyd, dy, n, a->p, a->rng));
            dsc = mpx_a(w7, a->ds_t);
        }
        MPX_TRY(cuda_softmax_bwd(be, dy, y, dsc, n / (size_t)S, (size_t)S, 1.0f));
    }
    MPX_TRY(att_gemm(be, a, 0, 0, S, D, S, a->scale, square(a, dsc), interleaved(a, a->k), interleaved(a, a->dq)));
    return att_gemm(be, a, 1, 0, S, D, S, a->scale, square(a, dsc), interleaved(a, a->q), interleaved(a, a->dk));
}
