/* Self-attention's core in one op (ABI 1.11, mpx_attention in mpx/ops.h): each pool
 * thread takes whole heads and runs, for one head, exactly the GEMMs and row ops the
 * model would otherwise run over all heads at once: cpu_gemm_local (the gemm op's kernel
 * and conversions for one batch item) and the row loops of cpu_rows_softmax.c. The bits are
 * theirs; what changes is where the [seq, seq] intermediates live. Batched over heads,
 * every one of them (scores, probabilities, dropped probabilities, their gradients) goes
 * to memory and back between ops: 12 such passes per layer, several MiB each, more than
 * the caches hold. Here a head's scores, dropped probabilities and gradients stay in the
 * thread's scratch (2 x seq x seq floats, L2-sized at seq 384); only the probabilities
 * are written (the activation backward needs), and backward reads them once and
 * regenerates their dropout from the Philox stream instead of keeping a second copy. */
#include "cpu_internal.h"
#include "../common/attention_args.h"

#include <stdatomic.h>

typedef struct attn_job {
    cpu_be *be;
    const mpx_attention *a;
    size_t ws_floats;     /* per thread: 2 x seq x seq, then the GEMMs' buffers */
    atomic_int failed;    /* the first failing head's error code */
} attn_job;

/* Head h of example b of a [batch * seq, ld] operand. */
static mpx_arg head_of(const mpx_attention *a, mpx_arg x, int b, int h)
{
    return mpx_at(x, (size_t)b * (size_t)a->seq * (size_t)a->ld + (size_t)h * (size_t)a->head_dim);
}

/* The gemm op's G(ta, tb, alpha, A, B -> C) for one head: [seq, seq] operands are
 * compact (ld seq), head blocks have ld a->ld. The batch is the heads, as in the
 * model's batched call, so the kernel is the one that call would pick. */
static mpx_gemm head_gemm(const mpx_attention *a, int ta, int tb, int m, int n, int k, float alpha, mpx_arg A,
                          int lda, mpx_arg B, int ldb, mpx_arg C, int ldc)
{
    mpx_gemm g = { .trans_a = ta, .trans_b = tb, .m = m, .n = n, .k = k, .alpha = alpha, .beta = 0.0f,
                   .a = A, .lda = lda, .b = B, .ldb = ldb, .c = C, .ldc = ldc, .batch = a->heads,
                   .compute = a->compute };
    return g;
}

static mpx_rng head_rng(const mpx_attention *a, size_t item)
{
    mpx_rng r = a->rng;
    r.offset += item * (size_t)a->seq * (size_t)a->seq;
    return r;
}

/* The head's rows of the dropout's mask bits in a->keep (NULL when not kept). */
static uint32_t *head_keep(const mpx_attention *a, size_t item)
{
    return a->keep && a->p > 0.0f ? a->keep + item * (size_t)a->seq * (((size_t)a->seq + 31) / 32) : NULL;
}

static int fwd_head(cpu_be *be, const mpx_attention *a, int b, int h, float *ws)
{
    const int S = a->seq, D = a->head_dim, ld = a->ld;
    const size_t SS = (size_t)S * (size_t)S, item = (size_t)b * (size_t)a->heads + (size_t)h;
    float *sbuf = ws, *pbuf = ws + SS, *gw = ws + 2 * SS;
    mpx_arg sc = mpx_a(sbuf, a->scores_t);
    mpx_gemm g = head_gemm(a, 0, 1, S, S, D, a->scale, head_of(a, a->q, b, h), ld, head_of(a, a->k, b, h), ld, sc, S);
    MPX_TRY(cpu_gemm_local(be, &g, gw));
    mpx_arg y = a->probs.p ? mpx_at(a->probs, item * SS) : mpx_a(pbuf, a->probs.t);
    mpx_arg yd = a->p > 0.0f ? mpx_a(pbuf, a->probs.t) : y;
    mpx_arg mask = a->mask.p ? mpx_at(a->mask, (size_t)b * (size_t)S) : a->mask;
    MPX_TRY(cpu_attn_softmax_rows(be, sc, mask, y, yd, (size_t)S, (size_t)S, a->p, head_rng(a, item),
                                  head_keep(a, item)));
    g = head_gemm(a, 0, 0, S, D, S, 1.0f, yd, S, head_of(a, a->v, b, h), ld, head_of(a, a->ctx, b, h), ld);
    return cpu_gemm_local(be, &g, gw);
}

static int bwd_head(cpu_be *be, const mpx_attention *a, int b, int h, float *ws)
{
    const int S = a->seq, D = a->head_dim, ld = a->ld;
    const size_t SS = (size_t)S * (size_t)S, item = (size_t)b * (size_t)a->heads + (size_t)h;
    float *sbuf = ws, *pbuf = ws + SS, *gw = ws + 2 * SS;
    const mpx_rng rng = head_rng(a, item);
    mpx_arg y = mpx_at(a->probs, item * SS), pd = y;
    mpx_arg dctx = head_of(a, a->dctx, b, h);
    if (a->p > 0.0f) {
        pd = mpx_a(pbuf, a->probs.t);
        MPX_TRY(cpu_attn_dropout_rows(be, y, pd, (size_t)S, (size_t)S, a->p, rng, head_keep(a, item)));
    }
    mpx_gemm g = head_gemm(a, 1, 0, S, D, S, 1.0f, pd, S, dctx, ld, head_of(a, a->dv, b, h), ld);
    MPX_TRY(cpu_gemm_local(be, &g, gw));
    mpx_arg dpd = mpx_a(sbuf, a->probs.t), ds = mpx_a(pbuf, a->ds_t);   /* pd is spent */
    g = head_gemm(a, 0, 1, S, S, D, 1.0f, dctx, ld, head_of(a, a->v, b, h), ld, dpd, S);
    MPX_TRY(cpu_gemm_local(be, &g, gw));
    MPX_TRY(cpu_attn_softmax_bwd_rows(be, dpd, y, ds, (size_t)S, (size_t)S, a->p, rng, head_keep(a, item)));
    g = head_gemm(a, 0, 0, S, D, S, a->scale, ds, S, head_of(a, a->k, b, h), ld, head_of(a, a->dq, b, h), ld);
    MPX_TRY(cpu_gemm_local(be, &g, gw));
    g = head_gemm(a, 1, 0, S, D, S, a->scale, ds, S, head_of(a, a->q, b, h), ld, head_of(a, a->dk, b, h), ld);
    return cpu_gemm_local(be, &g, gw);
}

static void run_heads(attn_job *j, size_t begin, size_t end, int bwd)
{
    int slot;
    float *ws = cpu_scratch_take(j->be, j->ws_floats * sizeof(float), &slot);
    if (!ws) {
        (void)CPU_FAIL(j->be, "cpu attention: out of memory for a %zu-byte per-thread scratch",
                       j->ws_floats * sizeof(float));
        int none = 0;
        atomic_compare_exchange_strong(&j->failed, &none, MPX_ERR_NOMEM);
    }
    for (size_t i = begin; ws && i < end && !atomic_load(&j->failed); i++) {
        int b = (int)(i / (size_t)j->a->heads), h = (int)(i % (size_t)j->a->heads);
        int rc = bwd ? bwd_head(j->be, j->a, b, h, ws) : fwd_head(j->be, j->a, b, h, ws);
        int none = 0;
        if (rc) atomic_compare_exchange_strong(&j->failed, &none, rc);
    }
    cpu_scratch_give(j->be, slot);
}

static void fwd_heads(void *vj, size_t begin, size_t end) { run_heads(vj, begin, end, 0); }
static void bwd_heads(void *vj, size_t begin, size_t end) { run_heads(vj, begin, end, 1); }

/* Checks the shapes and dtypes, and sizes the per-thread scratch: the largest of the
 * head's GEMMs' buffers past 2 x seq x seq floats. */
static int prepare(cpu_be *be, const mpx_attention *a, int bwd, attn_job *j, const char *op)
{
    attention_buf bufs[ATTENTION_BUFS];
    int n_bufs = 0;
    char why[256];
    if (attention_args(a, bwd, bufs, &n_bufs, why, sizeof why)) return CPU_FAIL(be, "cpu %s: %s", op, why);
    for (int i = 0; i < n_bufs; i++)   /* an optional buffer is checked when given */
        if (bufs[i].a.p || !bufs[i].optional) CPU_CHECK(be, op, bufs[i].name, bufs[i].a, bufs[i].n);
    const size_t S = (size_t)a->seq;
    if (mpx_dtype_is_format(a->compute))
        return CPU_FAIL(be, "cpu %s: compute dtype %s: attention GEMMs in a number format are not fused (the "
                        "caller runs the ops one by one)", op, cpu_dtype_name(be, a->compute));
    /* the GEMMs' buffer sizes; the operand dtypes that matter are those sized here */
    const int Si = a->seq, D = a->head_dim;
    mpx_arg s_t = mpx_a(NULL, a->scores_t), p_t = mpx_a(NULL, a->probs.t), d_t = mpx_a(NULL, a->ds_t);
    mpx_gemm g[4];
    int n = 0;
    if (!bwd) {
        g[n++] = head_gemm(a, 0, 1, Si, Si, D, 1.0f, a->q, a->ld, a->k, a->ld, s_t, Si);
        g[n++] = head_gemm(a, 0, 0, Si, D, Si, 1.0f, p_t, Si, a->v, a->ld, a->ctx, a->ld);
    } else {
        g[n++] = head_gemm(a, 1, 0, Si, D, Si, 1.0f, p_t, Si, a->dctx, a->ld, a->dv, a->ld);
        g[n++] = head_gemm(a, 0, 1, Si, Si, D, 1.0f, a->dctx, a->ld, a->v, a->ld, p_t, Si);
        g[n++] = head_gemm(a, 0, 0, Si, D, Si, 1.0f, d_t, Si, a->k, a->ld, a->dq, a->ld);
        g[n++] = head_gemm(a, 1, 0, Si, D, Si, 1.0f, d_t, Si, a->q, a->ld, a->dk, a->ld);
    }
    size_t most = 0;
    for (int i = 0; i < n; i++) {
        size_t f = cpu_gemm_local_floats(be, &g[i]);
        most = f > most ? f : most;
    }
    j->be = be;
    j->a = a;
    j->ws_floats = 2 * S * S + most;
    atomic_init(&j->failed, 0);
    return MPX_OK;
}

static int run(cpu_be *be, const mpx_attention *a, int bwd)
{
    attn_job j;
    const char *op = bwd ? "attention_bwd" : "attention_fwd";
    MPX_TRY(prepare(be, a, bwd, &j, op));
    size_t items = (size_t)a->batch * (size_t)a->heads;
    if (!items || !a->seq) return MPX_OK;
    cpu_pool_run_pieces(be->pool, items, 1, bwd ? bwd_heads : fwd_heads, &j);
    return atomic_load(&j.failed);
}

int cpu_attention_fwd(void *vbe, const mpx_attention *a) { return run(vbe, a, 0); }
int cpu_attention_bwd(void *vbe, const mpx_attention *a) { return run(vbe, a, 1); }
