#include "divergence.h"
#include "host.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* host chunks the differences are read back in */
#define CHUNK ((size_t)1 << 20)

int mpx_divergence_due(const mpx_session *s, int64_t step, int64_t total)
{
    if (s->world <= 1) return 0;
    int64_t every = s->set.diag_every;
    return step + 1 == total || (every > 0 && (step + 1) % every == 0);
}

static const mpx_comm_vtable *comm_vt(const mpx_session *s) { return &s->inst[MPX_KIND_COMM].rec->vt.comm; }
static void *comm_self(const mpx_session *s) { return s->inst[MPX_KIND_COMM].self; }
static void release(mpx_session *s, void *p) { if (p) mpx_core_host.release(&s->inst[MPX_KIND_BACKEND].env.pub, p); }

/* Every rank's `k` values (rank-major, world x k) on every rank: each rank fills its own
 * row of a zeroed table and the table is summed. */
static int share_rows(mpx_session *s, double *table, const double *mine, size_t k)
{
    size_t w = (size_t)s->world;
    memset(table, 0, w * k * sizeof *table);
    memcpy(table + (size_t)s->rank * k, mine, k * sizeof *mine);
    return mpx_core_host.allreduce_sum(&s->inst[MPX_KIND_COMM].env.pub, table, w * k);
}

/* Adds max |a - b|, sum (a - b)^2 and sum b^2 over m fp32 elements of backend memory to
 * out (ha, hb: host buffers of m). */
static int compare(mpx_session *s, const float *a, const float *b, size_t m, float *ha, float *hb, double out[3])
{
    if (s->ops->to_host(s->be, ha, a, m * 4) || s->ops->to_host(s->be, hb, b, m * 4)) return -1;
    for (size_t i = 0; i < m; i++) {
        double d = (double)ha[i] - (double)hb[i];
        if (d != d) out[0] = INFINITY;
        else if (fabs(d) > out[0]) out[0] = fabs(d);
        out[1] += d * d;
        out[2] += (double)hb[i] * (double)hb[i];
    }
    return 0;
}

/* Two backend fp32 buffers and two host ones of CHUNK elements; 0 or -2 (out of memory). */
typedef struct bufs { float *x, *y, *hx, *hy; } bufs;

static int bufs_open(mpx_session *s, bufs *b, const char *what)
{
    b->x = mpx_session_alloc(s, MPX_ROLE_SCRATCH, CHUNK * 4, what);
    b->y = mpx_session_alloc(s, MPX_ROLE_SCRATCH, CHUNK * 4, what);
    b->hx = malloc(CHUNK * sizeof *b->hx);
    b->hy = malloc(CHUNK * sizeof *b->hy);
    return b->x && b->y && b->hx && b->hy ? 0 : -2;
}

static void bufs_close(mpx_session *s, bufs *b)
{
    release(s, b->x);
    release(s, b->y);
    free(b->hx);
    free(b->hy);
}

/* [x, ...] appended to metrics[key] (created). */
static void append_row(json_t *metrics, const char *key, json_t *row)
{
    json_t *a = json_object_get(metrics, key);
    if (!json_is_array(a)) json_object_set_new(metrics, key, a = json_array());
    json_array_append_new(a, row);
}

static json_t *column(const double *table, size_t world, size_t k, size_t col)
{
    json_t *a = json_array();
    for (size_t r = 0; r < world; r++) json_array_append_new(a, json_real(table[r * k + col]));
    return a;
}

/* rc: -2 out of memory, -4 a collective failed, else reading the state failed. */
static int fail(int rc, const char *what, const char *where, int64_t step, const char *read, char *err, size_t errlen)
{
    if (!rc) return 0;
    snprintf(err, errlen, "%s %s step %lld: %s", what, where, (long long)step,
             rc == -2 ? "out of memory" : rc == -4 ? "the collective failed" : read);
    return -1;
}

int mpx_divergence_replicas(mpx_session *s, int64_t steps, json_t *metrics, char *err, size_t errlen)
{
    if (s->world <= 1 || s->weights_len < s->numel_pad) return 0;
    size_t n = s->numel_pad, w = (size_t)s->world;
    bufs b;
    double mine[3] = { 0, 0, 0 }, *table = calloc(w * 2, sizeof *table);
    int rc = bufs_open(s, &b, "replica check") || !table ? -2 : 0;
    /* chunk by chunk: this rank's weights widened (x), rank 0's broadcast (y) */
    for (size_t off = 0; !rc && off < n; off += CHUNK) {
        size_t m = n - off < CHUNK ? n - off : CHUNK;
        if (s->ops->cast(s->be, mpx_at(s->weights, off), mpx_a(b.x, MPX_F32), m) ||
            (s->rank == 0 && s->ops->copy(s->be, b.y, b.x, m * 4)))
            rc = -3;
        else if (comm_vt(s)->broadcast(comm_self(s), mpx_a(b.y, MPX_F32), m, 0))
            rc = -4;
        else if (compare(s, b.x, b.y, m, b.hx, b.hy, mine))
            rc = -3;
    }
    if (!rc) {
        mine[1] = mine[2] > 0 ? sqrt(mine[1] / mine[2]) : sqrt(mine[1]);   /* relative L2 */
        if (share_rows(s, table, mine, 2)) rc = -4;
    }
    if (!rc) {
        double max_abs = 0, max_rel = 0;
        for (size_t r = 0; r < w; r++) {
            max_abs = fmax(max_abs, table[2 * r]);
            max_rel = fmax(max_rel, table[2 * r + 1]);
        }
        json_object_set_new(metrics, "replica_divergence",
                            json_pack("{s:I, s:o, s:o}", "after_steps", (json_int_t)steps, "max_abs",
                                      column(table, w, 2, 0), "rel_l2", column(table, w, 2, 1)));
        append_row(metrics, "replica_divergence_trace", json_pack("[I, f, f]", (json_int_t)steps, max_abs, max_rel));
    }
    bufs_close(s, &b);
    free(table);
    return fail(rc, "replica divergence", "after", steps, "reading the weights failed", err, errlen);
}

int mpx_divergence_grads(mpx_session *s, int64_t step, json_t *metrics, char *err, size_t errlen)
{
    if (!s->lp_unread || !s->grad_acc.p || s->grad_acc.t != MPX_F32) return 0;
    size_t n = s->numel_pad, w = (size_t)s->world, part = n / w, lo = (size_t)s->rank * part, hi = lo + part;
    bufs b;
    double mine[3] = { 0, 0, 0 }, *table = calloc(w, sizeof *table);
    int rc = bufs_open(s, &b, "gradient divergence") || !table ? -2 : 0;
    const float *acc = s->grad_acc.p;
    /* chunk by chunk: the mean over the ranks (y); this rank compares over its partition */
    for (size_t off = 0; !rc && off < n; off += CHUNK) {
        size_t m = n - off < CHUNK ? n - off : CHUNK;
        if (s->ops->copy(s->be, b.y, acc + off, m * 4)) rc = -3;
        else if (comm_vt(s)->allreduce(comm_self(s), mpx_a(b.y, MPX_F32), m, MPX_SUM)) rc = -4;
        else if (s->ops->scale(s->be, mpx_a(b.y, MPX_F32), 1.0f / (float)w, m)) rc = -3;
        if (rc || off + m <= lo || off >= hi) continue;
        size_t a = off > lo ? off : lo, e = off + m < hi ? off + m : hi;
        if (compare(s, acc + a, b.y + (a - off), e - a, b.hx, b.hy, mine)) rc = -3;
    }
    if (!rc) {
        mine[0] = mine[2] > 0 ? sqrt(mine[1] / mine[2]) : sqrt(mine[1]);
        if (share_rows(s, table, mine, 1)) rc = -4;
    }
    if (!rc) {
        json_t *g = json_object_get(metrics, "grad_divergence");
        json_t *sum = json_object_get(g, "sum_rel_l2");
        int64_t count = json_integer_value(json_object_get(g, "measurements"));
        json_t *sums = json_array(), *means = json_array();
        double avg = 0;
        for (size_t r = 0; r < w; r++) {
            double t = json_number_value(json_array_get(sum, r)) + table[r];
            json_array_append_new(sums, json_real(t));
            json_array_append_new(means, json_real(t / (double)(count + 1)));
            avg += table[r] / (double)w;
        }
        json_object_set_new(metrics, "grad_divergence",
                            json_pack("{s:I, s:o, s:o, s:o, s:I}", "step", (json_int_t)step, "rel_l2",
                                      column(table, w, 1, 0), "mean_rel_l2", means, "sum_rel_l2", sums,
                                      "measurements", (json_int_t)(count + 1)));
        append_row(metrics, "grad_divergence_trace", json_pack("[I, f]", (json_int_t)step, avg));
    }
    bufs_close(s, &b);
    free(table);
    return fail(rc, "gradient divergence", "at", step, "reading the gradients failed", err, errlen);
}
