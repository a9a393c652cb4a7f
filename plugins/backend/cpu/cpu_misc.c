/* Embedding gather / scatter-add and the reductions reported to the host
 * (sum of squares, count of non-finite values). */
#include "cpu_internal.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>

/* ---- embeddings ---- */

typedef struct emb_job {
    cpu_be *be;
    const int32_t *ids;
    mpx_arg table, rows;       /* rows: y (forward) or dy (backward) */
    size_t dim;
    const size_t *order;       /* backward: row indices sorted by id (stable) */
    const size_t *group_start; /* backward: groups of equal ids in `order` */
    atomic_int failed;
} emb_job;

static void gather_rows(void *vj, size_t begin, size_t end)
{
    emb_job *j = vj;
    float buf[CPU_BLOCK];
    for (size_t i = begin; i < end; i++) {
        size_t src = (size_t)j->ids[i] * j->dim, dst = i * j->dim;
        for (size_t c = 0; c < j->dim; c += CPU_BLOCK) {
            size_t n = j->dim - c < CPU_BLOCK ? j->dim - c : CPU_BLOCK;
            cpu_load(j->be, j->table, src + c, n, buf);
            cpu_store(j->be, buf, j->rows, dst + c, n);
        }
    }
}

int cpu_embedding_fwd(void *vbe, const int32_t *ids, size_t n_ids, mpx_arg table, size_t table_rows,
                      size_t dim, mpx_arg y)
{
    cpu_be *be = vbe;
    CPU_CHECK(be, "embedding_fwd", "table", table, n_ids * dim);
    CPU_CHECK(be, "embedding_fwd", "y", y, n_ids * dim);
    if (n_ids && !ids) return CPU_FAIL(be, "cpu embedding_fwd: ids is NULL");
    for (size_t i = 0; i < n_ids; i++)
        if (ids[i] < 0 || (size_t)ids[i] >= table_rows)
            return CPU_FAIL(be, "cpu embedding_fwd: id %d at position %zu is outside the table's %zu rows",
                            (int)ids[i], i, table_rows);
    emb_job j = { .be = be, .ids = ids, .table = table, .rows = y, .dim = dim };
    cpu_pool_run(be->pool, n_ids, 16, gather_rows, &j);
    return MPX_OK;
}

/* Each group of equal ids: the table row, plus every dy row in position order, summed in
 * fp32 and rounded once. Groups own distinct table rows, so they run in parallel. */
static void scatter_groups(void *vj, size_t begin, size_t end)
{
    emb_job *j = vj;
    float *buf = malloc(2 * j->dim * sizeof(float));
    if (!buf) { atomic_store(&j->failed, 1); return; }
    float *acc = buf, *row = buf + j->dim;
    for (size_t g = begin; g < end; g++) {
        size_t first = j->group_start[g], last = j->group_start[g + 1];
        size_t dst = (size_t)j->ids[j->order[first]] * j->dim;
        cpu_load(j->be, j->table, dst, j->dim, acc);
        for (size_t k = first; k < last; k++) {
            cpu_load(j->be, j->rows, j->order[k] * j->dim, j->dim, row);
            for (size_t c = 0; c < j->dim; c++) acc[c] += row[c];
        }
        cpu_store(j->be, acc, j->table, dst, j->dim);
    }
    free(buf);
}

typedef struct id_pos { int32_t id; size_t pos; } id_pos;

static int by_id_then_pos(const void *a, const void *b)
{
    const id_pos *x = a, *y = b;
    if (x->id != y->id) return x->id < y->id ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

int cpu_embedding_bwd(void *vbe, const int32_t *ids, size_t n_ids, mpx_arg dy, mpx_arg dtable,
                      size_t table_rows, size_t dim)
{
    cpu_be *be = vbe;
    CPU_CHECK(be, "embedding_bwd", "dy", dy, n_ids * dim);
    CPU_CHECK(be, "embedding_bwd", "dtable", dtable, n_ids * dim);
    if (!n_ids || !dim) return MPX_OK;
    if (!ids) return CPU_FAIL(be, "cpu embedding_bwd: ids is NULL");
    for (size_t i = 0; i < n_ids; i++)
        if (ids[i] < 0 || (size_t)ids[i] >= table_rows)
            return CPU_FAIL(be, "cpu embedding_bwd: id %d at position %zu is outside the table's %zu rows",
                            (int)ids[i], i, table_rows);
    id_pos *pairs = malloc(n_ids * sizeof *pairs);
    size_t *order = malloc(n_ids * sizeof *order), *starts = malloc((n_ids + 1) * sizeof *starts);
    int rc = MPX_OK;
    if (!pairs || !order || !starts) {
        rc = CPU_FAIL(be, "cpu embedding_bwd: out of memory sorting %zu ids", n_ids);
        goto out;
    }
    for (size_t i = 0; i < n_ids; i++) pairs[i] = (id_pos){ ids[i], i };
    qsort(pairs, n_ids, sizeof *pairs, by_id_then_pos);
    size_t n_groups = 0;
    for (size_t k = 0; k < n_ids; k++) {
        order[k] = pairs[k].pos;
        if (k == 0 || pairs[k].id != pairs[k - 1].id) starts[n_groups++] = k;
    }
    starts[n_groups] = n_ids;
    emb_job j = { .be = be, .ids = ids, .table = dtable, .rows = dy, .dim = dim, .order = order,
                  .group_start = starts };
    cpu_pool_run(be->pool, n_groups, 8, scatter_groups, &j);
    if (atomic_load(&j.failed)) rc = CPU_FAIL(be, "cpu embedding_bwd: out of memory for row buffers (dim=%zu)", dim);
out:
    free(pairs);
    free(order);
    free(starts);
    return rc;
}

/* ---- reductions: fixed chunks, fp32 within a chunk, chunks combined in order ---- */

typedef struct red_job {
    cpu_be *be;
    mpx_arg x;
    size_t n;
    double *partial;
} red_job;

/* Elements off..off+m-1 as fp32: in place for fp32, else widened into buf. */
static const float *red_block(const red_job *j, size_t off, size_t m, float *buf)
{
    if (j->x.t == MPX_F32) return (const float *)j->x.p + off;
    cpu_load(j->be, j->x, off, m, buf);
    return buf;
}

/* Within a chunk, 8 interleaved fp32 lanes combined in a fixed order (the loop
 * vectorises; the result depends on the chunk layout only, never on threads). */
static void sumsq_chunks(void *vj, size_t begin, size_t end)
{
    red_job *j = vj;
    float buf[CPU_BLOCK];
    for (size_t ch = begin; ch < end; ch++) {
        size_t b = ch * CPU_SUM_CHUNK, e = b + CPU_SUM_CHUNK < j->n ? b + CPU_SUM_CHUNK : j->n;
        float acc[8] = { 0 };
        for (size_t off = b; off < e; off += CPU_BLOCK) {
            size_t m = e - off < CPU_BLOCK ? e - off : CPU_BLOCK, i = 0;
            const float *x = red_block(j, off, m, buf);
            for (; i + 8 <= m; i += 8)
                for (int k = 0; k < 8; k++) acc[k] += x[i + k] * x[i + k];
            for (; i < m; i++) acc[0] += x[i] * x[i];
        }
        j->partial[ch] = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    }
}

/* Non-finite: all exponent bits set (inf or NaN), tested on the bits so it vectorises. */
static void nonfinite_chunks(void *vj, size_t begin, size_t end)
{
    red_job *j = vj;
    float buf[CPU_BLOCK];
    for (size_t ch = begin; ch < end; ch++) {
        size_t b = ch * CPU_SUM_CHUNK, e = b + CPU_SUM_CHUNK < j->n ? b + CPU_SUM_CHUNK : j->n;
        uint32_t count = 0;
        for (size_t off = b; off < e; off += CPU_BLOCK) {
            size_t m = e - off < CPU_BLOCK ? e - off : CPU_BLOCK;
            const float *x = red_block(j, off, m, buf);
            for (size_t i = 0; i < m; i++) {
                uint32_t u;
                memcpy(&u, &x[i], sizeof u);
                count += (u & 0x7f800000u) == 0x7f800000u;
            }
        }
        j->partial[ch] = (double)count;
    }
}

static int reduce(cpu_be *be, mpx_arg x, size_t n, cpu_range_fn fn, double *out)
{
    size_t chunks = (n + CPU_SUM_CHUNK - 1) / CPU_SUM_CHUNK;
    red_job j = { .be = be, .x = x, .n = n };
    if (!(j.partial = cpu_ws(be, 3, (chunks ? chunks : 1) * sizeof(double)))) return MPX_ERR_NOMEM;
    cpu_pool_run(be->pool, chunks, 4, fn, &j);
    double total = 0.0;
    for (size_t ch = 0; ch < chunks; ch++) total += j.partial[ch];
    *out = total;
    return MPX_OK;
}

int cpu_sum_squares(void *vbe, mpx_arg x, size_t n, double *out)
{
    cpu_be *be = vbe;
    CPU_CHECK(be, "sum_squares", "x", x, n);
    if (!out) return CPU_FAIL(be, "cpu sum_squares: out is NULL");
    return reduce(be, x, n, sumsq_chunks, out);
}

int cpu_count_nonfinite(void *vbe, mpx_arg x, size_t n, size_t *out)
{
    cpu_be *be = vbe;
    CPU_CHECK(be, "count_nonfinite", "x", x, n);
    if (!out) return CPU_FAIL(be, "cpu count_nonfinite: out is NULL");
    double total = 0.0;
    MPX_TRY(reduce(be, x, n, nonfinite_chunks, &total));
    *out = (size_t)total;
    return MPX_OK;
}
