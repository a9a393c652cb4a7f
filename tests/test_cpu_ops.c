/* cpu backend, forward: memory, elementwise ops, dropout, GEMM — every dtype combination
 * against naive double references rounded once to the output dtype; unsupported dtypes;
 * results independent of the thread count. Row ops: test_cpu_ops_rows.c; backward
 * against finite differences: test_cpu_ops_grad.c. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_cpu_ops_ref.h"

#define N_EW 3000

static double *dbl(size_t n) { double *p = calloc(n ? n : 1, sizeof *p); cr_assert_not_null(p); return p; }

Test(memory, alloc_is_zeroed_aligned_and_copies)
{
    tb t = tb_open(2);
    for (size_t bytes = 1; bytes < 5000; bytes = bytes * 3 + 1) {
        unsigned char *p = t.ops->alloc(t.be, bytes);
        cr_assert_not_null(p);
        cr_assert_eq((uintptr_t)p % 64, 0);
        for (size_t i = 0; i < bytes; i++) cr_assert_eq(p[i], 0, "byte %zu of %zu not zero", i, bytes);
        memset(p, 0xab, bytes);
        unsigned char *q = t.ops->alloc(t.be, bytes);
        cr_assert_eq(t.ops->copy(t.be, q, p, bytes), 0);
        cr_assert_eq(memcmp(p, q, bytes), 0);
        cr_assert_eq(t.ops->fill_zero(t.be, q, bytes), 0);
        for (size_t i = 0; i < bytes; i++) cr_assert_eq(q[i], 0);
        cr_assert_eq(t.ops->to_host(t.be, q, p, bytes), 0);
        cr_assert_eq(t.ops->to_device(t.be, p, q, bytes), 0);
        cr_assert_eq(memcmp(p, q, bytes), 0);
        t.ops->free(t.be, p);
        t.ops->free(t.be, q);
    }
    cr_assert_not_null(t.vt->describe(t.be));
    tb_close(&t);
}

Test(elementwise, cast_every_pair_is_exact_rne)
{
    tb t = tb_open(2);
    double *xv = dbl(N_EW);
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++) {
            mpx_arg x = tb_alloc(&t, FLOAT_TYPES[a], N_EW), y = tb_alloc(&t, FLOAT_TYPES[b], N_EW);
            fill_random(x, N_EW, xv, 1 + a, -300.0, 300.0);
            xv[0] = 1e6; xv[1] = -7e4; xv[2] = 3e-6; xv[3] = -0.0;   /* overflow / subnormal */
            store_vals(x, 4, xv);
            cr_assert_eq(t.ops->cast(t.be, x, y, N_EW), 0, "%s", tb_error(&t));
            for (size_t i = 0; i < N_EW; i++) {
                double want = ref_round(y.t, xv[i]), got = get(y, i);
                cr_assert(got == want && !!signbit(got) == !!signbit(want), "cast %s->%s [%zu]: %.9g -> %.9g, want %.9g",
                          mpx_dtype_name(x.t), mpx_dtype_name(y.t), i, xv[i], got, want);
            }
        }
    tb_close(&t);
}

/* The bf16 conversions bit for bit against mpx/numerics.h (itself checked over all 2^32
 * inputs in test_numerics), NaNs and infinities included: every fp32 high half with 8
 * low halves (the rounding ties, both neighbours, 0 and all ones) through cast fp32 ->
 * bf16 (store), every bf16 pattern through cast bf16 -> fp32 (load), and the same fp32
 * values rounded as GEMM inputs (compute bf16, k = 1, times 1). Odd lengths and offsets
 * reach the vector loops' tails. */
Test(elementwise, bf16_conversions_match_the_scalar_rounding_bitwise)
{
    tb t = tb_open(2);
    const uint32_t lows[8] = { 0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff, 0x1234, 0xc0de };
    const size_t n = 65536 * 8 + 3;
    mpx_arg x = tb_alloc(&t, MPX_F32, n), y = tb_alloc(&t, MPX_BF16, n), z = tb_alloc(&t, MPX_F32, n);
    mpx_arg one = tb_alloc(&t, MPX_F32, 1);
    uint32_t *xu = x.p;
    for (size_t i = 0; i < n; i++) xu[i] = (uint32_t)((i / 8) % 65536) << 16 | lows[i % 8];
    *(float *)one.p = 1.0f;
    const size_t off = 1, m = n - 2;   /* an unaligned start and an odd length */
    cr_assert_eq(t.ops->cast(t.be, mpx_at(x, off), mpx_at(y, off), m), 0, "%s", tb_error(&t));
    for (size_t i = off; i < off + m; i++) {
        uint16_t want = mpx_f32_to_bf16(mpx_bits_f32(xu[i])), got = ((uint16_t *)y.p)[i];
        cr_assert_eq(got, want, "cast fp32 %08x -> bf16 %04x, want %04x", xu[i], got, want);
    }
    uint16_t *yu = y.p;
    for (size_t i = 0; i < n; i++) yu[i] = (uint16_t)(i * 40503u);   /* every pattern, shuffled */
    cr_assert_eq(t.ops->cast(t.be, mpx_at(y, off), mpx_at(z, off), m), 0, "%s", tb_error(&t));
    for (size_t i = off; i < off + m; i++) {
        float want = mpx_bf16_to_f32(yu[i]), got = ((float *)z.p)[i];
        cr_assert(memcmp(&want, &got, 4) == 0, "cast bf16 %04x -> %a, want %a", yu[i], (double)got, (double)want);
    }
    /* GEMM input rounding: C[i] = round_bf16(A[i]) * 1, the kernel's sum starting from +0
     * (so -0 comes out +0) and a NaN staying NaN */
    mpx_gemm g = { .m = (int)m, .n = 1, .k = 1, .alpha = 1.0f, .beta = 0.0f, .a = mpx_at(x, off), .lda = 1,
                   .b = one, .ldb = 1, .c = mpx_at(z, off), .ldc = 1, .batch = 1, .compute = MPX_BF16 };
    cr_assert_eq(t.ops->gemm(t.be, &g), 0, "%s", tb_error(&t));
    for (size_t i = off; i < off + m; i++) {
        float want = mpx_bf16_to_f32(mpx_f32_to_bf16(mpx_bits_f32(xu[i]))), got = ((float *)z.p)[i];
        if (isnan(want)) cr_assert(isnan(got), "gemm bf16 input %08x: got %a, want NaN", xu[i], (double)got);
        else if (want == 0.0f) cr_assert(got == 0.0f, "gemm bf16 input %08x: got %a, want 0", xu[i], (double)got);
        else cr_assert(memcmp(&want, &got, 4) == 0, "gemm bf16 input %08x: got %a, want %a", xu[i], (double)got, (double)want);
    }
    tb_close(&t);
}

Test(elementwise, add_axpby_scale_every_combination)
{
    tb t = tb_open(2);
    double *av = dbl(N_EW), *bv = dbl(N_EW), *ref = dbl(N_EW);
    for (int ia = 0; ia < 3; ia++)
        for (int ib = 0; ib < 3; ib++)
            for (int iy = 0; iy < 3; iy++) {
                mpx_arg a = tb_alloc(&t, FLOAT_TYPES[ia], N_EW), b = tb_alloc(&t, FLOAT_TYPES[ib], N_EW);
                mpx_arg y = tb_alloc(&t, FLOAT_TYPES[iy], N_EW);
                fill_random(a, N_EW, av, 10 + ia, -4, 4);
                fill_random(b, N_EW, bv, 20 + ib, -4, 4);
                cr_assert_eq(t.ops->add(t.be, a, b, y, N_EW), 0, "%s", tb_error(&t));
                for (size_t i = 0; i < N_EW; i++) ref[i] = av[i] + bv[i];
                check_out("add", y, ref, N_EW, 4, NULL, 0.97);
                /* in place: y aliases a */
                if (ia == iy) {
                    cr_assert_eq(t.ops->add(t.be, a, b, a, N_EW), 0);
                    check_out("add in place", a, ref, N_EW, 4, NULL, 0.97);
                }
            }
    for (int ix = 0; ix < 3; ix++)
        for (int iy = 0; iy < 3; iy++) {
            mpx_arg x = tb_alloc(&t, FLOAT_TYPES[ix], N_EW), y = tb_alloc(&t, FLOAT_TYPES[iy], N_EW);
            fill_random(x, N_EW, av, 30 + ix, -4, 4);
            fill_random(y, N_EW, bv, 40 + iy, -4, 4);
            cr_assert_eq(t.ops->axpby(t.be, 0.75f, x, -1.5f, y, N_EW), 0);
            for (size_t i = 0; i < N_EW; i++) ref[i] = 0.75 * av[i] - 1.5 * bv[i];
            check_out("axpby", y, ref, N_EW, 8, NULL, 0.97);
            /* beta = 0 ignores y, even NaN */
            for (size_t i = 0; i < N_EW; i++) bv[i] = NAN;
            store_vals(y, N_EW, bv);
            cr_assert_eq(t.ops->axpby(t.be, 2.0f, x, 0.0f, y, N_EW), 0);
            for (size_t i = 0; i < N_EW; i++) ref[i] = 2.0 * av[i];
            check_out("axpby beta=0", y, ref, N_EW, 8, NULL, 0.99);
        }
    for (int ix = 0; ix < 3; ix++) {
        mpx_arg x = tb_alloc(&t, FLOAT_TYPES[ix], N_EW);
        fill_random(x, N_EW, av, 50 + ix, -4, 4);
        cr_assert_eq(t.ops->scale(t.be, x, 0.3f, N_EW), 0);
        for (size_t i = 0; i < N_EW; i++) ref[i] = (double)0.3f * av[i];
        check_out("scale", x, ref, N_EW, 2, NULL, 0.97);
    }
    tb_close(&t);
}

Test(elementwise, gelu_forward_and_backward_every_combination)
{
    tb t = tb_open(2);
    double *xv = dbl(N_EW), *dyv = dbl(N_EW), *ref = dbl(N_EW);
    for (int ix = 0; ix < 3; ix++)
        for (int iy = 0; iy < 3; iy++) {
            mpx_arg x = tb_alloc(&t, FLOAT_TYPES[ix], N_EW), y = tb_alloc(&t, FLOAT_TYPES[iy], N_EW);
            fill_random(x, N_EW, xv, 60 + ix, -6, 6);
            cr_assert_eq(t.ops->gelu_fwd(t.be, x, y, N_EW), 0);
            for (size_t i = 0; i < N_EW; i++) ref[i] = ref_gelu(xv[i]);
            check_out("gelu_fwd", y, ref, N_EW, 1, NULL, 0.95);
            for (int id = 0; id < 3; id++) {
                mpx_arg dy = tb_alloc(&t, FLOAT_TYPES[id], N_EW);
                fill_random(dy, N_EW, dyv, 70 + id, -2, 2);
                cr_assert_eq(t.ops->gelu_bwd(t.be, dy, x, y, N_EW), 0);
                for (size_t i = 0; i < N_EW; i++) ref[i] = dyv[i] * ref_gelu_grad(xv[i]);
                check_out("gelu_bwd", y, ref, N_EW, 2, NULL, 0.95);
            }
        }
    tb_close(&t);
}

Test(dropout, mask_from_philox_every_combination)
{
    tb t = tb_open(2);
    const size_t n = 40001;   /* crosses the threading grain and a partial block of 4 */
    double *xv = dbl(n), *ref = dbl(n);
    const float p = 0.1f;
    mpx_rng rng = { 0x1234567890abcdefull, 7, 42, 0 };
    for (int ix = 0; ix < 3; ix++)
        for (int iy = 0; iy < 3; iy++) {
            mpx_arg x = tb_alloc(&t, FLOAT_TYPES[ix], n), y = tb_alloc(&t, FLOAT_TYPES[iy], n);
            fill_random(x, n, xv, 80 + ix, 0.5, 3);    /* nonzero: a zero output means dropped */
            cr_assert_eq(t.ops->dropout_fwd(t.be, x, y, n, p, rng), 0, "%s", tb_error(&t));
            size_t kept = 0;
            for (size_t i = 0; i < n; i++) {
                int keep = ref_dropout_keep(rng, i, p);
                kept += keep;
                ref[i] = keep ? xv[i] * (double)(1.0f / (1.0f - p)) : 0.0;
            }
            check_out("dropout_fwd", y, ref, n, 3, NULL, 0.97);
            /* kept fraction within 5 sigma of 1 - p */
            double sd = sqrt(n * p * (1 - p));
            cr_assert(fabs((double)kept - n * (1 - p)) < 5 * sd, "kept %zu of %zu", kept, n);
            /* backward: same mask applied to the gradient */
            cr_assert_eq(t.ops->dropout_bwd(t.be, x, y, n, p, rng), 0);
            check_out("dropout_bwd", y, ref, n, 3, NULL, 0.97);
        }
    /* another tick draws another mask; p = 0 keeps all, p = 1 drops all */
    mpx_arg x = tb_alloc(&t, MPX_F32, n), y = tb_alloc(&t, MPX_F32, n), y2 = tb_alloc(&t, MPX_F32, n);
    fill_random(x, n, xv, 90, 0.5, 3);
    mpx_rng r2 = rng;
    r2.tick++;
    cr_assert_eq(t.ops->dropout_fwd(t.be, x, y, n, p, rng), 0);
    cr_assert_eq(t.ops->dropout_fwd(t.be, x, y2, n, p, r2), 0);
    cr_assert_neq(memcmp(y.p, y2.p, n * 4), 0);
    cr_assert_eq(t.ops->dropout_fwd(t.be, x, y, n, 0.0f, rng), 0);
    cr_assert_eq(memcmp(x.p, y.p, n * 4), 0);
    cr_assert_eq(t.ops->dropout_fwd(t.be, x, y, n, 1.0f, rng), 0);
    for (size_t i = 0; i < n; i++) cr_assert_eq(((float *)y.p)[i], 0.0f);
    cr_assert_neq(t.ops->dropout_fwd(t.be, x, y, n, 1.5f, rng), 0);
    tb_close(&t);
}

/* Stream offsets that start inside a block of 4 and run across the carry of the block
 * counter's low word into its high word: each element keeps exactly when the scalar
 * Philox reference keeps it, through every vector width's path (128-, 64-word groups and
 * the scalar tail) — n = 1000 from offset 1 mod 4 uses them all. */
Test(dropout, mask_across_the_32_bit_block_carry)
{
    tb t = tb_open(1);
    const size_t n = 1000;
    const float p = 0.3f, s = 1.0f / (1.0f - p);
    const uint64_t offsets[] = { 1, 4 * (0x100000000ull - 20) + 1, 4 * (0x100000000ull - 40) + 2,
                                 4 * 0x3ffffffffull - 7 };
    mpx_arg x = tb_alloc(&t, MPX_F32, n), y = tb_alloc(&t, MPX_F32, n);
    for (size_t i = 0; i < n; i++) ((float *)x.p)[i] = 1.0f;
    for (size_t k = 0; k < sizeof offsets / sizeof offsets[0]; k++) {
        mpx_rng rng = { 0x0123456789abcdefull, 3, 9, offsets[k] };
        cr_assert_eq(t.ops->dropout_fwd(t.be, x, y, n, p, rng), 0, "%s", tb_error(&t));
        for (size_t i = 0; i < n; i++) {
            float want = ref_dropout_keep(rng, offsets[k] + i, p) ? s : 0.0f;
            cr_assert(((float *)y.p)[i] == want, "offset %llu element %zu: got %g, want %g",
                      (unsigned long long)offsets[k], i, (double)((float *)y.p)[i], (double)want);
        }
    }
    tb_close(&t);
}

/* ---- GEMM ---- */

typedef struct gemm_case { int ta, tb, m, n, k, batch, pad; float alpha, beta; } gemm_case;

static void run_gemm_case(tb *t, const gemm_case *c, mpx_dtype da, mpx_dtype db, mpx_dtype dc,
                          mpx_dtype compute, uint64_t seed)
{
    int ar = c->ta ? c->k : c->m, ac = c->ta ? c->m : c->k;
    int br = c->tb ? c->n : c->k, bc = c->tb ? c->k : c->n;
    int lda = ac + c->pad, ldb = bc + c->pad, ldc = c->n + c->pad;
    long long sa = (long long)ar * lda + 5, sb = (long long)br * ldb + 3, sc = (long long)c->m * ldc + 7;
    size_t na = (size_t)(sa * c->batch), nb = (size_t)(sb * c->batch), nc = (size_t)(sc * c->batch);
    mpx_arg A = tb_alloc(t, da, na), B = tb_alloc(t, db, nb), C = tb_alloc(t, dc, nc);
    double *av = dbl(na), *bv = dbl(nb), *cv = dbl(nc), *ref = dbl(nc), *slack = dbl(nc);
    fill_random(A, na, av, seed, -1, 1);
    fill_random(B, nb, bv, seed + 1, -1, 1);
    fill_random(C, nc, cv, seed + 2, -1, 1);
    memcpy(ref, cv, nc * sizeof *ref);
    /* the contract: inputs rounded to `compute` */
    double *ar_ = dbl(na), *br_ = dbl(nb), *abs_a = dbl(na), *abs_b = dbl(nb), *mag = dbl(nc);
    for (size_t i = 0; i < na; i++) { ar_[i] = ref_round(compute, av[i]); abs_a[i] = fabs(ar_[i]); }
    for (size_t i = 0; i < nb; i++) { br_[i] = ref_round(compute, bv[i]); abs_b[i] = fabs(br_[i]); }
    for (int b = 0; b < c->batch; b++) {
        ref_gemm(c->ta, c->tb, c->m, c->n, c->k, c->alpha, ar_ + b * sa, lda, br_ + b * sb, ldb,
                 c->beta, ref + b * sc, ldc);
        ref_gemm(c->ta, c->tb, c->m, c->n, c->k, fabs(c->alpha), abs_a + b * sa, lda, abs_b + b * sb,
                 ldb, 0.0, mag + b * sc, ldc);
    }
    for (size_t i = 0; i < nc; i++) slack[i] = 0x1p-22 * (c->k + 2) * (mag[i] + fabs(c->beta * cv[i]));
    mpx_gemm g = { .trans_a = c->ta, .trans_b = c->tb, .m = c->m, .n = c->n, .k = c->k,
                   .alpha = c->alpha, .beta = c->beta, .a = A, .lda = lda, .stride_a = sa,
                   .b = B, .ldb = ldb, .stride_b = sb, .c = C, .ldc = ldc, .stride_c = sc,
                   .batch = c->batch, .compute = compute };
    cr_assert_eq(t->ops->gemm(t->be, &g), 0, "gemm: %s", tb_error(t));
    /* elements outside the m × n windows must be untouched */
    for (int b = 0; b < c->batch; b++)
        for (long long i = 0; i < sc; i++) {
            size_t e = (size_t)(b * sc + i);
            int inside = i < (long long)c->m * ldc && i % ldc < c->n;
            if (!inside) ref[e] = cv[e], slack[e] = 0;
        }
    char what[160];
    snprintf(what, sizeof what, "gemm ta=%d tb=%d %dx%dx%d batch %d A %s B %s compute %s beta %g",
             c->ta, c->tb, c->m, c->n, c->k, c->batch, mpx_dtype_name(da), mpx_dtype_name(db),
             mpx_dtype_name(compute), (double)c->beta);
    check_out(what, C, ref, nc, 0, slack, 0.9);
    free(av); free(bv); free(cv); free(ref); free(slack); free(ar_); free(br_); free(abs_a);
    free(abs_b); free(mag);
    /* A, B, C: tb_close frees every tb_alloc */
}

Test(gemm, every_dtype_compute_and_transpose, .timeout = 60)
{
    tb t = tb_open(2);
    uint64_t seed = 1000;
    for (int ta = 0; ta < 2; ta++)
        for (int tbb = 0; tbb < 2; tbb++)
            for (int ia = 0; ia < 3; ia++)
                for (int ib = 0; ib < 3; ib++)
                    for (int ic = 0; ic < 3; ic++)
                        for (int cp = 0; cp < 3; cp++) {
                            gemm_case c = { ta, tbb, 7, 6, 35, 2, 3, 1.25f, (ia + ib) % 2 ? 0.5f : 0.0f };
                            run_gemm_case(&t, &c, FLOAT_TYPES[ia], FLOAT_TYPES[ib], FLOAT_TYPES[ic],
                                          FLOAT_TYPES[cp], seed++);
                        }
    tb_close(&t);
}

Test(gemm, larger_shapes_threaded_paths)
{
    tb t = tb_open(3);
    gemm_case big[] = {
        { 0, 1, 150, 97, 130, 1, 0, 1.0f, 0.0f },    /* x · W^T (forward of a linear) */
        { 0, 0, 150, 130, 97, 1, 0, 1.0f, 1.0f },    /* dy · W, accumulating */
        { 1, 0, 97, 130, 150, 1, 0, 1.0f, 1.0f },    /* dy^T · x (weight grad) */
        { 0, 1, 64, 64, 16, 6, 0, 0.25f, 0.0f },     /* attention scores, batched */
    };
    mpx_dtype combos[][4] = {
        { MPX_F32, MPX_F32, MPX_F32, MPX_F32 }, { MPX_BF16, MPX_BF16, MPX_BF16, MPX_BF16 },
        { MPX_F16, MPX_F16, MPX_F16, MPX_F16 }, { MPX_F32, MPX_F32, MPX_F16, MPX_F16 },
        { MPX_BF16, MPX_F32, MPX_F32, MPX_BF16 },
    };
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++)
        for (size_t k = 0; k < sizeof combos / sizeof combos[0]; k++)
            run_gemm_case(&t, &big[i], combos[k][0], combos[k][1], combos[k][2], combos[k][3], 77 + i * 10 + k);
    tb_close(&t);
}

/* ---- the attention kernel (option attention_gemm, cpu_gemm_small.c): batched GEMMs with
 * K or N at most 64 are one fp32 FMA chain per element in K order, then alpha * acc
 * (+ beta * C), every operation rounded once. The loop below is that contract; the
 * kernel must give its bits exactly, on every layout and on both ISA paths. */

static void fma_chain_gemm(const gemm_case *c, const float *A, int lda, long long sa, const float *B, int ldb,
                           long long sb, float *C, int ldc, long long sc)
{
    for (int b = 0; b < c->batch; b++)
        for (int i = 0; i < c->m; i++)
            for (int j = 0; j < c->n; j++) {
                float acc = 0.0f;
                for (int l = 0; l < c->k; l++) {
                    float a = c->ta ? A[b * sa + (long long)l * lda + i] : A[b * sa + (long long)i * lda + l];
                    float x = c->tb ? B[b * sb + (long long)j * ldb + l] : B[b * sb + (long long)l * ldb + j];
                    acc = fmaf(a, x, acc);
                }
                float *out = &C[b * sc + (long long)i * ldc + j];
                float v = c->alpha * acc;
                *out = c->beta == 0.0f ? v : v + c->beta * *out;
            }
}

/* Elements of C that differ from the FMA chain, for one case through the backend opened
 * with `threads` and these two GEMM options. */
static long kernel_mismatches(int threads, const char *attention_gemm, const char *linear_gemm, const gemm_case *c,
                              uint64_t seed)
{
    tb t = tb_open_gemm(threads, attention_gemm, linear_gemm);
    int ar = c->ta ? c->k : c->m, ac = c->ta ? c->m : c->k, br = c->tb ? c->n : c->k, bc = c->tb ? c->k : c->n;
    int lda = ac + c->pad, ldb = bc + c->pad, ldc = c->n + c->pad;
    long long sa = (long long)ar * lda + 5, sb = (long long)br * ldb + 3, sc = (long long)c->m * ldc + 7;
    size_t na = (size_t)(sa * c->batch), nb = (size_t)(sb * c->batch), nc = (size_t)(sc * c->batch);
    mpx_arg A = tb_alloc(&t, MPX_F32, na), B = tb_alloc(&t, MPX_F32, nb), C = tb_alloc(&t, MPX_F32, nc);
    fill_random(A, na, NULL, seed, -2, 2);
    fill_random(B, nb, NULL, seed + 1, -2, 2);
    fill_random(C, nc, NULL, seed + 2, -2, 2);
    float *want = malloc(nc * sizeof *want);
    cr_assert_not_null(want);
    memcpy(want, C.p, nc * sizeof *want);
    fma_chain_gemm(c, A.p, lda, sa, B.p, ldb, sb, want, ldc, sc);
    mpx_gemm g = { .trans_a = c->ta, .trans_b = c->tb, .m = c->m, .n = c->n, .k = c->k, .alpha = c->alpha,
                   .beta = c->beta, .a = A, .lda = lda, .stride_a = sa, .b = B, .ldb = ldb, .stride_b = sb,
                   .c = C, .ldc = ldc, .stride_c = sc, .batch = c->batch, .compute = MPX_F32 };
    cr_assert_eq(t.ops->gemm(t.be, &g), 0, "gemm: %s", tb_error(&t));
    long bad = 0;
    for (size_t i = 0; i < nc; i++) bad += memcmp(&want[i], (float *)C.p + i, sizeof(float)) != 0;
    free(want);
    tb_close(&t);
    return bad;
}

static const gemm_case attention_cases[] = {
    { 0, 1, 37, 70, 32, 3, 3, 0.17677669f, 0.0f },   /* scores: Q K^T / sqrt(32), K = head size */
    { 0, 1, 19, 130, 64, 4, 1, 1.0f, 0.0f },         /* dP = dctx V^T, head size 64 */
    { 0, 1, 8, 5, 7, 3, 0, 1.0f, 1.0f },             /* small everything, accumulating */
    { 0, 0, 45, 32, 100, 3, 3, 1.0f, 0.0f },         /* context: P V, N = head size */
    { 0, 0, 9, 17, 300, 2, 2, 0.125f, 0.5f },        /* dQ = dS K scaled, a partial vector */
    { 1, 0, 33, 64, 50, 3, 1, 0.17677669f, 0.0f },   /* dK = dS^T Q scaled */
    { 1, 0, 7, 1, 20, 5, 0, 1.0f, 1.0f },            /* dV-like, one column */
    { 0, 0, 6, 48, 8, 3, 2, 1.0f, 0.0f },            /* three vectors wide */
    { 1, 1, 11, 13, 9, 2, 1, 0.5f, 0.25f },          /* both transposed (no layout of the model) */
};

Test(gemm, attention_kernel_is_one_fma_chain_per_element, .timeout = 60)
{
    const char *options[] = { "mpx", "mpx-avx2" };
    for (size_t o = 0; o < 2; o++)
        for (size_t i = 0; i < sizeof attention_cases / sizeof attention_cases[0]; i++) {
            const gemm_case *c = &attention_cases[i];
            long bad = kernel_mismatches(2, options[o], "mpx", c, 500 + i);
            cr_expect_eq(bad, 0, "attention_gemm = %s, ta=%d tb=%d %dx%dx%d batch %d alpha %g beta %g: %ld "
                         "elements differ from the fp32 FMA chain", options[o], c->ta, c->tb, c->m, c->n, c->k,
                         c->batch, (double)c->alpha, (double)c->beta, bad);
        }
}

/* ---- gemm_bias (ABI 1.13): a linear layer's forward, bit for bit gemm then bias_add ----
 * With fp32 operands the linear kernel adds the bias as it stores C: the reference is the
 * FMA chain, then the fp32 sum acc + bias[j] rounded once (what bias_add does to an fp32
 * C). Through OpenBLAS (not the chain) and with 16-bit operands the op must equal the
 * gemm op followed by the bias_add op. */

typedef struct bias_case { int ta, tb, m, n, k, pad; } bias_case;

/* Elements of C that differ from the reference, for one case (ops_ref: the reference is
 * the gemm and bias_add ops; otherwise the scalar chain). A, B and bias in `dt`. */
static long gemm_bias_mismatches(int threads, const char *linear_gemm, const bias_case *c, mpx_dtype dt, int ops_ref,
                                 uint64_t seed)
{
    tb t = tb_open_gemm(threads, "mpx", linear_gemm);
    int ar = c->ta ? c->k : c->m, ac = c->ta ? c->m : c->k, br = c->tb ? c->n : c->k, bc = c->tb ? c->k : c->n;
    int lda = ac + c->pad, ldb = bc + c->pad;
    size_t na = (size_t)ar * (size_t)lda, nb = (size_t)br * (size_t)ldb, nc = (size_t)c->m * (size_t)c->n;
    mpx_arg A = tb_alloc(&t, dt, na), B = tb_alloc(&t, dt, nb), bias = tb_alloc(&t, dt, (size_t)c->n);
    mpx_arg C = tb_alloc(&t, MPX_F32, nc), R = tb_alloc(&t, MPX_F32, nc);
    fill_random(A, na, NULL, seed, -2, 2);
    fill_random(B, nb, NULL, seed + 1, -2, 2);
    fill_random(bias, (size_t)c->n, NULL, seed + 2, -3, 3);
    fill_random(C, nc, NULL, seed + 3, -2, 2);   /* beta 0: C's old values must not matter */
    mpx_gemm g = { .trans_a = c->ta, .trans_b = c->tb, .m = c->m, .n = c->n, .k = c->k, .alpha = 1.0f, .beta = 0.0f,
                   .a = A, .lda = lda, .b = B, .ldb = ldb, .c = R, .ldc = c->n, .batch = 1, .compute = MPX_F32 };
    if (ops_ref) {
        cr_assert_eq(t.ops->gemm(t.be, &g), 0, "gemm: %s", tb_error(&t));
        cr_assert_eq(t.ops->bias_add(t.be, R, bias, R, nc / (size_t)c->n, (size_t)c->n), 0, "bias_add: %s", tb_error(&t));
    } else {
        gemm_case gc = { c->ta, c->tb, c->m, c->n, c->k, 1, 0, 1.0f, 0.0f };
        fma_chain_gemm(&gc, A.p, lda, 0, B.p, ldb, 0, R.p, c->n, 0);
        for (size_t i = 0; i < nc; i++) ((float *)R.p)[i] += ((const float *)bias.p)[i % (size_t)c->n];
    }
    g.c = C;
    cr_assert_eq(t.ops->gemm_bias(t.be, &g, bias), 0, "gemm_bias: %s", tb_error(&t));
    long bad = 0;
    for (size_t i = 0; i < nc; i++) bad += memcmp((float *)R.p + i, (float *)C.p + i, sizeof(float)) != 0;
    tb_close(&t);
    return bad;
}

static const bias_case bias_cases[] = {
    { 0, 1, 150, 97, 130, 0 },    /* x W^T, partial tiles both ways (the bias of a last, narrow tile) */
    { 0, 1, 37, 70, 1700, 3 },    /* K cut into blocks: the bias on the last block's store only */
    { 0, 1, 600, 40, 200, 1 },    /* more pieces than threads */
    { 0, 1, 5, 2, 9, 0 },         /* smaller than one tile */
    { 0, 0, 50, 130, 100, 2 },    /* op(B) = B */
    { 1, 0, 97, 64, 300, 0 },     /* op(A) = A^T, packed */
};

Test(gemm, gemm_bias_is_the_gemm_then_bias_add, .timeout = 120)
{
    const char *options[] = { "mpx", "mpx-avx2", "openblas" };
    const int threads[] = { 1, 2, 3 };
    for (size_t o = 0; o < 3; o++)
        for (size_t th = 0; th < 3; th++)
            for (size_t i = 0; i < sizeof bias_cases / sizeof bias_cases[0]; i++) {
                const bias_case *c = &bias_cases[i];
                long bad = gemm_bias_mismatches(threads[th], options[o], c, MPX_F32, o == 2, 1300 + i);
                cr_expect_eq(bad, 0, "linear_gemm = %s, %d threads, ta=%d tb=%d %dx%dx%d: %ld elements differ from %s",
                             options[o], threads[th], c->ta, c->tb, c->m, c->n, c->k, bad,
                             o == 2 ? "gemm then bias_add" : "the FMA chain plus the bias");
            }
    /* 16-bit operands and bias: the op's other path, the two ops */
    for (size_t i = 0; i < sizeof bias_cases / sizeof bias_cases[0]; i++) {
        long bad = gemm_bias_mismatches(2, "mpx", &bias_cases[i], MPX_BF16, 1, 1400 + i);
        cr_expect_eq(bad, 0, "bf16, case %zu: %ld elements differ from gemm then bias_add", i, bad);
    }
}

Test(gemm, gemm_bias_refuses_what_bias_add_cannot_follow)
{
    tb t = tb_open(2);
    mpx_arg A = tb_alloc(&t, MPX_F32, 64), B = tb_alloc(&t, MPX_F32, 64), C = tb_alloc(&t, MPX_F32, 128);
    mpx_arg bias = tb_alloc(&t, MPX_F32, 8);
    mpx_gemm g = { .trans_a = 0, .trans_b = 1, .m = 8, .n = 8, .k = 8, .alpha = 1.0f, .beta = 0.0f, .a = A, .lda = 8,
                   .b = B, .ldb = 8, .c = C, .ldc = 8, .batch = 1, .compute = MPX_F32 };
    cr_expect_eq(t.ops->gemm_bias(t.be, &g, bias), 0, "gemm_bias: %s", tb_error(&t));
    mpx_gemm bad[3] = { g, g, g };
    bad[0].beta = 1.0f;
    bad[1].ldc = 16;
    bad[2].batch = 2;
    bad[2].stride_a = bad[2].stride_b = 0;
    bad[2].stride_c = 64;
    for (int i = 0; i < 3; i++) {
        cr_expect_neq(t.ops->gemm_bias(t.be, &bad[i], bias), 0, "case %d accepted", i);
        cr_expect(strstr(tb_error(&t), "gemm_bias") != NULL, "case %d: error names the op: %s", i, tb_error(&t));
    }
    tb_close(&t);
}

/* ---- the linear kernel (option linear_gemm, cpu_gemm_linear.c): every other GEMM has
 * the same contract, whatever the ISA path, the thread count (pieces of C), the tiles at
 * C's edges and K's cut into blocks (K > 768 with beta = 0: the running sum goes through
 * C between blocks). */

static const gemm_case linear_cases[] = {
    { 0, 1, 150, 97, 130, 1, 0, 1.0f, 0.0f },      /* x W^T (a linear's forward), partial tiles both ways */
    { 0, 1, 37, 70, 1700, 1, 3, 1.0f, 0.0f },      /* K cut into 3 blocks, padded leading dimensions */
    { 0, 0, 50, 130, 1000, 1, 1, 1.0f, 1.0f },     /* dy W accumulating: beta != 0 keeps K whole */
    { 1, 0, 97, 64, 1537, 1, 0, 1.0f, 0.0f },      /* dy^T x (weight grad), K cut into 3 */
    { 1, 0, 40, 33, 800, 1, 2, 1.0f, 1.0f },       /* weight grad accumulating */
    { 0, 0, 13, 200, 64, 1, 0, 0.5f, 0.25f },      /* alpha and beta both not 1 */
    { 1, 1, 29, 31, 900, 1, 1, 0.125f, 0.0f },     /* both transposed, scaled, K cut */
    { 0, 1, 5, 2, 9, 1, 0, 1.0f, 0.0f },           /* smaller than one tile (the QA head's shape) */
    { 0, 1, 600, 40, 200, 1, 0, 1.0f, 0.0f },      /* M in more pieces than threads, taken as threads come free */
    { 0, 0, 96, 96, 2, 1, 0, 1.0f, 0.0f },         /* K = 2 */
    { 0, 1, 130, 80, 70, 2, 1, 1.0f, 0.5f },       /* batched, not an attention shape (K, N > 64) */
};

Test(gemm, linear_kernel_is_one_fma_chain_per_element, .timeout = 120)
{
    const char *options[] = { "mpx", "mpx-avx2" };
    const int threads[] = { 1, 2, 3 };
    for (size_t o = 0; o < 2; o++)
        for (size_t th = 0; th < 3; th++)
            for (size_t i = 0; i < sizeof linear_cases / sizeof linear_cases[0]; i++) {
                const gemm_case *c = &linear_cases[i];
                long bad = kernel_mismatches(threads[th], "mpx", options[o], c, 900 + i);
                cr_expect_eq(bad, 0, "linear_gemm = %s, %d threads, ta=%d tb=%d %dx%dx%d batch %d alpha %g beta %g: "
                             "%ld elements differ from the fp32 FMA chain", options[o], threads[th], c->ta, c->tb,
                             c->m, c->n, c->k, c->batch, (double)c->alpha, (double)c->beta, bad);
            }
}

/* 16-bit operands (fp16, bf16) whose conversion is only their exact widening (compute is
 * their dtype or fp32) are widened by the linear kernel as it packs them, not copied to
 * fp32 first: the result must still be the FMA chain over the widened values, then
 * rounded once to C's dtype (C read widened when beta != 0). */
static long widened_mismatches(int threads, mpx_dtype ta_, mpx_dtype tb_, mpx_dtype tc, mpx_dtype compute,
                               const gemm_case *c, uint64_t seed)
{
    tb t = tb_open_gemm(threads, "mpx", "mpx");
    int ar = c->ta ? c->k : c->m, ac = c->ta ? c->m : c->k, br = c->tb ? c->n : c->k, bc = c->tb ? c->k : c->n;
    int lda = ac + c->pad, ldb = bc + c->pad, ldc = c->n + c->pad;
    long long sa = (long long)ar * lda + 5, sb = (long long)br * ldb + 3, sc = (long long)c->m * ldc + 7;
    size_t na = (size_t)(sa * c->batch), nb = (size_t)(sb * c->batch), nc = (size_t)(sc * c->batch);
    mpx_arg A = tb_alloc(&t, ta_, na), B = tb_alloc(&t, tb_, nb), C = tb_alloc(&t, tc, nc);
    double *v = malloc((na > nb ? (na > nc ? na : nc) : (nb > nc ? nb : nc)) * sizeof *v);
    float *a32 = malloc(na * sizeof *a32), *b32 = malloc(nb * sizeof *b32), *want = malloc(nc * sizeof *want);
    cr_assert(v && a32 && b32 && want);
    fill_random(A, na, v, seed, -2, 2);
    for (size_t i = 0; i < na; i++) a32[i] = (float)v[i];
    fill_random(B, nb, v, seed + 1, -2, 2);
    for (size_t i = 0; i < nb; i++) b32[i] = (float)v[i];
    fill_random(C, nc, v, seed + 2, -2, 2);
    for (size_t i = 0; i < nc; i++) want[i] = (float)v[i];
    fma_chain_gemm(c, a32, lda, sa, b32, ldb, sb, want, ldc, sc);
    mpx_gemm g = { .trans_a = c->ta, .trans_b = c->tb, .m = c->m, .n = c->n, .k = c->k, .alpha = c->alpha,
                   .beta = c->beta, .a = A, .lda = lda, .stride_a = sa, .b = B, .ldb = ldb, .stride_b = sb,
                   .c = C, .ldc = ldc, .stride_c = sc, .batch = c->batch, .compute = compute };
    cr_assert_eq(t.ops->gemm(t.be, &g), 0, "gemm: %s", tb_error(&t));
    long bad = 0;
    for (long long b = 0; b < c->batch; b++)
        for (int i = 0; i < c->m; i++)
            for (int j = 0; j < c->n; j++) {
                size_t e = (size_t)(b * sc + (long long)i * ldc + j);
                bad += get(C, e) != ref_round(tc, (double)want[e]);
            }
    free(v), free(a32), free(b32), free(want);
    tb_close(&t);
    return bad;
}

Test(gemm, linear_kernel_widens_16_bit_operands_exactly, .timeout = 120)
{
    static const struct { mpx_dtype a, b, c, compute; } dts[] = {
        { MPX_BF16, MPX_BF16, MPX_F32, MPX_BF16 },   /* bf16 activations and weights, fp32 grads (dW) */
        { MPX_BF16, MPX_BF16, MPX_BF16, MPX_BF16 },  /* C rounded to bf16 */
        { MPX_F16, MPX_F16, MPX_F16, MPX_F16 },      /* fp16 throughout */
        { MPX_F16, MPX_F32, MPX_F32, MPX_F32 },      /* one widened operand beside an fp32 one */
        { MPX_F32, MPX_BF16, MPX_F32, MPX_F32 },
    };
    for (int threads = 1; threads <= 2; threads++)
        for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
            for (size_t i = 0; i < sizeof linear_cases / sizeof linear_cases[0]; i++) {
                const gemm_case *c = &linear_cases[i];
                long bad = widened_mismatches(threads, dts[d].a, dts[d].b, dts[d].c, dts[d].compute, c, 1300 + i);
                cr_expect_eq(bad, 0, "%d threads, A %s B %s C %s compute %s, ta=%d tb=%d %dx%dx%d batch %d alpha %g "
                             "beta %g: %ld elements differ from the FMA chain over the widened values", threads,
                             mpx_dtype_name(dts[d].a), mpx_dtype_name(dts[d].b), mpx_dtype_name(dts[d].c),
                             mpx_dtype_name(dts[d].compute), c->ta, c->tb, c->m, c->n, c->k, c->batch,
                             (double)c->alpha, (double)c->beta, bad);
            }
}

Test(gemm, rejects_bad_arguments)
{
    tb t = tb_open(1);
    mpx_arg A = tb_alloc(&t, MPX_F32, 64), B = tb_alloc(&t, MPX_F32, 64), C = tb_alloc(&t, MPX_F32, 64);
    mpx_gemm g = { .m = 4, .n = 4, .k = 4, .alpha = 1, .a = A, .lda = 4, .b = B, .ldb = 4, .c = C,
                   .ldc = 4, .batch = 1, .compute = MPX_F32 };
    cr_assert_eq(t.ops->gemm(t.be, &g), 0);
    g.lda = 3;
    cr_assert_eq(t.ops->gemm(t.be, &g), MPX_ERR);
    cr_assert(strstr(tb_error(&t), "lda=3"), "%s", tb_error(&t));
    g.lda = 4;
    g.compute = MPX_I32;
    cr_assert_eq(t.ops->gemm(t.be, &g), MPX_ERR_UNSUPPORTED);
    g.compute = MPX_F32;
    g.a.t = MPX_I32;
    cr_assert_eq(t.ops->gemm(t.be, &g), MPX_ERR_UNSUPPORTED);
    cr_assert(strstr(tb_error(&t), "int32"), "%s", tb_error(&t));
    tb_close(&t);
}

Test(errors, unsupported_dtypes_are_refused_with_a_message)
{
    tb t = tb_open(1);
    mpx_arg f = tb_alloc(&t, MPX_F32, 16), bad = mpx_a(f.p, MPX_I32), none = mpx_a(f.p, MPX_DTYPE_NONE);
    cr_assert_eq(t.ops->cast(t.be, bad, f, 16), MPX_ERR_UNSUPPORTED);
    cr_assert(strstr(tb_error(&t), "cast") && strstr(tb_error(&t), "int32"), "%s", tb_error(&t));
    cr_assert_eq(t.ops->add(t.be, f, f, none, 16), MPX_ERR_UNSUPPORTED);
    cr_assert_eq(t.ops->gelu_fwd(t.be, bad, f, 16), MPX_ERR_UNSUPPORTED);
    cr_assert_eq(t.ops->layernorm_fwd(t.be, f, bad, f, f, NULL, NULL, 2, 8, 1e-5f), MPX_ERR_UNSUPPORTED);
    cr_assert_eq(t.ops->softmax_fwd(t.be, f, mpx_a(NULL, MPX_F32), bad, 1, 1, 2, 8, 1.0f), MPX_ERR_UNSUPPORTED);
    cr_assert_eq(t.ops->sum_squares(t.be, none, 16, &(double){ 0 }), MPX_ERR_UNSUPPORTED);
    cr_assert_eq(t.ops->apply_update(t.be, bad, f, f.p, 16, MPX_ROUND_NEAREST, (mpx_rng){ 0 }), MPX_ERR_UNSUPPORTED);
    cr_assert_eq(t.ops->apply_update(t.be, f, f, f.p, 16, (mpx_rounding)9, (mpx_rng){ 0 }), MPX_ERR_UNSUPPORTED);
    int32_t labels[2] = { 0, 8 };
    double loss;
    cr_assert_neq(t.ops->cross_entropy(t.be, f, labels, 2, 8, &loss, mpx_a(NULL, MPX_F32), 1.0f), 0);
    cr_assert(strstr(tb_error(&t), "label 8"), "%s", tb_error(&t));
    tb_close(&t);
}

/* ---- thread count: same bits for 1 and 3 threads ---- */

static void run_all_ops(tb *t, void *out[8], size_t n, size_t rows, size_t cols)
{
    mpx_arg x = tb_alloc(t, MPX_BF16, n), w = tb_alloc(t, MPX_F32, n), g = tb_alloc(t, MPX_F32, cols);
    mpx_arg y = tb_alloc(t, MPX_BF16, n), dx = tb_alloc(t, MPX_F32, n), db = tb_alloc(t, MPX_F32, cols);
    mpx_arg dg = tb_alloc(t, MPX_F32, cols), c = tb_alloc(t, MPX_BF16, rows * rows);
    fill_random(x, n, NULL, 1, -2, 2);
    fill_random(w, n, NULL, 2, -2, 2);
    fill_random(g, cols, NULL, 3, 0.5, 1.5);
    float *mean = calloc(rows, 4), *rstd = calloc(rows, 4);
    cr_assert_eq(t->ops->layernorm_fwd(t->be, x, g, g, y, mean, rstd, rows, cols, 1e-5f), 0);
    cr_assert_eq(t->ops->layernorm_bwd(t->be, w, x, g, mean, rstd, dx, dg, db, rows, cols, 0, 0), 0);
    cr_assert_eq(t->ops->gelu_fwd(t->be, dx, w, n), 0);
    cr_assert_eq(t->ops->bias_grad(t->be, w, db, rows, cols, 1), 0);
    mpx_gemm gm = { .trans_b = 1, .m = (int)rows, .n = (int)rows, .k = (int)cols, .alpha = 1,
                    .a = y, .lda = (int)cols, .b = w, .ldb = (int)cols, .c = c, .ldc = (int)rows,
                    .batch = 1, .compute = MPX_BF16 };
    cr_assert_eq(t->ops->gemm(t->be, &gm), 0);
    /* batched (attention-like): 12 items, spread over threads when there are several */
    mpx_arg cb = tb_alloc(t, MPX_F32, 12 * 64 * 64);
    mpx_gemm gb = { .trans_b = 1, .m = 64, .n = 64, .k = 32, .alpha = 0.5f, .a = x, .lda = 32,
                    .stride_a = 64 * 32, .b = w, .ldb = 32, .stride_b = 64 * 32, .c = cb, .ldc = 64,
                    .stride_c = 64 * 64, .batch = 12, .compute = MPX_BF16 };
    cr_assert_eq(t->ops->gemm(t->be, &gb), 0);
    double ss;
    cr_assert_eq(t->ops->sum_squares(t->be, w, n, &ss), 0);
    out[7] = cb.p;
    out[0] = y.p; out[1] = dx.p; out[2] = dg.p; out[3] = db.p; out[4] = w.p; out[5] = c.p;
    *(double *)out[6] = ss;
    free(mean); free(rstd);
}

Test(threads, results_do_not_depend_on_thread_count)
{
    const size_t rows = 300, cols = 384, n = rows * cols;
    double s1, s3;
    void *o1[8] = { [6] = &s1 }, *o3[8] = { [6] = &s3 };
    tb t1 = tb_open(1), t3 = tb_open(3);
    run_all_ops(&t1, o1, n, rows, cols);
    run_all_ops(&t3, o3, n, rows, cols);
    size_t bytes[6] = { n * 2, n * 4, cols * 4, cols * 4, n * 4, rows * rows * 2 };
    const char *names[6] = { "layernorm y", "layernorm dx", "dgamma", "dbeta+bias_grad", "gelu", "gemm" };
    for (int i = 0; i < 6; i++) cr_assert_eq(memcmp(o1[i], o3[i], bytes[i]), 0, "%s differs", names[i]);
    cr_assert_eq(memcmp(o1[7], o3[7], 12 * 64 * 64 * 4), 0, "batched gemm differs");
    cr_assert_eq(s1, s3, "sum_squares %.17g vs %.17g", s1, s3);
    tb_close(&t1);
    tb_close(&t3);
}

/* mpx_rng.offset: a tensor cut in two pieces (as ZeRO shards it) draws exactly the
 * numbers of the whole, for dropout and for stochastic rounding. */
Test(rng_offset, pieces_draw_as_the_whole)
{
    tb t = tb_open(2);
    const size_t n = 1001, cut = 333; /* a cut inside a block of 4 */
    double *xv = dbl(n);
    mpx_rng rng = { 99, 5, 3, 0 };
    mpx_arg x = tb_alloc(&t, MPX_F32, n), whole = tb_alloc(&t, MPX_F32, n), parts = tb_alloc(&t, MPX_F32, n);
    fill_random(x, n, xv, 7, 0.5, 3);
    cr_assert_eq(t.ops->dropout_fwd(t.be, x, whole, n, 0.3f, rng), 0);
    mpx_rng r1 = rng, r2 = rng;
    r2.offset = cut;
    cr_assert_eq(t.ops->dropout_fwd(t.be, x, parts, cut, 0.3f, r1), 0);
    cr_assert_eq(t.ops->dropout_fwd(t.be, mpx_at(x, cut), mpx_at(parts, cut), n - cut, 0.3f, r2), 0);
    cr_expect_eq(memcmp(whole.p, parts.p, n * 4), 0, "dropout pieces differ from the whole");

    mpx_arg w1 = tb_alloc(&t, MPX_BF16, n), w2 = tb_alloc(&t, MPX_BF16, n);
    float *u = malloc(n * 4);
    for (size_t i = 0; i < n; i++) u[i] = 1e-3f * (float)(i % 7);
    mpx_arg none = { NULL, MPX_BF16 };
    cr_assert_eq(t.ops->apply_update(t.be, w1, none, u, n, MPX_ROUND_STOCHASTIC, rng), 0);
    cr_assert_eq(t.ops->apply_update(t.be, w2, none, u, cut, MPX_ROUND_STOCHASTIC, r1), 0);
    cr_assert_eq(t.ops->apply_update(t.be, mpx_at(w2, cut), none, u + cut, n - cut, MPX_ROUND_STOCHASTIC, r2), 0);
    cr_expect_eq(memcmp(w1.p, w2.p, n * 2), 0, "stochastic rounding pieces differ from the whole");
    free(u);
    tb_close(&t);
}

Test(embedding, ids_outside_the_table_are_refused)
{
    tb t = tb_open(1);
    int32_t ids[3] = { 0, 4, 5 };
    mpx_arg table = tb_alloc(&t, MPX_F32, 5 * 4), y = tb_alloc(&t, MPX_F32, 3 * 4);
    cr_expect_neq(t.ops->embedding_fwd(t.be, ids, 3, table, 5, 4, y), 0);
    cr_expect(strstr(tb_error(&t), "5 rows"), "%s", tb_error(&t));
    cr_expect_neq(t.ops->embedding_bwd(t.be, ids, 3, y, table, 5, 4), 0);
    cr_expect_eq(t.ops->embedding_fwd(t.be, ids, 2, table, 5, 4, y), 0);
    tb_close(&t);
}
