/* The cuda backend's private interface: the instance (device, stream, cuBLAS handle,
 * workspaces), the error helpers, and the ops each file defines. Shared by the C files
 * (built with cc) and the .cu files (built with nvcc), hence the extern "C".
 *
 * Every op runs on the instance's stream, asynchronously; an op that hands a result to
 * the host (a loss, a norm, a count) synchronises. Ids and labels are checked on the
 * device, and the first one outside its bound is reported, naming the op, the value and
 * its position, by the next op that synchronises (cuda_sync_). Rounding contract as the cpu backend's (mpx/ops.h): fp32 inside, each
 * output rounded once to nearest even with mpx/numerics.h's own functions (compiled as
 * device code), and the kernels are built with --fmad=false so a * b + c is two
 * roundings, as the cpu backend computes it. Row and column reductions follow the cpu
 * backend's summation order (8 interleaved lanes within a row, fixed blocks of 32 rows,
 * fixed chunks of 4096 elements), so most results agree bit for bit; exp, log, erfc
 * differ from the cpu backend's in the last ulp. */
#ifndef MPX_CUDA_INTERNAL_H
#define MPX_CUDA_INTERNAL_H

#include "mpx/mpx.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The cpu backend's blocking, kept so reductions add in the same order. */
#define CUDA_ROW_BLOCK 32      /* rows per column-reduction block (bias_grad, layernorm_bwd) */
#define CUDA_SUM_CHUNK 4096    /* elements per reduction chunk (sum_squares) */

/* cuBLAS, opened at create (dlopen): linking it would make every mpx process load
 * libcublasLt (about 0.3 s) whenever it scans the plugins, GPU or not. */
#ifdef __cplusplus
#define CUDA_FN(f) void *          /* the kernels' files never call cuBLAS (C++ overloads it) */
#else
#define CUDA_FN(f) __typeof__(&f)
#endif
typedef struct cuda_blas {
    void *lib;
    CUDA_FN(cublasCreate_v2) create;
    CUDA_FN(cublasDestroy_v2) destroy;
    CUDA_FN(cublasSetStream_v2) set_stream;
    CUDA_FN(cublasSetMathMode) set_math_mode;
    CUDA_FN(cublasGetVersion_v2) get_version;
    CUDA_FN(cublasGetStatusString) status_string;
    CUDA_FN(cublasGemmEx) gemm_ex;
    CUDA_FN(cublasGemmStridedBatchedEx) gemm_strided_batched_ex;
    CUDA_FN(cublasGemmBatchedEx) gemm_batched_ex;   /* the attention op's "batched" GEMMs */
} cuda_blas;

/* cuBLASLt, opened at create only with backend.cuda.epilogue (the bias epilogue of the
 * linear layers' GEMMs: cuda_gemm.c). */
typedef struct cuda_lt {
    void *lib;
    cublasLtHandle_t handle;
    CUDA_FN(cublasLtCreate) create;
    CUDA_FN(cublasLtDestroy) destroy;
    CUDA_FN(cublasLtMatmulDescCreate) desc_create;
    CUDA_FN(cublasLtMatmulDescDestroy) desc_destroy;
    CUDA_FN(cublasLtMatmulDescSetAttribute) desc_set;
    CUDA_FN(cublasLtMatrixLayoutCreate) layout_create;
    CUDA_FN(cublasLtMatrixLayoutDestroy) layout_destroy;
    CUDA_FN(cublasLtMatmulPreferenceCreate) pref_create;
    CUDA_FN(cublasLtMatmulPreferenceDestroy) pref_destroy;
    CUDA_FN(cublasLtMatmulPreferenceSetAttribute) pref_set;
    CUDA_FN(cublasLtMatmulAlgoGetHeuristic) heuristic;
    CUDA_FN(cublasLtMatmul) matmul;
} cuda_lt;

/* Whose ids a check on the device found outside their bound (cuda_check_ids). */
enum { CUDA_BAD_EMB_FWD = 0, CUDA_BAD_EMB_BWD = 1, CUDA_BAD_LABEL = 2, CUDA_BAD_KINDS = 3 };

/* backend.cuda.attention: whether the instance's op table has the attention op (ABI
 * 1.11), and how its GEMMs are issued (cuda_attention.c) */
enum { CUDA_ATTN_OPS = 0, CUDA_ATTN_PER_EXAMPLE = 1, CUDA_ATTN_BATCHED = 2 };

/* 0, 1, 6: GEMM operands; 2: column partials; 3: row results; 4: plans; 5: counters;
 * 7, 8: the attention op's [batch, heads, seq, seq] intermediates; 9: its pointer arrays;
 * 10: cuBLASLt's workspace; 11: the bias of an epilogue in C's dtype */
#define CUDA_WS_SLOTS 12
typedef struct cuda_be {
    mpx_env *env;              /* for errors */
    int device, tf32, attention;
    int fused;                 /* backend.cuda.fused: the optional fused ops of ABI 1.10 and 1.17 */
    int epilogue;              /* backend.cuda.epilogue: gemm_bias and gemm_bias_as_c on cuBLASLt */
    mpx_ops ops;               /* this instance's op table (ABI 1.16 instance_ops) */
    cudaStream_t stream;
    cuda_blas api;             /* cuBLAS entry points */
    cublasHandle_t blas;
    cuda_lt lt;                /* cuBLASLt entry points and handle (epilogue only) */
    unsigned long long *bad;   /* device, 2 x CUDA_BAD_KINDS: per kind the lowest (position << 32 | value)
                                * outside its bound (all ones: none), then that check's bound */
    unsigned long long bad_h[2 * CUDA_BAD_KINDS];   /* the host copy read at each synchronisation */
    void *ws[CUDA_WS_SLOTS];   /* device workspaces (GEMM operands, partials) */
    size_t ws_bytes[CUDA_WS_SLOTS];
    void *hws[2];              /* host staging (ids, partial sums) */
    size_t hws_bytes[2];
    char line[512];
} cuda_be;

/* Device workspace `slot` of at least `bytes` (contents undefined), NULL with the error set. */
void *cuda_ws(cuda_be *be, int slot, size_t bytes);
/* Host staging buffer `slot` (0 or 1) of at least `bytes`. */
void *cuda_hws(cuda_be *be, int slot, size_t bytes);

/* A CUDA runtime status (cudaError_t) to an mpx status, naming `what`. */
int cuda_rt_(cuda_be *be, int err, const char *file, int line, const char *what);
#define CUDA_TRY(be, call, what) MPX_TRY(cuda_rt_((be), (int)(call), __FILE__, __LINE__, (what)))
/* After a kernel launch: the launch error, if any. */
#define CUDA_LAUNCHED(be, what) CUDA_TRY(be, cudaGetLastError(), what)
/* Waits for the stream (before the host reads what the device wrote), and reports an id
 * or label that a check on the device found outside its bound since the last one. */
int cuda_sync_(cuda_be *be, const char *file, int line, const char *what);
#define CUDA_SYNC(be, what) MPX_TRY(cuda_sync_((be), __FILE__, __LINE__, (what)))

/* As the cpu backend's: MPX_ERR_UNSUPPORTED unless fp32/fp16/bf16; MPX_ERR if n > 0 and NULL. */
int cuda_check_(cuda_be *be, const char *file, int line, const char *op, const char *name,
                mpx_arg a, size_t n);
#define CUDA_CHECK(be, op, name, a, n) MPX_TRY(cuda_check_((be), __FILE__, __LINE__, (op), (name), (a), (n)))
#define CUDA_CHECK_OPT(be, op, name, a, n) do { if ((a).p) CUDA_CHECK(be, op, name, a, n); } while (0)
#define CUDA_FAIL(be, ...) MPX_FAIL((be)->env, __VA_ARGS__)

/* Checks n int32 ids on the device against [0, bound), without waiting: the kernels that
 * read them skip a value outside, and the next synchronisation reports it (kind: which
 * op's ids). */
int cuda_check_ids(cuda_be *be, const int32_t *ids, size_t n, size_t bound, int kind);

/* ---- kernels' host wrappers, one group per file ---- */
/* cuda_elementwise.cu */
int cuda_cast(void *be, mpx_arg x, mpx_arg y, size_t n);
int cuda_add(void *be, mpx_arg a, mpx_arg b, mpx_arg y, size_t n);
int cuda_axpby(void *be, float alpha, mpx_arg x, float beta, mpx_arg y, size_t n);
int cuda_scale(void *be, mpx_arg x, float alpha, size_t n);
int cuda_gelu_fwd(void *be, mpx_arg x, mpx_arg y, size_t n);
int cuda_gelu_bwd(void *be, mpx_arg dy, mpx_arg x, mpx_arg dx, size_t n);
int cuda_dropout_fwd(void *be, mpx_arg x, mpx_arg y, size_t n, float p, mpx_rng rng);
int cuda_dropout_bwd(void *be, mpx_arg dy, mpx_arg dx, size_t n, float p, mpx_rng rng);
int cuda_apply_update(void *be, mpx_arg w, mpx_arg comp, const float *u, size_t n,
                      mpx_rounding mode, mpx_rng rng);
/* GEMM operand preparation: `batch` matrices of rows x cols (leading dim ld, stride
 * between matrices) from `src` into the compact `dst` of dtype dst_t, each value rounded
 * to `round_to` first (MPX_F32: none); to_storage = 1 goes the other way (compact fp32
 * C back into its storage). */
int cuda_convert_matrix(cuda_be *be, mpx_arg src, int rows, int cols, int ld, long long stride,
                        int batch, mpx_arg dst, mpx_dtype round_to, int to_storage);

/* cuda_gemm.c */
int cuda_gemm(void *be, const mpx_gemm *g);
/* ABI 1.13 and 1.18 on cuBLASLt's bias epilogue, in the instance's table when
 * backend.cuda.epilogue = true (the ops one after the other where it offers no kernel) */
int cuda_gemm_bias(void *be, const mpx_gemm *g, mpx_arg bias);
int cuda_gemm_bias_as_c(void *be, const mpx_gemm *g, mpx_arg bias);

/* cuda_rows.cu */
int cuda_bias_add(void *be, mpx_arg x, mpx_arg bias, mpx_arg y, size_t rows, size_t cols);
int cuda_bias_grad(void *be, mpx_arg dy, mpx_arg dbias, size_t rows, size_t cols, int accumulate);
int cuda_layernorm_fwd(void *be, mpx_arg x, mpx_arg gamma, mpx_arg beta, mpx_arg y,
                       float *mean, float *rstd, size_t rows, size_t cols, float eps);
int cuda_layernorm_bwd(void *be, mpx_arg dy, mpx_arg x, mpx_arg gamma, const float *mean,
                       const float *rstd, mpx_arg dx, mpx_arg dgamma, mpx_arg dbeta,
                       size_t rows, size_t cols, int accumulate_dx, int accumulate_params);
int cuda_softmax_fwd(void *be, mpx_arg x, const mpx_arg mask, mpx_arg y, size_t batch,
                     size_t heads, size_t rows, size_t cols, float scale);
int cuda_softmax_bwd(void *be, mpx_arg dy, mpx_arg y, mpx_arg dx, size_t n_rows, size_t cols,
                     float scale);
/* ABI 1.10 and 1.17, in the instance's table when backend.cuda.fused = true */
int cuda_softmax_dropout_fwd(void *be, mpx_arg x, const mpx_arg mask, mpx_arg y, mpx_arg yd, size_t batch,
                             size_t heads, size_t rows, size_t cols, float scale, float p, mpx_rng rng);
int cuda_dropout_softmax_bwd(void *be, mpx_arg dyd, mpx_arg y, mpx_arg dx, size_t n_rows, size_t cols,
                             float scale, float p, mpx_rng rng);
int cuda_dropout_add_layernorm_fwd(void *be, mpx_arg x, float p, mpx_rng rng, mpx_arg resid, mpx_arg r,
                                   mpx_arg gamma, mpx_arg beta, mpx_arg y, float *mean, float *rstd, size_t rows,
                                   size_t cols, float eps);
int cuda_cross_entropy(void *be, mpx_arg logits, const int32_t *labels, size_t rows,
                       size_t cols, double *loss, mpx_arg dlogits, float dscale);

/* cuda_misc.cu */
int cuda_embedding_fwd(void *be, const int32_t *ids, size_t n_ids, mpx_arg table,
                       size_t table_rows, size_t dim, mpx_arg y);
int cuda_embedding_bwd(void *be, const int32_t *ids, size_t n_ids, mpx_arg dy, mpx_arg dtable,
                       size_t table_rows, size_t dim);
int cuda_sum_squares(void *be, mpx_arg x, size_t n, double *out);
int cuda_count_nonfinite(void *be, mpx_arg x, size_t n, size_t *out);

/* cuda_optim.cu (ABI 1.4) */
int cuda_fused_update(void *be, mpx_fused_update *f);

/* cuda_attention.c (ABI 1.11; in the instance's table unless backend.cuda.attention = "ops") */
int cuda_attention_fwd(void *be, const mpx_attention *a);
int cuda_attention_bwd(void *be, const mpx_attention *a);
/* cuda_misc.cu: out[b * heads + h] = base + (b * per_example + h * per_head) bytes, on the
 * device (the pointer arrays of cublasGemmBatchedEx, without a host copy) */
int cuda_fill_pointers(cuda_be *be, void **out, const void *base, long long per_example, long long per_head,
                       int batch, int heads);

#ifdef __cplusplus
}
#endif

#endif
