/* Shared by the cpu backend op suites: the backend under test (loaded from
 * build/plugins/backend-cpu.so through the shared test host), typed test tensors, and
 * naive double-precision reference implementations of every op. */
#ifndef TEST_CPU_OPS_REF_H
#define TEST_CPU_OPS_REF_H

#include "mpx/mpx.h"

typedef struct tb {
    mpx_env *env;          /* the backend's env: its error messages land here */
    const mpx_ops *ops;
    void *be;
    const mpx_backend_vtable *vt;
    void **bufs;           /* every tb_alloc, freed by tb_close */
    size_t n_bufs, cap_bufs;
} tb;

/* Loads and creates the backend with `threads` (0 = all cores); aborts the test on failure. */
tb tb_open(int threads);
/* attention_gemm: the backend option ("mpx" or "openblas") */
tb tb_open_attn(int threads, const char *attention_gemm);
/* both GEMM options: attention_gemm and linear_gemm ("mpx", "mpx-avx2" or "openblas") */
tb tb_open_gemm(int threads, const char *attention_gemm, const char *linear_gemm);
/* ... and bf16_gemm ("auto", "amx" or "fma"; tb_open_gemm: "auto") */
tb tb_open_bf16(int threads, const char *attention_gemm, const char *linear_gemm, const char *bf16_gemm);
void tb_close(tb *t);
const char *tb_error(tb *t);

/* A backend buffer of n elements of dtype t (zero-filled). */
mpx_arg tb_alloc(tb *t, mpx_dtype d, size_t n);

extern const mpx_dtype FLOAT_TYPES[3];

/* Stores random values uniform in [lo, hi) into a (rounded to its dtype) and writes the
 * exact stored values to `vals` (NULL: not needed). `seed` picks the sequence. */
void fill_random(mpx_arg a, size_t n, double *vals, uint64_t seed, double lo, double hi);
/* Stores the given values (rounded to a's dtype) and overwrites vals with what was stored. */
void store_vals(mpx_arg a, size_t n, double *vals);
double get(mpx_arg a, size_t i);
void get_all(mpx_arg a, size_t n, double *out);

/* Round a double to dtype d with round to nearest even (double/ldexp formulation,
 * independent of mpx/numerics.h). */
double ref_round(mpx_dtype d, double v);
/* Unit in the last place of dtype d at magnitude |v| (subnormal spacing below). */
double ref_ulp(mpx_dtype d, double v);

/* Checks out[i] against ref[i] (an unrounded double reference): |out - rnd(ref)| must be
 * at most one ulp of out's dtype plus `slack[i]` (the fp32 arithmetic error bound of the
 * op, NULL = rel 1e-5 * |ref| + 1e-6 * scale). For 16-bit outputs at least `min_exact`
 * of the elements must equal rnd(ref) exactly (the "rounded once" contract). */
void check_out(const char *what, mpx_arg out, const double *ref, size_t n, double scale,
               const double *slack, double min_exact);

/* ---- double references ---- */
void ref_gemm(int ta, int tb_, int m, int n, int k, double alpha, const double *A, int lda,
              const double *B, int ldb, double beta, double *C, int ldc);
double ref_gelu(double x);
double ref_gelu_grad(double x);
void ref_layernorm(const double *x, const double *g, const double *b, double *y, size_t rows,
                   size_t cols, double eps);
void ref_softmax(const double *x, const double *mask, double *y, size_t batch, size_t heads,
                 size_t rows, size_t cols, double scale);
double ref_cross_entropy(const double *logits, const int32_t *labels, size_t rows, size_t cols);
/* Philox keep decision of dropout element i (written out from the counter layout). */
int ref_dropout_keep(mpx_rng rng, uint64_t i, float p);

#endif
