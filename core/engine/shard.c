#include "shard.h"
#include "host.h"
#include "weight_gather.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const mpx_comm_vtable *comm_vt(const mpx_session *s) { return &s->inst[MPX_KIND_COMM].rec->vt.comm; }

int mpx_shard_plan(mpx_session *s, char *err, size_t errlen)
{
    size_t w = (size_t)(s->world > 0 ? s->world : 1);
    s->numel_pad = (s->numel + w - 1) / w * w;
    mpx_instance *z = &s->inst[MPX_KIND_ZERO];
    size_t b = 0, e = 0, chunk = s->numel_pad / w;
    if (z->rec->vt.zero.owned_range(z->self, s->numel_pad, s->rank, (int)w, &b, &e)) {
        mpx_session_error(s, MPX_KIND_ZERO, err, errlen);
        return -1;
    }
    int whole = b == 0 && e == s->numel_pad, equal = b == (size_t)s->rank * chunk && e == b + chunk;
    if (!whole && !equal) {
        snprintf(err, errlen, "%s: owns [%zu, %zu) of %zu elements on rank %d of %zu; mpx needs the whole "
                 "buffer or the rank's equal slice", z->env.label, b, e, s->numel_pad, s->rank, w);
        return -1;
    }
    s->shard_begin = b;
    s->shard_len = e - b;
    size_t n = 0;
    for (size_t i = 0; i < s->n_pieces; i++) {
        mpx_piece p = s->pieces[i];
        size_t lo = p.offset > b ? p.offset : b, hi = p.offset + p.len < e ? p.offset + p.len : e;
        if (lo >= hi) continue;
        p.tensor_offset = lo - p.offset;
        p.offset = lo - b;
        p.len = hi - lo;
        s->pieces[n++] = p;
    }
    s->n_pieces = n;
    return 0;
}

mpx_arg mpx_shard_reduced(const mpx_session *s)
{
    if (s->grad_shard.p) return s->grad_shard;
    return mpx_at(s->grad_acc.p ? s->grad_acc : s->grads, s->shard_begin);
}

void mpx_shard_norm_slice(const mpx_session *s, size_t *off, size_t *len)
{
    size_t w = (size_t)(s->world > 0 ? s->world : 1), chunk = s->numel_pad / w;
    *off = (size_t)s->rank * chunk - s->shard_begin;
    *len = chunk;
}

static int cast_or_copy(mpx_session *s, mpx_arg x, mpx_arg y, size_t n)
{
    if (x.p == y.p && x.t == y.t) return 0;
    if (x.t == y.t) return s->ops->copy(s->be, y.p, x.p, n * mpx_dtype_size(x.t));
    return s->ops->cast(s->be, x, y, n);
}

/* DeepSpeed 0.8.0 to 0.13.2, bf16 with BF16_Optimizer: backward has already added this
 * rank's 16-bit grads into its fp32 accumulator (update_hp_grads); the engine's
 * all-reduce then takes the module's 16-bit grads (buffered_allreduce_fallback over
 * param.grad: the last micro-batch's), which the next backward clears unread. The same
 * all-reduce here, for its time; the accumulator stays this rank's own. */
static int reduce_unread(mpx_session *s, char *err, size_t errlen)
{
    if (comm_vt(s)->allreduce(s->inst[MPX_KIND_COMM].self, s->grads, s->numel_pad, MPX_SUM)) {
        mpx_session_error(s, MPX_KIND_COMM, err, errlen);
        snprintf(err + strlen(err), errlen - strlen(err), " (the unread all-reduce of the %s grads)",
                 mpx_dtype_name(s->grads.t));
        return -1;
    }
    return 0;
}

int mpx_shard_reduce_grads(mpx_session *s, char *err, size_t errlen)
{
    if (s->lp_unread) return reduce_unread(s, err, errlen);
    mpx_arg acc = s->grad_acc.p ? s->grad_acc : s->grads, wire = acc;
    size_t n = s->numel_pad;
    if (s->world > 1 && s->prec.comm != MPX_DTYPE_NONE && s->prec.comm != acc.t) {
        if (!s->comm_buf.p) {
            s->comm_buf = mpx_a(mpx_session_alloc(s, MPX_ROLE_SCRATCH, n * mpx_dtype_size(s->prec.comm),
                                                  "gradient in comm_dtype"), s->prec.comm);
            if (!s->comm_buf.p) { snprintf(err, errlen, "out of memory for the gradient in precision.comm_dtype"); return -1; }
        }
        wire = s->comm_buf;
        if (s->ops->cast(s->be, acc, wire, n)) { snprintf(err, errlen, "casting the gradient to %s failed", mpx_dtype_name(wire.t)); return -1; }
    }
    mpx_instance *z = &s->inst[MPX_KIND_ZERO], *c = &s->inst[MPX_KIND_COMM];
    if (z->rec->vt.zero.reduce_grads(z->self, c->self, comm_vt(s), wire, n)) {
        mpx_session_error(s, MPX_KIND_ZERO, err, errlen);
        return -1;
    }
    int rc = s->grad_shard.p ? cast_or_copy(s, mpx_at(wire, s->shard_begin), s->grad_shard, s->shard_len)
                             : cast_or_copy(s, wire, acc, n);
    if (rc) snprintf(err, errlen, "copying the reduced gradient back from %s failed", mpx_dtype_name(wire.t));
    return rc;
}

int mpx_shard_gather_fp32(mpx_session *s, void *dev, char *err, size_t errlen)
{
    size_t b = s->shard_begin, len = s->shard_len;
    /* the master when there is one, else the weights: partitioned from stage 1 (master)
     * or stage 3 (weights) */
    mpx_arg src = s->master.p ? s->master : mpx_shard_weights(s);
    int partitioned = (s->master.p || s->weights_len < s->numel_pad) && len < s->numel_pad;
    if (!partitioned) {
        if (s->ops->cast(s->be, s->master.p ? s->master : s->weights, mpx_a(dev, MPX_F32), s->numel)) {
            snprintf(err, errlen, "widening the weights to fp32 failed");
            return -1;
        }
        return 0;
    }
    float *full = mpx_session_alloc(s, MPX_ROLE_SCRATCH, s->numel_pad * 4, "gathered fp32 master");
    if (!full) { snprintf(err, errlen, "out of memory gathering the master copy"); return -1; }
    mpx_arg all = mpx_a(full, MPX_F32), mine = mpx_at(all, b);
    int rc = cast_or_copy(s, src, mine, len);
    if (!rc && comm_vt(s)->allgather(s->inst[MPX_KIND_COMM].self, mine, all, len)) {
        mpx_session_error(s, MPX_KIND_COMM, err, errlen);
        rc = -1;
    } else if (rc) {
        snprintf(err, errlen, "staging the %s slice failed", s->master.p ? "master" : "weights");
    }
    if (!rc && s->ops->copy(s->be, dev, full, s->numel * 4)) { snprintf(err, errlen, "copying the gathered master failed"); rc = -1; }
    mpx_core_host.release(&s->inst[MPX_KIND_BACKEND].env.pub, full);
    return rc;
}

int mpx_shard_memory_table(mpx_session *s, double *out)
{
    size_t w = (size_t)(s->world > 0 ? s->world : 1);
    memset(out, 0, w * MPX_ROLE_COUNT * sizeof *out);
    for (int r = 0; r < MPX_ROLE_COUNT; r++) out[(size_t)s->rank * MPX_ROLE_COUNT + (size_t)r] = (double)s->bytes[r];
    return mpx_core_host.allreduce_sum(&s->inst[MPX_KIND_COMM].env.pub, out, w * MPX_ROLE_COUNT);
}

void mpx_shard_abort(mpx_session *s)
{
    const mpx_instance *c = &s->inst[MPX_KIND_COMM];
    if (s->world <= 1 || !c->self) return;
    const mpx_comm_vtable *cv = comm_vt(s);
    if (cv->size >= offsetof(mpx_comm_vtable, abort) + sizeof(void *) && cv->abort) cv->abort(c->self, 1);
}
