/* cpu backend, forward: bias, layernorm, softmax, cross-entropy, embeddings, reductions,
 * apply_update — every dtype combination against naive double references rounded once
 * to the output dtype (backward formulas here are the analytic ones in double; the
 * finite-difference checks are in test_cpu_ops_grad.c). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_cpu_ops_ref.h"

static double *dbl(size_t n) { double *p = calloc(n ? n : 1, sizeof *p); cr_assert_not_null(p); return p; }

#define R 37
#define C 45

Test(bias, add_and_grad_every_combination)
{
    tb t = tb_open(2);
    double *xv = dbl(R * C), *bv = dbl(C), *ref = dbl(R * C), *old = dbl(C);
    for (int ix = 0; ix < 3; ix++)
        for (int ib = 0; ib < 3; ib++)
            for (int iy = 0; iy < 3; iy++) {
                mpx_arg x = tb_alloc(&t, FLOAT_TYPES[ix], R * C), b = tb_alloc(&t, FLOAT_TYPES[ib], C);
                mpx_arg y = tb_alloc(&t, FLOAT_TYPES[iy], R * C);
                fill_random(x, R * C, xv, 1 + ix, -3, 3);
                fill_random(b, C, bv, 5 + ib, -3, 3);
                cr_assert_eq(t.ops->bias_add(t.be, x, b, y, R, C), 0, "%s", tb_error(&t));
                for (size_t i = 0; i < R * C; i++) ref[i] = xv[i] + bv[i % C];
                check_out("bias_add", y, ref, R * C, 6, NULL, 0.97);
            }
    for (int id = 0; id < 3; id++)
        for (int ib = 0; ib < 3; ib++)
            for (int acc = 0; acc < 2; acc++) {
                mpx_arg dy = tb_alloc(&t, FLOAT_TYPES[id], R * C), db = tb_alloc(&t, FLOAT_TYPES[ib], C);
                fill_random(dy, R * C, xv, 9 + id, -1, 1);
                fill_random(db, C, old, 11 + ib, -1, 1);
                cr_assert_eq(t.ops->bias_grad(t.be, dy, db, R, C, acc), 0);
                for (size_t c = 0; c < C; c++) {
                    ref[c] = acc ? old[c] : 0;
                    for (size_t r = 0; r < R; r++) ref[c] += xv[r * C + c];
                }
                check_out("bias_grad", db, ref, C, R, NULL, 0.9);
            }
    tb_close(&t);
}

Test(layernorm, forward_every_combination)
{
    tb t = tb_open(2);
    double *xv = dbl(R * C), *gv = dbl(C), *bv = dbl(C), *ref = dbl(R * C);
    float mean[R], rstd[R];
    for (int ix = 0; ix < 3; ix++)
        for (int ig = 0; ig < 3; ig++)
            for (int ib = 0; ib < 3; ib++)
                for (int iy = 0; iy < 3; iy++) {
                    mpx_arg x = tb_alloc(&t, FLOAT_TYPES[ix], R * C), g = tb_alloc(&t, FLOAT_TYPES[ig], C);
                    mpx_arg b = tb_alloc(&t, FLOAT_TYPES[ib], C), y = tb_alloc(&t, FLOAT_TYPES[iy], R * C);
                    fill_random(x, R * C, xv, 20 + ix, -2, 5);
                    fill_random(g, C, gv, 24 + ig, 0.5, 1.5);
                    fill_random(b, C, bv, 28 + ib, -0.5, 0.5);
                    cr_assert_eq(t.ops->layernorm_fwd(t.be, x, g, b, y, mean, rstd, R, C, 1e-5f), 0,
                                 "%s", tb_error(&t));
                    ref_layernorm(xv, gv, bv, ref, R, C, 1e-5);
                    check_out("layernorm_fwd", y, ref, R * C, 3, NULL, 0.9);
                    for (size_t r = 0; r < R; r++) {
                        double m = 0, v = 0;
                        for (size_t c = 0; c < C; c++) m += xv[r * C + c];
                        m /= C;
                        for (size_t c = 0; c < C; c++) v += (xv[r * C + c] - m) * (xv[r * C + c] - m);
                        double rs = 1 / sqrt(v / C + 1e-5);
                        cr_assert(fabs(mean[r] - m) <= 1e-5 * (1 + fabs(m)), "mean %g vs %g", (double)mean[r], m);
                        cr_assert(fabs(rstd[r] - rs) <= 1e-5 * rs, "rstd %g vs %g", (double)rstd[r], rs);
                    }
                }
    tb_close(&t);
}

/* analytic backward in double */
static void ref_layernorm_bwd(const double *dy, const double *x, const double *g, double *dx,
                              double *dg, double *dbeta, size_t rows, size_t cols, double eps)
{
    for (size_t c = 0; c < cols; c++) dg[c] = dbeta[c] = 0;
    for (size_t r = 0; r < rows; r++) {
        const double *xr = x + r * cols, *dr = dy + r * cols;
        double m = 0, v = 0, sg = 0, sgx = 0;
        for (size_t c = 0; c < cols; c++) m += xr[c];
        m /= cols;
        for (size_t c = 0; c < cols; c++) v += (xr[c] - m) * (xr[c] - m);
        double rs = 1 / sqrt(v / cols + eps);
        for (size_t c = 0; c < cols; c++) {
            double xh = (xr[c] - m) * rs;
            sg += dr[c] * g[c];
            sgx += dr[c] * g[c] * xh;
            dg[c] += dr[c] * xh;
            dbeta[c] += dr[c];
        }
        for (size_t c = 0; c < cols; c++) {
            double xh = (xr[c] - m) * rs;
            dx[r * cols + c] = rs * (dr[c] * g[c] - sg / cols - xh * sgx / cols);
        }
    }
}

Test(layernorm, backward_every_combination, .timeout = 60)
{
    tb t = tb_open(2);
    const size_t rows = 9, cols = 40;   /* 3^6 dtype combinations: keep each one small */
    double *xv = dbl(rows * cols), *gv = dbl(cols), *dyv = dbl(rows * cols), *dx = dbl(rows * cols);
    double *dg = dbl(cols), *dbeta = dbl(cols), *old_dx = dbl(rows * cols), *old_g = dbl(cols), *old_b = dbl(cols);
    float mean[9], rstd[9];
    for (int combo = 0; combo < 729; combo++) {
        int k = combo;
        mpx_dtype td[6];
        for (int i = 0; i < 6; i++) { td[i] = FLOAT_TYPES[k % 3]; k /= 3; }
        int acc = combo % 2;
        mpx_arg dy = tb_alloc(&t, td[0], rows * cols), x = tb_alloc(&t, td[1], rows * cols);
        mpx_arg g = tb_alloc(&t, td[2], cols), ddx = tb_alloc(&t, td[3], rows * cols);
        mpx_arg ddg = tb_alloc(&t, td[4], cols), ddb = tb_alloc(&t, td[5], cols);
        fill_random(dy, rows * cols, dyv, combo, -1, 1);
        fill_random(x, rows * cols, xv, combo + 1000, -2, 2);
        fill_random(g, cols, gv, combo + 2000, 0.5, 1.5);
        fill_random(ddx, rows * cols, old_dx, combo + 3000, -1, 1);
        fill_random(ddg, cols, old_g, combo + 4000, -1, 1);
        fill_random(ddb, cols, old_b, combo + 5000, -1, 1);
        for (size_t r = 0; r < rows; r++) {
            double m = 0, v = 0;
            for (size_t c = 0; c < cols; c++) m += xv[r * cols + c];
            m /= cols;
            for (size_t c = 0; c < cols; c++) v += (xv[r * cols + c] - m) * (xv[r * cols + c] - m);
            mean[r] = (float)m;
            rstd[r] = (float)(1 / sqrt(v / cols + 1e-5));
        }
        cr_assert_eq(t.ops->layernorm_bwd(t.be, dy, x, g, mean, rstd, ddx, ddg, ddb, rows, cols, acc, !acc), 0,
                     "%s", tb_error(&t));
        ref_layernorm_bwd(dyv, xv, gv, dx, dg, dbeta, rows, cols, 1e-5);
        for (size_t i = 0; i < rows * cols; i++) if (acc) dx[i] += old_dx[i];
        for (size_t c = 0; c < cols; c++) if (!acc) { dg[c] += old_g[c]; dbeta[c] += old_b[c]; }
        check_out("layernorm_bwd dx", ddx, dx, rows * cols, 10, NULL, 0.85);
        check_out("layernorm_bwd dgamma", ddg, dg, cols, 10, NULL, 0.85);
        check_out("layernorm_bwd dbeta", ddb, dbeta, cols, 10, NULL, 0.85);
    }
    tb_close(&t);
}

Test(softmax, forward_and_backward_every_combination)
{
    tb t = tb_open(2);
    const size_t B = 2, H = 3, Rr = 5, Cc = 33, n = B * H * Rr * Cc;
    double *xv = dbl(n), *mv = dbl(B * Cc), *ref = dbl(n), *dyv = dbl(n), *yv = dbl(n);
    for (int ix = 0; ix < 3; ix++)
        for (int iy = 0; iy < 3; iy++)
            for (int im = 0; im < 4; im++) {
                mpx_arg x = tb_alloc(&t, FLOAT_TYPES[ix], n), y = tb_alloc(&t, FLOAT_TYPES[iy], n);
                mpx_arg mask = im < 3 ? tb_alloc(&t, FLOAT_TYPES[im], B * Cc) : mpx_a(NULL, MPX_F32);
                fill_random(x, n, xv, 40 + ix, -4, 4);
                if (mask.p) {
                    for (size_t i = 0; i < B * Cc; i++) mv[i] = (i % 7 == 3) ? -10000.0 : 0.0;
                    store_vals(mask, B * Cc, mv);
                }
                cr_assert_eq(t.ops->softmax_fwd(t.be, x, mask, y, B, H, Rr, Cc, 0.125f), 0, "%s", tb_error(&t));
                ref_softmax(xv, mask.p ? mv : NULL, ref, B, H, Rr, Cc, 0.125);
                check_out("softmax_fwd", y, ref, n, 0.1, NULL, 0.9);
            }
    for (int id = 0; id < 3; id++)
        for (int iy = 0; iy < 3; iy++)
            for (int ix = 0; ix < 3; ix++) {
                mpx_arg dy = tb_alloc(&t, FLOAT_TYPES[id], n), y = tb_alloc(&t, FLOAT_TYPES[iy], n);
                mpx_arg dx = tb_alloc(&t, FLOAT_TYPES[ix], n);
                fill_random(dy, n, dyv, 50 + id, -1, 1);
                fill_random(y, n, yv, 60 + iy, 0, 0.06);   /* probability-like rows */
                cr_assert_eq(t.ops->softmax_bwd(t.be, dy, y, dx, B * H * Rr, Cc, 0.5f), 0);
                for (size_t r = 0; r < B * H * Rr; r++) {
                    double dot = 0;
                    for (size_t c = 0; c < Cc; c++) dot += dyv[r * Cc + c] * yv[r * Cc + c];
                    for (size_t c = 0; c < Cc; c++)
                        ref[r * Cc + c] = 0.5 * yv[r * Cc + c] * (dyv[r * Cc + c] - dot);
                }
                check_out("softmax_bwd", dx, ref, n, 0.05, NULL, 0.9);
            }
    free(xv); free(mv); free(ref); free(dyv); free(yv);
    tb_close(&t);
}

static int same_bits(mpx_arg a, mpx_arg b, size_t n, size_t *at)
{
    const size_t es = mpx_dtype_size(a.t);
    for (size_t i = 0; i < n; i++)
        if (memcmp((const char *)a.p + i * es, (const char *)b.p + i * es, es)) { *at = i; return 0; }
    return 1;
}

/* ABI 1.17: dropout, residual add and layernorm in one pass must be the three ops one after
 * the other, bit for bit (r, y, mean and rstd): every dtype of x, the residual, the sum
 * and the output with fp32 and bf16 parameters, p = 0 (no dropout) and 0.3 at a stream
 * offset that starts rows mid Philox block, two threads; the sum over the residual or over
 * x where their dtypes allow; and what the contract forbids refused. The three ops are
 * checked against their references above and in test_cpu_ops.c. */
Test(layernorm, fused_with_dropout_and_residual_is_the_three_ops_bit_for_bit)
{
    tb t = tb_open(2);
    cr_assert(MPX_OPS_HAS(t.ops, dropout_add_layernorm_fwd) && t.ops->dropout_add_layernorm_fwd,
              "the cpu backend offers the fused op");
    const size_t n = R * C;
    const mpx_rng rng = { 0x5eedULL, 12, 4, 7 };
    const float ps[2] = { 0.0f, 0.3f };
    const mpx_dtype params[2] = { MPX_F32, MPX_BF16 };
    float m1[R], s1[R], m2[R], s2[R];
    size_t at = 0;
    for (int ix = 0; ix < 3; ix++)
        for (int ie = 0; ie < 3; ie++)
            for (int ir = 0; ir < 3; ir++)
                for (int iy = 0; iy < 3; iy++)
                    for (int k = 0; k < 4; k++) {
                        const float p = ps[k & 1];
                        const mpx_dtype xt = FLOAT_TYPES[ix], et = FLOAT_TYPES[ie], rt = FLOAT_TYPES[ir];
                        mpx_arg x = tb_alloc(&t, xt, n), res = tb_alloc(&t, et, n), d = tb_alloc(&t, xt, n);
                        mpx_arg r1 = tb_alloc(&t, rt, n), r2 = tb_alloc(&t, rt, n);
                        mpx_arg y1 = tb_alloc(&t, FLOAT_TYPES[iy], n), y2 = tb_alloc(&t, FLOAT_TYPES[iy], n);
                        mpx_arg g = tb_alloc(&t, params[k >> 1], C), b = tb_alloc(&t, params[k >> 1], C);
                        fill_random(x, n, NULL, 90 + ix, -3, 3);
                        fill_random(res, n, NULL, 95 + ie, -2, 2);
                        fill_random(g, C, NULL, 98, 0.5, 1.5);
                        fill_random(b, C, NULL, 99, -0.5, 0.5);
                        mpx_arg dd = x;
                        if (p > 0.0f) {
                            cr_assert_eq(t.ops->dropout_fwd(t.be, x, d, n, p, rng), 0, "%s", tb_error(&t));
                            dd = d;
                        }
                        cr_assert_eq(t.ops->add(t.be, dd, res, r1, n), 0, "%s", tb_error(&t));
                        cr_assert_eq(t.ops->layernorm_fwd(t.be, r1, g, b, y1, m1, s1, R, C, 1e-12f), 0, "%s",
                                     tb_error(&t));
                        cr_assert_eq(t.ops->dropout_add_layernorm_fwd(t.be, x, p, rng, res, r2, g, b, y2, m2, s2, R, C,
                                                                      1e-12f), 0, "%s", tb_error(&t));
                        cr_assert(same_bits(r1, r2, n, &at), "x %d resid %d r %d y %d case %d: the sum differs at %zu",
                                  ix, ie, ir, iy, k, at);
                        cr_assert(same_bits(y1, y2, n, &at), "x %d resid %d r %d y %d case %d: y differs at %zu", ix,
                                  ie, ir, iy, k, at);
                        cr_assert(!memcmp(m1, m2, sizeof m1) && !memcmp(s1, s2, sizeof s1),
                                  "x %d resid %d r %d y %d case %d: mean or rstd differs", ix, ie, ir, iy, k);
                        if (ir == ie) {   /* the sum over the residual */
                            cr_assert_eq(t.ops->dropout_add_layernorm_fwd(t.be, x, p, rng, res, res, g, b, y2, m2, s2,
                                                                          R, C, 1e-12f), 0, "%s", tb_error(&t));
                            cr_assert(same_bits(r1, res, n, &at) && same_bits(y1, y2, n, &at),
                                      "x %d r %d case %d: r over the residual differs at %zu", ix, ir, k, at);
                        }
                        if (ir == ix) {   /* the sum over x */
                            fill_random(x, n, NULL, 90 + ix, -3, 3);
                            fill_random(res, n, NULL, 95 + ie, -2, 2);
                            cr_assert_eq(t.ops->dropout_add_layernorm_fwd(t.be, x, p, rng, res, x, g, b, y2, m2, s2, R,
                                                                          C, 1e-12f), 0, "%s", tb_error(&t));
                            cr_assert(same_bits(r1, x, n, &at) && same_bits(y1, y2, n, &at),
                                      "resid %d r %d case %d: r over x differs at %zu", ie, ir, k, at);
                        }
                    }
    mpx_arg a = tb_alloc(&t, MPX_F32, n), b16 = tb_alloc(&t, MPX_BF16, n), g = tb_alloc(&t, MPX_F32, C);
    mpx_arg o16 = tb_alloc(&t, MPX_BF16, n);
    cr_expect_eq(t.ops->dropout_add_layernorm_fwd(t.be, a, 1.0f, rng, a, b16, g, g, o16, m1, s1, R, C, 1e-12f), 0,
                 "p = 1 is taken: %s", tb_error(&t));
    cr_expect_neq(t.ops->dropout_add_layernorm_fwd(t.be, a, 1.5f, rng, a, b16, g, g, o16, m1, s1, R, C, 1e-12f), 0,
                  "p = 1.5 is refused");
    cr_expect_neq(t.ops->dropout_add_layernorm_fwd(t.be, a, 0.1f, rng, a, mpx_a(a.p, MPX_BF16), g, g, o16, m1, s1, R,
                                                   C, 1e-12f), 0, "r over x in another dtype is refused");
    cr_expect_neq(t.ops->dropout_add_layernorm_fwd(t.be, a, 0.1f, rng, a, b16, g, g, b16, m1, s1, R, C, 1e-12f), 0,
                  "y over r is refused");
    tb_close(&t);
}

/* ABI 1.10's fused softmax + dropout against the two ops run one after the other (each
 * checked against its reference above and in test_cpu_ops.c): the same bits for every
 * combination of fp32, fp16 and bf16, with 33 columns so that rows start mid Philox
 * block, a stream offset, one and two threads, p = 0 and 1, and the outputs over the
 * inputs where the ABI allows it. The fp32 case is also checked against the double
 * reference softmax times the reference mask from the counter layout. */
Test(softmax, fused_with_dropout_is_the_two_ops_bit_for_bit)
{
    tb t = tb_open(2);
    cr_assert(MPX_OPS_HAS(t.ops, dropout_softmax_bwd) && t.ops->softmax_dropout_fwd && t.ops->dropout_softmax_bwd,
              "the cpu backend offers the fused ops");
    const size_t B = 2, H = 3, Rr = 5, Cc = 33, n = B * H * Rr * Cc, rows = B * H * Rr;
    const float p = 0.3f;
    const mpx_rng rng = { 0x1234abcdULL, 77, 5, 7 };
    double *xv = dbl(n), *mv = dbl(B * Cc), *ref = dbl(n), *dyv = dbl(n);
    size_t at = 0;
    for (int ix = 0; ix < 3; ix++)
        for (int iy = 0; iy < 3; iy++)
            for (int id = 0; id < 3; id++)
                for (int im = 0; im < 2; im++) {
                    mpx_arg x = tb_alloc(&t, FLOAT_TYPES[ix], n), mask = im ? tb_alloc(&t, MPX_F32, B * Cc) : mpx_a(NULL, MPX_F32);
                    mpx_arg y1 = tb_alloc(&t, FLOAT_TYPES[iy], n), y2 = tb_alloc(&t, FLOAT_TYPES[iy], n);
                    mpx_arg d1 = tb_alloc(&t, FLOAT_TYPES[id], n), d2 = tb_alloc(&t, FLOAT_TYPES[id], n);
                    fill_random(x, n, xv, 70 + ix, -4, 4);
                    if (mask.p) {
                        for (size_t i = 0; i < B * Cc; i++) mv[i] = (i % 5 == 2) ? -10000.0 : 0.0;
                        store_vals(mask, B * Cc, mv);
                    }
                    cr_assert_eq(t.ops->softmax_fwd(t.be, x, mask, y1, B, H, Rr, Cc, 0.125f), 0, "%s", tb_error(&t));
                    cr_assert_eq(t.ops->dropout_fwd(t.be, y1, d1, n, p, rng), 0, "%s", tb_error(&t));
                    cr_assert_eq(t.ops->softmax_dropout_fwd(t.be, x, mask, y2, d2, B, H, Rr, Cc, 0.125f, p, rng), 0,
                                 "%s", tb_error(&t));
                    cr_assert(same_bits(y1, y2, n, &at), "x %d y %d yd %d mask %d: probabilities differ at %zu",
                              ix, iy, id, im, at);
                    cr_assert(same_bits(d1, d2, n, &at), "x %d y %d yd %d mask %d: dropped probabilities differ at %zu",
                              ix, iy, id, im, at);
                    if (ix == 0 && iy == 0 && id == 0) {
                        ref_softmax(xv, mask.p ? mv : NULL, ref, B, H, Rr, Cc, 0.125);
                        for (size_t i = 0; i < n; i++) ref[i] = ref_dropout_keep(rng, rng.offset + i, p) ? ref[i] / (1.0 - p) : 0.0;
                        check_out("softmax_dropout_fwd vs reference", d2, ref, n, 0.1, NULL, 0.9);
                    }
                }
    /* backward: dx = softmax_bwd(dropout_bwd(dyd) in dyd's dtype, y) */
    for (int id = 0; id < 3; id++)
        for (int iy = 0; iy < 3; iy++)
            for (int ix = 0; ix < 3; ix++) {
                mpx_arg dyd = tb_alloc(&t, FLOAT_TYPES[id], n), y = tb_alloc(&t, FLOAT_TYPES[iy], n);
                mpx_arg dp = tb_alloc(&t, FLOAT_TYPES[id], n);
                mpx_arg dx1 = tb_alloc(&t, FLOAT_TYPES[ix], n), dx2 = tb_alloc(&t, FLOAT_TYPES[ix], n);
                fill_random(dyd, n, dyv, 80 + id, -1, 1);
                fill_random(y, n, xv, 90 + iy, 0, 0.06);
                cr_assert_eq(t.ops->dropout_bwd(t.be, dyd, dp, n, p, rng), 0);
                cr_assert_eq(t.ops->softmax_bwd(t.be, dp, y, dx1, rows, Cc, 0.5f), 0);
                cr_assert_eq(t.ops->dropout_softmax_bwd(t.be, dyd, y, dx2, rows, Cc, 0.5f, p, rng), 0, "%s", tb_error(&t));
                cr_assert(same_bits(dx1, dx2, n, &at), "dyd %d y %d dx %d: gradients differ at %zu", id, iy, ix, at);
                if (ix == id) {   /* in place: dx over dyd (same dtype) */
                    cr_assert_eq(t.ops->dropout_softmax_bwd(t.be, dyd, y, dyd, rows, Cc, 0.5f, p, rng), 0);
                    cr_assert(same_bits(dx1, dyd, n, &at), "in place, dtype %d: differs at %zu", id, at);
                }
                if (id == 0 && iy == 0 && ix == 0) {
                    for (size_t r = 0; r < rows; r++) {
                        double dot = 0;
                        for (size_t c = 0; c < Cc; c++) {
                            size_t i = r * Cc + c;
                            double g = ref_dropout_keep(rng, rng.offset + i, p) ? dyv[i] / (1.0 - p) : 0.0;
                            ref[i] = g;
                            dot += g * xv[i];
                        }
                        for (size_t c = 0; c < Cc; c++) ref[r * Cc + c] = 0.5 * xv[r * Cc + c] * (ref[r * Cc + c] - dot);
                    }
                    check_out("dropout_softmax_bwd vs reference", dx2, ref, n, 0.05, NULL, 0.9);
                }
            }
    /* in place (yd over y, and y over x), p = 0 and p = 1, on one thread and on two */
    for (int threads = 1; threads <= 2; threads++) {
        tb t1 = tb_open(threads);
        const float ps[3] = { 0.0f, 1.0f, 0.3f };
        for (int k = 0; k < 3; k++)
            for (int id = 0; id < 3; id++) {
                mpx_arg x = tb_alloc(&t1, FLOAT_TYPES[id], n), y1 = tb_alloc(&t1, FLOAT_TYPES[id], n);
                mpx_arg d1 = tb_alloc(&t1, FLOAT_TYPES[id], n), y2 = tb_alloc(&t1, FLOAT_TYPES[id], n);
                mpx_arg x2 = tb_alloc(&t1, FLOAT_TYPES[id], n);
                fill_random(x, n, xv, 100 + id, -4, 4);
                cr_assert_eq(t1.ops->cast(t1.be, x, x2, n), 0);
                cr_assert_eq(t1.ops->softmax_fwd(t1.be, x, mpx_a(NULL, MPX_F32), y1, B, H, Rr, Cc, 0.125f), 0);
                cr_assert_eq(t1.ops->dropout_fwd(t1.be, y1, d1, n, ps[k], rng), 0);
                /* yd over y */
                cr_assert_eq(t1.ops->softmax_dropout_fwd(t1.be, x, mpx_a(NULL, MPX_F32), y2, y2, B, H, Rr, Cc, 0.125f,
                                                         ps[k], rng), 0, "%s", tb_error(&t1));
                cr_assert(same_bits(d1, y2, n, &at), "%d threads, p %g, dtype %d, yd = y: differs at %zu", threads,
                          (double)ps[k], id, at);
                /* y over x (x2 is a copy of x) */
                cr_assert_eq(t1.ops->softmax_dropout_fwd(t1.be, x2, mpx_a(NULL, MPX_F32), x2, y2, B, H, Rr, Cc, 0.125f,
                                                         ps[k], rng), 0);
                cr_assert(same_bits(y1, x2, n, &at) && same_bits(d1, y2, n, &at),
                          "%d threads, p %g, dtype %d, y = x: differs at %zu", threads, (double)ps[k], id, at);
            }
        tb_close(&t1);
    }
    mpx_arg a = tb_alloc(&t, MPX_F32, n), b16 = mpx_a(a.p, MPX_BF16), y = tb_alloc(&t, MPX_F32, n);
    cr_expect_neq(t.ops->dropout_softmax_bwd(t.be, a, y, b16, rows, Cc, 1.0f, p, rng), 0, "aliasing across dtypes is refused");
    cr_expect_neq(t.ops->dropout_softmax_bwd(t.be, a, y, a, rows, Cc, 1.0f, 1.5f, rng), 0, "p = 1.5 is refused");
    cr_expect_neq(t.ops->softmax_dropout_fwd(t.be, a, mpx_a(NULL, MPX_F32), y, y, B, H, Rr, Cc, 1.0f, -0.1f, rng), 0,
                  "p = -0.1 is refused");
    free(xv); free(mv); free(ref); free(dyv);
    tb_close(&t);
}

/* Scores far below the row's maximum: exp underflows to subnormals between about -87
 * and -103.97 and to +0 below. The row sum is 1.0f exactly (the maximum's exp(0) = 1
 * plus terms under 1e-38), so every output is expf(x - max) bit for bit: the vector exp
 * must agree with scalar expf across the underflow edge, masked -10000 positions
 * included, whatever lanes they share. */
Test(softmax, underflowing_scores_match_scalar_expf_bitwise)
{
    tb t = tb_open(2);
    const size_t cols = 40;
    const float vals[] = { -87.5f, -88.0f, -90.0f, -100.0f, -103.9f, -103.97f, -103.98f,
                           -104.0f, -104.5f, -150.0f, -1e4f, -INFINITY };
    mpx_arg x = tb_alloc(&t, MPX_F32, cols), y = tb_alloc(&t, MPX_F32, cols);
    mpx_arg mask = tb_alloc(&t, MPX_F32, cols);
    float *xp = x.p, *yp = y.p, *mp = mask.p;
    for (size_t c = 0; c < cols; c++) {
        xp[c] = c == 5 ? 0.0f : vals[(c * 7) % (sizeof vals / sizeof vals[0])];
        mp[c] = c % 8 >= 6 ? -10000.0f : 0.0f;   /* two masked lanes in every eight */
    }
    cr_assert_eq(t.ops->softmax_fwd(t.be, x, mask, y, 1, 1, 1, cols, 1.0f), 0, "%s", tb_error(&t));
    int subnormal = 0;
    for (size_t c = 0; c < cols; c++) {
        float want = expf((xp[c] + mp[c]) - 0.0f);
        cr_assert(memcmp(&want, &yp[c], sizeof want) == 0, "col %zu: x = %a: got %a, expf gives %a", c,
                  (double)(xp[c] + mp[c]), (double)yp[c], (double)want);
        subnormal += want > 0.0f && want < 0x1p-126f;
    }
    cr_assert_gt(subnormal, 0, "the row must reach the subnormal range");
    tb_close(&t);
}

/* fp32 logits: the exact loss and (softmax - onehot) * dscale / rows. 16-bit logits: as
 * PyTorch's cross_entropy on a 16-bit tensor (log_softmax, then nll_loss, each output
 * in the tensor's dtype): logp rounded to the dtype, the loss the 16-bit mean of
 * -logp[label], backward from d = round(dscale / rows) through exp(logp). */
static double ref_cross_entropy_16(mpx_dtype t, const double *lv, const int32_t *labels, size_t rows,
                                   size_t cols, double dscale, double *dref)
{
    double total = 0, d = ref_round(t, dscale / (double)rows);
    for (size_t r = 0; r < rows; r++) {
        const double *z = lv + r * cols;
        double mx = -INFINITY, s = 0;
        for (size_t c = 0; c < cols; c++) mx = fmax(mx, z[c]);
        for (size_t c = 0; c < cols; c++) s += exp(z[c] - mx);
        for (size_t c = 0; c < cols; c++) {
            double logp = ref_round(t, z[c] - mx - log(s));
            if (c == (size_t)labels[r]) total -= logp;
            dref[r * cols + c] = exp(logp) * d - (c == (size_t)labels[r] ? d : 0.0);
        }
    }
    return total / (double)rows;
}

Test(cross_entropy, loss_and_gradient_every_combination)
{
    tb t = tb_open(2);
    const size_t rows = 6, cols = 50;
    int32_t labels[6] = { 0, 49, 7, 7, 13, 0 };
    double *lv = dbl(rows * cols), *ref = dbl(rows * cols);
    for (int il = 0; il < 3; il++)
        for (int id = 0; id < 4; id++) {
            mpx_arg lg = tb_alloc(&t, FLOAT_TYPES[il], rows * cols);
            mpx_arg dl = id < 3 ? tb_alloc(&t, FLOAT_TYPES[id], rows * cols) : mpx_a(NULL, MPX_F32);
            fill_random(lg, rows * cols, lv, 70 + il, -8, 8);
            double loss = 0;
            cr_assert_eq(t.ops->cross_entropy(t.be, lg, labels, rows, cols, &loss, dl, 256.0f), 0, "%s", tb_error(&t));
            if (lg.t != MPX_F32) {
                double mean = ref_cross_entropy_16(lg.t, lv, labels, rows, cols, 256.0, ref);
                double want = ref_round(lg.t, mean);
                cr_assert(ref_round(lg.t, loss) == loss, "[%s] loss %.9g is not a %s value",
                          mpx_dtype_name(lg.t), loss, mpx_dtype_name(lg.t));
                cr_assert(fabs(loss - want) <= ref_ulp(lg.t, want), "[%s] loss %.9g, want %.9g (mean %.9g)",
                          mpx_dtype_name(lg.t), loss, want, mean);
                if (dl.p) check_out("cross_entropy dlogits (16-bit logits)", dl, ref, rows * cols, 1, NULL, 0.9);
                continue;
            }
            double want = ref_cross_entropy(lv, labels, rows, cols);
            cr_assert(fabs(loss - want) <= 1e-6 * (1 + fabs(want)), "loss %.9g, want %.9g", loss, want);
            if (!dl.p) continue;
            for (size_t r = 0; r < rows; r++) {
                double mx = -INFINITY, s = 0;
                for (size_t c = 0; c < cols; c++) mx = fmax(mx, lv[r * cols + c]);
                for (size_t c = 0; c < cols; c++) s += exp(lv[r * cols + c] - mx);
                for (size_t c = 0; c < cols; c++)
                    ref[r * cols + c] = 256.0 * (exp(lv[r * cols + c] - mx) / s - (c == (size_t)labels[r])) / rows;
            }
            check_out("cross_entropy dlogits", dl, ref, rows * cols, 1, NULL, 0.9);
        }
    tb_close(&t);
}

/* MPX_OPS_LOSS_OPTIONAL (ABI 1.18): without a loss pointer the backend gives the same
 * dlogits bits (each logits x dlogits dtype, checked above against the references) and
 * writes no loss; with neither a loss pointer nor dlogits the call is refused. The flag is
 * set, so the bert model's backward takes this path on the cpu backend too. */
Test(cross_entropy, without_a_loss_pointer_the_gradient_is_the_same)
{
    tb t = tb_open(2);
    cr_assert(MPX_OPS_HAS(t.ops, flags) && (t.ops->flags & MPX_OPS_LOSS_OPTIONAL), "backend/cpu lacks the flag");
    const size_t rows = 5, cols = 37, n = rows * cols;
    int32_t labels[5] = { 36, 0, 11, 11, 2 };
    double *lv = dbl(n);
    for (int il = 0; il < 3; il++)
        for (int id = 0; id < 3; id++) {
            mpx_arg lg = tb_alloc(&t, FLOAT_TYPES[il], n);
            mpx_arg with = tb_alloc(&t, FLOAT_TYPES[id], n), without = tb_alloc(&t, FLOAT_TYPES[id], n);
            fill_random(lg, n, lv, 90 + il, -6, 6);
            double loss = 0;
            cr_assert_eq(t.ops->cross_entropy(t.be, lg, labels, rows, cols, &loss, with, 128.0f), 0, "%s", tb_error(&t));
            cr_assert_eq(t.ops->cross_entropy(t.be, lg, labels, rows, cols, NULL, without, 128.0f), 0, "%s",
                         tb_error(&t));
            size_t bytes = n * mpx_dtype_size(FLOAT_TYPES[id]);
            cr_expect(memcmp(with.p, without.p, bytes) == 0, "[%s logits, %s dlogits] other bits without a loss pointer",
                      mpx_dtype_name(lg.t), mpx_dtype_name(with.t));
            cr_expect(isfinite(loss) && loss > 0, "loss %g", loss);
        }
    mpx_arg lg = tb_alloc(&t, MPX_F32, n);
    cr_assert_neq(t.ops->cross_entropy(t.be, lg, labels, rows, cols, NULL, mpx_a(NULL, MPX_F32), 1.0f), 0);
    cr_expect(strstr(tb_error(&t), "neither a loss pointer nor dlogits"), "%s", tb_error(&t));
    tb_close(&t);
}

/* A dscale of 2^16 (DeepSpeed's fp16 loss at scale 2^16) rounds to inf in fp16, so
 * every gradient element is non-finite; bf16 holds it. */
Test(cross_entropy, fp16_gradient_of_an_inf_seed_is_non_finite)
{
    tb t = tb_open(1);
    const size_t rows = 1, cols = 4;
    int32_t labels[1] = { 2 };
    double *lv = dbl(rows * cols);
    for (int il = 1; il < 3; il++) {
        mpx_arg lg = tb_alloc(&t, FLOAT_TYPES[il], cols), dl = tb_alloc(&t, FLOAT_TYPES[il], cols);
        fill_random(lg, cols, lv, 3, -1, 1);
        double loss;
        cr_assert_eq(t.ops->cross_entropy(t.be, lg, labels, rows, cols, &loss, dl, 65536.0f), 0, "%s", tb_error(&t));
        size_t bad = 0;
        cr_assert_eq(t.ops->count_nonfinite(t.be, dl, cols, &bad), 0);
        cr_expect_eq(bad, FLOAT_TYPES[il] == MPX_F16 ? cols : 0, "[%s] %zu non-finite", mpx_dtype_name(lg.t), bad);
    }
    tb_close(&t);
}

Test(embedding, gather_and_scatter_add_every_combination)
{
    tb t = tb_open(2);
    const size_t vocab = 20, dim = 37, n_ids = 30;
    int32_t ids[30];
    for (size_t i = 0; i < n_ids; i++) ids[i] = (int32_t)((i * 7) % 11);   /* repeats */
    ids[5] = 19;
    double *tv = dbl(vocab * dim), *dyv = dbl(n_ids * dim), *ref = dbl(n_ids * dim);
    for (int it = 0; it < 3; it++)
        for (int iy = 0; iy < 3; iy++) {
            mpx_arg table = tb_alloc(&t, FLOAT_TYPES[it], vocab * dim), y = tb_alloc(&t, FLOAT_TYPES[iy], n_ids * dim);
            fill_random(table, vocab * dim, tv, 80 + it, -1, 1);
            cr_assert_eq(t.ops->embedding_fwd(t.be, ids, n_ids, table, vocab, dim, y), 0, "%s", tb_error(&t));
            for (size_t i = 0; i < n_ids; i++)
                for (size_t c = 0; c < dim; c++) ref[i * dim + c] = tv[ids[i] * dim + c];
            check_out("embedding_fwd", y, ref, n_ids * dim, 1, NULL, 1.0);
            /* backward: y now plays dy, table plays dtable */
            fill_random(y, n_ids * dim, dyv, 90 + iy, -1, 1);
            memcpy(ref, tv, vocab * dim * sizeof *ref);
            for (size_t i = 0; i < n_ids; i++)
                for (size_t c = 0; c < dim; c++) ref[ids[i] * dim + c] += dyv[i * dim + c];
            cr_assert_eq(t.ops->embedding_bwd(t.be, ids, n_ids, y, table, vocab, dim), 0, "%s", tb_error(&t));
            check_out("embedding_bwd", table, ref, vocab * dim, 3, NULL, 0.9);
        }
    tb_close(&t);
}

Test(reductions, sum_squares_and_nonfinite_every_dtype)
{
    tb t = tb_open(3);
    const size_t n = 50001;
    double *xv = dbl(n);
    for (int ix = 0; ix < 3; ix++) {
        mpx_arg x = tb_alloc(&t, FLOAT_TYPES[ix], n);
        fill_random(x, n, xv, 100 + ix, -3, 3);
        double ss = 0, want = 0;
        for (size_t i = 0; i < n; i++) want += xv[i] * xv[i];
        cr_assert_eq(t.ops->sum_squares(t.be, x, n, &ss), 0);
        cr_assert(fabs(ss - want) <= 1e-5 * want, "sum_squares %.12g, want %.12g", ss, want);
        size_t bad = 99;
        cr_assert_eq(t.ops->count_nonfinite(t.be, x, n, &bad), 0);
        cr_assert_eq(bad, 0);
        xv[0] = NAN; xv[4097] = INFINITY; xv[n - 1] = -INFINITY; xv[30000] = 1e30; /* 1e30: inf in fp16 */
        store_vals(x, n, xv);
        cr_assert_eq(t.ops->count_nonfinite(t.be, x, n, &bad), 0);
        cr_assert_eq(bad, x.t == MPX_F16 ? 4u : 3u, "%s: %zu non-finite", mpx_dtype_name(x.t), bad);
    }
    tb_close(&t);
}

/* ---- apply_update ---- */

Test(apply_update, nearest_every_dtype)
{
    tb t = tb_open(2);
    const size_t n = 20000;
    double *wv = dbl(n), *ref = dbl(n);
    float *u = calloc(n, 4);
    for (size_t i = 0; i < n; i++) u[i] = (float)(((double)(i % 97) - 48) * 1e-3);
    for (int iw = 0; iw < 3; iw++) {
        mpx_arg w = tb_alloc(&t, FLOAT_TYPES[iw], n);
        fill_random(w, n, wv, 110 + iw, -1, 1);
        cr_assert_eq(t.ops->apply_update(t.be, w, mpx_a(NULL, w.t), u, n, MPX_ROUND_NEAREST, (mpx_rng){ 1, 2, 3, 0 }), 0);
        for (size_t i = 0; i < n; i++) ref[i] = wv[i] + u[i];
        check_out("apply_update nearest", w, ref, n, 1, NULL, 0.99);
    }
    free(u);
    tb_close(&t);
}

Test(apply_update, stochastic_follows_the_stream_and_is_unbiased)
{
    tb t = tb_open(2);
    const size_t n = 100003;
    float *u = calloc(n, 4);
    mpx_rng rng = { 77, 5, 9, 0 };
    for (int iw = 1; iw < 3; iw++) {
        mpx_dtype d = FLOAT_TYPES[iw];
        double ulp = d == MPX_BF16 ? 0x1p-7 : 0x1p-10;
        for (size_t i = 0; i < n; i++) u[i] = (float)(0.3 * ulp);
        mpx_arg w = tb_alloc(&t, d, n);
        double *wv = dbl(n);
        for (size_t i = 0; i < n; i++) wv[i] = 1.0;
        store_vals(w, n, wv);
        cr_assert_eq(t.ops->apply_update(t.be, w, mpx_a(NULL, d), u, n, MPX_ROUND_STOCHASTIC, rng), 0);
        double sum = 0;
        for (size_t i = 0; i < n; i++) {
            double got = get(w, i);
            cr_assert(got == 1.0 || got == 1.0 + ulp, "%s sr: %.9g", mpx_dtype_name(d), got);
            /* element i uses word i % 4 of counter (i / 4, site, tick) under key = seed */
            uint32_t ctr[4] = { (uint32_t)(i / 4), 0, rng.site, rng.tick }, key[2] = { 77, 0 };
            uint32_t x = mpx_philox4x32_10(ctr, key).v[i % 4];
            double frac = ((double)(1.0f + u[i]) - 1.0) / ulp;   /* of the fp32 sum, exact */
            int up = (double)(x >> 8) < frac * 0x1p24;
            cr_assert_eq(got == 1.0 + ulp, up, "element %zu: draw %08x", i, x);
            sum += got;
        }
        double mean = sum / n, sigma = ulp * sqrt(0.3 * 0.7 / n);
        cr_assert(fabs(mean - (1.0 + 0.3 * ulp)) < 5 * sigma, "%s: mean %.12g", mpx_dtype_name(d), mean);
        free(wv);
    }
    free(u);
    tb_close(&t);
}

Test(apply_update, kahan_matches_the_formula_and_recovers_small_updates)
{
    tb t = tb_open(2);
    const size_t n = 5000;
    float *u = calloc(n, 4);
    for (int iw = 0; iw < 3; iw++) {
        mpx_dtype d = FLOAT_TYPES[iw];
        mpx_arg w = tb_alloc(&t, d, n), c = tb_alloc(&t, d, n);
        double *wv = dbl(n), *cv = dbl(n);
        fill_random(w, n, wv, 120 + iw, -1, 1);
        fill_random(c, n, cv, 130 + iw, -1e-3, 1e-3);
        for (size_t i = 0; i < n; i++) u[i] = (float)(((double)(i % 89) - 44) * 1e-4);
        cr_assert_eq(t.ops->apply_update(t.be, w, c, u, n, MPX_ROUND_KAHAN, (mpx_rng){ 0 }), 0, "%s", tb_error(&t));
        for (size_t i = 0; i < n; i++) {
            float y = u[i] - (float)cv[i];
            float tt = (float)ref_round(d, (double)((float)wv[i] + y));
            float cn = (tt - (float)wv[i]) - y;
            cr_assert_eq(get(w, i), ref_round(d, tt), "w[%zu]", i);
            cr_assert_eq(get(c, i), ref_round(d, cn), "c[%zu]", i);
        }
        free(wv); free(cv);
    }
    /* bf16 weights of 1.0 with 1000 updates of 1e-4 (well under half an ulp, 2^-8):
     * nearest never moves, Kahan ends within an ulp of 1.1 */
    const size_t m = 64;
    mpx_arg wn = tb_alloc(&t, MPX_BF16, m), wk = tb_alloc(&t, MPX_BF16, m), ck = tb_alloc(&t, MPX_BF16, m);
    double ones[64];
    for (size_t i = 0; i < m; i++) { ones[i] = 1.0; u[i] = 1e-4f; }
    store_vals(wn, m, ones);
    store_vals(wk, m, ones);
    for (int s = 0; s < 1000; s++) {
        cr_assert_eq(t.ops->apply_update(t.be, wn, mpx_a(NULL, MPX_BF16), u, m, MPX_ROUND_NEAREST, (mpx_rng){ 0 }), 0);
        cr_assert_eq(t.ops->apply_update(t.be, wk, ck, u, m, MPX_ROUND_KAHAN, (mpx_rng){ 0 }), 0);
    }
    for (size_t i = 0; i < m; i++) {
        cr_assert_eq(get(wn, i), 1.0);
        cr_assert(fabs(get(wk, i) - 1.1) <= 0x1p-7, "kahan bf16 ended at %.6g", get(wk, i));
    }
    free(u);
    tb_close(&t);
}
