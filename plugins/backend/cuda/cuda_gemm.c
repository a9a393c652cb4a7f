/* GEMM: "round inputs to `compute`, multiply-accumulate in fp32, round the output" on
 * cuBLAS (cublasGemmEx, or cublasGemmStridedBatchedEx for a batch) with
 * CUBLAS_COMPUTE_32F — TF32 only with backend.cuda.tf32 — and reduced-precision
 * reductions disallowed (set at create). An operand stored in another dtype than
 * `compute` is first converted, rounded to nearest even, into a compact workspace. C
 * goes to cuBLAS as it is stored when cuBLAS can write that dtype from these inputs
 * (C = compute, or C fp32); otherwise (fp32 inputs into a 16-bit C, or fp16 inputs into
 * bf16) cuBLAS writes an fp32 workspace, read from C first when beta != 0, which is
 * then rounded once into C.
 * Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLAS gets B first. */
#include "cuda_internal.h"

#include <stdint.h>
#include <string.h>

static cudaDataType_t cuda_type(mpx_dtype t)
{
    return t == MPX_F16 ? CUDA_R_16F : t == MPX_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

static int blas_rc(cuda_be *be, cublasStatus_t s, const mpx_gemm *g)
{
    if (s == CUBLAS_STATUS_SUCCESS) return MPX_OK;
    return CUDA_FAIL(be, "cuda gemm %dx%dx%d (batch %d, %s/%s -> %s, compute %s): cuBLAS: %s", g->m, g->n, g->k,
                     g->batch, mpx_dtype_name(g->a.t), mpx_dtype_name(g->b.t), mpx_dtype_name(g->c.t),
                     mpx_dtype_name(g->compute), be->api.status_string(s));
}

/* An operand of `rows` x `cols` per matrix in `compute`: itself, or a compact rounded copy. */
typedef struct operand { void *p; int ld; long long stride; } operand;

static int prepare(cuda_be *be, mpx_arg a, int rows, int cols, int ld, long long stride, int batch,
                   mpx_dtype compute, int slot, operand *out)
{
    if (a.t == compute) {
        *out = (operand){ a.p, ld, stride };
        return MPX_OK;
    }
    if (stride == 0) batch = 1;   /* one matrix shared by the batch (bert's Q, K and V): converted once */
    size_t per = (size_t)rows * (size_t)cols;
    size_t total = per * (size_t)batch;
    void *w = cuda_ws(be, slot, (total ? total : 1) * mpx_dtype_size(compute));
    if (!w) return MPX_ERR_NOMEM;
    MPX_TRY(cuda_convert_matrix(be, a, rows, cols, ld, stride, batch, mpx_a(w, compute), MPX_F32, 0));
    *out = (operand){ w, cols > 0 ? cols : 1, stride == 0 ? 0 : (long long)per };
    return MPX_OK;
}

int cuda_gemm(void *vbe, const mpx_gemm *g)
{
    cuda_be *be = vbe;
    if (!g) return CUDA_FAIL(be, "cuda gemm: no arguments");
    if (g->compute != MPX_F32 && g->compute != MPX_F16 && g->compute != MPX_BF16) {
        (void)CUDA_FAIL(be, "cuda gemm: compute dtype %s; supported: fp32, fp16, bf16", mpx_dtype_name(g->compute));
        return MPX_ERR_UNSUPPORTED;
    }
    if (g->m < 0 || g->n < 0 || g->k < 0 || g->batch < 1)
        return CUDA_FAIL(be, "cuda gemm: bad shape %dx%dx%d, batch %d", g->m, g->n, g->k, g->batch);
    size_t na = (size_t)g->m * (size_t)g->k, nc = (size_t)g->m * (size_t)g->n;
    CUDA_CHECK(be, "gemm", "A", g->a, na);
    CUDA_CHECK(be, "gemm", "B", g->b, (size_t)g->k * (size_t)g->n);
    CUDA_CHECK(be, "gemm", "C", g->c, nc);
    if (!nc) return MPX_OK;
    int ra = g->trans_a ? g->k : g->m, ca = g->trans_a ? g->m : g->k;
    int rb = g->trans_b ? g->n : g->k, cb = g->trans_b ? g->k : g->n;
    operand A = { g->a.p, g->lda, g->stride_a }, B = { g->b.p, g->ldb, g->stride_b };
    if (g->k > 0) {
        MPX_TRY(prepare(be, g->a, ra, ca, g->lda, g->stride_a, g->batch, g->compute, 0, &A));
        MPX_TRY(prepare(be, g->b, rb, cb, g->ldb, g->stride_b, g->batch, g->compute, 1, &B));
    }
    /* cuBLAS writes C itself when C is the compute dtype or fp32 */
    int direct = g->c.t == g->compute || g->c.t == MPX_F32;
    operand C = { g->c.p, g->ldc, g->stride_c };
    mpx_dtype ct = g->c.t;
    if (!direct) {
        void *w = cuda_ws(be, 6, nc * (size_t)g->batch * sizeof(float));
        if (!w) return MPX_ERR_NOMEM;
        if (g->beta != 0.0f)
            MPX_TRY(cuda_convert_matrix(be, g->c, g->m, g->n, g->ldc, g->stride_c, g->batch, mpx_a(w, MPX_F32), MPX_F32, 0));
        C = (operand){ w, g->n, (long long)nc };
        ct = MPX_F32;
    }
    cublasComputeType_t comp = be->tf32 && g->compute == MPX_F32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cublasOperation_t opa = g->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, opb = g->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cudaDataType_t it = cuda_type(g->compute);
    /* k = 0: C = beta C; the operands are not read, but cuBLAS wants valid leading dims */
    int lda = A.ld > 0 ? A.ld : 1, ldb = B.ld > 0 ? B.ld : 1;
    cublasStatus_t s;
    if (g->batch == 1)
        s = be->api.gemm_ex(be->blas, opb, opa, g->n, g->m, g->k, &g->alpha, B.p, it, ldb, A.p, it, lda,
                         &g->beta, C.p, cuda_type(ct), C.ld, comp, CUBLAS_GEMM_DEFAULT);
    else
        s = be->api.gemm_strided_batched_ex(be->blas, opb, opa, g->n, g->m, g->k, &g->alpha, B.p, it, ldb, B.stride,
                                            A.p, it, lda, A.stride, &g->beta, C.p, cuda_type(ct), C.ld, C.stride,
                                            g->batch, comp, CUBLAS_GEMM_DEFAULT);
    MPX_TRY(blas_rc(be, s, g));
    if (!direct)
        MPX_TRY(cuda_convert_matrix(be, g->c, g->m, g->n, g->ldc, g->stride_c, g->batch, mpx_a(C.p, MPX_F32), MPX_F32, 1));
    return MPX_OK;
}

/* ---- the bias epilogue on cuBLASLt (backend.cuda.epilogue) ----
 * D = alpha op(A) op(B) + bias over D's rows as cuBLASLt computes CUBLASLT_EPILOGUE_BIAS:
 * the fp32 sum of product and bias, rounded once into D's dtype, which is the rounding of
 * bias_add into an fp32 C (gemm_bias) and of the GEMM that reads a C filled with the
 * bias (gemm_bias_as_c). cuBLASLt chooses its kernel by heuristic, which need not be
 * cublasGemmEx's for the same shape: the product may sum in another order. */

#define CUDA_LT_WS ((size_t)32 << 20)   /* cuBLASLt's workspace: 32 MiB, NVIDIA's advice for Hopper */

/* The largest power of two (at most 256) that divides the address: cuBLASLt's heuristic
 * otherwise assumes 256-byte alignment of every matrix. */
static uint32_t align_of(const void *p)
{
    uint32_t a = 256;
    while (a > 1 && ((uintptr_t)p % a)) a >>= 1;
    return a;
}

/* *done = 1 when cuBLASLt ran the GEMM with `bias` (device, C's dtype, g->n values) in
 * its epilogue and beta 0; 0 when nothing ran (no kernel for it, or a C that cuBLAS does
 * not write from these inputs): the caller then runs the ops. */
static int lt_gemm_bias(cuda_be *be, const mpx_gemm *g, const void *bias, int *done)
{
    *done = 0;
    if ((g->c.t != g->compute && g->c.t != MPX_F32) || g->k == 0) return MPX_OK;
    int ra = g->trans_a ? g->k : g->m, ca = g->trans_a ? g->m : g->k;
    int rb = g->trans_b ? g->n : g->k, cb = g->trans_b ? g->k : g->n;
    operand A, B;
    MPX_TRY(prepare(be, g->a, ra, ca, g->lda, 0, 1, g->compute, 0, &A));
    MPX_TRY(prepare(be, g->b, rb, cb, g->ldb, 0, 1, g->compute, 1, &B));
    void *ws = cuda_ws(be, 10, CUDA_LT_WS);
    if (!ws) return MPX_ERR_NOMEM;
    const cuda_lt *lt = &be->lt;
    cublasComputeType_t comp = be->tf32 && g->compute == MPX_F32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cublasOperation_t opa = g->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, opb = g->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cudaDataType_t it = cuda_type(g->compute), ct = cuda_type(g->c.t);
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    int32_t bias_t = (int32_t)ct;
    uint64_t ws_bytes = CUDA_LT_WS;
    /* partial sums of a split K in fp32 only, as cublasGemmEx under
     * CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION (no in-place or output-type sums) */
    uint32_t reduction = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    uint32_t al[4] = { align_of(B.p), align_of(A.p), align_of(g->c.p), align_of(g->c.p) };
    const float beta = 0.0f;
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t h;
    int found = 0;
    memset(&h, 0, sizeof h);
    /* row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: B first, as in cuda_gemm */
    cublasStatus_t s = lt->desc_create(&op, comp, CUDA_R_32F);
    if (s == CUBLAS_STATUS_SUCCESS) s = lt->desc_set(op, CUBLASLT_MATMUL_DESC_TRANSA, &opb, sizeof opb);
    if (s == CUBLAS_STATUS_SUCCESS) s = lt->desc_set(op, CUBLASLT_MATMUL_DESC_TRANSB, &opa, sizeof opa);
    if (s == CUBLAS_STATUS_SUCCESS) s = lt->desc_set(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
    if (s == CUBLAS_STATUS_SUCCESS) s = lt->desc_set(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    if (s == CUBLAS_STATUS_SUCCESS) s = lt->desc_set(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_t, sizeof bias_t);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = lt->layout_create(&la, it, (uint64_t)(g->trans_b ? g->k : g->n), (uint64_t)(g->trans_b ? g->n : g->k), B.ld);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = lt->layout_create(&lb, it, (uint64_t)(g->trans_a ? g->m : g->k), (uint64_t)(g->trans_a ? g->k : g->m), A.ld);
    if (s == CUBLAS_STATUS_SUCCESS) s = lt->layout_create(&lc, ct, (uint64_t)g->n, (uint64_t)g->m, g->ldc);
    if (s == CUBLAS_STATUS_SUCCESS) s = lt->pref_create(&pref);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = lt->pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = lt->pref_set(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reduction, sizeof reduction);
    if (s == CUBLAS_STATUS_SUCCESS) s = lt->pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[0], sizeof al[0]);
    if (s == CUBLAS_STATUS_SUCCESS) s = lt->pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[1], sizeof al[1]);
    if (s == CUBLAS_STATUS_SUCCESS) s = lt->pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], sizeof al[2]);
    if (s == CUBLAS_STATUS_SUCCESS) s = lt->pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[3], sizeof al[3]);
    if (s == CUBLAS_STATUS_SUCCESS) s = lt->heuristic(lt->handle, op, la, lb, lc, lc, pref, 1, &h, &found);
    if (s == CUBLAS_STATUS_NOT_SUPPORTED) s = CUBLAS_STATUS_SUCCESS, found = 0;   /* no kernel: the ops */
    if (s == CUBLAS_STATUS_SUCCESS && found > 0)
        s = lt->matmul(lt->handle, op, &g->alpha, B.p, la, A.p, lb, &beta, g->c.p, lc, g->c.p, lc, &h.algo, ws,
                       CUDA_LT_WS, be->stream);
    if (pref) lt->pref_destroy(pref);
    if (lc) lt->layout_destroy(lc);
    if (lb) lt->layout_destroy(lb);
    if (la) lt->layout_destroy(la);
    if (op) lt->desc_destroy(op);
    if (s != CUBLAS_STATUS_SUCCESS)
        return CUDA_FAIL(be, "cuda gemm with bias epilogue %dx%dx%d (%s/%s -> %s, compute %s): cuBLASLt: %s", g->m, g->n,
                         g->k, mpx_dtype_name(g->a.t), mpx_dtype_name(g->b.t), mpx_dtype_name(g->c.t),
                         mpx_dtype_name(g->compute), be->api.status_string(s));
    *done = found > 0;
    return MPX_OK;
}

static int linear_args(cuda_be *be, const char *op, const mpx_gemm *g, float beta, mpx_arg bias)
{
    if (!g) return CUDA_FAIL(be, "cuda %s: no arguments", op);
    if (g->batch != 1 || g->beta != beta || g->ldc != g->n)
        return CUDA_FAIL(be, "cuda %s: batch %d, beta %g, ldc %d (n %d): the op takes batch 1, beta %g and ldc = n", op,
                         g->batch, (double)g->beta, g->ldc, g->n, (double)beta);
    CUDA_CHECK(be, op, "bias", bias, (size_t)g->n);
    return MPX_OK;
}

/* ABI 1.13: gemm then bias_add, the bias widened exactly into fp32 for an fp32 C; any
 * other C (two roundings: the GEMM's, then the sum's) runs the two ops. */
int cuda_gemm_bias(void *vbe, const mpx_gemm *g, mpx_arg bias)
{
    cuda_be *be = vbe;
    MPX_TRY(linear_args(be, "gemm_bias", g, 0.0f, bias));
    int done = 0;
    if (g->c.t == MPX_F32 && g->m > 0 && g->n > 0) {
        void *b32 = cuda_ws(be, 11, (size_t)g->n * sizeof(float));
        if (!b32) return MPX_ERR_NOMEM;
        MPX_TRY(cuda_cast(be, bias, mpx_a(b32, MPX_F32), (size_t)g->n));
        MPX_TRY(lt_gemm_bias(be, g, b32, &done));
    }
    if (done) return MPX_OK;
    MPX_TRY(cuda_gemm(be, g));
    return cuda_bias_add(be, g->c, bias, g->c, (size_t)g->m, (size_t)g->n);
}

/* ABI 1.18: the bias rounded to C's dtype as the fill makes it (0 + bias, one rounding:
 * a -0 bias gives +0), then the GEMM's one rounding of product plus that value. */
int cuda_gemm_bias_as_c(void *vbe, const mpx_gemm *g, mpx_arg bias)
{
    cuda_be *be = vbe;
    MPX_TRY(linear_args(be, "gemm_bias_as_c", g, 1.0f, bias));
    if (g->m <= 0 || g->n <= 0) return MPX_OK;
    const size_t n = (size_t)g->n, es = mpx_dtype_size(g->c.t);
    int done = 0;
    void *row = cuda_ws(be, 11, n * es);
    if (!row) return MPX_ERR_NOMEM;
    CUDA_TRY(be, cudaMemsetAsync(row, 0, n * es, be->stream), "gemm_bias_as_c (bias fill)");
    MPX_TRY(cuda_bias_add(be, mpx_a(row, g->c.t), bias, mpx_a(row, g->c.t), 1, n));
    MPX_TRY(lt_gemm_bias(be, g, row, &done));
    if (done) return MPX_OK;
    CUDA_TRY(be, cudaMemsetAsync(g->c.p, 0, (size_t)g->m * n * es, be->stream), "gemm_bias_as_c (fill)");
    MPX_TRY(cuda_bias_add(be, g->c, bias, g->c, (size_t)g->m, n));
    return cuda_gemm(be, g);
}
