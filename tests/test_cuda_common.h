/* Shared by the cuda backend suites: the cpu backend (the reference) and the cuda
 * backend side by side through the shared test host, buffers holding the same values on
 * both, and the comparisons of ggml's test-backend-ops: a normalised mean squared error
 * per output, sum (cuda - cpu)^2 / sum cpu^2, under a bound per output dtype; exact
 * bits where the contract says so (Philox draws: dropout, stochastic rounding).
 *
 * Without a device the suites skip, visibly: cuda_pair_open() calls cr_skip_test with
 * the reason (backend-cuda.so not built, or the cuda backend's own "no CUDA device"). */
#ifndef TEST_CUDA_COMMON_H
#define TEST_CUDA_COMMON_H

#include "mpx/mpx.h"

typedef struct cuda_side {
    mpx_env *env;
    const mpx_ops *ops;
    void *be;
} cuda_side;

/* side[0] = cpu (1 thread), side[1] = cuda. Skips the test when there is no device. */
typedef struct cuda_pair { cuda_side side[2]; } cuda_pair;
void cuda_pair_open(cuda_pair *p, const char *cuda_options);
void cuda_pair_close(cuda_pair *p);

/* One logical buffer: the same n elements of dtype t on both backends. */
typedef struct pbuf { mpx_arg a[2]; size_t n; } pbuf;

/* Uniform in [lo, hi), rounded to t, identical on both sides (seed picks the values). */
pbuf pb_random(cuda_pair *p, mpx_dtype t, size_t n, uint64_t seed, float lo, float hi);
pbuf pb_zero(cuda_pair *p, mpx_dtype t, size_t n);
/* int32 values (ids, labels) on both sides. */
pbuf pb_ints(cuda_pair *p, const int32_t *v, size_t n);
/* Overwrites element i with the fp32 value v (rounded to the dtype) on both sides. */
void pb_poke(cuda_pair *p, pbuf *b, size_t i, float v);
void pb_free(cuda_pair *p, pbuf *b);

/* Both sides' values widened to double (malloc'd, 2 x n: cpu then cuda). */
double *pb_fetch(cuda_pair *p, const pbuf *b);
/* sum (got - ref)^2 / sum ref^2 (0 when both are all zero; non-finite values must sit
 * at the same places with the same bits, else the error is infinite). */
double nmse_host(const double *ref, const double *got, size_t n);
/* nmse_host of the cuda side against the cpu side. */
double pb_nmse(cuda_pair *p, const pbuf *b);
/* The bound for an output of dtype t of an op with exp, log or erf (the others must be
 * bitwise the cpu backend's): 1e-12 fp32, 5e-10 fp16, 3e-8 bf16 (test_cuda_common.c
 * says why). */
double nmse_bound(mpx_dtype t);
/* The bound for a GEMM's output of dtype `out` over k products (test_cuda_common.c). */
double gemm_nmse_bound(mpx_dtype out, int k);
/* With MPX_TEST_ERRLOG=FILE set, appends "error<TAB>bound<TAB>what" to FILE: the measured
 * margins under each bound, for the device check's record. */
void errlog(const char *what, double e, double bound);
/* Asserts pb_nmse <= nmse_bound(dtype), naming the op; returns the error. */
double expect_close(cuda_pair *p, const pbuf *b, const char *what);
/* Asserts the two sides' bytes are identical, naming the first differing element. */
void expect_bits(cuda_pair *p, const pbuf *b, const char *what);

/* Runs `call` on side s (0 cpu, 1 cuda) with A(x) = x's pointer there; asserts success. */
#define ON_BOTH(p, call)                                                                  \
    for (int s_ = 0; s_ < 2; s_++) {                                                      \
        const mpx_ops *O = (p)->side[s_].ops; void *BE = (p)->side[s_].be; (void)O; (void)BE; \
        int rc_ = (call);                                                                 \
        cr_assert_eq(rc_, 0, "%s on %s: rc %d: %s", #call, s_ ? "cuda" : "cpu", rc_,       \
                     th_error(th_backend_env((p)->side[s_].env)));                                        \
    }
#define A(b) ((b).a[s_])

#endif
