#include "memory_plan.h"
#include "host.h"
#include "update_window.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const char *const role_names[MPX_ROLE_COUNT] = { "weights", "grads", "grad_acc", "master",
                                                        "opt_state", "compensation", "scratch" };

static void add(mpx_memory_plan *p, int role, uint64_t count, uint64_t elem, uint64_t numel)
{
    uint64_t b;
    if (__builtin_mul_overflow(numel, elem, &b) || __builtin_mul_overflow(b, count, &b) ||
        __builtin_add_overflow(p->bytes[role], b, &p->bytes[role]))
        p->overflow = 1;
}

static uint64_t machine_memory(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && size > 0 ? (uint64_t)pages * (uint64_t)size : UINT64_MAX;
}

/* The host's fp32 copy of the initial weights, the total and the limit. */
static void finish(const mpx_session *s, mpx_memory_plan *p)
{
    uint64_t h;
    if (__builtin_mul_overflow((uint64_t)s->numel, 4, &h)) p->overflow = 1;
    p->host_staging = h;
    p->total = p->host_staging;
    for (int r = 0; r < MPX_ROLE_COUNT; r++)
        if (__builtin_add_overflow(p->total, p->bytes[r], &p->total)) p->overflow = 1;
    double limit = s->set.max_memory;
    p->limit = limit >= 1 ? (limit < 1.8e19 ? (uint64_t)limit : UINT64_MAX) : machine_memory();
}

void mpx_memory_plan_make_eval(const mpx_session *s, mpx_memory_plan *p)
{
    memset(p, 0, sizeof *p);
    uint64_t n = s->numel;
    p->eval = 1;
    /* the weights and the initial fp32 weights' chunk on the backend: no grads, master
     * or optimizer state (session.c, alloc_eval_state) */
    add(p, MPX_ROLE_WEIGHTS, 1, mpx_dtype_size(s->prec.weights), n);
    add(p, MPX_ROLE_SCRATCH, 1, 4, mpx_staging_elems(s, (size_t)n));
    finish(s, p);
}

void mpx_memory_plan_make(const mpx_session *s, int n_state, mpx_memory_plan *p)
{
    memset(p, 0, sizeof *p);
    const mpx_precision_desc *d = &s->prec;
    uint64_t n = s->numel;
    add(p, MPX_ROLE_WEIGHTS, 1, mpx_dtype_size(d->weights), n);
    add(p, MPX_ROLE_GRADS, 1, mpx_dtype_size(d->grads), n);
    int acc = d->grad_acc != MPX_DTYPE_NONE && d->grad_acc != d->grads;
    if (acc) add(p, MPX_ROLE_GRAD_ACC, 1, mpx_dtype_size(d->grad_acc), n);
    if (d->master != MPX_DTYPE_NONE) add(p, MPX_ROLE_MASTER, 1, mpx_dtype_size(d->master), n);
    if (d->rounding == MPX_ROUND_KAHAN && d->master == MPX_DTYPE_NONE)
        add(p, MPX_ROLE_COMPENSATION, 1, mpx_dtype_size(d->weights), n);
    for (int i = 0; i < n_state; i++) add(p, MPX_ROLE_OPT_STATE, 1, mpx_dtype_size(mpx_opt_state_dtype(d, i)), n);
    /* the fp32 gradient copy (unless the grads or accumulator are it) and the update,
     * whole or one window each (update_window.h), and the initial fp32 weights' chunk on
     * the backend */
    size_t grad32, update;
    mpx_update_buffer_elems(s, (size_t)n, &grad32, &update);
    add(p, MPX_ROLE_SCRATCH, 1, 4, (uint64_t)grad32 + update + mpx_staging_elems(s, (size_t)n));
    finish(s, p);
}

void mpx_memory_plan_text(const mpx_memory_plan *p, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = 0;
    for (int r = 0; r < MPX_ROLE_COUNT && used < len; r++)
        if (p->bytes[r])
            used += (size_t)snprintf(buf + used, len - used, "%s%s %.4g MB", used ? ", " : "", role_names[r],
                                     (double)p->bytes[r] / 1e6);
    if (used < len)
        snprintf(buf + used, len - used, ", host staging %.4g MB", (double)p->host_staging / 1e6);
}

static int refuse_over_limit(const mpx_session *s, const mpx_memory_plan *p, char *err, size_t errlen)
{
    if (!p->overflow && p->total <= p->limit) return 0;
    char text[1024];
    mpx_memory_plan_text(p, text, sizeof text);
    double limit = s->set.max_memory;
    snprintf(err, errlen, "the model state of %zu parameters needs %s%.4g GB%s (%s), more than %s (%.4g GB)",
             s->numel, p->overflow ? "over " : "", p->overflow ? 1.8e10 : (double)p->total / 1e9,
             p->eval ? " to evaluate" : "", text,
             limit >= 1 ? "run.max_memory" : "this machine's physical memory", (double)p->limit / 1e9);
    return -1;
}

int mpx_memory_plan_check(const mpx_session *s, int n_state, char *err, size_t errlen)
{
    mpx_memory_plan p;
    mpx_memory_plan_make(s, n_state, &p);
    return refuse_over_limit(s, &p, err, errlen);
}

int mpx_memory_plan_check_eval(const mpx_session *s, char *err, size_t errlen)
{
    mpx_memory_plan p;
    mpx_memory_plan_make_eval(s, &p);
    return refuse_over_limit(s, &p, err, errlen);
}
