/* GEMM with a number format as compute dtype: the 8-bit emulation (DESIGN, Numerics).
 *
 * Each operand is widened to fp32, scaled, rounded to the format (saturating, as the
 * fp8 conversions of cuda_fp8.h with __NV_SATFINITE that Transformer Engine uses) and
 * multiplied in fp32; C is rounded once to its dtype:
 *   - per-tensor recipes (none, delayed, current): q = round(x * s) with the scale the
 *     host gives for that operand (host->tensor_scale keyed by the operand's address,
 *     which also records its amax), and the product is taken on the q values with
 *     alpha * (1/s_a) * (1/s_b), as a tensor core applies the two scale inverses;
 *   - MX (OCP MX v1.0): each block of 32 consecutive elements along K shares the scale
 *     2^X, X = floor(log2(block amax)) - emax of the element format, stored as E8M0;
 *     elements are x / 2^X rounded (saturating) and multiplied back by 2^X (exact).
 * Where a real tensor core differs: it accumulates the K products in blocks, truncating
 * (an H100: 32 products aligned and cut to 13 fraction bits), while this emulation
 * accumulates in OpenBLAS's fp32 order, unless the backend's fp8_accumulate option asks
 * for the H100's arithmetic (cpu_gemm_h100.c, mmaemu's model, bit for bit on its
 * fixture).
 * Operands are converted whole (all batch items) over the pool, the rounding in AVX-512
 * where the CPU has it (cpu_quant.c, bit for bit the header's); the multiply uses the
 * pool as the 16-bit path does, on AMX tiles with bf16_gemm = "amx" (every value of a
 * format of at most 7 mantissa bits is a bf16 value: the products are exact, and they
 * accumulate in the unit's order; an MX value below 2^-126 would read as zero). Each conversion is counted (non-zero, saturated,
 * flushed to zero) and reported to the host (gemm_input_stats, ABI 1.8). */
#include "cpu_internal.h"

#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct stored {
    mpx_arg a;
    int rows, cols, ld;   /* one item as stored */
    long long stride;
    int batch;
} stored;

/* One operand's conversion, cut over the pool by stored rows (all batch items): widen,
 * its amax, quantise; the counts of every piece are added into st. */
typedef struct qjob {
    const cpu_be *be;
    const stored *o;
    float *dst;                 /* batch x rows x cols, compact fp32 */
    const mpx_format *f;
    const cpu_qfmt *qf;
    const float *lut;
    float s;                    /* per-tensor scale */
    int k_along_cols;           /* MX: K runs along a stored row (else down a column) */
    uint32_t amax_bits;         /* widen_rows: the bits of the largest finite-or-inf |x| */
    int nan;                    /* ... and whether an x is NaN (amax is then NaN) */
    mpx_quant_stats st;         /* quantise: nonzero, saturated, flushed, added atomically */
} qjob;

static void add_stats(qjob *j, const mpx_quant_stats *t)
{
    __atomic_fetch_add(&j->st.nonzero, t->nonzero, __ATOMIC_RELAXED);
    __atomic_fetch_add(&j->st.saturated, t->saturated, __ATOMIC_RELAXED);
    __atomic_fetch_add(&j->st.flushed, t->flushed, __ATOMIC_RELAXED);
}

/* Stored rows [r0, r1) (over all items) widened into dst, and their amax. */
static void widen_rows(void *vj, size_t r0, size_t r1)
{
    qjob *j = vj;
    const stored *o = j->o;
    uint32_t mb = 0;
    for (size_t r = r0; r < r1; r++) {
        size_t b = r / (size_t)o->rows, row = r % (size_t)o->rows;
        float *d = j->dst + r * (size_t)o->cols;
        cpu_load(j->be, o->a, (size_t)((long long)b * o->stride) + row * (size_t)o->ld, (size_t)o->cols, d);
        mb = cpu_abs_bits_max(d, (size_t)o->cols, 1, mb);
    }
    int nan = mb > 0x7f800000u;
    if (nan) mb = 0;
    /* max of non-negative floats = max of their bits: one atomic each */
    uint32_t cur = __atomic_load_n(&j->amax_bits, __ATOMIC_RELAXED);
    while (mb > cur && !__atomic_compare_exchange_n(&j->amax_bits, &cur, mb, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {}
    if (nan) __atomic_store_n(&j->nan, 1, __ATOMIC_RELAXED);
}

/* Elements [e0, e1) of dst quantised with the per-tensor scale. */
static void quant_elems(void *vj, size_t e0, size_t e1)
{
    qjob *j = vj;
    mpx_quant_stats t = { 0 };
    cpu_quantize(j->be, j->f, j->qf, j->lut, j->dst + e0, e1 - e0, j->s, &t);
    add_stats(j, &t);
}

/* MX blocks along K of lines [l0, l1): a line is a stored row (k_along_cols) or column,
 * over all items (line l of item l / lines). Each block of 32 shares the scale 2^X. */
static void quant_mx_lines(void *vj, size_t l0, size_t l1)
{
    qjob *j = vj;
    const stored *o = j->o;
    const int lines = j->k_along_cols ? o->rows : o->cols, klen = j->k_along_cols ? o->cols : o->rows;
    mpx_quant_stats t = { 0 };
    if (j->k_along_cols) {   /* a line is a stored row: its blocks contiguous */
        for (size_t li = l0; li < l1; li++) {
            float *v = j->dst + li * (size_t)o->cols;
            for (int k0 = 0; k0 < klen; k0 += MPX_MX_BLOCK)
                cpu_quantize_mx_block(j->be, j->f, j->qf, j->lut, v + k0,
                                      klen - k0 < MPX_MX_BLOCK ? klen - k0 : MPX_MX_BLOCK, &t);
        }
    } else {   /* lines are columns: lines [l0, l1) of an item at a time, blocks of 32 rows */
        for (size_t li = l0; li < l1;) {
            size_t item = li / (size_t)lines, c0 = li % (size_t)lines;
            size_t c1 = (item + 1) * (size_t)lines < l1 ? (size_t)lines : l1 - item * (size_t)lines;
            float *m = j->dst + item * (size_t)o->rows * (size_t)o->cols;
            for (int k0 = 0; k0 < klen; k0 += MPX_MX_BLOCK)
                cpu_quantize_mx_cols(j->be, j->f, j->qf, j->lut, m + (size_t)k0 * (size_t)o->cols + c0, (size_t)o->cols,
                                     klen - k0 < MPX_MX_BLOCK ? klen - k0 : MPX_MX_BLOCK, (int)(c1 - c0), &t);
            li = item * (size_t)lines + c1;
        }
    }
    add_stats(j, &t);
}

static mpx_scaling recipe_of(const cpu_be *be)
{
    const mpx_precision_desc *d = be->env->host->precision(be->env);
    if (!d || d->size < offsetof(mpx_precision_desc, scaling) + sizeof d->scaling) return MPX_SCALING_NONE;
    return d->scaling;
}

/* Widen and quantize one operand over the pool; *inv_scale is 1/s for per-tensor recipes. */
static int prepare(cpu_be *be, const stored *o, mpx_dtype t, mpx_scaling recipe, int k_along_cols,
                   float *dst, float *inv_scale, mpx_quant_stats *st)
{
    const mpx_format *f = cpu_fmt(be, t);
    cpu_qfmt qf;
    cpu_qfmt_init(f, &qf);
    qjob j = { .be = be, .o = o, .dst = dst, .f = f, .qf = &qf, .lut = be->lut[t - MPX_FORMAT_FIRST], .s = 1.0f,
               .k_along_cols = k_along_cols };
    size_t rows = (size_t)o->batch * (size_t)o->rows, n = rows * (size_t)o->cols;
    size_t grain = o->cols > 0 ? (16384 + (size_t)o->cols - 1) / (size_t)o->cols : rows;
    cpu_pool_run(be->pool, rows, grain ? grain : 1, widen_rows, &j);
    *inv_scale = 1.0f;
    if (recipe == MPX_SCALING_MX) {
        size_t lines = (size_t)o->batch * (size_t)(k_along_cols ? o->rows : o->cols);
        cpu_pool_run(be->pool, lines, 16, quant_mx_lines, &j);
        st->n += n;
        st->scale = NAN;
    } else {
        if (recipe == MPX_SCALING_DELAYED || recipe == MPX_SCALING_CURRENT)
        {
            float amax;
            memcpy(&amax, &j.amax_bits, 4);
            MPX_TRY(be->env->host->tensor_scale(be->env, t, o->a.p, j.nan ? NAN : amax, &j.s));
        }
        cpu_pool_run(be->pool, n, 16384, quant_elems, &j);
        st->n += n;
        st->scale = j.s;
        *inv_scale = 1.0f / j.s;
    }
    st->nonzero += j.st.nonzero;
    st->saturated += j.st.saturated;
    st->flushed += j.st.flushed;
    return MPX_OK;
}

/* One operand as the multiply reads it: quantised into a compact fp32 buffer (q NULL), or
 * as stored, quantised by the AMX path while it packs it (q). */
typedef struct opnd {
    mpx_arg x;
    int ld;
    long long stride;
    cpu_amx_quant *q;
    const stored *so;   /* per item (q set, not the AMX path): each thread quantises its item into a buffer */
    int k_along_cols;
} opnd;

/* Item b of an operand quantised (as prepare does it, with q's per-tensor scale or MX) into
 * dst, compact; counted into st. */
static void quantize_item(const cpu_be *be, const opnd *o, int b, float *dst, mpx_quant_stats *st)
{
    const stored *so = o->so;
    for (int r = 0; r < so->rows; r++)
        cpu_load(be, so->a, (size_t)((long long)b * so->stride) + (size_t)r * (size_t)so->ld, (size_t)so->cols,
                 dst + (size_t)r * (size_t)so->cols);
    const cpu_amx_quant *q = o->q;
    if (!q->mx) {
        cpu_quantize(be, q->f, q->qf, q->lut, dst, (size_t)so->rows * (size_t)so->cols, q->s, st);
    } else if (o->k_along_cols) {
        for (int r = 0; r < so->rows; r++)
            for (int k0 = 0; k0 < so->cols; k0 += MPX_MX_BLOCK)
                cpu_quantize_mx_block(be, q->f, q->qf, q->lut, dst + (size_t)r * (size_t)so->cols + (size_t)k0,
                                      so->cols - k0 < MPX_MX_BLOCK ? so->cols - k0 : MPX_MX_BLOCK, st);
    } else {
        for (int k0 = 0; k0 < so->rows; k0 += MPX_MX_BLOCK)
            cpu_quantize_mx_cols(be, q->f, q->qf, q->lut, dst + (size_t)k0 * (size_t)so->cols, (size_t)so->cols,
                                 so->rows - k0 < MPX_MX_BLOCK ? so->rows - k0 : MPX_MX_BLOCK, so->cols, st);
    }
}

/* The products of the quantised operands, item by item. */
typedef struct mult {
    cpu_be *be;
    const mpx_gemm *g, *gg;   /* gg: alpha with the scales' inverses */
    opnd a, b;
    int h100, emin, amx, census;
    cpu_pool *pool;           /* NULL: items spread over the pool's threads */
    float *cw;                /* a 16-bit C's fp32 item (NULL: allocated per call) */
    atomic_int failed;
} mult;

static int mult_one(mult *m, int b, cpu_pool *pool, float *cw, void *amx_buf, float *panel, float *abuf, float *bbuf)
{
    const mpx_gemm *g = m->g, *gg = m->gg;
    cpu_be *be = m->be;
    mpx_arg xa = mpx_at(m->a.x, (size_t)((long long)b * m->a.stride)), xb = mpx_at(m->b.x, (size_t)((long long)b * m->b.stride));
    int ldo = g->c.t == MPX_F32 ? g->ldc : g->n, rc = 0, lda = m->a.ld, ldb = m->b.ld;
    cpu_amx_quant *qa = m->a.q, *qb = m->b.q;
    for (int o = 0; o < 2; o++) {   /* an operand quantised item by item: this item, into this thread's buffer */
        opnd *op = o ? &m->b : &m->a;
        if (!op->so) continue;
        mpx_quant_stats st = { 0 };
        float *buf = o ? bbuf : abuf;
        quantize_item(be, op, b, buf, &st);
        __atomic_fetch_add(&op->q->st.nonzero, st.nonzero, __ATOMIC_RELAXED);
        __atomic_fetch_add(&op->q->st.saturated, st.saturated, __ATOMIC_RELAXED);
        __atomic_fetch_add(&op->q->st.flushed, st.flushed, __ATOMIC_RELAXED);
        if (o) xb = mpx_a(buf, MPX_F32), ldb = op->so->cols, qb = NULL;
        else xa = mpx_a(buf, MPX_F32), lda = op->so->cols, qa = NULL;
    }
    const float *Ab = xa.p, *Bb = xb.p;   /* (fp32 buffers but for the AMX path's own quantisation) */
    mpx_arg cb = mpx_at(g->c, (size_t)((long long)b * g->stride_c));
    float *out = g->c.t == MPX_F32 ? cb.p : cw;
    if (g->c.t != MPX_F32 && g->beta != 0.0f)
        for (int r = 0; r < g->m; r++) cpu_load(be, cb, (size_t)r * g->ldc, (size_t)g->n, cw + (size_t)r * g->n);
    if (m->h100) cpu_gemm_h100(gg, Ab, lda, Bb, ldb, out, ldo, m->emin, be->fp8_acc == CPU_FP8_ACC_H100_FAST);
    else if (m->amx)   /* every quantised value is a bf16 value: the AMX path packs them exactly */
        rc = cpu_amx_gemm(be, pool, gg, xa, lda, xb, ldb, out, ldo, amx_buf, 1, qa, qb);
    else if (cpu_small_gemm_fits(be, gg))   /* the attention kernel, as the 16-bit path (same contract as below) */
        rc = cpu_small_gemm(be, gg, Ab, lda, Bb, ldb, out, ldo, panel);
    else rc = cpu_sgemm_pool(be, pool, gg, Ab, lda, Bb, ldb, out, ldo);
    if (!rc && m->census) {
        mpx_gemm c32 = *gg;
        c32.compute = MPX_F32;
        cpu_amx_census(be, &c32, xa, lda, xb, ldb, out, ldo);
    }
    if (g->c.t != MPX_F32)
        for (int r = 0; r < g->m; r++) cpu_store(be, cw + (size_t)r * g->n, cb, (size_t)r * g->ldc, (size_t)g->n);
    return rc;
}

static void mult_items(void *vm, size_t begin, size_t end)
{
    mult *m = vm;
    const mpx_gemm *g = m->g;
    float *cw = m->cw, *own = NULL, *abuf = NULL, *bbuf = NULL;
    void *amx_buf = NULL;
    if (!m->pool) {   /* a thread of the pool: buffers of its own */
        size_t c = g->c.t != MPX_F32 ? (size_t)g->m * g->n : 0, x = m->amx ? cpu_amx_bytes(g) / sizeof(float) + 1 : 0;
        size_t na = m->a.so ? (size_t)g->m * g->k : 0, nb = m->b.so ? (size_t)g->k * g->n : 0;
        if (c + x + na + nb && !(own = malloc((c + x + na + nb) * sizeof(float)))) { atomic_store(&m->failed, 1); return; }
        cw = own;
        amx_buf = m->amx ? own + c : NULL;
        abuf = na ? own + c + x : NULL;
        bbuf = nb ? own + c + x + na : NULL;
    }
    for (size_t b = begin; b < end; b++)
        if (mult_one(m, (int)b, m->pool, cw, amx_buf, NULL, abuf, bbuf)) atomic_store(&m->failed, 1);
    free(own);
}

/* The amax of a stored operand (per-tensor scaling quantised while packed), over the pool. */
static void amax_rows(void *vj, size_t r0, size_t r1)
{
    qjob *j = vj;
    const stored *o = j->o;
    float tmp[1024];
    uint32_t mb = 0;
    for (size_t r = r0; r < r1; r++) {
        size_t b = r / (size_t)o->rows, row = r % (size_t)o->rows;
        if (o->a.t == MPX_BF16) {   /* the largest |x| of bf16 values: the largest of their bits, widened */
            const uint16_t *h = (const uint16_t *)o->a.p + (size_t)((long long)b * o->stride) + row * (size_t)o->ld;
            uint32_t m16 = 0;
            for (int c = 0; c < o->cols; c++) {
                uint32_t u = h[c] & 0x7fffu;
                m16 = u > m16 ? u : m16;
            }
            mb = m16 << 16 > mb ? m16 << 16 : mb;
            continue;
        }
        for (int c0 = 0; c0 < o->cols; c0 += 1024) {
            int w = o->cols - c0 < 1024 ? o->cols - c0 : 1024;
            cpu_load(j->be, o->a, (size_t)((long long)b * o->stride) + row * (size_t)o->ld + (size_t)c0, (size_t)w, tmp);
            mb = cpu_abs_bits_max(tmp, (size_t)w, 1, mb);
        }
    }
    int nan = mb > 0x7f800000u;
    if (nan) mb = 0;
    uint32_t cur = __atomic_load_n(&j->amax_bits, __ATOMIC_RELAXED);
    while (mb > cur && !__atomic_compare_exchange_n(&j->amax_bits, &cur, mb, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {}
    if (nan) __atomic_store_n(&j->nan, 1, __ATOMIC_RELAXED);
}

/* An operand the AMX path quantises while packing: its per-tensor scale (the host's, from
 * its amax) or MX; q set up, *inv_scale as prepare gives it. */
static int prepare_fused(cpu_be *be, const stored *o, mpx_dtype t, mpx_scaling recipe, const cpu_qfmt *qf,
                         cpu_amx_quant *q, float *inv_scale)
{
    const mpx_format *f = cpu_fmt(be, t);
    *q = (cpu_amx_quant){ .f = f, .qf = qf, .lut = be->lut[t - MPX_FORMAT_FIRST], .s = 1.0f,
                          .mx = recipe == MPX_SCALING_MX };
    *inv_scale = 1.0f;
    if (recipe == MPX_SCALING_DELAYED || recipe == MPX_SCALING_CURRENT) {
        qjob j = { .be = be, .o = o };
        size_t rows = (size_t)o->batch * (size_t)o->rows;
        size_t grain = o->cols > 0 ? (16384 + (size_t)o->cols - 1) / (size_t)o->cols : rows;
        cpu_pool_run(be->pool, rows, grain ? grain : 1, amax_rows, &j);
        float amax;
        memcpy(&amax, &j.amax_bits, 4);
        MPX_TRY(be->env->host->tensor_scale(be->env, t, o->a.p, j.nan ? NAN : amax, &q->s));
        *inv_scale = 1.0f / q->s;
    }
    return MPX_OK;
}

int cpu_gemm_scaled(cpu_be *be, const mpx_gemm *g)
{
    if (be->env->host->size < offsetof(mpx_host, tensor_scale) + sizeof(void *) || !be->env->host->tensor_scale)
        return CPU_FAIL(be, "cpu gemm: number formats need an ABI 1.2 host");
    mpx_scaling recipe = recipe_of(be);
    stored sa = { g->a, g->trans_a ? g->k : g->m, g->trans_a ? g->m : g->k, g->lda, g->stride_a, g->batch };
    stored sb = { g->b, g->trans_b ? g->n : g->k, g->trans_b ? g->k : g->n, g->ldb, g->stride_b, g->batch };
    int h100 = be->fp8_acc != CPU_FP8_ACC_FP32, emin = 0;
    const mpx_format *cf = cpu_fmt(be, g->compute);
    if (h100) {
        if (recipe == MPX_SCALING_MX || !cf || cf->storage_bytes != 1 || !((cf->exp_bits == 4 && cf->man_bits == 3) ||
                                                                          (cf->exp_bits == 5 && cf->man_bits == 2)))
            return CPU_FAIL(be, "cpu gemm: fp8_accumulate = \"%s\" models an H100's E4M3/E5M2 GEMMs with per-tensor "
                            "scales; compute dtype %s%s has none", be->fp8_acc == CPU_FP8_ACC_H100 ? "h100" : "h100-fast",
                            cpu_dtype_name(be, g->compute), recipe == MPX_SCALING_MX ? " with MX block scales" : "");
        emin = 1 - cf->bias;
    }
    /* the product on AMX tiles (option bf16_gemm) when the format's values are bf16 values: at most 7 mantissa
     * bits (per-tensor q, and MX's q 2^X, whose 2^X is a power of two); an operand is then quantised while the
     * AMX path packs it, but for MX blocks that run down the stored columns (quantised first, as below) */
    const int amx = !h100 && cf && !cf->encode && cf->man_bits <= 7 && cpu_amx_dims(be, g);
    const int fuse_a = amx && (recipe != MPX_SCALING_MX || !g->trans_a);
    const int fuse_b = amx && (recipe != MPX_SCALING_MX || g->trans_b);
    /* items spread over the threads (attention): an operand the AMX path does not quantise
     * is quantised item by item by the thread that multiplies it, in its cache */
    const int par = be->threads > 1 && g->batch >= 2 * be->threads && !h100;
    const int item_a = par && !fuse_a, item_b = par && !fuse_b;
    size_t na = fuse_a || item_a ? 0 : (size_t)g->batch * g->m * g->k;
    size_t nb = fuse_b || item_b ? 0 : (size_t)g->batch * g->k * g->n;
    size_t nc = g->c.t == MPX_F32 ? 0 : (size_t)g->m * g->n;
    float *A = malloc((na + nb + nc + 1) * sizeof(float));
    if (!A) return (void)CPU_FAIL(be, "cpu gemm: out of memory (m=%d n=%d k=%d batch=%d)", g->m, g->n, g->k, g->batch), MPX_ERR_NOMEM;
    float *B = A + na, *Cw = B + nb;
    float ia = 1.0f, ib = 1.0f;
    int rc = MPX_OK;
    mpx_quant_stats qa = { 0 }, qb = { 0 };
    cpu_qfmt qf;
    cpu_amx_quant fq[2];
    if (cf) cpu_qfmt_init(cf, &qf);
    mult m = { .be = be, .g = g, .a = { mpx_a(A, MPX_F32), sa.cols ? sa.cols : 1, (long long)g->m * g->k, NULL },
               .b = { mpx_a(B, MPX_F32), sb.cols ? sb.cols : 1, (long long)g->k * g->n, NULL },
               .h100 = h100, .emin = emin, .amx = amx };
    if (g->k > 0) {
        if (fuse_a || item_a) {
            rc = prepare_fused(be, &sa, g->compute, recipe, &qf, &fq[0], &ia);
            m.a = (opnd){ g->a, g->lda, g->stride_a, &fq[0], item_a ? &sa : NULL, !g->trans_a };
        } else rc = prepare(be, &sa, g->compute, recipe, !g->trans_a, A, &ia, &qa);
        if (!rc && (fuse_b || item_b)) {
            rc = prepare_fused(be, &sb, g->compute, recipe, &qf, &fq[1], &ib);
            m.b = (opnd){ g->b, g->ldb, g->stride_b, &fq[1], item_b ? &sb : NULL, g->trans_b };
        } else if (!rc) rc = prepare(be, &sb, g->compute, recipe, g->trans_b, B, &ib, &qb);
    }
    if (rc) { free(A); return rc; }
    mpx_gemm gg = *g;
    gg.alpha = g->alpha * ia * ib;
    m.gg = &gg;
    atomic_init(&m.failed, 0);
    if (be->census && !h100 && cf && !cf->encode && cf->man_bits <= 7 && cpu_amx_sizes(g)) m.census = 1;
    if (par) {
        /* attention: whole items per thread, each on its own buffers */
        cpu_pool_run(be->pool, (size_t)g->batch, 1, mult_items, &m);
    } else {
        m.pool = be->pool;
        m.cw = Cw;
        mult_items(&m, 0, (size_t)g->batch);
    }
    if (atomic_load(&m.failed))
        rc = CPU_FAIL(be, "cpu gemm: out of memory for a kernel's packing buffers (m=%d n=%d k=%d batch=%d)", g->m,
                      g->n, g->k, g->batch);
    /* what the rounding did, for the host's diagnostics (ABI 1.8) */
    for (int o = 0; o < 2; o++) {
        if (!(o ? fuse_b || item_b : fuse_a || item_a) || g->k <= 0) continue;
        mpx_quant_stats *st = o ? &qb : &qa;
        *st = fq[o].st;
        st->n = (size_t)g->batch * (size_t)g->k * (size_t)(o ? g->n : g->m);
        st->scale = recipe == MPX_SCALING_MX ? NAN : fq[o].s;
    }
    const mpx_host *h = be->env->host;
    if (!rc && g->k > 0 && h->size >= offsetof(mpx_host, gemm_input_stats) + sizeof(void *) && h->gemm_input_stats)
        h->gemm_input_stats(be->env, g->compute, g->a.p, &qa, g->b.p, &qb);
    free(A);
    return rc;
}
