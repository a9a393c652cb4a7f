/* cpu backend, backward: every op's gradient against central finite differences taken in
 * double precision on the double reference forward functions, for fp32, fp16, bf16 and
 * a mixed storage combination. The scalar is L = sum(w * f(inputs)) with random w, which
 * is also the dy the op's backward receives. Tolerance per dtype: one ulp of the output
 * plus `rel[dtype]` of the gradient's largest magnitude (inputs such as softmax's y are
 * themselves stored in that dtype). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_cpu_ops_ref.h"

static double *dbl(size_t n) { double *p = calloc(n ? n : 1, sizeof *p); cr_assert_not_null(p); return p; }

/* dtypes for (inputs, dy, gradient outputs) */
static const mpx_dtype COMBOS[4][3] = {
    { MPX_F32, MPX_F32, MPX_F32 }, { MPX_F16, MPX_F16, MPX_F16 },
    { MPX_BF16, MPX_BF16, MPX_BF16 }, { MPX_F32, MPX_BF16, MPX_F16 },
};

static double rel_tol(mpx_dtype in, mpx_dtype out)
{
    mpx_dtype worst = (in == MPX_BF16 || out == MPX_BF16) ? MPX_BF16 : (in == MPX_F16 || out == MPX_F16) ? MPX_F16 : MPX_F32;
    return worst == MPX_F32 ? 1e-4 : worst == MPX_F16 ? 0x1p-8 : 0x1p-5;
}

typedef double (*loss_fn)(const double *x, void *ctx);

/* Central differences of loss at x (modified in place and restored). */
static void fd_grad(loss_fn loss, double *x, size_t n, void *ctx, double *grad)
{
    for (size_t i = 0; i < n; i++) {
        double x0 = x[i], h = 1e-6 * fmax(1.0, fabs(x0));
        x[i] = x0 + h;
        double lp = loss(x, ctx);
        x[i] = x0 - h;
        double lm = loss(x, ctx);
        x[i] = x0;
        grad[i] = (lp - lm) / (2 * h);
    }
}

static void compare(const char *what, mpx_arg got, const double *fd, size_t n, double rel)
{
    double scale = 0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(fd[i]));
    double *slack = dbl(n);
    for (size_t i = 0; i < n; i++) slack[i] = rel * scale;
    check_out(what, got, fd, n, scale, slack, 0.0);
    free(slack);
}

static double dot(const double *w, const double *y, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) s += w[i] * y[i];
    return s;
}

/* ---- GELU ---- */
typedef struct { const double *w; size_t n; } ew_ctx;
static double gelu_loss(const double *x, void *v)
{
    ew_ctx *c = v;
    double s = 0;
    for (size_t i = 0; i < c->n; i++) s += c->w[i] * ref_gelu(x[i]);
    return s;
}

Test(grad, gelu)
{
    tb t = tb_open(2);
    const size_t n = 300;
    double *xv = dbl(n), *wv = dbl(n), *fd = dbl(n);
    for (int k = 0; k < 4; k++) {
        mpx_arg x = tb_alloc(&t, COMBOS[k][0], n), dy = tb_alloc(&t, COMBOS[k][1], n), dx = tb_alloc(&t, COMBOS[k][2], n);
        fill_random(x, n, xv, 1, -5, 5);
        fill_random(dy, n, wv, 2, -1, 1);
        cr_assert_eq(t.ops->gelu_bwd(t.be, dy, x, dx, n), 0);
        ew_ctx c = { wv, n };
        fd_grad(gelu_loss, xv, n, &c, fd);
        compare("gelu_bwd vs fd", dx, fd, n, rel_tol(x.t, dx.t));
    }
    tb_close(&t);
}

/* ---- dropout ---- */
typedef struct { const double *w; size_t n; mpx_rng rng; float p; } drop_ctx;
static double dropout_loss(const double *x, void *v)
{
    drop_ctx *c = v;
    double s = 0, scale = (double)(1.0f / (1.0f - c->p));
    for (size_t i = 0; i < c->n; i++) s += ref_dropout_keep(c->rng, i, c->p) ? c->w[i] * x[i] * scale : 0;
    return s;
}

Test(grad, dropout)
{
    tb t = tb_open(2);
    const size_t n = 203;
    double *xv = dbl(n), *wv = dbl(n), *fd = dbl(n);
    mpx_rng rng = { 99, 3, 17, 0 };
    for (int k = 0; k < 4; k++) {
        mpx_arg x = tb_alloc(&t, COMBOS[k][0], n), dy = tb_alloc(&t, COMBOS[k][1], n), dx = tb_alloc(&t, COMBOS[k][2], n);
        fill_random(x, n, xv, 3, -2, 2);
        fill_random(dy, n, wv, 4, -1, 1);
        cr_assert_eq(t.ops->dropout_bwd(t.be, dy, dx, n, 0.25f, rng), 0);
        drop_ctx c = { wv, n, rng, 0.25f };
        fd_grad(dropout_loss, xv, n, &c, fd);
        compare("dropout_bwd vs fd", dx, fd, n, rel_tol(x.t, dx.t));
    }
    tb_close(&t);
}

/* ---- layernorm: x, gamma, beta ---- */
typedef struct { const double *w; double *x, *g, *b, *y; size_t rows, cols; int which; } ln_ctx;
static double ln_loss(const double *v, void *vc)
{
    ln_ctx *c = vc;
    const double *x = c->which == 0 ? v : c->x, *g = c->which == 1 ? v : c->g, *b = c->which == 2 ? v : c->b;
    ref_layernorm(x, g, b, c->y, c->rows, c->cols, 1e-5);
    return dot(c->w, c->y, c->rows * c->cols);
}

Test(grad, layernorm)
{
    tb t = tb_open(2);
    const size_t rows = 7, cols = 33, n = rows * cols;
    double *xv = dbl(n), *wv = dbl(n), *gv = dbl(cols), *bv = dbl(cols), *y = dbl(n), *fd = dbl(n);
    float mean[7], rstd[7];
    for (int k = 0; k < 4; k++) {
        mpx_dtype ti = COMBOS[k][0], to = COMBOS[k][2];
        mpx_arg x = tb_alloc(&t, ti, n), g = tb_alloc(&t, ti, cols), b = tb_alloc(&t, ti, cols);
        mpx_arg yy = tb_alloc(&t, MPX_F32, n), dy = tb_alloc(&t, COMBOS[k][1], n);
        mpx_arg dx = tb_alloc(&t, to, n), dg = tb_alloc(&t, to, cols), db = tb_alloc(&t, to, cols);
        fill_random(x, n, xv, 5, -2, 3);
        fill_random(g, cols, gv, 6, 0.5, 1.5);
        fill_random(b, cols, bv, 7, -1, 1);
        fill_random(dy, n, wv, 8, -1, 1);
        cr_assert_eq(t.ops->layernorm_fwd(t.be, x, g, b, yy, mean, rstd, rows, cols, 1e-5f), 0);
        cr_assert_eq(t.ops->layernorm_bwd(t.be, dy, x, g, mean, rstd, dx, dg, db, rows, cols, 0, 0), 0);
        ln_ctx c = { wv, xv, gv, bv, y, rows, cols, 0 };
        fd_grad(ln_loss, xv, n, &c, fd);
        compare("layernorm dx vs fd", dx, fd, n, rel_tol(ti, to));
        c.which = 1;
        fd_grad(ln_loss, gv, cols, &c, fd);
        compare("layernorm dgamma vs fd", dg, fd, cols, rel_tol(ti, to));
        c.which = 2;
        fd_grad(ln_loss, bv, cols, &c, fd);
        compare("layernorm dbeta vs fd", db, fd, cols, rel_tol(ti, to));
    }
    tb_close(&t);
}

/* ---- softmax with mask and scale ---- */
typedef struct { const double *w, *mask; double *y; size_t b, h, r, c; double scale; } sm_ctx;
static double sm_loss(const double *x, void *v)
{
    sm_ctx *c = v;
    ref_softmax(x, c->mask, c->y, c->b, c->h, c->r, c->c, c->scale);
    return dot(c->w, c->y, c->b * c->h * c->r * c->c);
}

Test(grad, softmax)
{
    tb t = tb_open(2);
    const size_t B = 2, H = 2, Rr = 3, Cc = 17, n = B * H * Rr * Cc;
    double *xv = dbl(n), *wv = dbl(n), *mv = dbl(B * Cc), *y = dbl(n), *fd = dbl(n);
    for (size_t i = 0; i < B * Cc; i++) mv[i] = i % 5 == 4 ? -10000.0 : 0.0;
    for (int k = 0; k < 4; k++) {
        mpx_arg x = tb_alloc(&t, COMBOS[k][0], n), yy = tb_alloc(&t, COMBOS[k][0], n);
        mpx_arg dy = tb_alloc(&t, COMBOS[k][1], n), dx = tb_alloc(&t, COMBOS[k][2], n);
        mpx_arg mask = tb_alloc(&t, MPX_F32, B * Cc);
        store_vals(mask, B * Cc, mv);
        fill_random(x, n, xv, 9, -3, 3);
        fill_random(dy, n, wv, 10, -1, 1);
        cr_assert_eq(t.ops->softmax_fwd(t.be, x, mask, yy, B, H, Rr, Cc, 0.7f), 0);
        cr_assert_eq(t.ops->softmax_bwd(t.be, dy, yy, dx, B * H * Rr, Cc, 0.7f), 0);
        sm_ctx c = { wv, mv, y, B, H, Rr, Cc, (double)0.7f };
        fd_grad(sm_loss, xv, n, &c, fd);
        compare("softmax_bwd vs fd", dx, fd, n, rel_tol(x.t, dx.t));
    }
    free(xv); free(wv); free(mv); free(y); free(fd);
    tb_close(&t);
}

/* ---- cross-entropy ---- */
typedef struct { const int32_t *labels; size_t rows, cols; double dscale; } ce_ctx;
static double ce_loss(const double *x, void *v)
{
    ce_ctx *c = v;
    return c->dscale * ref_cross_entropy(x, c->labels, c->rows, c->cols);
}

Test(grad, cross_entropy)
{
    tb t = tb_open(2);
    const size_t rows = 5, cols = 40, n = rows * cols;
    int32_t labels[5] = { 3, 0, 39, 3, 20 };
    double *xv = dbl(n), *fd = dbl(n);
    for (int k = 0; k < 4; k++) {
        mpx_arg x = tb_alloc(&t, COMBOS[k][0], n), dx = tb_alloc(&t, COMBOS[k][2], n);
        fill_random(x, n, xv, 11, -6, 6);
        double loss;
        cr_assert_eq(t.ops->cross_entropy(t.be, x, labels, rows, cols, &loss, dx, 1024.0f), 0);
        ce_ctx c = { labels, rows, cols, 1024.0 };
        fd_grad(ce_loss, xv, n, &c, fd);
        compare("cross_entropy dlogits vs fd", dx, fd, n, rel_tol(x.t, dx.t));
    }
    tb_close(&t);
}

/* ---- GEMM: C = A B (A m×k, B k×n); dA = W B^T, dB = A^T W through the op itself ---- */
typedef struct { const double *w, *A, *B; double *C; int m, n, k, which; } mm_ctx;
static double mm_loss(const double *v, void *vc)
{
    mm_ctx *c = vc;
    const double *A = c->which == 0 ? v : c->A, *B = c->which == 1 ? v : c->B;
    ref_gemm(0, 0, c->m, c->n, c->k, 1.0, A, c->k, B, c->n, 0.0, c->C, c->n);
    return dot(c->w, c->C, (size_t)c->m * c->n);
}

Test(grad, gemm)
{
    tb t = tb_open(2);
    const int m = 6, n = 5, k = 9;
    double *av = dbl(m * k), *bv = dbl(k * n), *wv = dbl(m * n), *cc = dbl(m * n), *fd = dbl(m * k > k * n ? m * k : k * n);
    for (int q = 0; q < 4; q++) {
        mpx_dtype ti = COMBOS[q][0], tw = COMBOS[q][1], to = COMBOS[q][2];
        mpx_arg A = tb_alloc(&t, ti, m * k), B = tb_alloc(&t, ti, k * n), W = tb_alloc(&t, tw, m * n);
        mpx_arg dA = tb_alloc(&t, to, m * k), dB = tb_alloc(&t, to, k * n);
        fill_random(A, m * k, av, 12, -1, 1);
        fill_random(B, k * n, bv, 13, -1, 1);
        fill_random(W, m * n, wv, 14, -1, 1);
        mpx_dtype compute = ti == MPX_F32 && tw == MPX_F32 ? MPX_F32 : (ti == MPX_F32 ? tw : ti);
        /* the backward GEMMs run in the dtype of their inputs: rounding W to it as well */
        if (compute != tw) for (int i = 0; i < m * n; i++) wv[i] = ref_round(compute, wv[i]);
        mpx_gemm ga = { .trans_b = 1, .m = m, .n = k, .k = n, .alpha = 1, .a = W, .lda = n, .b = B,
                        .ldb = n, .c = dA, .ldc = k, .batch = 1, .compute = compute };
        mpx_gemm gb = { .trans_a = 1, .m = k, .n = n, .k = m, .alpha = 1, .a = A, .lda = k, .b = W,
                        .ldb = n, .c = dB, .ldc = n, .batch = 1, .compute = compute };
        cr_assert_eq(t.ops->gemm(t.be, &ga), 0);
        cr_assert_eq(t.ops->gemm(t.be, &gb), 0);
        mm_ctx c = { wv, av, bv, cc, m, n, k, 0 };
        fd_grad(mm_loss, av, (size_t)(m * k), &c, fd);
        compare("gemm dA vs fd", dA, fd, (size_t)(m * k), rel_tol(ti, to));
        c.which = 1;
        fd_grad(mm_loss, bv, (size_t)(k * n), &c, fd);
        compare("gemm dB vs fd", dB, fd, (size_t)(k * n), rel_tol(ti, to));
    }
    tb_close(&t);
}

/* ---- bias and embedding (linear maps: the gradient is the scatter/sum of w) ---- */
typedef struct { const double *w; const int32_t *ids; size_t rows, cols; } lin_ctx;
static double bias_loss(const double *bias, void *v)
{
    lin_ctx *c = v;
    double s = 0;
    for (size_t r = 0; r < c->rows; r++)
        for (size_t j = 0; j < c->cols; j++) s += c->w[r * c->cols + j] * (0.5 + bias[j]);
    return s;
}
static double emb_loss(const double *table, void *v)
{
    lin_ctx *c = v;
    double s = 0;
    for (size_t r = 0; r < c->rows; r++)
        for (size_t j = 0; j < c->cols; j++) s += c->w[r * c->cols + j] * table[(size_t)c->ids[r] * c->cols + j];
    return s;
}

Test(grad, bias_and_embedding)
{
    tb t = tb_open(2);
    const size_t rows = 13, cols = 21, vocab = 9;
    int32_t ids[13] = { 1, 4, 4, 0, 8, 1, 1, 2, 4, 7, 0, 3, 4 };
    double *wv = dbl(rows * cols), *bv = dbl(cols), *tv = dbl(vocab * cols), *fd = dbl(vocab * cols);
    for (int k = 0; k < 4; k++) {
        mpx_arg dy = tb_alloc(&t, COMBOS[k][1], rows * cols), db = tb_alloc(&t, COMBOS[k][2], cols);
        mpx_arg dt = tb_alloc(&t, COMBOS[k][2], vocab * cols);
        fill_random(dy, rows * cols, wv, 15, -1, 1);
        cr_assert_eq(t.ops->bias_grad(t.be, dy, db, rows, cols, 0), 0);
        lin_ctx c = { wv, ids, rows, cols };
        fd_grad(bias_loss, bv, cols, &c, fd);
        compare("bias_grad vs fd", db, fd, cols, rel_tol(dy.t, db.t));
        cr_assert_eq(t.ops->embedding_bwd(t.be, ids, rows, dy, dt, vocab, cols), 0);
        fd_grad(emb_loss, tv, vocab * cols, &c, fd);
        compare("embedding_bwd vs fd", dt, fd, vocab * cols, rel_tol(dy.t, dt.t));
    }
    tb_close(&t);
}
