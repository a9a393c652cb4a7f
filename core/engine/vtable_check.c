/* The entries a plugin must fill: every ABI 1.0 entry of its kind's vtable and, for a
 * backend, every ABI 1.0 op of its op table. Later entries are optional: the core reads
 * them only when the table's size covers them and they are not NULL. A NULL required
 * entry would crash the first call to it; the loader refuses the plugin instead, naming
 * the entries (mpx plugins lists why). */
#include "vtable_check.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

typedef struct required {
    const char *name;
    size_t off, size;
} required;

#define REQ(type, f) { #f, offsetof(type, f), sizeof(((type *)0)->f) }

static const required req_precision[] = { REQ(mpx_precision_vtable, describe) };
static const required req_optimizer[] = {
    REQ(mpx_optimizer_vtable, create), REQ(mpx_optimizer_vtable, destroy), REQ(mpx_optimizer_vtable, n_state),
    REQ(mpx_optimizer_vtable, state_name), REQ(mpx_optimizer_vtable, step),
};
static const required req_zero[] = {
    REQ(mpx_zero_vtable, create), REQ(mpx_zero_vtable, destroy), REQ(mpx_zero_vtable, stage),
    REQ(mpx_zero_vtable, owned_range), REQ(mpx_zero_vtable, reduce_grads), REQ(mpx_zero_vtable, gather_weights),
};
static const required req_model[] = {
    REQ(mpx_model_vtable, create), REQ(mpx_model_vtable, destroy), REQ(mpx_model_vtable, n_params),
    REQ(mpx_model_vtable, param), REQ(mpx_model_vtable, n_sites), REQ(mpx_model_vtable, site),
    REQ(mpx_model_vtable, init_weights), REQ(mpx_model_vtable, bind), REQ(mpx_model_vtable, forward),
    REQ(mpx_model_vtable, backward), REQ(mpx_model_vtable, save),
};
static const required req_backend[] = {
    REQ(mpx_backend_vtable, create), REQ(mpx_backend_vtable, destroy), REQ(mpx_backend_vtable, ops),
    REQ(mpx_backend_vtable, describe),
};
static const required req_comm[] = {
    REQ(mpx_comm_vtable, create), REQ(mpx_comm_vtable, destroy), REQ(mpx_comm_vtable, rank),
    REQ(mpx_comm_vtable, world), REQ(mpx_comm_vtable, allreduce), REQ(mpx_comm_vtable, reduce_scatter),
    REQ(mpx_comm_vtable, allgather), REQ(mpx_comm_vtable, broadcast), REQ(mpx_comm_vtable, barrier),
    REQ(mpx_comm_vtable, allreduce_host),
};
static const required req_ops[] = {
    REQ(mpx_ops, alloc), REQ(mpx_ops, free), REQ(mpx_ops, to_device), REQ(mpx_ops, to_host),
    REQ(mpx_ops, copy), REQ(mpx_ops, fill_zero), REQ(mpx_ops, cast), REQ(mpx_ops, add), REQ(mpx_ops, axpby),
    REQ(mpx_ops, scale), REQ(mpx_ops, gemm), REQ(mpx_ops, bias_add), REQ(mpx_ops, bias_grad),
    REQ(mpx_ops, layernorm_fwd), REQ(mpx_ops, layernorm_bwd), REQ(mpx_ops, softmax_fwd),
    REQ(mpx_ops, softmax_bwd), REQ(mpx_ops, gelu_fwd), REQ(mpx_ops, gelu_bwd), REQ(mpx_ops, dropout_fwd),
    REQ(mpx_ops, dropout_bwd), REQ(mpx_ops, embedding_fwd), REQ(mpx_ops, embedding_bwd),
    REQ(mpx_ops, cross_entropy), REQ(mpx_ops, sum_squares), REQ(mpx_ops, count_nonfinite),
    REQ(mpx_ops, apply_update),
};

static const struct { const required *req; size_t n; } by_kind[MPX_KIND_COUNT] = {
    [MPX_KIND_PRECISION] = { req_precision, sizeof req_precision / sizeof *req_precision },
    [MPX_KIND_OPTIMIZER] = { req_optimizer, sizeof req_optimizer / sizeof *req_optimizer },
    [MPX_KIND_ZERO] = { req_zero, sizeof req_zero / sizeof *req_zero },
    [MPX_KIND_MODEL] = { req_model, sizeof req_model / sizeof *req_model },
    [MPX_KIND_BACKEND] = { req_backend, sizeof req_backend / sizeof *req_backend },
    [MPX_KIND_COMM] = { req_comm, sizeof req_comm / sizeof *req_comm },
};

/* A pointer entry is NULL when all its bytes are zero (a NULL pointer's representation on
 * every platform mpx builds for); read as bytes, so one loop serves data and function
 * pointers alike. */
static int is_null(const void *table, const required *r)
{
    const unsigned char *b = (const unsigned char *)table + r->off;
    for (size_t i = 0; i < r->size; i++)
        if (b[i]) return 0;
    return 1;
}

/* Names the entries of req that table (of `size` bytes) lacks or holds NULL, joined with
 * ", ", into buf; returns how many. */
static size_t missing(const void *table, uint32_t size, const required *req, size_t n, char *buf, size_t len)
{
    size_t k = 0, used = 0;
    if (len) buf[0] = 0;
    for (size_t i = 0; i < n; i++) {
        if (req[i].off + req[i].size <= size && !is_null(table, &req[i])) continue;
        int w = snprintf(buf + used, len > used ? len - used : 0, "%s%s", k ? ", " : "", req[i].name);
        if (w > 0) used += (size_t)w;
        if (used >= len) used = len ? len - 1 : 0;
        k++;
    }
    return k;
}

size_t mpx_vtable_missing(mpx_kind kind, const void *vtable, char *buf, size_t len)
{
    if ((unsigned)kind >= MPX_KIND_COUNT || !vtable) {
        snprintf(buf, len, "(no vtable)");
        return 1;
    }
    uint32_t size;
    memcpy(&size, vtable, sizeof size);
    return missing(vtable, size, by_kind[kind].req, by_kind[kind].n, buf, len);
}

size_t mpx_ops_missing(const mpx_ops *ops, char *buf, size_t len)
{
    if (!ops) {
        snprintf(buf, len, "(no op table)");
        return 1;
    }
    return missing(ops, ops->size, req_ops, sizeof req_ops / sizeof *req_ops, buf, len);
}
