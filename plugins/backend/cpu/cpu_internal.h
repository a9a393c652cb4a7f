/* The cpu backend's private interface: the instance, its thread pool and workspaces,
 * dtype conversion over blocks, and the op implementations each file defines.
 *
 * Thread count and results: every op except GEMM gives bitwise the same result for any
 * `threads` value, because work is split into fixed-size blocks (never into one piece
 * per thread) and partial sums are combined in block order. GEMM's kernels (the linear
 * one, cpu_gemm_linear.c, and the attention one, cpu_gemm_small.c, the defaults) compute
 * each element of C as one fp32 FMA chain in K order, so where C is cut between threads
 * never matters (test_cpu_ops checks it against the scalar chain). With the options set
 * to "openblas", C is cut into pieces, each one single-threaded OpenBLAS sgemm, whose
 * kernels accumulate each element over K alone: also independent of the cut, as long as
 * no piece is small enough for OpenBLAS's small-matrix kernels (cpu_gemm.c).
 */
#ifndef MPX_CPU_INTERNAL_H
#define MPX_CPU_INTERNAL_H

#include "mpx/mpx.h"

#include <stdatomic.h>
#include <stdlib.h>

/* Elements per conversion block: buffers of this many floats live on the stack. */
#define CPU_BLOCK 1024
/* Rows per fixed reduction block (bias_grad, layernorm_bwd): independent of threads. */
#define CPU_ROW_BLOCK 32
/* Elements per fixed reduction chunk (sum_squares, count_nonfinite). */
#define CPU_SUM_CHUNK 4096

/* ---- thread pool (cpu_pool.c) ---- */
typedef void (*cpu_range_fn)(void *ctx, size_t begin, size_t end);
typedef struct cpu_pool cpu_pool;
/* A pool using `threads` threads in all (the caller is one of them). */
cpu_pool *cpu_pool_create(int threads);
void cpu_pool_destroy(cpu_pool *p);
/* fn(ctx, b, e) over pieces covering [0, n), each at least `grain` items (the last may
 * be shorter); returns when all are done. Pieces run concurrently: fn must only write
 * what its range owns. */
void cpu_pool_run(cpu_pool *p, size_t n, size_t grain, cpu_range_fn fn, void *ctx);
/* The same with pieces of exactly `piece` items (few, long items: attention heads). */
void cpu_pool_run_pieces(cpu_pool *p, size_t n, size_t piece, cpu_range_fn fn, void *ctx);

/* ---- the instance ---- */
#define CPU_WS_SLOTS 4
typedef struct cpu_be {
    mpx_env *env;          /* for errors */
    int threads;
    cpu_pool *pool;
    void *ws[CPU_WS_SLOTS];   /* reusable workspaces (GEMM operands, partial sums) */
    size_t ws_bytes[CPU_WS_SLOTS];
    int has_f16c;
    int has_avx2_fma;      /* vector Phi/exp through libmvec (cpu_vecmath.c) */
    int has_avx2;          /* vector Philox */
    int has_avx512;        /* wider vector Philox */
    char line[384];
    /* number formats (ABI 1.2), per dtype slot: the host's parameters and a decode
     * table, filled by cpu_check_ on the calling thread before any op uses them */
    const mpx_format *fmt[MPX_FORMAT_END - MPX_FORMAT_FIRST];
    float *lut[MPX_FORMAT_END - MPX_FORMAT_FIRST];
    int fp8_acc;           /* option fp8_accumulate: CPU_FP8_ACC_* */
    int small_gemm;        /* option attention_gemm: 0 = OpenBLAS, else cpu_small_gemm_level() */
    int linear_gemm;       /* option linear_gemm: 0 = OpenBLAS, else cpu_small_gemm_level() */
    void **lin_ws;         /* the linear GEMM's packing buffers: one per pool thread, then */
    size_t *lin_ws_bytes;  /* the packed B shared by the pieces (threads + 1 entries each) */
    _Atomic int *lin_taken;   /* whether a pool thread holds lin_ws[i] (threads entries) */
    void **scr;            /* per-thread scratch (cpu_scratch_take): `threads` buffers, */
    size_t *scr_bytes;     /* their sizes and whether one is taken */
    _Atomic int *scr_taken;
    int bf16_gemm;         /* option bf16_gemm: CPU_BF16_GEMM_* (the path that runs) */
    void *amx_ws;          /* the AMX GEMM's packed operands (calls through the pool) */
    size_t amx_ws_bytes;
    int census;            /* option subnormal_census */
    size_t census_n[5];    /* subnormal inputs, inputs, subnormal outputs, outputs, GEMMs */
} cpu_be;

/* A scratch buffer of at least `bytes` (64-byte aligned, contents undefined) for the
 * calling pool thread, or NULL when out of memory; *slot receives what to give back to
 * cpu_scratch_give. At most `threads` are taken at once, so inside a pool job every
 * thread finds one. */
void *cpu_scratch_take(cpu_be *be, size_t bytes, int *slot);
void cpu_scratch_give(cpu_be *be, int slot);

/* ---- the attention GEMMs (cpu_gemm_small.c) ---- */
#define CPU_SMALL_MAX 64
/* 2: AVX-512F, 1: AVX2 + FMA, 0: neither (OpenBLAS keeps these shapes). */
int cpu_small_gemm_level(void);
/* Whether the kernel takes this GEMM: batched, K or N at most CPU_SMALL_MAX. */
int cpu_small_gemm_fits(const cpu_be *be, const mpx_gemm *g);
/* One batch item over fp32 operands as cblas_sgemm reads them (g's transposes and sizes,
 * row-major); 0, or -1 when out of memory. */
int cpu_small_gemm(const cpu_be *be, const mpx_gemm *g, const float *A, int lda, const float *B, int ldb,
                   float *C, int ldc, float *panel);
/* dst[c dst_ld + r] = src[r src_ld + c] for r < rows, c < cols (8 x 8 blocks in AVX
 * registers when the CPU has AVX2; cpu_gemm_pack.c): the GEMM kernels' packing. */
void cpu_transpose_into(const cpu_be *be, const float *src, size_t src_ld, int rows, int cols, float *dst,
                        size_t dst_ld);
/* The same from a 16-bit source (element (r, c) at off + r src_ld + c), widened as it goes. */
void cpu_transpose_widen(const cpu_be *be, mpx_arg src, size_t off, size_t src_ld, int rows, int cols, float *dst,
                         size_t dst_ld);
/* The linear kernel's row-order packing (cpu_gemm_pack.c): kc source rows of n panel
 * columns each, from element first, ld apart (fp32 at f32, else a16 widened), into
 * panels of w columns at dst, the columns past n zero. */
void cpu_pack_rows(const cpu_be *be, const float *f32, mpx_arg a16, size_t first, size_t ld, int kc, int n, int w,
                   float *dst);
/* Floats of the packed op(B) panel cpu_small_gemm needs (`panel`; NULL: it allocates). */
size_t cpu_small_gemm_panel_floats(const cpu_be *be, const mpx_gemm *g);

/* ---- the one-matrix GEMMs (cpu_gemm_linear.c) ---- */
/* C = alpha op(A) op(B) + beta C on operands laid out as cblas_sgemm reads them (k > 0),
 * one fp32 FMA chain per element in K order as the attention kernel's, cut over the pool
 * (NULL: this thread, with a buffer of its own); A and B are fp32, or fp16/bf16 that are
 * widened (exactly) as they are packed; 0, or -1 when out of memory or when
 * be->linear_gemm names no kernel this CPU runs. */
int cpu_linear_gemm(cpu_be *be, cpu_pool *pool, const mpx_gemm *g, mpx_arg A, int lda, mpx_arg B, int ldb,
                    mpx_arg C, int ldc);
/* The same with `bias` (g->n fp32 values) added to each row of an fp32 C as its tiles
 * are stored, bit for bit C's store and bias_add after it: beta must be 0. */
int cpu_linear_gemm_bias(cpu_be *be, cpu_pool *pool, const mpx_gemm *g, mpx_arg A, int lda, mpx_arg B, int ldb,
                         mpx_arg C, int ldc, const float *bias);
/* Whether the linear kernel cuts g's K into blocks (beta = 0 and K > its block): a C in
 * fp16/bf16 is then refused (-1), since the running sums go through C in fp32; otherwise
 * such a C is written rounded tile by tile (C read widened when beta != 0). */
int cpu_linear_gemm_cuts_k(const mpx_gemm *g);

/* How an 8-bit GEMM accumulates (option fp8_accumulate): fp32 (OpenBLAS), or an H100's
 * tensor cores per mmaemu's model (cpu_gemm_h100.c), slow or fast accumulation. */
enum { CPU_FP8_ACC_FP32 = 0, CPU_FP8_ACC_H100 = 1, CPU_FP8_ACC_H100_FAST = 2 };

/* The H100 model of one dot product of k fp8 values a[l * sa] and b[l * sb] (formats with
 * smallest normal exponents emin_a, emin_b), as an fp32 accumulator before alpha. */
float cpu_h100_dot(const float *a, size_t sa, const float *b, size_t sb, int k, int emin_a, int emin_b, int fast);

/* C = alpha * acc + beta * C over the compact stored operands A (row length lda) and B
 * (ldb), as cblas_sgemm reads them with g's transposes, acc by cpu_h100_dot. */
void cpu_gemm_h100(const mpx_gemm *g, const float *A, int lda, const float *B, int ldb, float *C, int ldc, int emin,
                   int fast);

/* The format of dtype t (NULL for fp32/fp16/bf16) once cpu_check_ has seen it. */
static inline const mpx_format *cpu_fmt(const cpu_be *be, mpx_dtype t)
{
    return mpx_dtype_is_format(t) ? be->fmt[t - MPX_FORMAT_FIRST] : NULL;
}
/* Makes dtype t usable (its format looked up, its decode table built); 0 or -1. */
int cpu_prepare_format(cpu_be *be, mpx_dtype t);
/* The dtype's name, formats by their declared name. */
const char *cpu_dtype_name(const cpu_be *be, mpx_dtype t);

/* Workspace `slot` of at least `bytes`, 64-byte aligned, contents undefined. */
void *cpu_ws(cpu_be *be, int slot, size_t bytes);

/* Fails with MPX_ERR_UNSUPPORTED unless `a` is fp32/fp16/bf16 or a number format the
 * host knows (ABI 1.2), MPX_ERR if n > 0 and
 * a.p is NULL. `op`/`name` go into the message. */
int cpu_check_(cpu_be *be, const char *file, int line, const char *op, const char *name,
               mpx_arg a, size_t n);
#define CPU_CHECK(be, op, name, a, n) MPX_TRY(cpu_check_((be), __FILE__, __LINE__, (op), (name), (a), (n)))
/* An optional output: a NULL pointer means "not wanted" whatever its dtype says. */
#define CPU_CHECK_OPT(be, op, name, a, n) do { if ((a).p) CPU_CHECK(be, op, name, a, n); } while (0)
#define CPU_FAIL(be, ...) MPX_FAIL((be)->env, __VA_ARGS__)

/* ---- conversion (cpu_convert.c) ---- */
/* dst[j] = a[off + j] widened to fp32, j < n. */
void cpu_load(const cpu_be *be, mpx_arg a, size_t off, size_t n, float *dst);
/* a[off + j] = src[j] rounded to nearest even to a's dtype. */
void cpu_store(const cpu_be *be, const float *src, mpx_arg a, size_t off, size_t n);
/* x[j] = round(x[j]) to `t` and back (no-op for fp32). */
void cpu_round_inplace(const cpu_be *be, float *x, size_t n, mpx_dtype t);
/* The same for number formats (cpu_formats.c): table decode, RNE encode. */
void cpu_fmt_load(const cpu_be *be, mpx_arg a, size_t off, size_t n, float *dst);
void cpu_fmt_store(const cpu_be *be, const float *src, mpx_arg a, size_t off, size_t n);
void cpu_fmt_round(const cpu_be *be, float *x, size_t n, mpx_dtype t);
/* The CPU supports F16C (checked once at create). */
int cpu_detect_f16c(void);

/* ---- the 8-bit GEMMs' quantisation (cpu_quant.c) ---- */
/* A format's rounding in fp32 arithmetic (ok = 0: only the scalar form describes it). */
typedef struct cpu_qfmt {
    int ok, tie_up, subnormals, fnuz;
    unsigned sh;                           /* 23 - mantissa bits */
    float min_normal, magic, maxv, mid;    /* 2^emin, 2^(emin - M + 23), largest finite, its midpoint up */
} cpu_qfmt;
void cpu_qfmt_init(const mpx_format *f, cpu_qfmt *q);
/* x[i] = the format's value nearest x[i] * s (saturating; lut: the decode table), i < n,
 * counted into st's nonzero, saturated and flushed (not n or scale): bit for bit
 * lut[mpx_fmt_encode_sat(f, x[i] * s)], in AVX-512 where qf->ok and the CPU has it. */
void cpu_quantize(const cpu_be *be, const mpx_format *f, const cpu_qfmt *qf, const float *lut, float *x, size_t n,
                  float s, mpx_quant_stats *st);
/* One MX block (OCP MX v1.0) of w <= 32 contiguous values in place: the scale 2^X,
 * X = floor(log2(block amax)) - emax (E8M0), elements x / 2^X rounded as cpu_quantize
 * (counted), times 2^X; a NaN in the block makes the block NaN. */
void cpu_quantize_mx_block(const cpu_be *be, const mpx_format *f, const cpu_qfmt *qf, const float *lut, float *x, int w,
                           mpx_quant_stats *st);
/* MX blocks down columns: rows (<= 32) rows of `cols` columns at x (row stride ld), each
 * column one block, as cpu_quantize_mx_block does it (16 columns at a time in AVX-512). */
void cpu_quantize_mx_cols(const cpu_be *be, const mpx_format *f, const cpu_qfmt *qf, const float *lut, float *x,
                          size_t ld, int rows, int cols, mpx_quant_stats *st);
/* The largest of m and the bits of |x[i step]|, i < n: for non-negative floats the order
 * of their bits (a NaN's are above inf's). */
uint32_t cpu_abs_bits_max(const float *x, size_t n, size_t step, uint32_t m);

/* ---- the bf16 GEMMs on AMX tiles (cpu_gemm_amx.c) ---- */
enum { CPU_BF16_GEMM_FMA = 0, CPU_BF16_GEMM_AMX = 1 };
/* The CPU has AMX-BF16 and the OS lets this process use the tiles (asked once). */
int cpu_amx_available(void);
/* g's operands are bf16 values under the contract (compute bf16, or fp32 on two bf16
 * operands) and C has at least 16 rows and columns; cpu_amx_takes: and the AMX path is
 * on (option bf16_gemm, no census). */
int cpu_amx_shape(const mpx_gemm *g);
int cpu_amx_takes(const cpu_be *be, const mpx_gemm *g);
/* g's sizes are ones the AMX path takes (whatever the dtypes); cpu_amx_dims: and the path
 * is on. The 8-bit GEMMs ask these for their quantised operands, which are bf16 values. */
int cpu_amx_sizes(const mpx_gemm *g);
int cpu_amx_dims(const cpu_be *be, const mpx_gemm *g);
/* Bytes of packing buffer one item of g needs (`buf` of cpu_amx_gemm). */
size_t cpu_amx_bytes(const mpx_gemm *g);
/* An 8-bit GEMM operand's quantisation, done while the AMX path packs it: per tensor
 * (scale s) or MX (blocks of 32 along K: only where K runs along the stored rows, op(A) =
 * A or op(B) = B^T). st's nonzero, saturated and flushed are added to (atomically). */
typedef struct cpu_amx_quant {
    const mpx_format *f;
    const cpu_qfmt *qf;
    const float *lut;
    float s;
    int mx;
    mpx_quant_stats st;
} cpu_amx_quant;
/* C = alpha op(A) op(B) + beta C (fp32 C at ldc; beta = 0: C not read), operands as
 * stored with g's transposes, on AMX tiles, cut over the pool (NULL: this thread alone,
 * packing into `buf`, else into the backend's buffer); `exact`: fp32 operands hold bf16
 * values (their top halves are taken as they are); qa, qb: quantised while packed (NULL:
 * not). 0, or -1 when out of memory. */
int cpu_amx_gemm(cpu_be *be, cpu_pool *pool, const mpx_gemm *g, mpx_arg A, int lda, mpx_arg B, int ldb, float *C,
                 int ldc, void *buf, int exact, cpu_amx_quant *qa, cpu_amx_quant *qb);
/* Option subnormal_census: adds to be->census the subnormal values among g's inputs
 * (after the contract's rounding) and its fp32 result C, the values the AMX unit would
 * have read or written as zero. */
void cpu_amx_census(cpu_be *be, const mpx_gemm *g, mpx_arg A, int lda, mpx_arg B, int ldb, const float *C, int ldc);

/* ---- GEMM (cpu_gemm.c, cpu_gemm_scaled.c) ---- */
/* One fp32 row-major GEMM of g's shape on compact operands, cut over the pool (NULL:
 * this thread): the linear kernel (cpu_gemm_linear.c) or, with linear_gemm = "openblas"
 * or on a CPU without AVX2, OpenBLAS; bitwise the same for any thread count. 0, or -1
 * when out of memory. */
int cpu_sgemm_pool(cpu_be *be, cpu_pool *pool, const mpx_gemm *g, const float *A, int lda,
                    const float *B, int ldb, float *C, int ldc);
/* A GEMM whose compute dtype is a number format (8-bit emulation with scaling). */
int cpu_gemm_scaled(cpu_be *be, const mpx_gemm *g);
/* Batch item 0 of g (fp32/fp16/bf16 compute) on the calling thread alone, bit for bit what
 * the gemm op gives that item when g->batch items are computed together (the kernel is
 * chosen from g->batch as the op chooses it); conversions and packing go into `ws`, of
 * at least cpu_gemm_local_floats(g) floats. MPX_OK, or an error (message set). */
int cpu_gemm_local(cpu_be *be, const mpx_gemm *g, float *ws);
size_t cpu_gemm_local_floats(const cpu_be *be, const mpx_gemm *g);

/* ---- vector helpers (cpu_vecmath.c) ---- */
/* out[i] = the Philox word of stream element e0 + i (DESIGN: word e % 4 of block e / 4). */
void cpu_philox_words(const cpu_be *be, const mpx_rng *rng, uint64_t e0, size_t n, uint32_t *out);
/* out[i] = Phi(x[i]) = erfc(-x[i] / sqrt 2) / 2 (out may be x). */
void cpu_phi(const cpu_be *be, const float *x, float *out, size_t n);
/* out[i] = exp(x[i]) (out may be x). */
void cpu_exp(const cpu_be *be, const float *x, float *out, size_t n);
/* out[i] = exp(x[i] - sub) (out may be x); returns their sum in 8 lanes (i % 8) over the
 * full groups of 8, the tail into lane 0, combined ((0+4)+(1+5))+((2+6)+(3+7)). */
float cpu_exp_sub_sum(const cpu_be *be, const float *x, float sub, float *out, size_t n);
/* The CPU has AVX2 and FMA and glibc the vector functions (checked once at create). */
int cpu_detect_avx2_fma(void);
int cpu_detect_avx2(void);
int cpu_detect_avx512(void);

/* ---- ops, one group per file ---- */
int cpu_cast(void *be, mpx_arg x, mpx_arg y, size_t n);
int cpu_add(void *be, mpx_arg a, mpx_arg b, mpx_arg y, size_t n);
int cpu_axpby(void *be, float alpha, mpx_arg x, float beta, mpx_arg y, size_t n);
int cpu_scale(void *be, mpx_arg x, float alpha, size_t n);
int cpu_gelu_fwd(void *be, mpx_arg x, mpx_arg y, size_t n);
int cpu_gelu_bwd(void *be, mpx_arg dy, mpx_arg x, mpx_arg dx, size_t n);
int cpu_dropout_fwd(void *be, mpx_arg x, mpx_arg y, size_t n, float p, mpx_rng rng);
int cpu_dropout_bwd(void *be, mpx_arg dy, mpx_arg dx, size_t n, float p, mpx_rng rng);
int cpu_apply_update(void *be, mpx_arg w, mpx_arg comp, const float *u, size_t n,
                     mpx_rounding mode, mpx_rng rng);
/* Dropout's rule (cpu_elementwise.c, shared with the fused softmax): element i of a run
 * whose Philox words are words[i] keeps when (words[i] >> 8) >= keep_from, and
 * out[i] = kept ? x[i] * s : +0 (out may be x). */
uint32_t cpu_dropout_keep_from(float p);
float cpu_dropout_scale(float p);
void cpu_dropout_apply(const cpu_be *be, const float *x, const uint32_t *words, size_t n, uint32_t keep_from,
                       float s, float *out);
/* out[i] = a[i] + b[i], and out[i] = alpha * x[i], i < n, in AVX-512 registers when the
 * CPU has them (out may be an input). */
void cpu_vadd(const cpu_be *be, const float *a, const float *b, float *out, size_t n);
void cpu_vscale(const cpu_be *be, const float *x, float alpha, float *out, size_t n);
/* The same decisions as bits: bit i % 32 of bits[i / 32] set when element i keeps (the
 * bits past n in the last word 0); and applied from them, bit for bit cpu_dropout_apply. */
void cpu_dropout_bits(const cpu_be *be, const uint32_t *words, size_t n, uint32_t keep_from, uint32_t *bits);
void cpu_dropout_apply_bits(const cpu_be *be, const float *x, const uint32_t *bits, size_t n, float s, float *out);

int cpu_gemm(void *be, const mpx_gemm *g);
int cpu_gemm_bias(void *be, const mpx_gemm *g, mpx_arg bias);

int cpu_bias_add(void *be, mpx_arg x, mpx_arg bias, mpx_arg y, size_t rows, size_t cols);
int cpu_bias_grad(void *be, mpx_arg dy, mpx_arg dbias, size_t rows, size_t cols, int accumulate);
/* ABI 1.17 (cpu_rows.c): dropout, residual add and layernorm in one pass */
int cpu_dropout_add_layernorm_fwd(void *be, mpx_arg x, float p, mpx_rng rng, mpx_arg resid, mpx_arg r,
                                  mpx_arg gamma, mpx_arg beta, mpx_arg y, float *mean, float *rstd, size_t rows,
                                  size_t cols, float eps);
int cpu_layernorm_fwd(void *be, mpx_arg x, mpx_arg gamma, mpx_arg beta, mpx_arg y,
                      float *mean, float *rstd, size_t rows, size_t cols, float eps);
int cpu_layernorm_bwd(void *be, mpx_arg dy, mpx_arg x, mpx_arg gamma, const float *mean,
                      const float *rstd, mpx_arg dx, mpx_arg dgamma, mpx_arg dbeta,
                      size_t rows, size_t cols, int accumulate_dx, int accumulate_params);

int cpu_softmax_fwd(void *be, mpx_arg x, const mpx_arg mask, mpx_arg y, size_t batch,
                    size_t heads, size_t rows, size_t cols, float scale);
int cpu_softmax_bwd(void *be, mpx_arg dy, mpx_arg y, mpx_arg dx, size_t n_rows, size_t cols,
                    float scale);
int cpu_softmax_dropout_fwd(void *be, mpx_arg x, const mpx_arg mask, mpx_arg y, mpx_arg yd,
                            size_t batch, size_t heads, size_t rows, size_t cols, float scale,
                            float p, mpx_rng rng);
int cpu_dropout_softmax_bwd(void *be, mpx_arg dyd, mpx_arg y, mpx_arg dx, size_t n_rows,
                            size_t cols, float scale, float p, mpx_rng rng);
/* One head's rows of the attention ops, on the calling thread (cpu_attention.c): `rows`
 * rows of `cols` at x, y, ... (contiguous); mask_row: the head's example's fp32 mask row
 * (p NULL: none); rng.offset: the stream element of the first row's first element. Each
 * is bit for bit the op it names over those rows: */
/* `keep` (or NULL): the rows' dropout decisions as bits, (cols + 31) / 32 words a row
 * (cpu_dropout_bits), written by the first and read by the other two instead of the
 * stream. */
/* softmax_fwd (scale 1) into y, then, p > 0, dropout_fwd of y as stored into yd */
int cpu_attn_softmax_rows(cpu_be *be, mpx_arg x, mpx_arg mask_row, mpx_arg y, mpx_arg yd, size_t rows,
                          size_t cols, float p, mpx_rng rng, uint32_t *keep);
/* dropout_fwd of y into yd (p > 0) */
int cpu_attn_dropout_rows(cpu_be *be, mpx_arg y, mpx_arg yd, size_t rows, size_t cols, float p, mpx_rng rng,
                          const uint32_t *keep);
/* p > 0: dropout_softmax_bwd (scale 1); p = 0: softmax_bwd */
int cpu_attn_softmax_bwd_rows(cpu_be *be, mpx_arg dyd, mpx_arg y, mpx_arg dx, size_t rows, size_t cols, float p,
                              mpx_rng rng, const uint32_t *keep);
int cpu_attention_fwd(void *be, const mpx_attention *a);
int cpu_attention_bwd(void *be, const mpx_attention *a);
int cpu_cross_entropy(void *be, mpx_arg logits, const int32_t *labels, size_t rows,
                      size_t cols, double *loss, mpx_arg dlogits, float dscale);

int cpu_embedding_fwd(void *be, const int32_t *ids, size_t n_ids, mpx_arg table, size_t table_rows,
                      size_t dim, mpx_arg y);
int cpu_embedding_bwd(void *be, const int32_t *ids, size_t n_ids, mpx_arg dy, mpx_arg dtable,
                      size_t table_rows, size_t dim);
int cpu_sum_squares(void *be, mpx_arg x, size_t n, double *out);
int cpu_count_nonfinite(void *be, mpx_arg x, size_t n, size_t *out);

/* ---- the row ops' job and helpers (cpu_rows.c, cpu_rows_softmax.c) ---- */

/* Rows per piece handed to a thread (rows are cols-sized; a few hundred floats each). */
#define CPU_ROW_GRAIN 8

typedef struct row_job {
    cpu_be *be;
    mpx_arg x, y, dy, dx, aux;      /* per-op meaning, see each op */
    const float *vec0, *vec1;       /* fp32 copies of per-column vectors (bias, gamma, beta) */
    float *mean, *rstd;
    const float *cmean, *crstd;
    float *partials;                /* column-reduction partials, [block][n_vec][cols] */
    double *row_loss;
    const int32_t *labels;
    size_t rows, cols, heads_rows;
    float scale, eps, dscale;       /* dscale: the dropout's p in the fused softmax */
    mpx_rng rng;                    /* the fused softmax's dropout stream */
    uint32_t *keep;                 /* the attention op's mask bits, keep_words a row (or NULL) */
    size_t keep_words;
    int accumulate;
    atomic_int failed;              /* a worker's allocation failed */
} row_job;

/* `count` fp32 row buffers of `cols` each, or NULL (flagging the job). */
static inline float *row_buffers(row_job *j, size_t count)
{
    float *b = malloc(count * j->cols * sizeof(float));
    if (!b) atomic_store(&j->failed, 1);
    return b;
}

static inline int finish(row_job *j, const char *op)
{
    if (atomic_load(&j->failed))
        return (void)CPU_FAIL(j->be, "cpu %s: out of memory for row buffers (cols=%zu)", op, j->cols), MPX_ERR_NOMEM;
    return MPX_OK;
}

/* fp32 rows in place:
 * an fp32 row is read and written where it is stored (no copy into a work buffer);
 * other dtypes go through `buf`. Each row op reads element c of its inputs before it
 * writes element c of its output (or finishes reading a row before writing it), so an
 * output aliasing an input is fine. */
static inline const float *row_in(const row_job *j, mpx_arg a, size_t off, float *buf)
{
    if (a.t == MPX_F32) return (const float *)a.p + off;
    cpu_load(j->be, a, off, j->cols, buf);
    return buf;
}

static inline float *row_out(mpx_arg a, size_t off, float *buf)
{
    return a.t == MPX_F32 ? (float *)a.p + off : buf;
}

static inline void row_done(const row_job *j, const float *r, mpx_arg a, size_t off)
{
    if (a.t != MPX_F32) cpu_store(j->be, r, a, off, j->cols);
}

/* Sums and maxima over a row in 8 interleaved lanes combined in a fixed order: the loops
 * vectorise, and the result depends only on n (never on threads). */
#define LANES 8
/* sum x[c] and sum x[c] y[c], c < n, in those lanes (cpu_rows.c; the maximum, row_max, is
 * cpu_rows_softmax.c's) */
float cpu_row_sum(const float *x, size_t n);
float cpu_row_dot(const float *x, const float *y, size_t n);

#endif
