#include "test_cuda_common.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "support/test_host.h"

#define CUDA_SO "build/plugins/backend-cuda.so"

void cuda_pair_open(cuda_pair *p, const char *cuda_options)
{
    memset(p, 0, sizeof *p);
    /* MPX_TEST_DEVICE_SO=build/plugins/backend-cpu.so checks the harness itself without a
     * device: the cpu backend against itself (every error must then be 0). */
    const char *so = getenv("MPX_TEST_DEVICE_SO");
    int self_check = so && *so;
    if (!self_check) so = CUDA_SO;
    if (access(so, R_OK) != 0)
        cr_skip_test("no CUDA device checks: %s was not built (no nvcc)", so);
    for (int s = 0; s < 2; s++) p->side[s].env = th_env(NULL, NULL, NULL);
    cr_assert_eq(th_use_cpu_backend(p->side[0].env, "threads = 1;"), 0, "%s", th_error(p->side[0].env));
    if (self_check) cuda_options = "threads = 2;";
    /* MPX_TEST_CUDA_OPTIONS replaces the cuda side's options: with "tf32 = true;" the fp32
     * GEMM cases must fail (TF32's 10-bit products are far outside the fp32 bound), a
     * check on the device that the bound tells fp32 from TF32. */
    const char *forced = getenv("MPX_TEST_CUDA_OPTIONS");
    if (!self_check && forced && *forced) cuda_options = forced;
    if (th_use_backend(p->side[1].env, so, cuda_options ? cuda_options : "device = -1; tf32 = false;")) {
        const char *why = th_error(p->side[1].env);
        const char *no_dev = strstr(why, "no CUDA device");
        if (no_dev) cr_skip_test("%s", no_dev);
        cr_assert_fail("cuda backend: %s", why);
    }
    for (int s = 0; s < 2; s++) p->side[s].ops = th_ops_of(p->side[s].env, &p->side[s].be);
}

void cuda_pair_close(cuda_pair *p)
{
    for (int s = 0; s < 2; s++) if (p->side[s].env) th_env_free(p->side[s].env);
}

static mpx_arg side_alloc(cuda_side *sd, mpx_dtype t, size_t n)
{
    void *q = sd->ops->alloc(sd->be, (n ? n : 1) * mpx_dtype_size(t));
    cr_assert_not_null(q, "alloc of %zu %s elements", n, mpx_dtype_name(t));
    return mpx_a(q, t);
}

static void upload(cuda_pair *p, pbuf *b, const void *host)
{
    for (int s = 0; s < 2; s++) {
        cuda_side *sd = &p->side[s];
        cr_assert_eq(sd->ops->to_device(sd->be, b->a[s].p, host, b->n * mpx_dtype_size(b->a[s].t)), 0, "to_device");
    }
}

static void *host_of(mpx_dtype t, const float *v, size_t n)
{
    void *h = malloc((n ? n : 1) * mpx_dtype_size(t));
    cr_assert_not_null(h);
    for (size_t i = 0; i < n; i++) {
        if (t == MPX_F32) ((float *)h)[i] = v[i];
        else if (t == MPX_BF16) ((uint16_t *)h)[i] = mpx_f32_to_bf16(v[i]);
        else ((uint16_t *)h)[i] = mpx_f32_to_f16(v[i]);
    }
    return h;
}

pbuf pb_random(cuda_pair *p, mpx_dtype t, size_t n, uint64_t seed, float lo, float hi)
{
    pbuf b = { { side_alloc(&p->side[0], t, n), side_alloc(&p->side[1], t, n) }, n };
    float *v = malloc((n ? n : 1) * sizeof *v);
    cr_assert_not_null(v);
    for (size_t i = 0; i < n; i++) v[i] = lo + (hi - lo) * mpx_uniform(mpx_philox_draw(seed, 99, 1, i));
    void *h = host_of(t, v, n);
    upload(p, &b, h);
    free(h);
    free(v);
    return b;
}

pbuf pb_zero(cuda_pair *p, mpx_dtype t, size_t n)
{
    pbuf b = { { side_alloc(&p->side[0], t, n), side_alloc(&p->side[1], t, n) }, n };
    return b;
}

pbuf pb_ints(cuda_pair *p, const int32_t *v, size_t n)
{
    pbuf b = { { side_alloc(&p->side[0], MPX_I32, n), side_alloc(&p->side[1], MPX_I32, n) }, n };
    upload(p, &b, v);
    return b;
}

void pb_poke(cuda_pair *p, pbuf *b, size_t i, float v)
{
    void *h = host_of(b->a[0].t, &v, 1);
    size_t sz = mpx_dtype_size(b->a[0].t);
    for (int s = 0; s < 2; s++)
        cr_assert_eq(p->side[s].ops->to_device(p->side[s].be, (char *)b->a[s].p + i * sz, h, sz), 0);
    free(h);
}

void pb_free(cuda_pair *p, pbuf *b)
{
    for (int s = 0; s < 2; s++) p->side[s].ops->free(p->side[s].be, b->a[s].p);
}

static double widen(mpx_dtype t, const void *h, size_t i)
{
    switch (t) {
    case MPX_F32: return ((const float *)h)[i];
    case MPX_BF16: return mpx_bf16_to_f32(((const uint16_t *)h)[i]);
    case MPX_F16: return mpx_f16_to_f32(((const uint16_t *)h)[i]);
    case MPX_I32: return ((const int32_t *)h)[i];
    default: return NAN;
    }
}

static void *fetch_raw(cuda_pair *p, const pbuf *b, int s)
{
    size_t bytes = (b->n ? b->n : 1) * mpx_dtype_size(b->a[s].t);
    void *h = malloc(bytes);
    cr_assert_not_null(h);
    cr_assert_eq(p->side[s].ops->to_host(p->side[s].be, h, b->a[s].p, b->n * mpx_dtype_size(b->a[s].t)), 0,
                 "to_host on %s: %s", s ? "cuda" : "cpu", th_error(th_backend_env(p->side[s].env)));
    return h;
}

double *pb_fetch(cuda_pair *p, const pbuf *b)
{
    double *out = malloc(2 * (b->n ? b->n : 1) * sizeof *out);
    cr_assert_not_null(out);
    for (int s = 0; s < 2; s++) {
        void *h = fetch_raw(p, b, s);
        for (size_t i = 0; i < b->n; i++) out[(size_t)s * b->n + i] = widen(b->a[s].t, h, i);
        free(h);
    }
    return out;
}

double nmse_host(const double *ref, const double *got, size_t n)
{
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        double c = ref[i], d = got[i];
        if (!isfinite(c) || !isfinite(d)) {
            if (!(isnan(c) && isnan(d)) && c != d) return INFINITY;
            continue;
        }
        num += (d - c) * (d - c);
        den += c * c;
    }
    if (num == 0.0) return 0.0;
    return den > 0.0 ? num / den : INFINITY;
}

double pb_nmse(cuda_pair *p, const pbuf *b)
{
    double *v = pb_fetch(p, b);
    double e = nmse_host(v, v + b->n, b->n);
    free(v);
    return e;
}

/* Ops with exp, log or erf (GELU, softmax, cross-entropy): on the H200 (2026-12-04,
 * results/anchors/cuda_errors.tsv) their worst errors were 8.3e-15 (fp32), 8.9e-12 (fp16)
 * and 0 (bf16): a few outputs a rounding apart, where CUDA's expf/erff and glibc's differ
 * by an ulp before the rounding. The bounds sit 50-120x above that and far below the
 * faults they must catch: an fp16 output one ulp off everywhere (5.5e-7), truncated
 * instead of rounded (2.5e-7), a bf16 one rounded twice through fp16 (1.9e-6).
 * tests/test_cuda_bounds.c checks both sides of each on the CPU. */
double nmse_bound(mpx_dtype t) { return t == MPX_F32 ? 1e-12 : t == MPX_F16 ? 5e-10 : 3e-8; }

/* A GEMM's outputs differ only by the order of its fp32 sums (cuBLAS's is not the cpu
 * backend's): about sqrt(k) fp32 roundings, and a 16-bit output flips one rounding where
 * the two sums straddle a rounding boundary, at a rate about sqrt(k) 2^-24 / spacing, each
 * flip costing about spacing^2. Hence, with 16x room (the H200's worst, at k = 65 and 128:
 * bf16 3.95e-9, fp16 2.35e-10, fp32 6.6e-14, 8-110x below these):
 *   16-bit output: 16 sqrt(k) 2^-24 s, s = 2^-8 (bf16), 2^-11 (fp16)
 *   fp32 output:   (4 sqrt(k) 2^-24)^2
 * At k = 3072 that is 2.1e-7 (bf16), 2.6e-8 (fp16), 1.7e-10 (fp32): an fp16 output one
 * ulp off or truncated, and TF32's 10-bit products (about 1e-7), still fail. */
double gemm_nmse_bound(mpx_dtype out, int k)
{
    double rk = sqrt((double)(k > 0 ? k : 1)), e = 0x1p-24 * rk;
    if (out == MPX_BF16) return 16.0 * e * 0x1p-8;
    if (out == MPX_F16) return 16.0 * e * 0x1p-11;
    return (4.0 * e) * (4.0 * e);
}

void errlog(const char *what, double e, double bound)
{
    const char *path = getenv("MPX_TEST_ERRLOG");
    if (!path || !*path) return;
    FILE *f = fopen(path, "a");   /* one line per write: the suites' forked workers share it */
    if (!f) return;
    fprintf(f, "%.3g\t%.3g\t%s\n", e, bound, what);
    fclose(f);
}

double expect_close(cuda_pair *p, const pbuf *b, const char *what)
{
    double e = pb_nmse(p, b), bound = nmse_bound(b->a[0].t);
    char line[200];
    snprintf(line, sizeof line, "%s (%s, %zu elements)", what, mpx_dtype_name(b->a[0].t), b->n);
    errlog(line, e, bound);
    cr_expect(e <= bound, "%s (%s, %zu elements): normalised error %.3g > %.3g", what, mpx_dtype_name(b->a[0].t),
              b->n, e, bound);
    return e;
}

void expect_bits(cuda_pair *p, const pbuf *b, const char *what)
{
    unsigned char *c = fetch_raw(p, b, 0), *d = fetch_raw(p, b, 1);
    size_t sz = mpx_dtype_size(b->a[0].t), n_diff = 0, first = 0;
    for (size_t i = 0; i < b->n; i++)
        if (memcmp(c + i * sz, d + i * sz, sz) != 0 && !n_diff++) first = i;
    /* the device check's record: differing elements against the bound, which is none */
    char line[200];
    snprintf(line, sizeof line, "%s (%s, %zu elements; bitwise: differing elements)", what, mpx_dtype_name(b->a[0].t),
             b->n);
    errlog(line, (double)n_diff, 0.0);
    cr_expect(n_diff == 0, "%s (%s): %zu of %zu elements differ, the first %zu: cpu %.9g, cuda %.9g", what,
              mpx_dtype_name(b->a[0].t), n_diff, b->n, first, widen(b->a[0].t, c, first), widen(b->a[0].t, d, first));
    free(c);
    free(d);
}
