/* The cuda backend op by op against the cpu backend on the same inputs, as ggml's
 * test-backend-ops: every op of mpx_ops in every storage dtype (fp32, fp16, bf16, and
 * the mixed cases the model uses). Ops without exp, log or erf are bit for bit the cpu
 * backend's (as the H200 measured them: results/anchors/cuda_errors.tsv), so are the
 * Philox ops (dropout, stochastic rounding) at stream offsets that do not start on a
 * Philox block; the others, and the GEMMs (cuBLAS sums in its own order), have a
 * normalised error under a bound near the measured one (test_cuda_common.c). Skips
 * without a device. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/test_host.h"
#include "test_cuda_common.h"

static const mpx_dtype T3[3] = { MPX_F32, MPX_F16, MPX_BF16 };
#define N 5003   /* not a multiple of the block sizes */

Test(cuda_memory, zeroed_round_trip_and_overlapping_copy)
{
    cuda_pair p;
    cuda_pair_open(&p, NULL);
    pbuf z = pb_zero(&p, MPX_F32, 1000);
    double *v = pb_fetch(&p, &z);
    for (size_t i = 0; i < 1000; i++) cr_expect_eq(v[1000 + i], 0.0, "alloc is zero-filled at %zu", i);
    free(v);
    pbuf r = pb_random(&p, MPX_F32, 1000, 1, -2, 2);
    /* memmove semantics: shift by 10 elements inside one buffer */
    ON_BOTH(&p, O->copy(BE, (float *)A(r).p + 10, A(r).p, 500 * sizeof(float)));
    expect_bits(&p, &r, "overlapping copy");
    ON_BOTH(&p, O->fill_zero(BE, (float *)A(r).p + 3, 7 * sizeof(float)));
    expect_bits(&p, &r, "fill_zero");
    pb_free(&p, &z);
    pb_free(&p, &r);
    cuda_pair_close(&p);
}

Test(cuda_elementwise, cast_every_pair_bitwise)
{
    cuda_pair p;
    cuda_pair_open(&p, NULL);
    for (int i = 0; i < 3; i++)
        for (int o = 0; o < 3; o++) {
            pbuf x = pb_random(&p, T3[i], N, 10 + (uint64_t)i, -70000, 70000), y = pb_zero(&p, T3[o], N);
            pb_poke(&p, &x, 0, NAN);
            pb_poke(&p, &x, 1, 1e-7f);   /* an fp16 subnormal */
            ON_BOTH(&p, O->cast(BE, A(x), A(y), N));
            expect_bits(&p, &y, "cast");   /* RNE conversions are exact on both */
            pb_free(&p, &x);
            pb_free(&p, &y);
        }
    cuda_pair_close(&p);
}

Test(cuda_elementwise, add_axpby_scale_gelu)
{
    cuda_pair p;
    cuda_pair_open(&p, NULL);
    for (int i = 0; i < 3; i++) {
        mpx_dtype t = T3[i];
        pbuf a = pb_random(&p, t, N, 20, -3, 3), b = pb_random(&p, MPX_F32, N, 21, -3, 3), y = pb_zero(&p, t, N);
        ON_BOTH(&p, O->add(BE, A(a), A(b), A(y), N));
        expect_bits(&p, &y, "add");
        ON_BOTH(&p, O->axpby(BE, 0.75f, A(b), -1.5f, A(y), N));
        expect_bits(&p, &y, "axpby");
        ON_BOTH(&p, O->axpby(BE, 2.0f, A(a), 0.0f, A(y), N));
        expect_bits(&p, &y, "axpby beta 0");
        ON_BOTH(&p, O->scale(BE, A(y), 1.0f / 3.0f, N));
        expect_bits(&p, &y, "scale");
        ON_BOTH(&p, O->gelu_fwd(BE, A(a), A(y), N));
        expect_close(&p, &y, "gelu_fwd");
        ON_BOTH(&p, O->gelu_bwd(BE, A(b), A(a), A(y), N));
        expect_close(&p, &y, "gelu_bwd");
        pb_free(&p, &a);
        pb_free(&p, &b);
        pb_free(&p, &y);
    }
    cuda_pair_close(&p);
}

/* One dtype throughout, as the model's residual adds, GELUs and dropouts run: the cuda
 * backend then loads 16 bytes at a time where the pointers are 16-byte aligned (shift 0
 * and 8 elements) and falls back to one element at a time where they are not (1 and 3)
 * and for the elements past the last whole vector; either way the cpu backend's bits
 * (GELU: its bound). Dropout at stream offsets on a Philox block (0, 8, 4100: the
 * vectors) and off one (3). */
Test(cuda_elementwise, one_dtype_aligned_and_not)
{
    cuda_pair p;
    cuda_pair_open(&p, NULL);
    static const size_t shifts[4] = { 0, 1, 3, 8 };
    static const uint64_t offsets[4] = { 0, 8, 4100, 3 };
    for (int i = 0; i < 3; i++) {
        mpx_dtype t = T3[i];
        for (int si = 0; si < 4; si++) {
            const size_t sh = shifts[si], n = N - sh;
            pbuf a = pb_random(&p, t, N, 40, -3, 3), b = pb_random(&p, t, N, 41, -3, 3), y = pb_zero(&p, t, N);
            char what[96];
#define AT(x) mpx_at(A(x), sh)
            snprintf(what, sizeof what, "add (%s, shift %zu)", mpx_dtype_name(t), sh);
            ON_BOTH(&p, O->add(BE, AT(a), AT(b), AT(y), n));
            expect_bits(&p, &y, what);
            ON_BOTH(&p, O->add(BE, AT(y), AT(b), AT(y), n));   /* y over a */
            expect_bits(&p, &y, what);
            snprintf(what, sizeof what, "axpby (%s, shift %zu)", mpx_dtype_name(t), sh);
            ON_BOTH(&p, O->axpby(BE, 0.75f, AT(a), -1.5f, AT(y), n));
            expect_bits(&p, &y, what);
            for (size_t k = sh; k < N; k += 97) pb_poke(&p, &y, k, NAN);   /* beta 0 must not read y */
            ON_BOTH(&p, O->axpby(BE, 2.0f, AT(b), 0.0f, AT(y), n));
            expect_bits(&p, &y, what);
            snprintf(what, sizeof what, "scale (%s, shift %zu)", mpx_dtype_name(t), sh);
            ON_BOTH(&p, O->scale(BE, AT(y), 1.0f / 3.0f, n));
            expect_bits(&p, &y, what);
            snprintf(what, sizeof what, "gelu_fwd (%s, shift %zu)", mpx_dtype_name(t), sh);
            ON_BOTH(&p, O->gelu_fwd(BE, AT(a), AT(y), n));
            expect_close(&p, &y, what);
            snprintf(what, sizeof what, "gelu_bwd (%s, shift %zu)", mpx_dtype_name(t), sh);
            ON_BOTH(&p, O->gelu_bwd(BE, AT(b), AT(a), AT(y), n));
            expect_close(&p, &y, what);
            if (sh == 0) {   /* GELU (erfc, exp) within a bound of the cpu: its vector and one-element paths bit for bit */
                cuda_side *g = &p.side[1];
                const size_t es = mpx_dtype_size(t);
                pbuf a1 = pb_zero(&p, t, N + 1), b1 = pb_zero(&p, t, N + 1), y1 = pb_zero(&p, t, N + 1);
                cr_assert_eq(g->ops->copy(g->be, mpx_at(a1.a[1], 1).p, a.a[1].p, N * es), 0);
                cr_assert_eq(g->ops->copy(g->be, mpx_at(b1.a[1], 1).p, b.a[1].p, N * es), 0);
                for (int bwd = 0; bwd < 2; bwd++) {
                    if (bwd) {
                        cr_assert_eq(g->ops->gelu_bwd(g->be, b.a[1], a.a[1], y.a[1], N), 0);
                        cr_assert_eq(g->ops->gelu_bwd(g->be, mpx_at(b1.a[1], 1), mpx_at(a1.a[1], 1), mpx_at(y1.a[1], 1), N), 0);
                    } else {
                        cr_assert_eq(g->ops->gelu_fwd(g->be, a.a[1], y.a[1], N), 0);
                        cr_assert_eq(g->ops->gelu_fwd(g->be, mpx_at(a1.a[1], 1), mpx_at(y1.a[1], 1), N), 0);
                    }
                    double *v = pb_fetch(&p, &y), *w = pb_fetch(&p, &y1);
                    cr_expect(memcmp(v + N, w + (N + 1) + 1, N * sizeof *v) == 0,
                              "gelu_%s (%s): the aligned (16-byte) and unaligned (one-element) paths differ",
                              bwd ? "bwd" : "fwd", mpx_dtype_name(t));
                    free(v);
                    free(w);
                }
                pb_free(&p, &a1);
                pb_free(&p, &b1);
                pb_free(&p, &y1);
            }
            for (int o = 0; o < 4; o++) {
                mpx_rng rng = { 0xfeedfacecafebeefull, 3, 9, offsets[o] };
                snprintf(what, sizeof what, "dropout_fwd (%s, shift %zu, offset %llu)", mpx_dtype_name(t), sh,
                         (unsigned long long)offsets[o]);
                ON_BOTH(&p, O->dropout_fwd(BE, AT(a), AT(y), n, 0.1f, rng));
                expect_bits(&p, &y, what);
                ON_BOTH(&p, O->dropout_bwd(BE, AT(b), AT(b), n, 0.5f, rng));   /* in place */
                expect_bits(&p, &b, what);
            }
#undef AT
            pb_free(&p, &a);
            pb_free(&p, &b);
            pb_free(&p, &y);
        }
    }
    cuda_pair_close(&p);
}

Test(cuda_philox, dropout_draws_the_cpu_numbers_bitwise)
{
    cuda_pair p;
    cuda_pair_open(&p, NULL);
    const float probs[4] = { 0.0f, 0.1f, 0.5f, 1.0f };
    const uint64_t offsets[3] = { 0, 3, 4097 };
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 4; k++)
            for (int o = 0; o < 3; o++) {
                mpx_rng rng = { 0x123456789abcdefull, 7, 5, offsets[o] };
                pbuf x = pb_random(&p, T3[i], N, 30, -2, 2), y = pb_zero(&p, T3[i], N), dx = pb_zero(&p, T3[i], N);
                ON_BOTH(&p, O->dropout_fwd(BE, A(x), A(y), N, probs[k], rng));
                expect_bits(&p, &y, "dropout_fwd");
                ON_BOTH(&p, O->dropout_bwd(BE, A(x), A(dx), N, probs[k], rng));
                expect_bits(&p, &dx, "dropout_bwd");
                pb_free(&p, &x);
                pb_free(&p, &y);
                pb_free(&p, &dx);
            }
    cuda_pair_close(&p);
}

Test(cuda_philox, apply_update_nearest_stochastic_kahan)
{
    cuda_pair p;
    cuda_pair_open(&p, NULL);
    const mpx_rounding modes[3] = { MPX_ROUND_NEAREST, MPX_ROUND_STOCHASTIC, MPX_ROUND_KAHAN };
    for (int i = 0; i < 3; i++)
        for (int m = 0; m < 3; m++) {
            mpx_rng rng = { 42, 3, 9, 5 };
            pbuf w = pb_random(&p, T3[i], N, 40, -1, 1), u = pb_random(&p, MPX_F32, N, 41, -1e-3f, 1e-3f);
            pbuf c = pb_random(&p, T3[i], N, 42, -1e-4f, 1e-4f);
            for (int rep = 0; rep < 3; rep++)
                ON_BOTH(&p, O->apply_update(BE, A(w), A(c), (const float *)A(u).p, N, modes[m], rng));
            expect_bits(&p, &w, modes[m] == MPX_ROUND_STOCHASTIC ? "apply_update stochastic" : "apply_update");
            if (modes[m] == MPX_ROUND_KAHAN) expect_bits(&p, &c, "apply_update kahan compensation");
            pb_free(&p, &w);
            pb_free(&p, &u);
            pb_free(&p, &c);
        }
    cuda_pair_close(&p);
}

/* ---- GEMM ---- */

/* shared_a / shared_b: that operand is one matrix at stride 0 for the whole batch */
typedef struct gcase { int ta, tb, m, n, k, batch; float alpha, beta; int shared_a, shared_b; } gcase;

static void run_gemm(cuda_pair *p, const gcase *c, mpx_dtype da, mpx_dtype db, mpx_dtype dc, mpx_dtype comp)
{
    int ra = c->ta ? c->k : c->m, ca = c->ta ? c->m : c->k, rb = c->tb ? c->n : c->k, cb = c->tb ? c->k : c->n;
    /* padded leading dimensions, and a gap between batch items */
    int lda = ca + 3, ldb = cb + 1, ldc = c->n + 2;
    long long sa = (long long)ra * lda + 5, sb = (long long)rb * ldb + 7, sc = (long long)c->m * ldc + 1;
    if (c->shared_a) sa = 0;
    if (c->shared_b) sb = 0;
    size_t na = sa ? (size_t)(sa * c->batch) : (size_t)ra * (size_t)lda,
           nb = sb ? (size_t)(sb * c->batch) : (size_t)rb * (size_t)ldb, nc = (size_t)(sc * c->batch);
    pbuf A_ = pb_random(p, da, na, 50, -1, 1), B_ = pb_random(p, db, nb, 51, -1, 1), C_ = pb_random(p, dc, nc, 52, -1, 1);
    mpx_gemm g[2];
    for (int s = 0; s < 2; s++)
        g[s] = (mpx_gemm){ .trans_a = c->ta, .trans_b = c->tb, .m = c->m, .n = c->n, .k = c->k, .alpha = c->alpha,
                           .beta = c->beta, .a = A_.a[s], .lda = lda, .stride_a = sa, .b = B_.a[s], .ldb = ldb,
                           .stride_b = sb, .c = C_.a[s], .ldc = ldc, .stride_c = sc, .batch = c->batch,
                           .compute = comp };
    ON_BOTH(p, O->gemm(BE, &g[s_]));
    char what[160];
    snprintf(what, sizeof what, "gemm %s%s %dx%dx%d batch %d%s beta %g, %s x %s -> %s, compute %s", c->ta ? "T" : "N",
             c->tb ? "T" : "N", c->m, c->n, c->k, c->batch,
             c->shared_a ? " (A at stride 0)" : c->shared_b ? " (B at stride 0)" : "", (double)c->beta,
             mpx_dtype_name(da), mpx_dtype_name(db), mpx_dtype_name(dc), mpx_dtype_name(comp));
    /* the error of a dot product over k grows with k: the bound is per output dtype and k */
    double e = pb_nmse(p, &C_), bound = gemm_nmse_bound(dc, c->k);
    errlog(what, e, bound);
    cr_expect(e <= bound, "%s: normalised error %.3g > %.3g", what, e, bound);
    pb_free(p, &A_);
    pb_free(p, &B_);
    pb_free(p, &C_);
}

Test(cuda_gemm, every_transpose_dtype_and_compute, .timeout = 120)
{
    cuda_pair p;
    cuda_pair_open(&p, NULL);
    const gcase shapes[3] = { { 0, 0, 33, 17, 65, 1, 1.0f, 0.0f, 0, 0 }, { 0, 0, 96, 80, 128, 3, 0.5f, 1.0f, 0, 0 },
                              { 0, 0, 1, 129, 7, 2, 1.0f, -0.25f, 0, 0 } };
    for (int sh = 0; sh < 3; sh++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                gcase c = shapes[sh];
                c.ta = ta;
                c.tb = tb;
                for (int ci = 0; ci < 3; ci++) {
                    mpx_dtype comp = T3[ci];
                    run_gemm(&p, &c, comp, comp, comp, comp);       /* all in the compute dtype */
                    run_gemm(&p, &c, comp, comp, MPX_F32, comp);    /* fp32 out */
                    run_gemm(&p, &c, MPX_F32, comp, comp, comp);    /* autocast: fp32 weight, 16-bit GEMM */
                }
                run_gemm(&p, &c, MPX_F32, MPX_F32, MPX_BF16, MPX_F32);  /* fp32 inputs into a 16-bit C */
                run_gemm(&p, &c, MPX_F16, MPX_F16, MPX_BF16, MPX_F16);  /* C neither compute nor fp32 */
                run_gemm(&p, &c, MPX_BF16, MPX_BF16, MPX_F16, MPX_F16); /* inputs rounded to another 16-bit type */
            }
    cuda_pair_close(&p);
}

/* The model's own shapes (bert-base, batch 32 x 384 tokens: m = 12,288 rows): the
 * forward's x W^T over k = 768 and the FFN's down projection over k = 3072, attention's
 * P V over the 384 keys (8 of its batched items), and a weight gradient dY^T X summing
 * over all 12,288 tokens; each in bf16, fp16 and fp32, 16-bit GEMMs with a 16-bit and an
 * fp32 output. The bound grows with sqrt(k) (test_cuda_common.c). */
Test(cuda_gemm, the_models_shapes, .timeout = 300)
{
    cuda_pair p;
    cuda_pair_open(&p, NULL);
    const gcase shapes[4] = { { 0, 1, 12288, 96, 768, 1, 1.0f, 0.0f, 0, 0 }, { 0, 1, 12288, 96, 3072, 1, 1.0f, 0.0f, 0, 0 },
                              { 0, 0, 384, 64, 384, 8, 1.0f, 0.0f, 0, 0 }, { 1, 0, 768, 96, 12288, 1, 1.0f, 1.0f, 0, 0 } };
    for (int sh = 0; sh < 4; sh++)
        for (int ci = 0; ci < 3; ci++) {
            mpx_dtype comp = T3[ci];
            run_gemm(&p, &shapes[sh], comp, comp, comp, comp);
            if (comp != MPX_F32) run_gemm(&p, &shapes[sh], comp, comp, MPX_F32, comp);
        }
    cuda_pair_close(&p);
}

/* bert's Q, K and V as one call (bert_qkv_spacing): the layer's input x at stride 0
 * against the three weights, forward (x W^T, a 16-bit C read with beta 1 after its bias
 * fill, or fp32 written) and for the weight gradients (dY^T x over the 12,288 tokens,
 * accumulated); fp32 x into a 16-bit GEMM (autocast's fp32 layernorm output) is converted
 * once for the batch. */
Test(cuda_gemm, a_shared_operand_at_stride_0, .timeout = 300)
{
    cuda_pair p;
    cuda_pair_open(&p, NULL);
    const gcase fwd = { 0, 1, 12288, 96, 768, 3, 1.0f, 1.0f, 1, 0 }, wgrad = { 1, 0, 96, 768, 12288, 3, 1.0f, 1.0f, 0, 1 };
    for (int ci = 0; ci < 3; ci++) {
        mpx_dtype comp = T3[ci];
        run_gemm(&p, &fwd, comp, comp, comp, comp);
        run_gemm(&p, &wgrad, comp, comp, comp, comp);
        if (comp != MPX_F32) {
            run_gemm(&p, &fwd, MPX_F32, comp, comp, comp);
            run_gemm(&p, &wgrad, comp, MPX_F32, MPX_F32, comp);
        }
    }
    gcase f0 = fwd;
    f0.beta = 0.0f;
    run_gemm(&p, &f0, MPX_F32, MPX_F32, MPX_F32, MPX_F32);
    cuda_pair_close(&p);
}

/* ---- the bias epilogue (ABI 1.13 gemm_bias, 1.18 gemm_bias_as_c), backend.cuda.epilogue = true ---- */

/* A linear layer x W^T + b on side s: the op where that side's table has it, else the ops
 * it stands for (the cpu side: its gemm_bias, and the fill and GEMM for as_c). */
static int linear_on(const mpx_ops *o, void *be, int as_c, const mpx_gemm *g, mpx_arg bias)
{
    if (!as_c) {
        if (MPX_OPS_HAS(o, gemm_bias) && o->gemm_bias) return o->gemm_bias(be, g, bias);
        int rc = o->gemm(be, g);
        return rc ? rc : o->bias_add(be, g->c, bias, g->c, (size_t)g->m, (size_t)g->n);
    }
    if (MPX_OPS_HAS(o, gemm_bias_as_c) && o->gemm_bias_as_c) return o->gemm_bias_as_c(be, g, bias);
    int rc = o->fill_zero(be, g->c.p, (size_t)g->m * (size_t)g->n * mpx_dtype_size(g->c.t));
    if (!rc) rc = o->bias_add(be, g->c, bias, g->c, (size_t)g->m, (size_t)g->n);
    return rc ? rc : o->gemm(be, g);
}

/* One linear layer at [m x k] x [n x k]^T: the epilogue's op on cuda against the cpu
 * backend's ops under the GEMM bound, and against cuda's own ops (another kernel may sum
 * in another order: how many elements differ is logged, not asserted). */
static void linear_case(cuda_pair *p, cuda_pair *ops_only, int as_c, int m, int n, int k, mpx_dtype dx, mpx_dtype dw,
                        mpx_dtype db, mpx_dtype dc, mpx_dtype comp)
{
    pbuf X = pb_random(p, dx, (size_t)m * k, 60, -1, 1), W = pb_random(p, dw, (size_t)n * k, 61, -1, 1);
    pbuf B = pb_random(p, db, (size_t)n, 62, -1, 1), C = pb_random(p, dc, (size_t)m * n, 63, -1, 1);
    for (int s = 0; s < 2; s++) {
        mpx_gemm g = { .trans_a = 0, .trans_b = 1, .m = m, .n = n, .k = k, .alpha = 1.0f, .beta = as_c ? 1.0f : 0.0f,
                       .a = X.a[s], .lda = k, .b = W.a[s], .ldb = k, .c = C.a[s], .ldc = n, .batch = 1, .compute = comp };
        int rc = linear_on(p->side[s].ops, p->side[s].be, as_c, &g, B.a[s]);
        cr_assert_eq(rc, 0, "linear on %s: %s", s ? "cuda" : "cpu", th_error(th_backend_env(p->side[s].env)));
    }
    char what[160];
    snprintf(what, sizeof what, "%s %dx%dx%d, %s x %s + %s bias -> %s, compute %s", as_c ? "gemm_bias_as_c" : "gemm_bias",
             m, n, k, mpx_dtype_name(dx), mpx_dtype_name(dw), mpx_dtype_name(db), mpx_dtype_name(dc),
             mpx_dtype_name(comp));
    double e = pb_nmse(p, &C), bound = gemm_nmse_bound(dc, k);
    errlog(what, e, bound);
    cr_expect(e <= bound, "%s: normalised error %.3g > %.3g", what, e, bound);
    if (ops_only) {   /* the same inputs through cuda's separate ops */
        double *got = pb_fetch(p, &C);
        pbuf X2 = pb_random(ops_only, dx, (size_t)m * k, 60, -1, 1), W2 = pb_random(ops_only, dw, (size_t)n * k, 61, -1, 1);
        pbuf B2 = pb_random(ops_only, db, (size_t)n, 62, -1, 1), C2 = pb_random(ops_only, dc, (size_t)m * n, 63, -1, 1);
        mpx_gemm g = { .trans_a = 0, .trans_b = 1, .m = m, .n = n, .k = k, .alpha = 1.0f, .beta = as_c ? 1.0f : 0.0f,
                       .a = X2.a[1], .lda = k, .b = W2.a[1], .ldb = k, .c = C2.a[1], .ldc = n, .batch = 1, .compute = comp };
        cr_assert_eq(linear_on(ops_only->side[1].ops, ops_only->side[1].be, as_c, &g, B2.a[1]), 0, "%s: the ops", what);
        double *ref = pb_fetch(ops_only, &C2);
        size_t differ = 0;
        for (size_t i = 0; i < C.n; i++) differ += memcmp(&got[C.n + i], &ref[C2.n + i], sizeof *got) != 0;
        cr_log_info("%s: %zu of %zu elements differ from cuda's fill, bias add and cublasGemmEx", what, differ, C.n);
        free(got);
        free(ref);
        pb_free(ops_only, &X2);
        pb_free(ops_only, &W2);
        pb_free(ops_only, &B2);
        pb_free(ops_only, &C2);
    }
    pb_free(p, &X);
    pb_free(p, &W);
    pb_free(p, &B);
    pb_free(p, &C);
}

/* The model's linear layers (bert-base, 12,288 tokens: k = 768 in, 3072 for the FFN's
 * down projection) in each policy's dtypes: fp32 (gemm_bias), bf16-master (bf16 all
 * through), amp (fp32 weight and bias into an fp16 GEMM and C); and a C that cuBLAS does
 * not write from the inputs (fp16 GEMM into bf16), which takes the ops. */
Test(cuda_gemm, bias_epilogue_at_the_models_shapes, .timeout = 300)
{
    cuda_pair p, q;
    cuda_pair_open(&p, "device = -1; epilogue = true;");
    int self = getenv("MPX_TEST_DEVICE_SO") && *getenv("MPX_TEST_DEVICE_SO");
    if (!self) {
        const mpx_ops *o = p.side[1].ops;
        cr_assert(MPX_OPS_HAS(o, gemm_bias_as_c) && o->gemm_bias && o->gemm_bias_as_c, "epilogue = true has no bias ops");
        cuda_pair_open(&q, NULL);
        cr_expect(!q.side[1].ops->gemm_bias && !q.side[1].ops->gemm_bias_as_c, "the default instance has the bias ops");
    }
    const int ks[2] = { 768, 3072 };
    for (int i = 0; i < 2; i++) {
        linear_case(&p, self ? NULL : &q, 0, 12288, 96, ks[i], MPX_F32, MPX_F32, MPX_F32, MPX_F32, MPX_F32);
        linear_case(&p, self ? NULL : &q, 1, 12288, 96, ks[i], MPX_BF16, MPX_BF16, MPX_BF16, MPX_BF16, MPX_BF16);
        linear_case(&p, self ? NULL : &q, 1, 12288, 96, ks[i], MPX_F16, MPX_F32, MPX_F32, MPX_F16, MPX_F16);
        linear_case(&p, self ? NULL : &q, 1, 12288, 96, ks[i], MPX_BF16, MPX_BF16, MPX_BF16, MPX_F32, MPX_BF16);
    }
    linear_case(&p, self ? NULL : &q, 1, 333, 77, 129, MPX_F16, MPX_F16, MPX_F16, MPX_BF16, MPX_F16);
    linear_case(&p, self ? NULL : &q, 0, 333, 77, 129, MPX_BF16, MPX_BF16, MPX_BF16, MPX_F32, MPX_BF16);
    if (!self) cuda_pair_close(&q);
    cuda_pair_close(&p);
}

/* ---- rows ---- */

Test(cuda_rows, bias_layernorm_softmax_every_dtype)
{
    cuda_pair p;
    cuda_pair_open(&p, NULL);
    const size_t rows = 77, cols = 203;
    for (int i = 0; i < 3; i++) {
        mpx_dtype t = T3[i];
        pbuf x = pb_random(&p, t, rows * cols, 60, -3, 3), bias = pb_random(&p, t, cols, 61, -1, 1);
        pbuf y = pb_zero(&p, t, rows * cols), db = pb_random(&p, t, cols, 62, -1, 1);
        ON_BOTH(&p, O->bias_add(BE, A(x), A(bias), A(y), rows, cols));
        expect_bits(&p, &y, "bias_add");
        ON_BOTH(&p, O->bias_grad(BE, A(x), A(db), rows, cols, 1));
        expect_bits(&p, &db, "bias_grad accumulate");
        ON_BOTH(&p, O->bias_grad(BE, A(x), A(db), rows, cols, 0));
        expect_bits(&p, &db, "bias_grad");

        pbuf g = pb_random(&p, t, cols, 63, 0.5f, 1.5f), be = pb_random(&p, t, cols, 64, -0.5f, 0.5f);
        pbuf mean = pb_zero(&p, MPX_F32, rows), rstd = pb_zero(&p, MPX_F32, rows);
        ON_BOTH(&p, O->layernorm_fwd(BE, A(x), A(g), A(be), A(y), (float *)A(mean).p, (float *)A(rstd).p, rows, cols, 1e-12f));
        expect_bits(&p, &y, "layernorm_fwd");
        expect_bits(&p, &mean, "layernorm_fwd mean");
        expect_bits(&p, &rstd, "layernorm_fwd rstd");
        pbuf dy = pb_random(&p, t, rows * cols, 65, -1, 1), dx = pb_random(&p, t, rows * cols, 66, -1, 1);
        pbuf dg = pb_random(&p, t, cols, 67, -1, 1), dbt = pb_random(&p, t, cols, 68, -1, 1);
        for (int acc = 0; acc < 2; acc++) {
            ON_BOTH(&p, O->layernorm_bwd(BE, A(dy), A(x), A(g), (const float *)A(mean).p, (const float *)A(rstd).p,
                                         A(dx), A(dg), A(dbt), rows, cols, acc, !acc));
            expect_bits(&p, &dx, "layernorm_bwd dx");
            expect_bits(&p, &dg, "layernorm_bwd dgamma");
            expect_bits(&p, &dbt, "layernorm_bwd dbeta");
        }

        /* softmax: batch 3, heads 2, rows 7, cols 203, a mask per batch item */
        const size_t B = 3, H = 2, R = 7, total = B * H * R;
        pbuf sx = pb_random(&p, t, total * cols, 69, -8, 8), sy = pb_zero(&p, t, total * cols);
        pbuf mask = pb_random(&p, MPX_F32, B * cols, 70, -10000, 0), sdx = pb_zero(&p, t, total * cols);
        pbuf sdy = pb_random(&p, t, total * cols, 71, -1, 1);
        ON_BOTH(&p, O->softmax_fwd(BE, A(sx), A(mask), A(sy), B, H, R, cols, 0.125f));
        expect_close(&p, &sy, "softmax_fwd masked");
        ON_BOTH(&p, O->softmax_bwd(BE, A(sdy), A(sy), A(sdx), total, cols, 0.125f));
        expect_close(&p, &sdx, "softmax_bwd");
        ON_BOTH(&p, O->softmax_fwd(BE, A(sx), mpx_a(NULL, MPX_F32), A(sy), B, H, R, cols, 1.0f));
        expect_close(&p, &sy, "softmax_fwd unmasked");
        pbuf *all[] = { &x, &bias, &y, &db, &g, &be, &mean, &rstd, &dy, &dx, &dg, &dbt, &sx, &sy, &mask, &sdx, &sdy };
        for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) pb_free(&p, all[k]);
    }
    cuda_pair_close(&p);
}

/* The dtype mixes the model runs: LayerNorm over 16-bit activations with fp32 or 16-bit
 * parameters into an fp32 island or back to 16 bits, its backward with fp32 parameter
 * gradients, a 16-bit linear's bias in fp32 (amp), a 16-bit gradient's bias sum into
 * fp32, the softmax island (16-bit scores, fp32 probabilities) and back. Bit for bit,
 * but softmax (exp). */

Test(cuda_rows, mixed_dtypes_as_the_model_runs_them)
{
    cuda_pair p;
    cuda_pair_open(&p, NULL);
    const size_t rows = 77, cols = 203;
    static const struct { mpx_dtype x, w, y; } ln[] = {
        { MPX_BF16, MPX_BF16, MPX_F32 }, { MPX_F16, MPX_F32, MPX_F16 }, { MPX_BF16, MPX_F32, MPX_BF16 },
        { MPX_F32, MPX_BF16, MPX_BF16 }, { MPX_F16, MPX_F32, MPX_F32 },
    };
    for (size_t i = 0; i < sizeof ln / sizeof ln[0]; i++) {
        pbuf x = pb_random(&p, ln[i].x, rows * cols, 160, -3, 3), y = pb_zero(&p, ln[i].y, rows * cols);
        pbuf g = pb_random(&p, ln[i].w, cols, 161, 0.5f, 1.5f), be = pb_random(&p, ln[i].w, cols, 162, -0.5f, 0.5f);
        pbuf mean = pb_zero(&p, MPX_F32, rows), rstd = pb_zero(&p, MPX_F32, rows);
        char what[120];
        snprintf(what, sizeof what, "layernorm_fwd x %s, gamma %s -> %s", mpx_dtype_name(ln[i].x),
                 mpx_dtype_name(ln[i].w), mpx_dtype_name(ln[i].y));
        ON_BOTH(&p, O->layernorm_fwd(BE, A(x), A(g), A(be), A(y), (float *)A(mean).p, (float *)A(rstd).p, rows, cols,
                                     1e-12f));
        expect_bits(&p, &y, what);
        /* backward: dy in y's dtype, dx in x's, parameter grads in fp32 */
        pbuf dy = pb_random(&p, ln[i].y, rows * cols, 163, -1, 1), dx = pb_zero(&p, ln[i].x, rows * cols);
        pbuf dg = pb_zero(&p, MPX_F32, cols), db = pb_zero(&p, MPX_F32, cols);
        ON_BOTH(&p, O->layernorm_bwd(BE, A(dy), A(x), A(g), (const float *)A(mean).p, (const float *)A(rstd).p,
                                     A(dx), A(dg), A(db), rows, cols, 0, 1));
        snprintf(what, sizeof what, "layernorm_bwd dx (x %s, gamma %s, dy %s)", mpx_dtype_name(ln[i].x),
                 mpx_dtype_name(ln[i].w), mpx_dtype_name(ln[i].y));
        expect_bits(&p, &dx, what);
        expect_bits(&p, &dg, "layernorm_bwd dgamma (fp32, mixed)");
        expect_bits(&p, &db, "layernorm_bwd dbeta (fp32, mixed)");
        pb_free(&p, &dy);
        pb_free(&p, &dx);
        pb_free(&p, &dg);
        pb_free(&p, &db);
        pbuf *all[] = { &x, &y, &g, &be, &mean, &rstd };
        for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) pb_free(&p, all[k]);
    }
    /* a 16-bit activation plus an fp32 bias (amp's weights), and its gradient into fp32 */
    for (int i = 1; i < 3; i++) {
        pbuf x = pb_random(&p, T3[i], rows * cols, 170, -3, 3), bias = pb_random(&p, MPX_F32, cols, 171, -1, 1);
        pbuf y = pb_zero(&p, T3[i], rows * cols), db = pb_random(&p, MPX_F32, cols, 172, -1, 1);
        ON_BOTH(&p, O->bias_add(BE, A(x), A(bias), A(y), rows, cols));
        expect_bits(&p, &y, "bias_add (16-bit x, fp32 bias)");
        ON_BOTH(&p, O->bias_grad(BE, A(x), A(db), rows, cols, 1));
        expect_bits(&p, &db, "bias_grad (16-bit dy into fp32, accumulate)");
        /* the softmax island: 16-bit scores, fp32 probabilities, and back */
        const size_t B = 3, H = 2, R = 7, total = B * H * R;
        pbuf sx = pb_random(&p, T3[i], total * cols, 173, -8, 8), sy = pb_zero(&p, MPX_F32, total * cols);
        pbuf mask = pb_random(&p, MPX_F32, B * cols, 174, -10000, 0), sdx = pb_zero(&p, T3[i], total * cols);
        pbuf sdy = pb_random(&p, T3[i], total * cols, 175, -1, 1);
        ON_BOTH(&p, O->softmax_fwd(BE, A(sx), A(mask), A(sy), B, H, R, cols, 0.125f));
        expect_close(&p, &sy, "softmax_fwd (16-bit scores, fp32 probabilities)");
        ON_BOTH(&p, O->softmax_bwd(BE, A(sdy), A(sy), A(sdx), total, cols, 0.125f));
        expect_close(&p, &sdx, "softmax_bwd (16-bit dy, fp32 probabilities, 16-bit dx)");
        pbuf *all[] = { &x, &bias, &y, &db, &sx, &sy, &mask, &sdx, &sdy };
        for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) pb_free(&p, all[k]);
    }
    cuda_pair_close(&p);
}

static void expect_same_on_device_as(cuda_pair *p, const pbuf *a, const pbuf *b, const char *what, const char *label);

Test(cuda_rows, cross_entropy_loss_and_gradient)
{
    cuda_pair p;
    cuda_pair_open(&p, NULL);
    const size_t rows = 24, cols = 384;
    int32_t labels[24];
    for (size_t r = 0; r < rows; r++) labels[r] = (int32_t)((r * 37) % cols);
    for (int i = 0; i < 3; i++) {
        pbuf x = pb_random(&p, T3[i], rows * cols, 80, -6, 6), d = pb_zero(&p, T3[i], rows * cols);
        pbuf lab = pb_ints(&p, labels, rows);
        double loss[2];
        ON_BOTH(&p, O->cross_entropy(BE, A(x), (const int32_t *)A(lab).p, rows, cols, &loss[s_], A(d), 1024.0f));
        /* a 16-bit loss is a 16-bit scalar: at most one rounding apart */
        double tol = T3[i] == MPX_F32 ? 1e-6 : T3[i] == MPX_BF16 ? 0x1p-7 : 0x1p-10;
        cr_expect(fabs(loss[1] - loss[0]) <= tol * fabs(loss[0]), "cross_entropy loss (%s): cpu %.9g cuda %.9g",
                  mpx_dtype_name(T3[i]), loss[0], loss[1]);
        expect_close(&p, &d, "cross_entropy dlogits");
        /* without a loss (MPX_OPS_LOSS_OPTIONAL, a backward): the same gradient, bit for bit */
        const mpx_ops *o = p.side[1].ops;
        if (o->flags & MPX_OPS_LOSS_OPTIONAL) {
            pbuf d2 = pb_zero(&p, T3[i], rows * cols);
            ON_BOTH(&p, O->cross_entropy(BE, A(x), (const int32_t *)A(lab).p, rows, cols, s_ ? NULL : &loss[0], A(d2),
                                         1024.0f));
            expect_same_on_device_as(&p, &d, &d2, "dlogits", "cross_entropy without a loss");
            pb_free(&p, &d2);
        }
        pb_free(&p, &x);
        pb_free(&p, &d);
        pb_free(&p, &lab);
    }
    cuda_pair_close(&p);
}

/* ---- embeddings and reductions ---- */

static void embeddings_case(cuda_pair *p, size_t rows, size_t n_ids, const int32_t *ids)
{
    const size_t dim = 96;
    for (int i = 0; i < 3; i++) {
        pbuf table = pb_random(p, T3[i], rows * dim, 90, -1, 1), y = pb_zero(p, T3[i], n_ids * dim);
        pbuf id = pb_ints(p, ids, n_ids), dy = pb_random(p, T3[i], n_ids * dim, 91, -1, 1);
        char what[96];
        ON_BOTH(p, O->embedding_fwd(BE, (const int32_t *)A(id).p, n_ids, A(table), rows, dim, A(y)));
        snprintf(what, sizeof what, "embedding_fwd (%zu ids, %zu rows, %s)", n_ids, rows, mpx_dtype_name(T3[i]));
        expect_bits(p, &y, what);
        ON_BOTH(p, O->embedding_bwd(BE, (const int32_t *)A(id).p, n_ids, A(dy), A(table), rows, dim));
        snprintf(what, sizeof what, "embedding_bwd (%zu ids, %zu rows, %s)", n_ids, rows, mpx_dtype_name(T3[i]));
        expect_bits(p, &table, what);
        pb_free(p, &table);
        pb_free(p, &y);
        pb_free(p, &id);
        pb_free(p, &dy);
    }
}

/* Tables as the model has them, the ids in no order: a small one with many repeats, two
 * rows over 1,037 positions (the token types: chains longer than the scatter's loads
 * ahead, and a tail), and a vocabulary-sized one (the sort's 15 bits) with 300 ids and
 * with a batch's 12,288 */
Test(cuda_misc, embeddings_with_repeated_ids)
{
    cuda_pair p;
    cuda_pair_open(&p, NULL);
    int32_t ids[1037];
    for (size_t i = 0; i < 300; i++) ids[i] = (int32_t)((i * i + 3 * i) % 50);
    embeddings_case(&p, 50, 300, ids);
    for (size_t i = 0; i < 1037; i++) ids[i] = (i * 7) % 3 == 0;
    embeddings_case(&p, 2, 1037, ids);
    for (size_t i = 0; i < 300; i++) ids[i] = (int32_t)(((i % 41) * 743 + (i % 2) * 29000) % 30522);
    embeddings_case(&p, 30522, 300, ids);
    /* a batch's worth (32 x 384 ids: the sort's multi-pass path), words drawn with repeats */
    int32_t *big = malloc(12288 * sizeof *big);
    cr_assert_not_null(big);
    for (size_t i = 0; i < 12288; i++) big[i] = (int32_t)((i * 2654435761u >> 7) % (i % 3 ? 30522 : 997));
    embeddings_case(&p, 30522, 12288, big);
    free(big);
    cuda_pair_close(&p);
}

Test(cuda_misc, ids_and_labels_outside_are_refused)
{
    cuda_pair p;
    cuda_pair_open(&p, NULL);
    int32_t ids[3] = { 0, 7, 2 };
    pbuf id = pb_ints(&p, ids, 3), table = pb_zero(&p, MPX_F32, 5 * 4), y = pb_zero(&p, MPX_F32, 3 * 4);
    cuda_side *c = &p.side[1];
    /* cuda checks ids on the device and reports at the next synchronisation (a copy to
     * the host here); the cpu backend at the op */
    float back[12];
    int rc = c->ops->embedding_fwd(c->be, (const int32_t *)id.a[1].p, 3, table.a[1], 5, 4, y.a[1]);
    if (!rc) rc = c->ops->to_host(c->be, back, y.a[1].p, sizeof back);
    cr_expect_neq(rc, 0, "an id outside the table was not refused");
    cr_expect(strstr(th_error(th_backend_env(c->env)), "id 7 at position 1") != NULL, "message: %s", th_error(th_backend_env(c->env)));
    /* reported once: the next synchronisation is clean */
    cr_expect_eq(c->ops->to_host(c->be, back, y.a[1].p, sizeof back), 0, "%s", th_error(th_backend_env(c->env)));
    /* the embedding backward's ids, the lowest position outside named */
    int32_t bad2[4] = { 1, -3, 2, 9 };
    pbuf id2 = pb_ints(&p, bad2, 4), dy = pb_zero(&p, MPX_F32, 4 * 4);
    rc = c->ops->embedding_bwd(c->be, (const int32_t *)id2.a[1].p, 4, dy.a[1], table.a[1], 5, 4);
    if (!rc) rc = c->ops->to_host(c->be, back, y.a[1].p, sizeof back);
    cr_expect_neq(rc, 0, "an id outside the table was not refused by embedding_bwd");
    cr_expect(strstr(th_error(th_backend_env(c->env)), "id -3 at position 1") != NULL, "message: %s",
              th_error(th_backend_env(c->env)));
    pb_free(&p, &id2);
    pb_free(&p, &dy);
    double loss;
    cr_expect_neq(c->ops->cross_entropy(c->be, y.a[1], (const int32_t *)id.a[1].p, 3, 4, &loss, mpx_a(NULL, MPX_F32), 1.0f), 0);
    cr_expect(strstr(th_error(th_backend_env(c->env)), "label 7") != NULL, "message: %s", th_error(th_backend_env(c->env)));
    pb_free(&p, &id);
    pb_free(&p, &table);
    pb_free(&p, &y);
    cuda_pair_close(&p);
}

Test(cuda_misc, sum_squares_and_count_nonfinite)
{
    cuda_pair p;
    cuda_pair_open(&p, NULL);
    const size_t n = 3 * 4096 + 1237;
    for (int i = 0; i < 3; i++) {
        pbuf x = pb_random(&p, T3[i], n, 100, -2, 2);
        double ss[2];
        ON_BOTH(&p, O->sum_squares(BE, A(x), n, &ss[s_]));
        cr_expect(fabs(ss[1] - ss[0]) <= 1e-6 * ss[0], "sum_squares (%s): cpu %.12g cuda %.12g", mpx_dtype_name(T3[i]),
                  ss[0], ss[1]);
        pb_poke(&p, &x, 5, INFINITY);
        pb_poke(&p, &x, 4096, NAN);
        pb_poke(&p, &x, n - 1, -INFINITY);
        size_t bad[2];
        ON_BOTH(&p, O->count_nonfinite(BE, A(x), n, &bad[s_]));
        cr_expect_eq(bad[0], 3);
        cr_expect_eq(bad[1], 3, "count_nonfinite on cuda: %zu", bad[1]);
        pb_free(&p, &x);
    }
    cuda_pair_close(&p);
}

/* ---- the fused ops (ABI 1.10 and 1.17), backend.cuda.fused = true ----
 * The contract is the two ops' bits on the same backend: on the device, the fused op
 * against softmax_fwd then dropout_fwd (backward: dropout_bwd then softmax_bwd), bit for
 * bit, in the softmax island's dtype mixes, in place and not, at a stream offset inside a
 * Philox block; against the cpu backend's fused op, under the softmax bound. */

typedef struct sd_case { mpx_dtype x, y; } sd_case;
static const sd_case SD_CASES[] = {
    { MPX_F32, MPX_F32 }, { MPX_BF16, MPX_BF16 }, { MPX_F16, MPX_F16 }, { MPX_BF16, MPX_F32 }, { MPX_F16, MPX_F32 },
};

/* The device side's values of a and b are identical (`label` names the case). */
static void expect_same_on_device_as(cuda_pair *p, const pbuf *a, const pbuf *b, const char *what, const char *label)
{
    double *x = pb_fetch(p, a), *y = pb_fetch(p, b);
    size_t first = a->n;
    for (size_t i = 0; i < a->n && first == a->n; i++)
        if (memcmp(&x[a->n + i], &y[b->n + i], sizeof *x)) first = i;
    cr_expect(first == a->n, "%s: %s differs at element %zu: %.9g vs %.9g", label, what, first,
              first < a->n ? x[a->n + first] : 0.0, first < a->n ? y[b->n + first] : 0.0);
    free(x);
    free(y);
}

static void expect_same_on_device(cuda_pair *p, const pbuf *a, const pbuf *b, const char *what, size_t ci)
{
    char label[64];
    snprintf(label, sizeof label, "case %zu (%s -> %s)", ci, mpx_dtype_name(SD_CASES[ci].x),
             mpx_dtype_name(SD_CASES[ci].y));
    expect_same_on_device_as(p, a, b, what, label);
}

Test(cuda_rows, softmax_dropout_fused_is_the_two_ops_bit_for_bit, .timeout = 120)
{
    cuda_pair p;
    cuda_pair_open(&p, "device = -1; tf32 = false; fused = true;");
    cuda_side *g = &p.side[1];
    for (int s = 0; s < 2; s++)
        cr_assert(MPX_OPS_HAS(p.side[s].ops, dropout_softmax_bwd) && p.side[s].ops->softmax_dropout_fwd &&
                      p.side[s].ops->dropout_softmax_bwd, "%s has no fused softmax + dropout", s ? "cuda" : "cpu");
    const size_t B = 3, H = 2, R = 7, cols = 203, total = B * H * R, n = total * cols;
    const float ps[2] = { 0.1f, 0.5f };
    for (size_t ci = 0; ci < sizeof SD_CASES / sizeof SD_CASES[0]; ci++) {
        const sd_case *c = &SD_CASES[ci];
        for (int pi = 0; pi < 2; pi++) {
            const float pr = ps[pi];
            const mpx_rng rng = { 99, 5, 2, 1 + 5 * (uint64_t)pi };   /* offsets 1 and 6: inside a block */
            /* a mask of a few -10000 among small values: most probabilities are not 0 */
            pbuf x = pb_random(&p, c->x, n, 300 + ci, -8, 8), mask = pb_random(&p, MPX_F32, B * cols, 301, -4, 0);
            pbuf y1 = pb_zero(&p, c->y, n), yd1 = pb_zero(&p, c->y, n), y2 = pb_zero(&p, c->y, n);
            pbuf yd2 = pb_zero(&p, c->y, n);
            pb_poke(&p, &mask, 5, -10000.0f);
            pb_poke(&p, &mask, cols + 17, -10000.0f);
            ON_BOTH(&p, O->softmax_dropout_fwd(BE, A(x), A(mask), A(y1), A(yd1), B, H, R, cols, 0.125f, pr, rng));
            expect_close(&p, &yd1, "softmax_dropout_fwd against the cpu backend's");
            cr_assert_eq(g->ops->softmax_fwd(g->be, x.a[1], mask.a[1], y2.a[1], B, H, R, cols, 0.125f), 0);
            cr_assert_eq(g->ops->dropout_fwd(g->be, y2.a[1], yd2.a[1], n, pr, rng), 0);
            expect_same_on_device(&p, &y1, &y2, "fused probabilities vs softmax_fwd", ci);
            expect_same_on_device(&p, &yd1, &yd2, "fused dropped probabilities vs dropout_fwd", ci);
            /* in place: yd over y; and, in one dtype, y and yd over x */
            pbuf y3 = pb_zero(&p, c->y, n);
            cr_assert_eq(g->ops->softmax_dropout_fwd(g->be, x.a[1], mask.a[1], y3.a[1], y3.a[1], B, H, R, cols, 0.125f,
                                                     pr, rng), 0);
            expect_same_on_device(&p, &y3, &yd2, "fused with yd = y", ci);
            if (c->x == c->y) {
                pbuf x2 = pb_random(&p, c->x, n, 300 + ci, -8, 8);
                cr_assert_eq(g->ops->softmax_dropout_fwd(g->be, x2.a[1], mask.a[1], x2.a[1], x2.a[1], B, H, R, cols,
                                                         0.125f, pr, rng), 0);
                expect_same_on_device(&p, &x2, &yd2, "fused with y = yd = x", ci);
                pb_free(&p, &x2);
            }
            /* backward: the probabilities' gradient in their dtype, the scores' in x's */
            pbuf dyd = pb_random(&p, c->y, n, 310 + ci, -1, 1), dx1 = pb_zero(&p, c->x, n), dx2 = pb_zero(&p, c->x, n);
            pbuf g2 = pb_zero(&p, c->y, n);
            ON_BOTH(&p, O->dropout_softmax_bwd(BE, A(dyd), A(y1), A(dx1), total, cols, 0.125f, pr, rng));
            expect_close(&p, &dx1, "dropout_softmax_bwd against the cpu backend's");
            cr_assert_eq(g->ops->dropout_bwd(g->be, dyd.a[1], g2.a[1], n, pr, rng), 0);
            cr_assert_eq(g->ops->softmax_bwd(g->be, g2.a[1], y1.a[1], dx2.a[1], total, cols, 0.125f), 0);
            expect_same_on_device(&p, &dx1, &dx2, "fused backward vs dropout_bwd then softmax_bwd", ci);
            if (c->x == c->y) {   /* dx over dyd */
                cr_assert_eq(g->ops->dropout_softmax_bwd(g->be, dyd.a[1], y1.a[1], dyd.a[1], total, cols, 0.125f, pr,
                                                         rng), 0);
                expect_same_on_device(&p, &dyd, &dx2, "fused backward with dx = dyd", ci);
            }
            pbuf *all[] = { &x, &mask, &y1, &yd1, &y2, &yd2, &y3, &dyd, &dx1, &dx2, &g2 };
            for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) pb_free(&p, all[k]);
        }
    }
    /* what the contract forbids is refused */
    pbuf a = pb_zero(&p, MPX_F32, n), b16 = pb_zero(&p, MPX_BF16, n);
    const mpx_rng rng = { 1, 1, 1, 0 };
    cr_expect_neq(g->ops->dropout_softmax_bwd(g->be, a.a[1], a.a[1], b16.a[1], total, cols, 1.0f, 1.5f, rng), 0,
                  "p = 1.5 is refused");
    cr_expect_neq(g->ops->dropout_softmax_bwd(g->be, a.a[1], a.a[1], mpx_a(a.a[1].p, MPX_BF16), total, cols, 1.0f,
                                              0.1f, rng), 0, "dx over dyd in another dtype is refused");
    if (!(getenv("MPX_TEST_DEVICE_SO") && *getenv("MPX_TEST_DEVICE_SO")))   /* the cpu op does not check this one */
        cr_expect_neq(g->ops->softmax_dropout_fwd(g->be, a.a[1], mpx_a(NULL, MPX_F32), a.a[1],
                                                  mpx_a(a.a[1].p, MPX_BF16), B, H, R, cols, 1.0f, 0.1f, rng), 0,
                      "yd over x in another dtype is refused");
    pb_free(&p, &a);
    pb_free(&p, &b16);
    cuda_pair_close(&p);
}

/* Dropout, residual add and layernorm in one pass: on the device the three ops' bits (r,
 * y, mean, rstd), and the cpu backend's (none of the three has exp, log or erf), in the
 * model's dtype mixes, with and without dropout at a stream offset inside a Philox
 * block, the sum over the residual where the dtypes allow; and the refusals. */
Test(cuda_rows, dropout_add_layernorm_fused_is_the_three_ops_bit_for_bit, .timeout = 120)
{
    cuda_pair p;
    cuda_pair_open(&p, "device = -1; tf32 = false; fused = true;");
    cuda_side *g = &p.side[1];
    for (int s = 0; s < 2; s++)
        cr_assert(MPX_OPS_HAS(p.side[s].ops, dropout_add_layernorm_fwd) && p.side[s].ops->dropout_add_layernorm_fwd,
                  "%s has no fused dropout + residual + layernorm", s ? "cuda" : "cpu");
    const size_t rows = 77, cols = 203, n = rows * cols;
    /* x (a linear's output: act), the residual and y (ln), the sum (res), the parameters */
    static const struct { mpx_dtype x, e, r, y, w; } mix[] = {
        { MPX_F32, MPX_F32, MPX_F32, MPX_F32, MPX_F32 }, { MPX_BF16, MPX_BF16, MPX_BF16, MPX_BF16, MPX_BF16 },
        { MPX_F16, MPX_F16, MPX_F32, MPX_F16, MPX_F32 }, { MPX_BF16, MPX_F32, MPX_F32, MPX_F32, MPX_F32 },
        { MPX_F16, MPX_F16, MPX_F16, MPX_F32, MPX_F32 },
    };
    for (size_t ci = 0; ci < sizeof mix / sizeof mix[0]; ci++)
        for (int k = 0; k < 2; k++) {
            const float pr = k ? 0.1f : 0.0f;
            const mpx_rng rng = { 4242, 9, 6, 5 };
            pbuf x = pb_random(&p, mix[ci].x, n, 400 + ci, -3, 3), e = pb_random(&p, mix[ci].e, n, 410 + ci, -2, 2);
            pbuf gm = pb_random(&p, mix[ci].w, cols, 420, 0.5f, 1.5f), bt = pb_random(&p, mix[ci].w, cols, 421, -0.5f, 0.5f);
            pbuf d = pb_zero(&p, mix[ci].x, n), r1 = pb_zero(&p, mix[ci].r, n), r2 = pb_zero(&p, mix[ci].r, n);
            pbuf y1 = pb_zero(&p, mix[ci].y, n), y2 = pb_zero(&p, mix[ci].y, n);
            pbuf m1 = pb_zero(&p, MPX_F32, rows), s1 = pb_zero(&p, MPX_F32, rows);
            pbuf m2 = pb_zero(&p, MPX_F32, rows), s2 = pb_zero(&p, MPX_F32, rows);
            char what[120];
            snprintf(what, sizeof what, "dropout_add_layernorm_fwd mix %zu p %.1f", ci, (double)pr);
            ON_BOTH(&p, O->dropout_add_layernorm_fwd(BE, A(x), pr, rng, A(e), A(r2), A(gm), A(bt), A(y2),
                                                     (float *)A(m2).p, (float *)A(s2).p, rows, cols, 1e-12f));
            expect_bits(&p, &r2, what);
            expect_bits(&p, &y2, what);
            expect_bits(&p, &m2, what);
            expect_bits(&p, &s2, what);
            mpx_arg dd = x.a[1];
            if (pr > 0.0f) {
                cr_assert_eq(g->ops->dropout_fwd(g->be, x.a[1], d.a[1], n, pr, rng), 0);
                dd = d.a[1];
            }
            cr_assert_eq(g->ops->add(g->be, dd, e.a[1], r1.a[1], n), 0);
            cr_assert_eq(g->ops->layernorm_fwd(g->be, r1.a[1], gm.a[1], bt.a[1], y1.a[1], (float *)m1.a[1].p,
                                               (float *)s1.a[1].p, rows, cols, 1e-12f), 0);
            expect_same_on_device_as(&p, &r1, &r2, "fused sum vs dropout_fwd then add", what);
            expect_same_on_device_as(&p, &y1, &y2, "fused y vs layernorm_fwd", what);
            expect_same_on_device_as(&p, &m1, &m2, "fused mean", what);
            expect_same_on_device_as(&p, &s1, &s2, "fused rstd", what);
            if (mix[ci].r == mix[ci].x) {   /* the sum over x */
                pbuf x2 = pb_random(&p, mix[ci].x, n, 400 + ci, -3, 3);
                cr_assert_eq(g->ops->dropout_add_layernorm_fwd(g->be, x2.a[1], pr, rng, e.a[1], x2.a[1], gm.a[1], bt.a[1],
                                                               y2.a[1], NULL, NULL, rows, cols, 1e-12f), 0);
                expect_same_on_device_as(&p, &x2, &r1, "fused with r = x", what);
                expect_same_on_device_as(&p, &y2, &y1, "fused with r = x: y", what);
                pb_free(&p, &x2);
            }
            if (mix[ci].r == mix[ci].e) {   /* the sum over the residual */
                cr_assert_eq(g->ops->dropout_add_layernorm_fwd(g->be, x.a[1], pr, rng, e.a[1], e.a[1], gm.a[1], bt.a[1],
                                                               y2.a[1], NULL, NULL, rows, cols, 1e-12f), 0);
                expect_same_on_device_as(&p, &e, &r1, "fused with r = resid", what);
                expect_same_on_device_as(&p, &y2, &y1, "fused with r = resid: y", what);
            }
            pbuf *all[] = { &x, &e, &gm, &bt, &d, &r1, &r2, &y1, &y2, &m1, &s1, &m2, &s2 };
            for (size_t q = 0; q < sizeof all / sizeof all[0]; q++) pb_free(&p, all[q]);
        }
    pbuf a = pb_zero(&p, MPX_F32, n), b16 = pb_zero(&p, MPX_BF16, n), w = pb_zero(&p, MPX_F32, cols);
    pbuf o16 = pb_zero(&p, MPX_BF16, n);
    const mpx_rng rng = { 1, 1, 1, 0 };
    cr_expect_neq(g->ops->dropout_add_layernorm_fwd(g->be, a.a[1], 1.5f, rng, a.a[1], b16.a[1], w.a[1], w.a[1],
                                                    o16.a[1], NULL, NULL, rows, cols, 1e-12f), 0, "p = 1.5 is refused");
    cr_expect_neq(g->ops->dropout_add_layernorm_fwd(g->be, a.a[1], 0.1f, rng, a.a[1], mpx_a(a.a[1].p, MPX_BF16),
                                                    w.a[1], w.a[1], o16.a[1], NULL, NULL, rows, cols, 1e-12f), 0,
                  "r over x in another dtype is refused");
    pb_free(&p, &o16);
    cr_expect_neq(g->ops->dropout_add_layernorm_fwd(g->be, a.a[1], 0.1f, rng, a.a[1], b16.a[1], w.a[1], w.a[1],
                                                    b16.a[1], NULL, NULL, rows, cols, 1e-12f), 0, "y over r is refused");
    pb_free(&p, &a);
    pb_free(&p, &b16);
    pb_free(&p, &w);
    cuda_pair_close(&p);
}

/* fused = false (the default) runs them as separate kernels: the table has no fused op. */
Test(cuda_rows, the_default_instance_has_no_fused_ops)
{
    cuda_pair p;
    cuda_pair_open(&p, NULL);
    const mpx_ops *o = p.side[1].ops;
    if (getenv("MPX_TEST_DEVICE_SO") && *getenv("MPX_TEST_DEVICE_SO")) cr_skip_test("self-check: the cpu backend has them");
    cr_expect(!MPX_OPS_HAS(o, dropout_softmax_bwd) || (!o->softmax_dropout_fwd && !o->dropout_softmax_bwd));
    cr_expect(!MPX_OPS_HAS(o, dropout_add_layernorm_fwd) || !o->dropout_add_layernorm_fwd);
    cuda_pair_close(&p);
}

/* ---- the attention op (ABI 1.11), backend.cuda.attention = "per-example" or "batched" ---- */

typedef struct attn_case { mpx_dtype act, sm, compute; float p; int masked; } attn_case;

/* The policies' dtypes: fp32 with and without dropout, bf16-master (bf16 everywhere),
 * amp (fp16 activations and GEMMs, fp32 probabilities, no mask); and two mixes that take
 * the op's conversions: fp32 operands into bf16 GEMMs, and fp16 activations (a 16-bit
 * output that is not the compute dtype) under bf16 GEMMs. */
static const attn_case ATTN_CASES[] = {
    { MPX_F32, MPX_F32, MPX_F32, 0.0f, 1 }, { MPX_F32, MPX_F32, MPX_F32, 0.1f, 1 },
    { MPX_BF16, MPX_BF16, MPX_BF16, 0.1f, 1 }, { MPX_F16, MPX_F32, MPX_F16, 0.1f, 0 },
    { MPX_F32, MPX_F32, MPX_BF16, 0.1f, 1 }, { MPX_F16, MPX_F32, MPX_BF16, 0.1f, 1 },
};
enum { AB = 3, ANH = 4, AS = 37, AD = 16, ALD = ANH * AD + 8 };   /* an odd seq, rows wider than the heads */

/* Two GEMMs and a softmax deep: 10 times the bound of a GEMM over seq products in the
 * coarsest dtype on the way (a score rounded the other way in fp16 moves an fp32
 * probability by more than an fp32 bound allows). */
static void expect_attn(cuda_pair *p, const pbuf *b, const attn_case *c, const char *what, const char *mode)
{
    double bound = 0.0;
    const mpx_dtype on_the_way[4] = { b->a[0].t, c->act, c->sm, c->compute };
    for (int i = 0; i < 4; i++) {
        double g = gemm_nmse_bound(on_the_way[i], AS);
        bound = g > bound ? g : bound;
    }
    bound *= 10.0;
    double e = pb_nmse(p, b);
    char line[200];
    snprintf(line, sizeof line, "attention %s %s (%s, %zu elements)", mode, what, mpx_dtype_name(b->a[0].t), b->n);
    errlog(line, e, bound);
    cr_expect(e <= bound, "%s: normalised error %.3g > %.3g", line, e, bound);
}

static mpx_attention attn_args(const attn_case *c, int s, pbuf *q, pbuf *k, pbuf *v, pbuf *ctx, pbuf *mask,
                               pbuf *probs)
{
    mpx_attention a = { .size = sizeof a, .batch = AB, .heads = ANH, .seq = AS, .head_dim = AD, .ld = ALD,
                        .q = q->a[s], .k = k->a[s], .v = v->a[s], .ctx = ctx->a[s],
                        .mask = c->masked ? mask->a[s] : mpx_a(NULL, MPX_F32), .probs = probs->a[s],
                        .scores_t = c->act, .ds_t = c->act, .compute = c->compute, .scale = 0.25f, .p = c->p,
                        .rng = { 1234, 7, 3, 5 } };
    return a;
}

static void attention_against_cpu(const char *mode, int fused)
{
    char opts[160];
    snprintf(opts, sizeof opts, "device = -1; tf32 = false; attention = \"%s\"; fused = %s;", mode,
             fused ? "true" : "false");
    cuda_pair p;
    cuda_pair_open(&p, opts);
    cr_assert(MPX_OPS_HAS(p.side[1].ops, attention_bwd) && p.side[1].ops->attention_fwd &&
              p.side[1].ops->attention_bwd, "attention = \"%s\" but the instance has no attention op", mode);
    const size_t span = (size_t)AB * AS * ALD, np = (size_t)AB * ANH * AS * AS;
    for (size_t ci = 0; ci < sizeof ATTN_CASES / sizeof ATTN_CASES[0]; ci++) {
        const attn_case *c = &ATTN_CASES[ci];
        pbuf q = pb_random(&p, c->act, span, 200, -1, 1), k = pb_random(&p, c->act, span, 201, -1, 1);
        pbuf v = pb_random(&p, c->act, span, 202, -1, 1), ctx = pb_zero(&p, c->act, span);
        pbuf mask = pb_zero(&p, MPX_F32, (size_t)AB * AS), probs = pb_zero(&p, c->sm, np);
        for (int b = 0; b < AB; b++)   /* the last 5 + b keys of example b are padding */
            for (int s = AS - 5 - b; s < AS; s++) pb_poke(&p, &mask, (size_t)b * AS + (size_t)s, -10000.0f);
        mpx_attention a[2];
        for (int s = 0; s < 2; s++) a[s] = attn_args(c, s, &q, &k, &v, &ctx, &mask, &probs);
        ON_BOTH(&p, O->attention_fwd(BE, &a[s_]));
        expect_attn(&p, &probs, c, "fwd probs", mode);
        expect_attn(&p, &ctx, c, "fwd ctx", mode);
        pbuf dctx = pb_random(&p, c->act, span, 203, -1, 1), dq = pb_zero(&p, c->act, span);
        pbuf dk = pb_zero(&p, c->act, span), dv = pb_zero(&p, c->act, span);
        for (int s = 0; s < 2; s++) a[s].dctx = dctx.a[s], a[s].dq = dq.a[s], a[s].dk = dk.a[s], a[s].dv = dv.a[s];
        ON_BOTH(&p, O->attention_bwd(BE, &a[s_]));
        expect_attn(&p, &dq, c, "bwd dq", mode);
        expect_attn(&p, &dk, c, "bwd dk", mode);
        expect_attn(&p, &dv, c, "bwd dv", mode);
        /* a forward that keeps no probabilities (an evaluation's, p = 0; and with dropout) */
        pbuf ctx0 = pb_zero(&p, c->act, span), ctx1 = pb_zero(&p, c->act, span);
        for (int s = 0; s < 2; s++) a[s].ctx = ctx0.a[s], a[s].probs = mpx_a(NULL, c->sm), a[s].p = 0.0f;
        ON_BOTH(&p, O->attention_fwd(BE, &a[s_]));
        expect_attn(&p, &ctx0, c, "eval fwd ctx", mode);
        for (int s = 0; s < 2; s++) a[s].ctx = ctx1.a[s], a[s].p = c->p;
        ON_BOTH(&p, O->attention_fwd(BE, &a[s_]));
        expect_attn(&p, &ctx1, c, "fwd ctx, no probabilities kept", mode);
        pbuf *all[] = { &q, &k, &v, &ctx, &mask, &probs, &dctx, &dq, &dk, &dv, &ctx0, &ctx1 };
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) pb_free(&p, all[i]);
    }
    cuda_pair_close(&p);
}

Test(cuda_attention, per_example_op_against_the_cpu_backends, .timeout = 120) { attention_against_cpu("per-example", 0); }
Test(cuda_attention, batched_op_against_the_cpu_backends, .timeout = 120) { attention_against_cpu("batched", 0); }

/* The contract (mpx/ops.h): the op is bit for bit the ops it stands for on the same
 * backend. With "per-example" the cuda op must equal, on the device, the model's calls
 * without it: the gemm op per example over its heads, softmax_fwd, dropout_fwd, and
 * backward dropout_bwd and softmax_bwd between the GEMMs. */
static void op_is_the_ops(const char *options)
{
    cuda_pair p;
    cuda_pair_open(&p, options);
    cuda_side *g = &p.side[1];
    const size_t span = (size_t)AB * AS * ALD, np = (size_t)AB * ANH * AS * AS, SS = (size_t)AS * AS;
    for (size_t ci = 0; ci < sizeof ATTN_CASES / sizeof ATTN_CASES[0]; ci++) {
        const attn_case *c = &ATTN_CASES[ci];
        pbuf q = pb_random(&p, c->act, span, 210, -1, 1), k = pb_random(&p, c->act, span, 211, -1, 1);
        pbuf v = pb_random(&p, c->act, span, 212, -1, 1), ctx = pb_zero(&p, c->act, span);
        pbuf ctx2 = pb_zero(&p, c->act, span), mask = pb_zero(&p, MPX_F32, (size_t)AB * AS);
        pbuf probs = pb_zero(&p, c->sm, np), probs2 = pb_zero(&p, c->sm, np);
        pbuf sc = pb_zero(&p, c->act, np), pd = pb_zero(&p, c->sm, np);
        pb_poke(&p, &mask, 3, -10000.0f);
        mpx_attention a = attn_args(c, 1, &q, &k, &v, &ctx, &mask, &probs);
        cr_assert_eq(g->ops->attention_fwd(g->be, &a), 0, "%s", th_error(th_backend_env(g->env)));
        /* the same on the device, one op at a time (bert_forward.c without the op) */
        for (int b = 0; b < AB; b++) {
            mpx_gemm m = { .trans_a = 0, .trans_b = 1, .m = AS, .n = AS, .k = AD, .alpha = a.scale,
                           .a = mpx_at(q.a[1], (size_t)b * AS * ALD), .lda = ALD, .stride_a = AD,
                           .b = mpx_at(k.a[1], (size_t)b * AS * ALD), .ldb = ALD, .stride_b = AD,
                           .c = mpx_at(sc.a[1], (size_t)b * ANH * SS), .ldc = AS, .stride_c = (long long)SS,
                           .batch = ANH, .compute = c->compute };
            cr_assert_eq(g->ops->gemm(g->be, &m), 0);
        }
        cr_assert_eq(g->ops->softmax_fwd(g->be, sc.a[1], a.mask, probs2.a[1], AB, ANH, AS, AS, 1.0f), 0);
        mpx_arg used = probs2.a[1];
        if (c->p > 0.0f) {
            cr_assert_eq(g->ops->dropout_fwd(g->be, probs2.a[1], pd.a[1], np, c->p, a.rng), 0);
            used = pd.a[1];
        }
        for (int b = 0; b < AB; b++) {
            mpx_gemm m = { .trans_a = 0, .trans_b = 0, .m = AS, .n = AD, .k = AS, .alpha = 1.0f,
                           .a = mpx_at(used, (size_t)b * ANH * SS), .lda = AS, .stride_a = (long long)SS,
                           .b = mpx_at(v.a[1], (size_t)b * AS * ALD), .ldb = ALD, .stride_b = AD,
                           .c = mpx_at(ctx2.a[1], (size_t)b * AS * ALD), .ldc = ALD, .stride_c = AD,
                           .batch = ANH, .compute = c->compute };
            cr_assert_eq(g->ops->gemm(g->be, &m), 0);
        }
        double *x = pb_fetch(&p, &ctx), *y = pb_fetch(&p, &ctx2), *px = pb_fetch(&p, &probs), *py = pb_fetch(&p, &probs2);
        cr_expect(memcmp(x + span, y + span, span * sizeof *x) == 0, "case %zu: the op's context is not the ops'", ci);
        cr_expect(memcmp(px + np, py + np, np * sizeof *px) == 0, "case %zu: the op's probabilities are not the ops'",
                  ci);
        free(x);
        free(y);
        free(px);
        free(py);
        /* backward: the op against bert_backward.c's ops one by one, from the same
         * probabilities (the op's, which the forward above showed are the ops') */
        pbuf dctx = pb_random(&p, c->act, span, 213, -1, 1);
        pbuf dq = pb_zero(&p, c->act, span), dk = pb_zero(&p, c->act, span), dv = pb_zero(&p, c->act, span);
        pbuf dq2 = pb_zero(&p, c->act, span), dk2 = pb_zero(&p, c->act, span), dv2 = pb_zero(&p, c->act, span);
        pbuf g1 = pb_zero(&p, c->sm, np), g2 = pb_zero(&p, c->sm, np), ds = pb_zero(&p, c->act, np);
        a.dctx = dctx.a[1], a.dq = dq.a[1], a.dk = dk.a[1], a.dv = dv.a[1];
        cr_assert_eq(g->ops->attention_bwd(g->be, &a), 0, "%s", th_error(th_backend_env(g->env)));
        mpx_arg pdrop = probs.a[1];
        if (c->p > 0.0f) {
            cr_assert_eq(g->ops->dropout_fwd(g->be, probs.a[1], pd.a[1], np, c->p, a.rng), 0);
            pdrop = pd.a[1];
        }
        for (int b = 0; b < AB; b++) {
            const size_t e = (size_t)b * AS * ALD, h = (size_t)b * ANH * SS;
            mpx_gemm m = { .trans_a = 0, .trans_b = 1, .m = AS, .n = AS, .k = AD, .alpha = 1.0f,
                           .a = mpx_at(dctx.a[1], e), .lda = ALD, .stride_a = AD, .b = mpx_at(v.a[1], e), .ldb = ALD,
                           .stride_b = AD, .c = mpx_at(g1.a[1], h), .ldc = AS, .stride_c = (long long)SS,
                           .batch = ANH, .compute = c->compute };
            cr_assert_eq(g->ops->gemm(g->be, &m), 0);
            m = (mpx_gemm){ .trans_a = 1, .trans_b = 0, .m = AS, .n = AD, .k = AS, .alpha = 1.0f,
                            .a = mpx_at(pdrop, h), .lda = AS, .stride_a = (long long)SS, .b = mpx_at(dctx.a[1], e),
                            .ldb = ALD, .stride_b = AD, .c = mpx_at(dv2.a[1], e), .ldc = ALD, .stride_c = AD,
                            .batch = ANH, .compute = c->compute };
            cr_assert_eq(g->ops->gemm(g->be, &m), 0);
        }
        mpx_arg dp = g1.a[1];
        if (c->p > 0.0f) {
            cr_assert_eq(g->ops->dropout_bwd(g->be, g1.a[1], g2.a[1], np, c->p, a.rng), 0);
            dp = g2.a[1];
        }
        cr_assert_eq(g->ops->softmax_bwd(g->be, dp, probs.a[1], ds.a[1], np / AS, AS, 1.0f), 0);
        for (int b = 0; b < AB; b++) {
            const size_t e = (size_t)b * AS * ALD, h = (size_t)b * ANH * SS;
            for (int w = 0; w < 2; w++) {   /* dQ = dS K scale, dK = dS^T Q scale */
                mpx_gemm m = { .trans_a = w, .trans_b = 0, .m = AS, .n = AD, .k = AS, .alpha = a.scale,
                               .a = mpx_at(ds.a[1], h), .lda = AS, .stride_a = (long long)SS,
                               .b = mpx_at(w ? q.a[1] : k.a[1], e), .ldb = ALD, .stride_b = AD,
                               .c = mpx_at(w ? dk2.a[1] : dq2.a[1], e), .ldc = ALD, .stride_c = AD,
                               .batch = ANH, .compute = c->compute };
                cr_assert_eq(g->ops->gemm(g->be, &m), 0);
            }
        }
        const pbuf *op_side[3] = { &dq, &dk, &dv }, *ops_side[3] = { &dq2, &dk2, &dv2 };
        for (int i = 0; i < 3; i++) {
            static const char *const name[3] = { "dq", "dk", "dv" };
            double *u = pb_fetch(&p, op_side[i]), *w = pb_fetch(&p, ops_side[i]);
            cr_expect(memcmp(u + span, w + span, span * sizeof *u) == 0, "case %zu: the op's %s is not the ops'", ci,
                      name[i]);
            free(u);
            free(w);
        }
        pbuf *all[] = { &q, &k, &v, &ctx, &ctx2, &mask, &probs, &probs2, &sc, &pd,
                        &dctx, &dq, &dk, &dv, &dq2, &dk2, &dv2, &g1, &g2, &ds };
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) pb_free(&p, all[i]);
    }
    cuda_pair_close(&p);
}

Test(cuda_attention, per_example_op_is_the_ops_bit_for_bit, .timeout = 120)
{
    op_is_the_ops("device = -1; tf32 = false; attention = \"per-example\";");
}

/* fused = true: the op's softmax and dropout in one kernel each way, still the separate
 * ops' bits */
Test(cuda_attention, per_example_op_with_fused_dropout_is_the_ops_bit_for_bit, .timeout = 120)
{
    op_is_the_ops("device = -1; tf32 = false; attention = \"per-example\"; fused = true;");
}

Test(cuda_attention, batched_op_with_fused_dropout_against_the_cpu_backends, .timeout = 120)
{
    attention_against_cpu("batched", 1);
}

/* "ops" (the default) leaves the instance without the op: the model runs the ops. */
Test(cuda_attention, the_default_instance_has_no_attention_op)
{
    cuda_pair p;
    cuda_pair_open(&p, NULL);
    const mpx_ops *o = p.side[1].ops;
    if (getenv("MPX_TEST_DEVICE_SO") && *getenv("MPX_TEST_DEVICE_SO")) cr_skip_test("self-check: the cpu backend has one");
    cr_expect(!MPX_OPS_HAS(o, attention_fwd) || (!o->attention_fwd && !o->attention_bwd));
    cuda_pair_close(&p);
}
