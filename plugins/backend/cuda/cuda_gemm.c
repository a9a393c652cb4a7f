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
