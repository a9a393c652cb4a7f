#include "test_cpu_ops_ref.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_host.h"

const mpx_dtype FLOAT_TYPES[3] = { MPX_F32, MPX_F16, MPX_BF16 };

tb tb_open(int threads) { return tb_open_attn(threads, "mpx"); }

tb tb_open_attn(int threads, const char *attention_gemm) { return tb_open_gemm(threads, attention_gemm, "mpx"); }

tb tb_open_gemm(int threads, const char *attention_gemm, const char *linear_gemm)
{
    return tb_open_bf16(threads, attention_gemm, linear_gemm, "auto");
}

tb tb_open_bf16(int threads, const char *attention_gemm, const char *linear_gemm, const char *bf16_gemm)
{
    tb t = { 0 };
    const char *why = NULL;
    const mpx_plugin_desc *d = th_load("build/plugins/backend-cpu.so", &why);
    cr_assert_not_null(d, "cannot load build/plugins/backend-cpu.so: %s", why ? why : "?");
    cr_assert_eq(d->kind, MPX_KIND_BACKEND);
    cr_assert_str_eq(d->name, "cpu");
    char opts[300];
    snprintf(opts, sizeof opts,
             "threads = %d; fp8_accumulate = \"fp32\"; attention_gemm = \"%s\"; linear_gemm = \"%s\"; "
             "bf16_gemm = \"%s\"; subnormal_census = false;",
             threads, attention_gemm, linear_gemm, bf16_gemm);
    t.env = th_env(opts, NULL, NULL);
    t.vt = d->vtable;
    cr_assert_eq(t.vt->create(t.env, &t.be), 0, "create: %s", th_error(t.env));
    t.ops = t.vt->ops;
    return t;
}

void tb_close(tb *t)
{
    for (size_t i = 0; i < t->n_bufs; i++) t->ops->free(t->be, t->bufs[i]);
    free(t->bufs);
    t->bufs = NULL;
    t->n_bufs = t->cap_bufs = 0;
    t->vt->destroy(t->be);
    th_env_free(t->env);
}

const char *tb_error(tb *t) { return th_error(t->env); }

mpx_arg tb_alloc(tb *t, mpx_dtype d, size_t n)
{
    void *p = t->ops->alloc(t->be, n * mpx_dtype_size(d) + 4);
    cr_assert_not_null(p);
    if (t->n_bufs == t->cap_bufs) {
        t->cap_bufs = t->cap_bufs ? 2 * t->cap_bufs : 32;
        t->bufs = realloc(t->bufs, t->cap_bufs * sizeof *t->bufs);
        cr_assert_not_null(t->bufs);
    }
    t->bufs[t->n_bufs++] = p;
    cr_assert_eq((uintptr_t)p % 64, 0, "alloc not 64-byte aligned");
    return mpx_a(p, d);
}

/* ---- values ---- */

double ref_round(mpx_dtype d, double v)
{
    int sig, emin;
    double maxf;
    switch (d) {
    case MPX_F16: sig = 11; emin = -14; maxf = 65504.0; break;
    case MPX_BF16: sig = 8; emin = -126; maxf = 3.3895313892515355e38; break;
    default: return (double)(float)v;
    }
    if (isnan(v) || isinf(v) || v == 0.0) return v;
    int e = ilogb(v);
    if (e < emin) e = emin;
    double r = ldexp(nearbyint(ldexp(v, sig - 1 - e)), e - (sig - 1));
    return fabs(r) > maxf ? copysign(INFINITY, v) : r;
}

double ref_ulp(mpx_dtype d, double v)
{
    int sig = d == MPX_F16 ? 11 : d == MPX_BF16 ? 8 : 24;
    int emin = d == MPX_F16 ? -14 : -126;
    int e = v == 0.0 ? emin : ilogb(v);
    if (e < emin) e = emin;
    return ldexp(1.0, e - (sig - 1));
}

double get(mpx_arg a, size_t i)
{
    switch (a.t) {
    case MPX_F32: return ((const float *)a.p)[i];
    case MPX_F16: return mpx_f16_to_f32(((const uint16_t *)a.p)[i]);
    case MPX_BF16: return mpx_bf16_to_f32(((const uint16_t *)a.p)[i]);
    default: cr_assert_fail("get: dtype %d", a.t); return 0;
    }
}

void get_all(mpx_arg a, size_t n, double *out)
{
    for (size_t i = 0; i < n; i++) out[i] = get(a, i);
}

static void put(mpx_arg a, size_t i, double v)
{
    switch (a.t) {
    case MPX_F32: ((float *)a.p)[i] = (float)v; break;
    case MPX_F16: ((uint16_t *)a.p)[i] = mpx_f32_to_f16((float)ref_round(MPX_F16, v)); break;
    case MPX_BF16: ((uint16_t *)a.p)[i] = mpx_f32_to_bf16((float)ref_round(MPX_BF16, v)); break;
    default: cr_assert_fail("put: dtype %d", a.t);
    }
}

void store_vals(mpx_arg a, size_t n, double *vals)
{
    for (size_t i = 0; i < n; i++) {
        put(a, i, vals[i]);
        vals[i] = get(a, i);
    }
}

/* splitmix64: a test-local generator (independent of the Philox under test) */
static uint64_t mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void fill_random(mpx_arg a, size_t n, double *vals, uint64_t seed, double lo, double hi)
{
    uint64_t s = seed * 7919 + 1;
    for (size_t i = 0; i < n; i++) {
        double u = (double)(mix(&s) >> 11) * 0x1p-53;
        put(a, i, lo + (hi - lo) * u);
        if (vals) vals[i] = get(a, i);
    }
}

void check_out(const char *what, mpx_arg out, const double *ref, size_t n, double scale,
               const double *slack, double min_exact)
{
    size_t exact = 0;
    for (size_t i = 0; i < n; i++) {
        double want = ref_round(out.t, ref[i]), got = get(out, i);
        double s = slack ? slack[i] : 1e-5 * fabs(ref[i]) + 1e-6 * scale;
        double tol = ref_ulp(out.t, want) + s;
        cr_assert(fabs(got - want) <= tol, "%s [%s] element %zu: got %.9g, want %.9g (ref %.12g, tol %.3g)",
                  what, mpx_dtype_name(out.t), i, got, want, ref[i], tol);
        exact += got == want;
    }
    if (out.t != MPX_F32 && n >= 20)
        cr_assert((double)exact >= min_exact * (double)n,
                  "%s [%s]: only %zu of %zu elements equal the once-rounded reference", what,
                  mpx_dtype_name(out.t), exact, n);
}

/* ---- references ---- */

void ref_gemm(int ta, int tb_, int m, int n, int k, double alpha, const double *A, int lda,
              const double *B, int ldb, double beta, double *C, int ldc)
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int p = 0; p < k; p++) {
                double a = ta ? A[(size_t)p * lda + i] : A[(size_t)i * lda + p];
                double b = tb_ ? B[(size_t)j * ldb + p] : B[(size_t)p * ldb + j];
                s += a * b;
            }
            double *c = &C[(size_t)i * ldc + j];
            *c = alpha * s + (beta != 0 ? beta * *c : 0);
        }
}

double ref_gelu(double x) { return 0.5 * x * (1.0 + erf(x / sqrt(2.0))); }

double ref_gelu_grad(double x)
{
    return 0.5 * (1.0 + erf(x / sqrt(2.0))) + x * exp(-0.5 * x * x) / sqrt(2.0 * M_PI);
}

void ref_layernorm(const double *x, const double *g, const double *b, double *y, size_t rows,
                   size_t cols, double eps)
{
    for (size_t r = 0; r < rows; r++) {
        const double *xr = x + r * cols;
        double mean = 0, var = 0;
        for (size_t c = 0; c < cols; c++) mean += xr[c];
        mean /= (double)cols;
        for (size_t c = 0; c < cols; c++) var += (xr[c] - mean) * (xr[c] - mean);
        var /= (double)cols;
        double rstd = 1.0 / sqrt(var + eps);
        for (size_t c = 0; c < cols; c++) y[r * cols + c] = (xr[c] - mean) * rstd * g[c] + b[c];
    }
}

void ref_softmax(const double *x, const double *mask, double *y, size_t batch, size_t heads,
                 size_t rows, size_t cols, double scale)
{
    for (size_t r = 0; r < batch * heads * rows; r++) {
        size_t bi = r / (heads * rows);
        double mx = -INFINITY, sum = 0;
        for (size_t c = 0; c < cols; c++) {
            double z = scale * x[r * cols + c] + (mask ? mask[bi * cols + c] : 0);
            y[r * cols + c] = z;
            mx = fmax(mx, z);
        }
        for (size_t c = 0; c < cols; c++) sum += exp(y[r * cols + c] - mx);
        for (size_t c = 0; c < cols; c++) y[r * cols + c] = exp(y[r * cols + c] - mx) / sum;
    }
}

double ref_cross_entropy(const double *logits, const int32_t *labels, size_t rows, size_t cols)
{
    double total = 0;
    for (size_t r = 0; r < rows; r++) {
        const double *z = logits + r * cols;
        double mx = -INFINITY, sum = 0;
        for (size_t c = 0; c < cols; c++) mx = fmax(mx, z[c]);
        for (size_t c = 0; c < cols; c++) sum += exp(z[c] - mx);
        total += mx + log(sum) - z[labels[r]];
    }
    return total / (double)rows;
}

int ref_dropout_keep(mpx_rng rng, uint64_t i, float p)
{
    uint64_t block = i / 4;
    uint32_t ctr[4] = { (uint32_t)(block & 0xffffffffu), (uint32_t)(block >> 32), rng.site, rng.tick };
    uint32_t key[2] = { (uint32_t)(rng.seed & 0xffffffffu), (uint32_t)(rng.seed >> 32) };
    uint32_t x = mpx_philox4x32_10(ctr, key).v[i % 4];
    return ldexp((double)(x >> 8), -24) >= (double)p;
}
