#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "opt_threads.h"

#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "host.h"
#include "thread_pool.h"

/* Groups per thread: a thread that gets its core late finds the others' groups taken,
 * not a share waiting for it. */
#define GROUPS_PER_THREAD 4
#define MAX_UPDATE_THREADS 256

struct mpx_opt_defer {
    const mpx_piece *pieces;
    size_t n;
    const float **update;  /* per piece: the update it was handed over with, or NULL */
};

typedef struct opt_group {
    mpx_env_impl env;      /* the optimizer's env with its own error text */
    int rc;
} opt_group;

struct mpx_opt_threads {
    mpx_pool *pool;
    size_t groups;         /* at most this many per call */
    opt_group *g;
    size_t *first, *count;
    mpx_piece *cut;        /* the call's pieces cut into groups */
    const float **upd;
    size_t cap;            /* entries of cut and upd */
    mpx_opt_defer defer;
    /* the call in progress */
    mpx_session *s;
    const mpx_opt_step *st;
};

static int available_cores(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

int mpx_update_threads_wanted(const mpx_session *s)
{
    int64_t t = s->set.update_threads;
    const mpx_instance *b = &s->inst[MPX_KIND_BACKEND];
    /* as the backend's threads (sweep executors split the cores through them) */
    if (t <= 0 && b->rec && s->set.has_backend_threads) t = s->set.backend_threads;
    if (t <= 0) t = available_cores();
    return t > MAX_UPDATE_THREADS ? MAX_UPDATE_THREADS : (int)t;
}

int mpx_opt_concurrent(const mpx_session *s)
{
    const mpx_instance *o = &s->inst[MPX_KIND_OPTIMIZER];
    if (!o->rec) return 0;
    const mpx_optimizer_vtable *vt = &o->rec->vt.optimizer;
    if (o->rec->desc.abi_minor < 9 || vt->size < offsetof(mpx_optimizer_vtable, flags) + sizeof vt->flags ||
        !(vt->flags & MPX_OPT_CONCURRENT))
        return 0;
    if (mpx_session_state_scaled(s)) return 0;
    return !(s->ops && MPX_OPS_HAS(s->ops, flags) && (s->ops->flags & MPX_OPS_DEVICE_MEMORY));
}

uint32_t mpx_opt_step_flags(const mpx_session *s, int diag_active)
{
    if (diag_active || !s->ops) return 0;
    /* on device memory only through a fused_update that adds in place, and to an optimizer
     * built for 1.18 or later (before, the bit promised fp32 host memory) */
    const mpx_instance *o = &s->inst[MPX_KIND_OPTIMIZER];
    if (MPX_OPS_HAS(s->ops, flags) && (s->ops->flags & MPX_OPS_DEVICE_MEMORY) &&
        (!(s->ops->flags & MPX_OPS_FUSED_ADD_IN_PLACE) || !o->rec || o->rec->desc.abi_minor < 18))
        return 0;
    /* as host_apply_update: into the master with nearest rounding, else into the weights
     * with the policy's; apply_update's nearest into fp32 is w + u in fp32 (mpx/ops.h) */
    int master = s->master.p != NULL;
    mpx_dtype t = master ? s->master.t : mpx_shard_weights(s).t;
    mpx_rounding mode = master ? MPX_ROUND_NEAREST : s->prec.rounding;
    return t == MPX_F32 && mode == MPX_ROUND_NEAREST ? MPX_STEP_ADD_IN_PLACE : 0;
}

void mpx_opt_threads_free(mpx_opt_threads *t)
{
    if (!t) return;
    mpx_pool_destroy(t->pool);
    free(t->g);
    free(t->first);
    free(t->count);
    free(t->cut);
    free(t->upd);
    free(t);
}

int mpx_opt_threads_create(mpx_session *s, mpx_opt_threads **out, char *err, size_t errlen)
{
    *out = NULL;
    int n = mpx_update_threads_wanted(s);
    if (n < 2 || !mpx_opt_concurrent(s)) return 0;
    mpx_opt_threads *t = calloc(1, sizeof *t);
    if (t) {
        t->groups = (size_t)n * GROUPS_PER_THREAD;
        t->pool = mpx_pool_create(n);
        t->g = calloc(t->groups, sizeof *t->g);
        t->first = calloc(t->groups, sizeof *t->first);
        t->count = calloc(t->groups, sizeof *t->count);
    }
    if (!t || !t->pool || !t->g || !t->first || !t->count) {
        mpx_opt_threads_free(t);
        snprintf(err, errlen, "out of memory for the optimizer's %d update threads (train.update_threads)", n);
        return -1;
    }
    *out = t;
    return 0;
}

int mpx_opt_threads_count(const mpx_opt_threads *t) { return t ? mpx_pool_threads(t->pool) : 1; }

size_t mpx_split_pieces(const mpx_piece *pieces, size_t n, size_t total, size_t groups, mpx_piece *out,
                        size_t *first, size_t *count)
{
    size_t np = 0, k = 0, in = 0; /* in: elements of pieces[k] already given out */
    for (size_t g = 0; g < groups; g++) {
        size_t need = (g + 1) * total / groups - g * total / groups;
        first[g] = np;
        while (need > 0 && k < n) {
            if (in == pieces[k].len) { k++; in = 0; continue; }
            const mpx_piece *p = &pieces[k];
            size_t take = p->len - in < need ? p->len - in : need;
            out[np] = *p;
            out[np].offset = p->offset + in;
            out[np].len = take;
            out[np].tensor_offset = p->tensor_offset + in;
            np++;
            in += take;
            need -= take;
        }
        count[g] = np - first[g];
    }
    return np;
}

int mpx_opt_defer_apply(mpx_opt_defer *d, mpx_env *env, const mpx_piece *piece, const float *update)
{
    uintptr_t at = (uintptr_t)piece, lo = (uintptr_t)d->pieces;
    if (at < lo || at >= lo + d->n * sizeof *piece || (at - lo) % sizeof *piece)
        return MPX_FAIL(env, "apply_update from a concurrent step (MPX_OPT_CONCURRENT) must be given one of the "
                        "pieces that step was given");
    size_t i = (at - lo) / sizeof *piece;
    if (!update) return MPX_FAIL(env, "apply_update of parameter %zu without an update", piece->param);
    if (d->update[i])
        return MPX_FAIL(env, "apply_update of the same piece of parameter %zu twice in one concurrent step", piece->param);
    d->update[i] = update;
    return MPX_OK;
}

/* Whether b is the part of a's piece that follows a. */
static int continues(const mpx_piece *a, const mpx_piece *b)
{
    return b->param == a->param && b->offset == a->offset + a->len && b->tensor_offset == a->tensor_offset + a->len &&
           b->site == a->site && b->weight_decay == a->weight_decay && b->tensor_numel == a->tensor_numel;
}

static void group_step(void *ctx, size_t g)
{
    mpx_opt_threads *t = ctx;
    mpx_instance *o = &t->s->inst[MPX_KIND_OPTIMIZER];
    mpx_opt_step st = *t->st;
    st.pieces = t->cut + t->first[g];
    st.n_pieces = t->count[g];
    t->g[g].rc = o->rec->vt.optimizer.step(o->self, &t->g[g].env.pub, &st);
}

static int serial_step(mpx_session *s, const mpx_opt_step *st, size_t base, char *err, size_t errlen)
{
    mpx_instance *o = &s->inst[MPX_KIND_OPTIMIZER];
    s->upd_base = base;
    int rc = o->rec->vt.optimizer.step(o->self, &o->env.pub, st);
    s->upd_base = 0;
    if (rc) mpx_session_error(s, MPX_KIND_OPTIMIZER, err, errlen);
    return rc ? -1 : 0;
}

static int reserve(mpx_opt_threads *t, size_t n, char *err, size_t errlen)
{
    if (n <= t->cap) return 0;
    mpx_piece *c = realloc(t->cut, n * sizeof *c);
    if (c) t->cut = c;
    const float **u = c ? realloc(t->upd, n * sizeof *u) : NULL;
    if (!u) {
        snprintf(err, errlen, "out of memory for %zu optimizer pieces (train.update_threads)", n);
        return -1;
    }
    t->upd = u;
    t->cap = n;
    return 0;
}

int mpx_opt_run(mpx_session *s, const mpx_opt_step *st, size_t base, char *err, size_t errlen)
{
    mpx_opt_threads *t = s->upd.threads;
    size_t total = 0;
    for (size_t k = 0; t && k < st->n_pieces; k++) total += st->pieces[k].len;
    if (!t || total < 2) return serial_step(s, st, base, err, errlen);
    size_t groups = total < t->groups ? total : t->groups;
    if (reserve(t, st->n_pieces + groups - 1, err, errlen)) return -1;
    size_t np = mpx_split_pieces(st->pieces, st->n_pieces, total, groups, t->cut, t->first, t->count);
    mpx_instance *o = &s->inst[MPX_KIND_OPTIMIZER];
    memset(t->upd, 0, np * sizeof *t->upd);
    t->defer = (mpx_opt_defer){ t->cut, np, t->upd };
    for (size_t g = 0; g < groups; g++) {
        t->g[g].env = o->env;
        t->g[g].env.err[0] = 0;
        t->g[g].env.defer = &t->defer;
        t->g[g].env.defer_apply = mpx_opt_defer_apply;
        t->g[g].rc = 0;
    }
    t->s = s;
    t->st = st;
    mpx_pool_run(t->pool, groups, group_step, t);
    for (size_t g = 0; g < groups; g++) {
        if (!t->g[g].rc) continue;
        memcpy(o->env.err, t->g[g].env.err, sizeof o->env.err);
        mpx_session_error(s, MPX_KIND_OPTIMIZER, err, errlen);
        return -1;
    }
    /* the updates into the master or the weights, in piece order, on the backend's threads;
     * the parts of a piece that was cut go in one call again (the op is elementwise) */
    s->upd_base = base;
    int rc = 0;
    for (size_t i = 0, j; !rc && i < np; i = j) {
        mpx_piece whole = t->cut[i];
        for (j = i + 1; j < np && continues(&t->cut[j - 1], &t->cut[j]) && t->upd[j] == t->upd[i]; j++)
            whole.len += t->cut[j].len;
        if (t->upd[i]) rc = mpx_core_host.apply_update(&o->env.pub, &whole, t->upd[i]);
    }
    s->upd_base = 0;
    if (rc) mpx_session_error(s, MPX_KIND_OPTIMIZER, err, errlen);
    return rc ? -1 : 0;
}
