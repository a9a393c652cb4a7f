/* GEMM: "round inputs to `compute`, multiply-accumulate in fp32, round the output".
 * fp32 operands that need no rounding go to cblas_sgemm as they are. Any other operand
 * is converted into a compact fp32 copy and sgemm runs on that; a 16-bit C is computed
 * in fp32 (read first when beta != 0) and rounded once at the end. Work goes one batch
 * item at a time, so converted operands are still in cache when used.
 * OpenBLAS always runs single-threaded (set at create): the backend's pool is the only
 * set of threads, so no OpenBLAS worker spins (sched_yield) while the pool runs the
 * elementwise ops — on 2 cores that spinning cost ~20 % of a BERT step. Threads are used
 *  - one matrix (or few): C is cut into pieces along its larger dimension (rows of
 *    op(A) or columns of op(B), multiples of CPU_GEMM_ALIGN), each piece one
 *    single-threaded sgemm, run by the pool; the pool also converts operands row block
 *    by row block into the backend's workspace (slot 0: A, 1: B, 2: C);
 *  - a batch of at least CPU_GEMM_BATCH_PAR items per thread (attention): the pool runs
 *    whole items, each thread converting into its own buffers.
 * Either way every element of C is one single-threaded-kernel dot product over K in
 * OpenBLAS's blocking, which does not depend on where C was cut as long as no piece is
 * small enough for OpenBLAS's small-matrix kernels (CPU_GEMM_MIN_PIECE): the bits do not
 * change with the thread count (test_cpu_ops checks it). */
#include "cpu_internal.h"

#include <cblas.h>
#include <stdatomic.h>
#include <stdlib.h>

/* Rows converted per piece when widening operands (each row is a few KB). */
#define CPU_GEMM_ROW_GRAIN 16
/* Batch items per thread from which items are spread over threads. */
#define CPU_GEMM_BATCH_PAR 2
/* Pieces of a cut C start at multiples of this many rows/columns (the kernels' tile). */
#define CPU_GEMM_ALIGN 16
/* Smallest piece: CPU_GEMM_MIN_UNITS x CPU_GEMM_ALIGN rows (or columns), and at least
 * CPU_GEMM_MIN_PIECE multiply-adds. The second bound keeps the bits: OpenBLAS (0.3.17+)
 * sends "small" products (M N K <= 1e6 on SkylakeX/Cooperlake) to other kernels, which
 * accumulate in another order — a piece of a large GEMM must not become small. Random
 * shapes cut this way (all four transpose cases) gave the uncut bits; with 16-row
 * pieces allowed, 32 of 450 did not. */
#define CPU_GEMM_MIN_UNITS 4
#define CPU_GEMM_MIN_PIECE 4e6

/* One operand's stored layout: `batch` matrices of rows × cols at stride, leading dim ld. */
typedef struct operand {
    mpx_arg a;
    int rows, cols, ld;
    long long stride;
    int batch;
} operand;

typedef struct conv_job {
    cpu_be *be;
    operand op;
    float *dst;           /* compact: batch × rows × cols */
    mpx_dtype round_to;   /* MPX_F32 = no rounding */
    int to_storage;       /* 0: storage -> dst; 1: dst -> storage (C write-back) */
} conv_job;

static void conv_rows(void *vjob, size_t begin, size_t end)
{
    const conv_job *j = vjob;
    const operand *o = &j->op;
    for (size_t r = begin; r < end; r++) {
        size_t b = r / (size_t)o->rows, row = r % (size_t)o->rows;
        size_t src = (size_t)((long long)b * o->stride) + row * (size_t)o->ld;
        float *d = j->dst + r * (size_t)o->cols;
        if (j->to_storage) {
            cpu_store(j->be, d, o->a, src, (size_t)o->cols);
        } else {
            cpu_load(j->be, o->a, src, (size_t)o->cols, d);
            if (j->round_to != MPX_F32) cpu_round_inplace(j->be, d, (size_t)o->cols, j->round_to);
        }
    }
}

/* Converts o (storage <-> compact dst); through the pool, or on this thread when
 * `pool` is NULL. */
static void convert(cpu_be *be, cpu_pool *pool, const operand *o, float *dst, mpx_dtype round_to,
                    int to_storage)
{
    conv_job job = { .be = be, .op = *o, .dst = dst, .round_to = round_to, .to_storage = to_storage };
    size_t rows = (size_t)o->batch * (size_t)o->rows;
    if (pool) cpu_pool_run(pool, rows, CPU_GEMM_ROW_GRAIN, conv_rows, &job);
    else conv_rows(&job, 0, rows);
}

static int needs_conversion(mpx_arg a, mpx_dtype compute)
{
    return a.t != MPX_F32 || (compute != MPX_F32 && compute != a.t);
}

/* A 16-bit operand whose conversion is only its exact widening (compute is its dtype or
 * fp32): the linear kernel reads it as stored. */
static int widen_only(mpx_arg a, mpx_dtype compute)
{
    return (a.t == MPX_F16 || a.t == MPX_BF16) && (compute == a.t || compute == MPX_F32);
}

/* The one-matrix operand as sgemm will read it: the original if fp32 and exact in
 * `compute`, else converted into `buf` (rows × cols floats). */
static const float *prepare_input(cpu_be *be, cpu_pool *pool, const operand *o, mpx_dtype compute,
                                  float *buf, int *ld)
{
    if (!needs_conversion(o->a, compute)) {
        *ld = o->ld;
        return o->a.p;
    }
    int needs_round = compute != MPX_F32 && o->a.t != compute;
    convert(be, pool, o, buf, needs_round ? compute : MPX_F32, 0);
    *ld = o->cols;
    return buf;
}

static int check_gemm(cpu_be *be, const mpx_gemm *g)
{
    CPU_CHECK(be, "gemm", "A", g->a, 1);
    CPU_CHECK(be, "gemm", "B", g->b, 1);
    CPU_CHECK(be, "gemm", "C", g->c, 1);
    if (g->compute != MPX_F32 && g->compute != MPX_F16 && g->compute != MPX_BF16 && cpu_prepare_format(be, g->compute)) {
        (void)CPU_FAIL(be, "cpu gemm: compute dtype %s is not fp32, fp16, bf16 or a number format of the run",
                       cpu_dtype_name(be, g->compute));
        return MPX_ERR_UNSUPPORTED;
    }
    if (g->m < 0 || g->n < 0 || g->k < 0 || g->batch < 1)
        return CPU_FAIL(be, "cpu gemm: bad sizes m=%d n=%d k=%d batch=%d", g->m, g->n, g->k, g->batch);
    int a_cols = g->trans_a ? g->m : g->k, b_cols = g->trans_b ? g->k : g->n;
    if (g->lda < (a_cols > 1 ? a_cols : 1) || g->ldb < (b_cols > 1 ? b_cols : 1) ||
        g->ldc < (g->n > 1 ? g->n : 1))
        return CPU_FAIL(be, "cpu gemm: leading dimensions lda=%d ldb=%d ldc=%d too small for "
                        "m=%d n=%d k=%d (trans_a=%d trans_b=%d)", g->lda, g->ldb, g->ldc, g->m, g->n,
                        g->k, g->trans_a, g->trans_b);
    if (g->batch > 1 && (g->stride_a < 0 || g->stride_b < 0 || g->stride_c < 0))
        return CPU_FAIL(be, "cpu gemm: negative batch stride");
    return MPX_OK;
}

/* C_b = alpha op(A_b) op(B_b) + beta C_b for k = 0 (sgemm would reject lda = 0 here). */
static void scale_only(float *c, int m, int n, int ldc, float beta)
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) c[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[(size_t)i * ldc + j];
}

static void sgemm(const mpx_gemm *g, const float *A, int lda, const float *B, int ldb, float *C, int ldc)
{
    if (g->k == 0) { scale_only(C, g->m, g->n, ldc, g->beta); return; }
    cblas_sgemm(CblasRowMajor, g->trans_a ? CblasTrans : CblasNoTrans,
                g->trans_b ? CblasTrans : CblasNoTrans, g->m, g->n, g->k, g->alpha,
                A, lda, B, ldb, g->beta, C, ldc);
}

/* One fp32 GEMM whose C is cut into pieces for the pool. */
typedef struct split_job {
    const mpx_gemm *g;
    const float *A, *B;
    float *C;
    int lda, ldb, ldc, by_rows;
} split_job;

static void split_pieces(void *vj, size_t begin, size_t end)
{
    const split_job *j = vj;
    mpx_gemm g = *j->g;
    int lo = (int)begin * CPU_GEMM_ALIGN, dim = j->by_rows ? g.m : g.n;
    int hi = (int)end * CPU_GEMM_ALIGN < dim ? (int)end * CPU_GEMM_ALIGN : dim;
    const float *A = j->A, *B = j->B;
    float *C = j->C;
    if (j->by_rows) {   /* rows lo..hi of op(A) and C */
        g.m = hi - lo;
        A += g.trans_a ? (size_t)lo : (size_t)lo * (size_t)j->lda;
        C += (size_t)lo * (size_t)j->ldc;
    } else {            /* columns lo..hi of op(B) and C */
        g.n = hi - lo;
        B += g.trans_b ? (size_t)lo * (size_t)j->ldb : (size_t)lo;
        C += (size_t)lo;
    }
    sgemm(&g, A, j->lda, B, j->ldb, C, j->ldc);
}

/* sgemm over the pool (NULL: this thread alone). The larger dimension is cut, so the
 * operand every piece repacks is the smaller one; one piece per thread (each piece
 * repacks that operand), fewer when pieces would be small. */
int cpu_sgemm_pool(cpu_be *be, cpu_pool *pool, const mpx_gemm *g, const float *A, int lda,
                   const float *B, int ldb, float *C, int ldc)
{
    if (be->linear_gemm > 0 && g->k > 0)
        return cpu_linear_gemm(be, pool, g, mpx_a((void *)A, MPX_F32), lda, mpx_a((void *)B, MPX_F32), ldb,
                               mpx_a(C, MPX_F32), ldc);
    int by_rows = g->m >= g->n, dim = by_rows ? g->m : g->n;
    double other_k = (double)(by_rows ? g->n : g->m) * (double)g->k;
    size_t units = (size_t)(dim + CPU_GEMM_ALIGN - 1) / CPU_GEMM_ALIGN, pieces = (size_t)be->threads;
    for (; pieces > 1; pieces--) {   /* the last piece is the smallest: check it */
        size_t per = (units + pieces - 1) / pieces, n_cut = (units + per - 1) / per;
        double last = (double)dim - (double)((n_cut - 1) * per * CPU_GEMM_ALIGN);
        if (n_cut > 1 && last >= CPU_GEMM_MIN_UNITS * CPU_GEMM_ALIGN && last * other_k >= CPU_GEMM_MIN_PIECE) break;
    }
    if (!pool || pieces < 2 || g->k == 0) {
        sgemm(g, A, lda, B, ldb, C, ldc);
        return 0;
    }
    split_job j = { g, A, B, C, lda, ldb, ldc, by_rows };
    cpu_pool_run(pool, units, (units + pieces - 1) / pieces, split_pieces, &j);   /* grain = per */
    return 0;
}

/* Batch item b of an operand as a one-matrix operand. */
static operand item(const operand *o, int b)
{
    operand r = *o;
    r.a = mpx_at(o->a, (size_t)((long long)b * o->stride));
    r.batch = 1;
    r.stride = 0;
    return r;
}

/* panel NULL: allocated; amx NULL: the backend's buffer (calls through the pool) */
typedef struct gemm_bufs { float *a, *b, *c, *panel; void *amx; } gemm_bufs;

/* Batch item b, start to finish: convert what needs it into `w`, sgemm (the attention
 * kernel, cpu_gemm_small.c, or cpu_sgemm_pool), round C back. `pool` NULL keeps the
 * conversions on the calling thread. 0, or -1 when a kernel is out of memory. */
static int gemm_item(cpu_be *be, cpu_pool *pool, const mpx_gemm *g, const operand *oa,
                      const operand *ob, const operand *oc, int b, const gemm_bufs *w)
{
    operand ia = item(oa, b), ib = item(ob, b), ic = item(oc, b);
    int lda = 1, ldb = 1, ldc = g->ldc;
    if (cpu_amx_takes(be, g)) {   /* bf16 operands on the AMX tiles: packed from storage */
        float *C = ic.a.p;
        if (g->c.t != MPX_F32) {
            C = w->c;
            ldc = g->n;
            if (g->beta != 0.0f) convert(be, pool, &ic, C, MPX_F32, 0);
        }
        if (cpu_amx_gemm(be, pool, g, ia.a, ia.ld, ib.a, ib.ld, C, ldc, w->amx, 0, NULL, NULL)) return -1;
        if (g->c.t != MPX_F32) convert(be, pool, &ic, C, MPX_F32, 1);
        return 0;
    }
    const float *A = NULL, *B = NULL;
    /* the linear kernel widens 16-bit operands as it packs them (no rounding to do) */
    const int linear = be->linear_gemm > 0 && g->k > 0 && !cpu_small_gemm_fits(be, g);
    const int wa = linear && widen_only(ia.a, g->compute), wb = linear && widen_only(ib.a, g->compute);
    /* ... and rounds a 16-bit C tile by tile when K is one block (not for the census, which
     * counts the fp32 results before they are rounded) */
    const int wc = linear && !be->census && (g->c.t == MPX_F16 || g->c.t == MPX_BF16) && !cpu_linear_gemm_cuts_k(g);
    if (g->k > 0) {
        if (!wa) A = prepare_input(be, pool, &ia, g->compute, w->a, &lda);
        if (!wb) B = prepare_input(be, pool, &ib, g->compute, w->b, &ldb);
    }
    float *C = ic.a.p;
    if (g->c.t != MPX_F32 && !wc) {
        C = w->c;
        ldc = g->n;
        if (g->beta != 0.0f) convert(be, pool, &ic, C, MPX_F32, 0);
    }
    if (wa || wb || wc) {
        mpx_arg a = wa ? ia.a : mpx_a((void *)A, MPX_F32), bb = wb ? ib.a : mpx_a((void *)B, MPX_F32);
        mpx_arg c = wc ? ic.a : mpx_a(C, MPX_F32);
        if (cpu_linear_gemm(be, pool, g, a, wa ? ia.ld : lda, bb, wb ? ib.ld : ldb, c, ldc)) return -1;
    } else if (cpu_small_gemm_fits(be, g)) {
        if (cpu_small_gemm(be, g, A, lda, B, ldb, C, ldc, w->panel)) return -1;
    } else if (cpu_sgemm_pool(be, pool, g, A, lda, B, ldb, C, ldc)) {
        return -1;
    }
    if (be->census && cpu_amx_shape(g))
        cpu_amx_census(be, g, ia.a, ia.ld, ib.a, ib.ld, C, ldc);   /* C: fp32 (wc is 0 under the census) */
    if (g->c.t != MPX_F32 && !wc) convert(be, pool, &ic, C, MPX_F32, 1);
    return 0;
}

/* Buffer sizes (floats) for one item; 0 where the operand is used in place. sz[3]: the
 * AMX path's packing buffer, for callers without the pool (sz[0], sz[1] then 0). */
static void item_sizes(const cpu_be *be, const mpx_gemm *g, size_t sz[4])
{
    sz[3] = 0;
    if (cpu_amx_takes(be, g)) {
        sz[0] = sz[1] = 0;
        sz[2] = g->c.t != MPX_F32 ? (size_t)g->m * (size_t)g->n : 0;
        sz[3] = (cpu_amx_bytes(g) + sizeof(float) - 1) / sizeof(float);
        return;
    }
    sz[0] = g->k > 0 && needs_conversion(g->a, g->compute) ? (size_t)g->m * (size_t)g->k : 0;
    sz[1] = g->k > 0 && needs_conversion(g->b, g->compute) ? (size_t)g->k * (size_t)g->n : 0;   /* (unused when widened in packing) */
    sz[2] = g->c.t != MPX_F32 ? (size_t)g->m * (size_t)g->n : 0;
}

typedef struct batch_job {
    cpu_be *be;
    const mpx_gemm *g;
    const operand *oa, *ob, *oc;
    atomic_int failed;
} batch_job;

static void batch_items(void *vj, size_t begin, size_t end)
{
    batch_job *j = vj;
    size_t sz[4];
    item_sizes(j->be, j->g, sz);
    float *mem = NULL;
    if (sz[0] + sz[1] + sz[2] + sz[3]) {
        mem = malloc((sz[0] + sz[1] + sz[2] + sz[3]) * sizeof(float));
        if (!mem) { atomic_store(&j->failed, 1); return; }
    }
    gemm_bufs w = { mem, mem ? mem + sz[0] : NULL, mem ? mem + sz[0] + sz[1] : NULL, NULL,
                    sz[3] ? mem + sz[0] + sz[1] + sz[2] : NULL };
    for (size_t b = begin; b < end; b++)
        if (gemm_item(j->be, NULL, j->g, j->oa, j->ob, j->oc, (int)b, &w)) atomic_store(&j->failed, 1);
    free(mem);
}

static int gemm_batch_parallel(cpu_be *be, const mpx_gemm *g, const operand *oa,
                               const operand *ob, const operand *oc)
{
    batch_job j = { .be = be, .g = g, .oa = oa, .ob = ob, .oc = oc };
    atomic_init(&j.failed, 0);
    cpu_pool_run(be->pool, (size_t)g->batch, 1, batch_items, &j);
    if (atomic_load(&j.failed))
        return (void)CPU_FAIL(be, "cpu gemm: out of memory for per-thread buffers (m=%d n=%d k=%d)", g->m, g->n, g->k), MPX_ERR_NOMEM;
    return MPX_OK;
}

static int gemm_sequential(cpu_be *be, const mpx_gemm *g, const operand *oa, const operand *ob,
                           const operand *oc)
{
    size_t sz[4];
    item_sizes(be, g, sz);
    gemm_bufs w = { NULL, NULL, NULL, NULL, NULL };   /* the AMX path packs into the backend's buffer */
    if ((sz[0] && !(w.a = cpu_ws(be, 0, sz[0] * sizeof(float)))) ||
        (sz[1] && !(w.b = cpu_ws(be, 1, sz[1] * sizeof(float)))) ||
        (sz[2] && !(w.c = cpu_ws(be, 2, sz[2] * sizeof(float)))))
        return MPX_ERR_NOMEM;
    for (int b = 0; b < g->batch; b++)
        if (gemm_item(be, be->pool, g, oa, ob, oc, b, &w))
            return (void)CPU_FAIL(be, "cpu gemm: out of memory for a kernel's packing buffers (m=%d n=%d k=%d)", g->m,
                                  g->n, g->k),
                   MPX_ERR_NOMEM;
    return MPX_OK;
}

size_t cpu_gemm_local_floats(const cpu_be *be, const mpx_gemm *g)
{
    size_t sz[4];
    item_sizes(be, g, sz);
    return sz[0] + sz[1] + sz[2] + sz[3] + (cpu_small_gemm_fits(be, g) ? cpu_small_gemm_panel_floats(be, g) : 0) + 64;
}

int cpu_gemm_local(cpu_be *be, const mpx_gemm *g, float *ws)
{
    MPX_TRY(check_gemm(be, g));
    if (g->m == 0 || g->n == 0) return MPX_OK;
    if (mpx_dtype_is_format(g->compute))
        return CPU_FAIL(be, "cpu gemm: a number-format compute dtype (%s) has no one-thread path",
                        cpu_dtype_name(be, g->compute));
    size_t sz[4];
    item_sizes(be, g, sz);
    gemm_bufs w = { sz[0] ? ws : NULL, sz[1] ? ws + sz[0] : NULL, sz[2] ? ws + sz[0] + sz[1] : NULL,
                    ws + sz[0] + sz[1] + sz[2], sz[3] ? ws + sz[0] + sz[1] + sz[2] : NULL };
    operand oa = { g->a, g->trans_a ? g->k : g->m, g->trans_a ? g->m : g->k, g->lda, 0, 1 };
    operand ob = { g->b, g->trans_b ? g->n : g->k, g->trans_b ? g->k : g->n, g->ldb, 0, 1 };
    operand oc = { g->c, g->m, g->n, g->ldc, 0, 1 };
    if (gemm_item(be, NULL, g, &oa, &ob, &oc, 0, &w))
        return (void)CPU_FAIL(be, "cpu gemm: out of memory for a kernel's packing buffers (m=%d n=%d k=%d)", g->m, g->n,
                              g->k),
               MPX_ERR_NOMEM;
    return MPX_OK;
}

int cpu_gemm(void *vbe, const mpx_gemm *g)
{
    cpu_be *be = vbe;
    MPX_TRY(check_gemm(be, g));
    if (g->m == 0 || g->n == 0) return MPX_OK;
    if (mpx_dtype_is_format(g->compute)) return cpu_gemm_scaled(be, g);
    operand oa = { g->a, g->trans_a ? g->k : g->m, g->trans_a ? g->m : g->k, g->lda, g->stride_a, g->batch };
    operand ob = { g->b, g->trans_b ? g->n : g->k, g->trans_b ? g->k : g->n, g->ldb, g->stride_b, g->batch };
    operand oc = { g->c, g->m, g->n, g->ldc, g->stride_c, g->batch };
    if (be->threads > 1 && g->batch >= CPU_GEMM_BATCH_PAR * be->threads)
        return gemm_batch_parallel(be, g, &oa, &ob, &oc);
    return gemm_sequential(be, g, &oa, &ob, &oc);
}

/* The linear kernel adds the bias as it stores C's tiles (fp32 operands, compute and C:
 * the path cpu_gemm takes to the same kernel, without conversions); any other GEMM is the
 * gemm op, then bias_add. */
int cpu_gemm_bias(void *vbe, const mpx_gemm *g, mpx_arg bias)
{
    cpu_be *be = vbe;
    MPX_TRY(check_gemm(be, g));
    if (g->batch != 1 || g->beta != 0.0f || g->ldc != g->n)
        return CPU_FAIL(be, "cpu gemm_bias: batch %d, beta %g, ldc %d (n %d): the op takes batch 1, beta 0 and ldc = n",
                        g->batch, (double)g->beta, g->ldc, g->n);
    CPU_CHECK(be, "gemm_bias", "bias", bias, (size_t)g->n);
    if (g->m == 0 || g->n == 0) return MPX_OK;
    if (be->linear_gemm > 0 && g->k > 0 && !cpu_small_gemm_fits(be, g) && g->compute == MPX_F32 &&
        g->a.t == MPX_F32 && g->b.t == MPX_F32 && g->c.t == MPX_F32 && bias.t == MPX_F32) {
        if (cpu_linear_gemm_bias(be, be->pool, g, g->a, g->lda, g->b, g->ldb, g->c, g->ldc, bias.p))
            return (void)CPU_FAIL(be, "cpu gemm_bias: out of memory for the kernel's packing buffers (m=%d n=%d k=%d)",
                                  g->m, g->n, g->k),
                   MPX_ERR_NOMEM;
        return MPX_OK;
    }
    MPX_TRY(cpu_gemm(vbe, g));
    return cpu_bias_add(vbe, g->c, bias, g->c, (size_t)g->m, (size_t)g->n);
}
