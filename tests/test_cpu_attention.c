/* ABI 1.11's attention op (mpx_ops.attention_fwd / attention_bwd, cpu_attention.c)
 * against what it stands for: the gemm op batched over one example's heads, softmax_fwd
 * and dropout_fwd (backward: dropout_bwd and softmax_bwd), run one after the other on the
 * same backend as the bert model runs them without the op. Every output must be bit for
 * bit theirs: fp32, the 16-bit policies' dtypes (bf16 and fp16 activations with fp32 or
 * 16-bit probabilities), head sizes on the attention kernel (16, 64) and past it (80),
 * an odd sequence length (edge tiles), row strides wider than the heads, with and
 * without a mask and dropout (its mask drawn again in backward, or kept as bits in
 * mpx_attention.keep), on 1, 2 and 3 threads. The fp32 forward and backward at
 * p = 0 are also checked against a double-precision reference. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_cpu_ops_ref.h"

static double *dbl(size_t n) { double *p = calloc(n ? n : 1, sizeof *p); cr_assert_not_null(p); return p; }

static int same_bits(mpx_arg a, mpx_arg b, size_t n, size_t *at)
{
    const size_t es = mpx_dtype_size(a.t);
    for (size_t i = 0; i < n; i++)
        if (memcmp((const char *)a.p + i * es, (const char *)b.p + i * es, es)) { *at = i; return 0; }
    return 1;
}

typedef struct shape { int batch, heads, seq, dim, ld; } shape;
typedef struct dtypes { mpx_dtype act, sm, compute; } dtypes;

/* Element e of a [batch * seq, ld] tensor that a head touches: row r, column c < heads * dim. */
static size_t span(const shape *s) { return (size_t)s->batch * (size_t)s->seq * (size_t)s->ld; }
static size_t n_probs(const shape *s) { return (size_t)s->batch * (size_t)s->heads * (size_t)s->seq * (size_t)s->seq; }

static mpx_gemm head_gemm(const shape *s, mpx_dtype compute, int ta, int tb, int m, int n, int k, float alpha,
                          mpx_arg a, int lda, long long sa, mpx_arg b, int ldb, long long sb, mpx_arg c, int ldc,
                          long long sc)
{
    mpx_gemm g = { .trans_a = ta, .trans_b = tb, .m = m, .n = n, .k = k, .alpha = alpha, .beta = 0.0f,
                   .a = a, .lda = lda, .stride_a = sa, .b = b, .ldb = ldb, .stride_b = sb,
                   .c = c, .ldc = ldc, .stride_c = sc, .batch = s->heads, .compute = compute };
    return g;
}

/* The model's ops one by one (bert_forward.c / bert_backward.c without the op): */
static void composed_fwd(tb *t, const mpx_attention *a, mpx_arg scores, mpx_arg pd)
{
    const shape s = { a->batch, a->heads, a->seq, a->head_dim, a->ld };
    const int S = s.seq, D = s.dim;
    const size_t SH = (size_t)S * s.ld, SS = (size_t)S * S;
    for (int b = 0; b < s.batch; b++) {
        mpx_gemm g = head_gemm(&s, a->compute, 0, 1, S, S, D, a->scale, mpx_at(a->q, b * SH), s.ld, D,
                               mpx_at(a->k, b * SH), s.ld, D, mpx_at(scores, b * s.heads * SS), S, (long long)SS);
        cr_assert_eq(t->ops->gemm(t->be, &g), 0, "%s", tb_error(t));
    }
    cr_assert_eq(t->ops->softmax_fwd(t->be, scores, a->mask, a->probs, (size_t)s.batch, (size_t)s.heads, (size_t)S,
                                     (size_t)S, 1.0f), 0, "%s", tb_error(t));
    mpx_arg p = a->probs;
    if (a->p > 0.0f) {
        cr_assert_eq(t->ops->dropout_fwd(t->be, a->probs, pd, n_probs(&s), a->p, a->rng), 0, "%s", tb_error(t));
        p = pd;
    }
    for (int b = 0; b < s.batch; b++) {
        mpx_gemm g = head_gemm(&s, a->compute, 0, 0, S, D, S, 1.0f, mpx_at(p, b * s.heads * SS), S, (long long)SS,
                               mpx_at(a->v, b * SH), s.ld, D, mpx_at(a->ctx, b * SH), s.ld, D);
        cr_assert_eq(t->ops->gemm(t->be, &g), 0, "%s", tb_error(t));
    }
}

static void composed_bwd(tb *t, const mpx_attention *a, mpx_arg pd, mpx_arg g1, mpx_arg g2, mpx_arg ds)
{
    const shape s = { a->batch, a->heads, a->seq, a->head_dim, a->ld };
    const int S = s.seq, D = s.dim;
    const size_t SH = (size_t)S * s.ld, SS = (size_t)S * S, n = n_probs(&s);
    mpx_arg p = a->probs;
    if (a->p > 0.0f) {
        cr_assert_eq(t->ops->dropout_fwd(t->be, a->probs, pd, n, a->p, a->rng), 0, "%s", tb_error(t));
        p = pd;
    }
    for (int b = 0; b < s.batch; b++) {
        mpx_arg dctx = mpx_at(a->dctx, b * SH);
        mpx_gemm g = head_gemm(&s, a->compute, 0, 1, S, S, D, 1.0f, dctx, s.ld, D, mpx_at(a->v, b * SH), s.ld, D,
                               mpx_at(g1, b * s.heads * SS), S, (long long)SS);
        cr_assert_eq(t->ops->gemm(t->be, &g), 0, "%s", tb_error(t));
        g = head_gemm(&s, a->compute, 1, 0, S, D, S, 1.0f, mpx_at(p, b * s.heads * SS), S, (long long)SS, dctx, s.ld,
                      D, mpx_at(a->dv, b * SH), s.ld, D);
        cr_assert_eq(t->ops->gemm(t->be, &g), 0, "%s", tb_error(t));
    }
    mpx_arg dp = g1;
    if (a->p > 0.0f) {
        cr_assert_eq(t->ops->dropout_bwd(t->be, g1, g2, n, a->p, a->rng), 0, "%s", tb_error(t));
        dp = g2;
    }
    cr_assert_eq(t->ops->softmax_bwd(t->be, dp, a->probs, ds, n / (size_t)S, (size_t)S, 1.0f), 0, "%s", tb_error(t));
    for (int b = 0; b < s.batch; b++) {
        mpx_arg dsb = mpx_at(ds, b * s.heads * SS);
        mpx_gemm g = head_gemm(&s, a->compute, 0, 0, S, D, S, a->scale, dsb, S, (long long)SS, mpx_at(a->k, b * SH),
                               s.ld, D, mpx_at(a->dq, b * SH), s.ld, D);
        cr_assert_eq(t->ops->gemm(t->be, &g), 0, "%s", tb_error(t));
        g = head_gemm(&s, a->compute, 1, 0, S, D, S, a->scale, dsb, S, (long long)SS, mpx_at(a->q, b * SH), s.ld, D,
                      mpx_at(a->dk, b * SH), s.ld, D);
        cr_assert_eq(t->ops->gemm(t->be, &g), 0, "%s", tb_error(t));
    }
}

/* Fresh inputs and two sets of outputs (op, composed) for one case. */
typedef struct io {
    mpx_attention op, ref;
    mpx_arg scores, pd, g1, g2, ds;
} io;

static io make_io(tb *t, const shape *s, const dtypes *d, float p, int masked, uint64_t seed, double *vals)
{
    io x;
    const size_t n = span(s), np = n_probs(s), rows = (size_t)s->batch * (size_t)s->seq;
    mpx_attention a = { .size = sizeof a, .batch = s->batch, .heads = s->heads, .seq = s->seq, .head_dim = s->dim,
                        .ld = s->ld, .scores_t = d->act, .ds_t = d->act, .compute = d->compute,
                        .scale = 1.0f / sqrtf((float)s->dim), .p = p, .rng = { 0x5eedULL + seed, 1234, 7, 3 * 4096 } };
    a.q = tb_alloc(t, d->act, n), a.k = tb_alloc(t, d->act, n), a.v = tb_alloc(t, d->act, n);
    a.dctx = tb_alloc(t, d->act, n);
    fill_random(a.q, n, vals, seed, -2, 2);
    fill_random(a.k, n, NULL, seed + 1, -2, 2);
    fill_random(a.v, n, NULL, seed + 2, -1, 1);
    fill_random(a.dctx, n, NULL, seed + 3, -1, 1);
    a.mask = mpx_a(NULL, MPX_F32);
    if (masked) {
        a.mask = tb_alloc(t, MPX_F32, rows);
        double *mv = dbl(rows);
        for (size_t i = 0; i < rows; i++) mv[i] = (i % 7 == 5 || i % s->seq == (size_t)s->seq - 1) ? -10000.0 : 0.0;
        store_vals(a.mask, rows, mv);
        free(mv);
    }
    x.op = x.ref = a;
    for (int i = 0; i < 2; i++) {
        mpx_attention *o = i ? &x.ref : &x.op;
        o->ctx = tb_alloc(t, d->act, n);
        o->probs = tb_alloc(t, d->sm, np);
        o->dq = tb_alloc(t, d->act, n), o->dk = tb_alloc(t, d->act, n), o->dv = tb_alloc(t, d->act, n);
    }
    x.scores = tb_alloc(t, d->act, np);
    x.pd = tb_alloc(t, d->sm, np);
    x.g1 = tb_alloc(t, d->sm, np);
    x.g2 = tb_alloc(t, d->sm, np);
    x.ds = tb_alloc(t, d->act, np);
    return x;
}

static void expect_same(const char *what, mpx_arg a, mpx_arg b, size_t n, const char *label)
{
    size_t at = 0;
    cr_expect(same_bits(a, b, n, &at), "%s: %s differs from the ops one by one at element %zu (%g vs %g)", label, what,
              at, get(a, at), get(b, at));
}

static const shape SHAPES[] = {
    { 2, 3, 37, 16, 48 },   /* odd seq: edge tiles; QK^T on the attention kernel (K = 16) */
    { 1, 2, 64, 64, 136 },  /* bert-base's head size; rows wider than the heads */
    { 2, 2, 21, 80, 160 },  /* a head past the attention kernel (K = N = 80): the linear path */
};
static const dtypes DTYPES[] = {
    { MPX_F32, MPX_F32, MPX_F32 },     /* fp32 */
    { MPX_BF16, MPX_F32, MPX_BF16 },   /* bf16 activations, fp32 softmax island (bf16-master) */
    { MPX_F16, MPX_F32, MPX_F16 },     /* amp's fp16 activations and GEMMs */
    { MPX_BF16, MPX_BF16, MPX_BF16 },  /* everything bf16 (pure-bf16) */
};

Test(attention, the_op_is_the_ops_one_by_one_bit_for_bit, .timeout = 120)
{
    char label[320];
    double *vals = dbl(2 * 37 * 160);
    for (int threads = 1; threads <= 3; threads++) {
        tb t = tb_open(threads);
        cr_assert(MPX_OPS_HAS(t.ops, attention_bwd) && t.ops->attention_fwd && t.ops->attention_bwd,
                  "the cpu backend offers the attention op");
        for (size_t si = 0; si < sizeof SHAPES / sizeof SHAPES[0]; si++)
            for (size_t di = 0; di < sizeof DTYPES / sizeof DTYPES[0]; di++)
                for (int k = 0; k < 3; k++) {
                    const float p = k == 0 ? 0.0f : 0.1f;
                    const int masked = k != 1;
                    const shape *s = &SHAPES[si];
                    snprintf(label, sizeof label, "%d threads, batch %d heads %d seq %d dim %d ld %d, act %s softmax %s "
                             "compute %s, p %g, mask %d, keep %d", threads, s->batch, s->heads, s->seq, s->dim, s->ld,
                             mpx_dtype_name(DTYPES[di].act), mpx_dtype_name(DTYPES[di].sm),
                             mpx_dtype_name(DTYPES[di].compute), (double)p, masked, k == 2);
                    io x = make_io(&t, s, &DTYPES[di], p, masked, 11 + 7 * si + di, vals);
                    const size_t n = span(s), np = n_probs(s);
                    if (k == 2) {   /* the mask kept as bits between the two (else drawn again) */
                        size_t words = (size_t)s->batch * s->heads * s->seq * ((s->seq + 31) / 32);
                        x.op.keep = tb_alloc(&t, MPX_F32, words).p;
                        memset(x.op.keep, 0xa5, words * 4);   /* stale bits of an earlier step */
                    }
                    cr_assert_eq(t.ops->attention_fwd(t.be, &x.op), 0, "%s: %s", label, tb_error(&t));
                    composed_fwd(&t, &x.ref, x.scores, x.pd);
                    expect_same("probs", x.op.probs, x.ref.probs, np, label);
                    expect_same("ctx", x.op.ctx, x.ref.ctx, n, label);
                    cr_assert_eq(t.ops->attention_bwd(t.be, &x.op), 0, "%s: %s", label, tb_error(&t));
                    composed_bwd(&t, &x.ref, x.pd, x.g1, x.g2, x.ds);
                    expect_same("dq", x.op.dq, x.ref.dq, n, label);
                    expect_same("dk", x.op.dk, x.ref.dk, n, label);
                    expect_same("dv", x.op.dv, x.ref.dv, n, label);
                    /* an evaluation forward keeps nothing and gives the same context */
                    mpx_attention ev = x.op;
                    ev.probs.p = NULL;
                    ev.p = 0.0f;
                    ev.ctx = tb_alloc(&t, DTYPES[di].act, n);
                    cr_assert_eq(t.ops->attention_fwd(t.be, &ev), 0, "%s: %s", label, tb_error(&t));
                    if (p == 0.0f) expect_same("ctx without probs", ev.ctx, x.op.ctx, n, label);
                }
        tb_close(&t);
    }
    free(vals);
}

/* fp32, p = 0: ctx = softmax(Q K^T / sqrt(D) + mask) V per head, and its gradients, in
 * double precision (dP = dctx V^T, dV = P^T dctx, dS = P (dP - rowsum(dP P)), dQ = dS K
 * / sqrt(D), dK = dS^T Q / sqrt(D)). */
Test(attention, fp32_matches_a_double_reference)
{
    tb t = tb_open(2);
    const shape s = { 2, 3, 29, 16, 48 };
    const dtypes d = { MPX_F32, MPX_F32, MPX_F32 };
    const int S = s.seq, D = s.dim, NH = s.heads;
    const size_t n = span(&s);
    double *q = dbl(n), *k = dbl(n), *v = dbl(n), *dc = dbl(n), *mask = dbl((size_t)s.batch * S);
    io x = make_io(&t, &s, &d, 0.0f, 1, 5, NULL);
    get_all(x.op.q, n, q), get_all(x.op.k, n, k), get_all(x.op.v, n, v), get_all(x.op.dctx, n, dc);
    get_all(x.op.mask, (size_t)s.batch * S, mask);
    cr_assert_eq(t.ops->attention_fwd(t.be, &x.op), 0, "%s", tb_error(&t));
    cr_assert_eq(t.ops->attention_bwd(t.be, &x.op), 0, "%s", tb_error(&t));
    double *ctx = dbl(n), *dq = dbl(n), *dk = dbl(n), *dv = dbl(n);
    double *P = dbl((size_t)S * S), *dP = dbl((size_t)S * S);
    const double sc = 1.0 / sqrt((double)D);
    for (int b = 0; b < s.batch; b++)
        for (int h = 0; h < NH; h++) {
#define AT(x, i, c) x[((size_t)b * S + (size_t)(i)) * (size_t)s.ld + (size_t)h * D + (size_t)(c)]
            for (int i = 0; i < S; i++) {
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j < S; j++) {
                    double a = 0;
                    for (int c = 0; c < D; c++) a += AT(q, i, c) * AT(k, j, c);
                    P[(size_t)i * S + j] = a * sc + mask[(size_t)b * S + j];
                    mx = fmax(mx, P[(size_t)i * S + j]);
                }
                for (int j = 0; j < S; j++) sum += (P[(size_t)i * S + j] = exp(P[(size_t)i * S + j] - mx));
                for (int j = 0; j < S; j++) P[(size_t)i * S + j] /= sum;
            }
            for (int i = 0; i < S; i++)
                for (int c = 0; c < D; c++) {
                    double a = 0, g = 0;
                    for (int j = 0; j < S; j++) a += P[(size_t)i * S + j] * AT(v, j, c), g += P[(size_t)j * S + i] * AT(dc, j, c);
                    AT(ctx, i, c) = a;
                    AT(dv, i, c) = g;
                }
            for (int i = 0; i < S; i++) {
                double dot = 0;
                for (int j = 0; j < S; j++) {
                    double a = 0;
                    for (int c = 0; c < D; c++) a += AT(dc, i, c) * AT(v, j, c);
                    dP[(size_t)i * S + j] = a;
                    dot += a * P[(size_t)i * S + j];
                }
                for (int j = 0; j < S; j++) dP[(size_t)i * S + j] = P[(size_t)i * S + j] * (dP[(size_t)i * S + j] - dot);
            }
            for (int i = 0; i < S; i++)
                for (int c = 0; c < D; c++) {
                    double a = 0, g = 0;
                    for (int j = 0; j < S; j++) a += dP[(size_t)i * S + j] * AT(k, j, c), g += dP[(size_t)j * S + i] * AT(q, j, c);
                    AT(dq, i, c) = a * sc;
                    AT(dk, i, c) = g * sc;
                }
#undef AT
        }
    /* columns of ld past heads * dim are never written: compare only the heads' */
    double *got = dbl(n);
    const char *names[4] = { "ctx", "dq", "dk", "dv" };
    const mpx_arg outs[4] = { x.op.ctx, x.op.dq, x.op.dk, x.op.dv };
    double *refs[4] = { ctx, dq, dk, dv };
    for (int o = 0; o < 4; o++) {
        get_all(outs[o], n, got);
        double worst = 0;
        for (size_t r = 0; r < (size_t)s.batch * S; r++)
            for (int c = 0; c < NH * D; c++) {
                size_t i = r * (size_t)s.ld + (size_t)c;
                worst = fmax(worst, fabs(got[i] - refs[o][i]) / (1e-3 + fabs(refs[o][i])));
            }
        cr_expect_lt(worst, 1e-4, "%s: worst relative error %g against the double reference", names[o], worst);
    }
    free(q), free(k), free(v), free(dc), free(mask), free(ctx), free(dq), free(dk), free(dv), free(P), free(dP), free(got);
    tb_close(&t);
}

Test(attention, bad_arguments_are_refused_with_a_message)
{
    tb t = tb_open(1);
    const shape s = { 1, 2, 8, 4, 8 };
    const dtypes d = { MPX_F32, MPX_F32, MPX_F32 };
    io x = make_io(&t, &s, &d, 0.1f, 0, 3, NULL);
    mpx_attention a = x.op;
    a.ld = 7;   /* narrower than heads x head_dim */
    cr_expect_neq(t.ops->attention_fwd(t.be, &a), 0);
    cr_expect(strstr(tb_error(&t), "ld=7") != NULL, "message: %s", tb_error(&t));
    a = x.op;
    a.p = 1.5f;
    cr_expect_neq(t.ops->attention_fwd(t.be, &a), 0);
    cr_expect(strstr(tb_error(&t), "p = 1.5") != NULL, "message: %s", tb_error(&t));
    a = x.op;
    a.probs.p = NULL;   /* backward needs the probabilities */
    cr_expect_neq(t.ops->attention_bwd(t.be, &a), 0);
    cr_expect(strstr(tb_error(&t), "probs") != NULL, "message: %s", tb_error(&t));
    a = x.op;
    a.size = 8;
    cr_expect_neq(t.ops->attention_fwd(t.be, &a), 0);
    cr_expect(strstr(tb_error(&t), "mpx_attention of 8 bytes") != NULL, "message: %s", tb_error(&t));
    tb_close(&t);
}
