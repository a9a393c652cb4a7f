/* The host table the core hands every plugin (mpx/abi.h: struct mpx_host). */
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../config/config.h"
#include "../record/notes.h"
#include "host.h"

static mpx_env_impl *impl(mpx_env *env) { return (mpx_env_impl *)env; }

static void host_error(mpx_env *env, const char *file, int line, const char *fmt, ...)
{
    mpx_env_impl *e = impl(env);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(e->err, sizeof e->err, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < sizeof e->err) {
        const char *base = strrchr(file, '/');
        snprintf(e->err + n, sizeof e->err - (size_t)n, " (%s:%d)", base ? base + 1 : file, line);
    }
}

static void host_note(mpx_env *env, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    mpx_note_from(impl(env)->label, fmt, ap);
    va_end(ap);
}

/* Plain keys live in the plugin's own sub-group; dotted keys are absolute. */
static const char *full_key(mpx_env *env, const char *key, char *buf, size_t len)
{
    if (strchr(key, '.')) return key;
    snprintf(buf, len, "%s.%s", impl(env)->sub, key);
    return buf;
}

#define OPT_GETTER(fn, type, getter, what)                                                   \
    static int fn(mpx_env *env, const char *key, type out)                                   \
    {                                                                                        \
        char buf[256];                                                                       \
        const char *k = full_key(env, key, buf, sizeof buf);                                 \
        if (getter(impl(env)->s->cfg, k, out) != 0)                                          \
            return MPX_FAIL(env, "option '%s' is missing or not " what, k);                  \
        return MPX_OK;                                                                       \
    }

OPT_GETTER(host_opt_bool, int *, mpx_config_get_bool, "a boolean")
OPT_GETTER(host_opt_int, int64_t *, mpx_config_get_int, "an integer")
OPT_GETTER(host_opt_float, double *, mpx_config_get_float, "a number")
OPT_GETTER(host_opt_string, const char **, mpx_config_get_string, "a string")

static int host_opt_float_list(mpx_env *env, const char *key, double *out, size_t cap, size_t *n)
{
    char buf[256];
    const char *k = full_key(env, key, buf, sizeof buf);
    if (mpx_config_get_float_list(impl(env)->s->cfg, k, out, cap, n) != 0)
        return MPX_FAIL(env, "option '%s' is missing, not a list of numbers, or longer than %zu", k, cap);
    return MPX_OK;
}

static int host_opt_string_list(mpx_env *env, const char *key, const char **out, size_t cap, size_t *n)
{
    char buf[256];
    const char *k = full_key(env, key, buf, sizeof buf);
    if (mpx_config_get_string_list(impl(env)->s->cfg, k, out, cap, n) != 0)
        return MPX_FAIL(env, "option '%s' is missing, not a list of strings, or longer than %zu", k, cap);
    return MPX_OK;
}

const char *mpx_session_error(mpx_session *s, mpx_kind kind, char *buf, size_t len)
{
    mpx_instance *in = &s->inst[kind];
    const mpx_instance *c = &s->inst[MPX_KIND_COMM];
    /* the zero plugin's collectives run in the communicator: its message is the cause */
    if (!in->env.err[0] && kind == MPX_KIND_ZERO && c->rec && c->env.err[0])
        snprintf(buf, len, "%s: its communicator failed: %s", in->env.label, c->env.err);
    else
        snprintf(buf, len, "%s: %s", in->env.label, in->env.err[0] ? in->env.err : "failed (no message)");
    return buf;
}

void *mpx_session_alloc(mpx_session *s, mpx_role role, size_t bytes, const char *what)
{
    if (s->n_allocs == s->cap_allocs) {
        size_t cap = s->cap_allocs ? s->cap_allocs * 2 : 64;
        mpx_alloc_rec *v = realloc(s->allocs, cap * sizeof *v);
        if (!v) return NULL;
        s->allocs = v;
        s->cap_allocs = cap;
    }
    int on_backend = s->ops != NULL;
    void *p;
    if (on_backend) {
        p = s->ops->alloc(s->be, bytes ? bytes : 1);
    } else {
        p = aligned_alloc(64, ((bytes ? bytes : 1) + 63) / 64 * 64);
        if (p) memset(p, 0, bytes);
    }
    if (!p) return NULL;
    mpx_alloc_rec *rec = &s->allocs[s->n_allocs++];
    *rec = (mpx_alloc_rec){ p, bytes, role, on_backend, "" };
    snprintf(rec->what, sizeof rec->what, "%s", what ? what : "");
    s->bytes[role] += bytes;
    if (s->bytes[role] > s->peak[role]) s->peak[role] = s->bytes[role];
    return p;
}

static void session_release(mpx_session *s, void *ptr)
{
    for (size_t i = 0; i < s->n_allocs; i++) {
        mpx_alloc_rec *a = &s->allocs[i];
        if (a->ptr != ptr) continue;
        s->bytes[a->role] -= a->bytes;
        if (a->on_backend) s->ops->free(s->be, ptr);
        else free(ptr);
        *a = s->allocs[--s->n_allocs];
        return;
    }
}

static void *host_alloc(mpx_env *env, mpx_role role, size_t bytes, const char *what)
{
    if ((unsigned)role >= MPX_ROLE_COUNT) {
        (void)MPX_FAIL(env, "alloc of '%s' with unknown memory role %d", what, (int)role);
        return NULL;
    }
    void *p = mpx_session_alloc(impl(env)->s, role, bytes, what);
    if (!p) (void)MPX_FAIL(env, "out of memory allocating %zu bytes for '%s'", bytes, what);
    return p;
}

static void host_release(mpx_env *env, void *ptr)
{
    if (ptr) session_release(impl(env)->s, ptr);
}

static const mpx_ops *host_ops(mpx_env *env, void **be)
{
    mpx_session *s = impl(env)->s;
    if (be) *be = s->be;
    return s->ops;
}

static uint64_t host_seed(mpx_env *env) { return impl(env)->s->seed; }

static const mpx_precision_desc *host_precision(mpx_env *env) { return &impl(env)->s->prec; }

static int host_apply_update(mpx_env *env, const mpx_piece *piece, const float *update)
{
    mpx_session *s = impl(env)->s;
    if (impl(env)->defer) return impl(env)->defer_apply(impl(env)->defer, env, piece, update);
    if (!s->ops) return MPX_FAIL(env, "apply_update before the backend exists");
    /* pieces are indexed from the update window the optimizer was given (s->upd_base,
     * update_window.h; 0 for the whole slice), and `update` is that window's */
    size_t at = s->upd_base + piece->offset;
    if (at + piece->len > s->shard_len)
        return MPX_FAIL(env, "apply_update: piece [%zu, +%zu) is outside this rank's %zu parameters",
                        at, piece->len, s->shard_len);
    /* With a master copy the update lands in fp32 exactly as computed; the rounding mode
     * acts when the master is written back to the weights. Pieces are indexed from this
     * rank's slice (shard.h): the master and the Kahan buffer hold only the slice. */
    int has_master = s->master.p != NULL;
    mpx_arg target = has_master ? mpx_at(s->master, at) : mpx_at(mpx_shard_weights(s), at);
    mpx_arg comp = s->comp.p && !has_master ? mpx_at(s->comp, at) : (mpx_arg){ NULL, target.t };
    mpx_rounding mode = has_master ? MPX_ROUND_NEAREST : s->prec.rounding;
    mpx_rng rng = { s->seed, piece->site, s->tick, piece->tensor_offset };
    int rc = s->ops->apply_update(s->be, target, comp, update + piece->offset, piece->len, mode, rng);
    if (rc) return MPX_FAIL(env, "apply_update of parameter %zu failed", piece->param);
    return MPX_OK;
}

static int host_allreduce_sum(mpx_env *env, double *vals, size_t n)
{
    mpx_session *s = impl(env)->s;
    const mpx_instance *c = &s->inst[MPX_KIND_COMM];
    if (!c->self) return MPX_OK; /* one rank, no communicator yet */
    return c->rec->vt.comm.allreduce_host(c->self, vals, n, MPX_SUM);
}

static const mpx_format *host_format(mpx_env *env, mpx_dtype t) { return mpx_format_of(&impl(env)->s->fmts, t); }

static int host_dtype_by_name(mpx_env *env, const char *name, mpx_dtype *out)
{
    const mpx_format_table *t = &impl(env)->s->fmts;
    if (name && mpx_dtype_parse(t, name, out) == 0) return MPX_OK;
    char choices[1024];
    mpx_dtype_choices(t, choices, sizeof choices);
    return MPX_FAIL(env, "no dtype or format named '%s' (known: %s)", name ? name : "(null)", choices);
}

void mpx_session_tensor_name(const mpx_session *s, const void *p, char *buf, size_t len)
{
    const char *c = p;
    size_t wsz = mpx_dtype_size(s->weights.t);
    const mpx_instance *m = &s->inst[MPX_KIND_MODEL];
    if (s->weights.p && wsz && c >= (const char *)s->weights.p && c < (const char *)s->weights.p + s->weights_len * wsz && m->self) {
        size_t el = s->weights_base + (size_t)(c - (const char *)s->weights.p) / wsz;
        for (size_t i = s->n_params; i-- > 0;)
            if (s->offsets[i] <= el) {
                const mpx_param_info *pi = m->rec->vt.model.param(m->self, i);
                if (s->offsets[i] == el) snprintf(buf, len, "%s", pi->name);
                else snprintf(buf, len, "%s+%zu", pi->name, el - s->offsets[i]);
                return;
            }
    }
    for (size_t i = 0; i < s->n_allocs; i++) {
        const mpx_alloc_rec *a = &s->allocs[i];
        if (c >= (const char *)a->ptr && c < (const char *)a->ptr + a->bytes) {
            if (c == a->ptr) snprintf(buf, len, "%s", a->what);
            else snprintf(buf, len, "%s+%zu", a->what, (size_t)(c - (const char *)a->ptr));
            return;
        }
    }
    snprintf(buf, len, "tensor@%p", p);
}

static int host_tensor_scale(mpx_env *env, mpx_dtype t, const void *tensor, float amax, float *scale)
{
    mpx_session *s = impl(env)->s;
    const mpx_format *f = mpx_format_of(&s->fmts, t);
    if (!f) return MPX_FAIL(env, "tensor_scale: dtype %d is not a number format", (int)t);
    char name[80] = "";
    if (s->scaling.recipe == MPX_SCALING_DELAYED) mpx_session_tensor_name(s, tensor, name, sizeof name);
    if (mpx_scaling_get(&s->scaling, t, f, tensor, name, amax, scale))
        return MPX_FAIL(env, "tensor_scale: out of memory");
    return MPX_OK;
}

/* The parameter group of a GEMM operand inside the weights buffer, else -1. */
static int weight_group(const mpx_session *s, const void *p)
{
    const char *c = p;
    size_t wsz = mpx_dtype_size(s->weights.t);
    const mpx_instance *m = &s->inst[MPX_KIND_MODEL];
    if (!p || !s->weights.p || !wsz || !m->self || c < (const char *)s->weights.p ||
        c >= (const char *)s->weights.p + s->numel * wsz)
        return -1;
    size_t el = (size_t)(c - (const char *)s->weights.p) / wsz;
    for (size_t i = s->n_params; i-- > 0;)
        if (s->offsets[i] <= el) {
            mpx_group g = m->rec->vt.model.param(m->self, i)->group;
            return (unsigned)g < MPX_GROUP_COUNT ? (int)g : MPX_GROUP_HEAD;
        }
    return -1;
}

static void add_quant(struct mpx_gemm_in_group *x, const mpx_quant_stats *q)
{
    x->n += q->n;
    x->nonzero += q->nonzero;
    x->saturated += q->saturated;
    x->flushed += q->flushed;
    if (!isfinite(q->scale)) return;
    if (isnan(x->scale_min) || q->scale < x->scale_min) x->scale_min = q->scale;
    if (isnan(x->scale_max) || q->scale > x->scale_max) x->scale_max = q->scale;
}

/* A GEMM's two 8-bit inputs go to the group of its weight operand (a layer's weight and
 * the activation or gradient it meets); GEMMs of two activations (attention's scores and
 * context) to the extra slot MPX_GROUP_COUNT. */
static void host_gemm_input_stats(mpx_env *env, mpx_dtype t, const void *a, const mpx_quant_stats *sa,
                                  const void *b, const mpx_quant_stats *sb)
{
    (void)t;
    mpx_session *s = impl(env)->s;
    int g = weight_group(s, a);
    if (g < 0) g = weight_group(s, b);
    struct mpx_gemm_in_group *x = &s->gemm_in[g < 0 ? MPX_GROUP_COUNT : g];
    if (sa) add_quant(x, sa);
    if (sb) add_quant(x, sb);
}

void mpx_session_gemm_in_reset(mpx_session *s)
{
    for (int g = 0; g <= MPX_GROUP_COUNT; g++)
        s->gemm_in[g] = (struct mpx_gemm_in_group){ .scale_min = NAN, .scale_max = NAN };
}

int mpx_session_backend_formats(const mpx_session *s)
{
    const mpx_plugin_rec *b = s->inst[MPX_KIND_BACKEND].rec;
    const mpx_ops *o = b ? b->vt.backend.ops : NULL;
    if (!b || b->desc.abi_minor < 15 || !o || !MPX_OPS_HAS(o, flags)) return 1;
    return (o->flags & MPX_OPS_FORMATS) != 0;
}

/* The per-parameter GEMM dtypes: the descriptor's, then the policy's param_gemm hook. */
int mpx_session_param_gemm(mpx_session *s, char *err, size_t errlen)
{
    if (s->param_gemm) return 0;
    const mpx_instance *m = &s->inst[MPX_KIND_MODEL], *p = &s->inst[MPX_KIND_PRECISION];
    if (!m->self) { snprintf(err, errlen, "param_gemm_dtype before the model exists"); return -1; }
    size_t n = m->rec->vt.model.n_params(m->self);
    mpx_dtype *t = calloc(n ? 2 * n : 2, sizeof *t);
    if (!t) { snprintf(err, errlen, "out of memory"); return -1; }
    int layers = 0;
    for (size_t i = 0; i < n; i++) {
        const mpx_param_info *pi = m->rec->vt.model.param(m->self, i);
        if (pi->layer + 1 > layers) layers = pi->layer + 1;
    }
    const mpx_precision_vtable *vt = &p->rec->vt.precision;
    int hook = p->rec->desc.abi_minor >= 3 && vt->size >= offsetof(mpx_precision_vtable, param_gemm) + sizeof(void *) &&
               vt->param_gemm;
    for (size_t i = 0; i < n; i++) {
        t[2 * i] = s->prec.gemm_in;
        t[2 * i + 1] = mpx_grad_gemm_dtype(&s->prec);
        if (hook && vt->param_gemm((mpx_env *)&p->env.pub, m->rec->vt.model.param(m->self, i), layers, &t[2 * i], &t[2 * i + 1])) {
            mpx_session_error(s, MPX_KIND_PRECISION, err, errlen);
            free(t);
            return -1;
        }
        for (int b = 0; b < 2; b++)
            if (mpx_dtype_is_format(t[2 * i + b]) && !mpx_session_backend_formats(s)) {
                snprintf(err, errlen, "%s: the %s GEMMs of %s compute in %s, a number format, and %s runs none (its op "
                         "table lacks MPX_OPS_FORMATS): run it on a backend that does (backend/cpu)", p->env.label,
                         b ? "backward" : "forward", m->rec->vt.model.param(m->self, i)->name,
                         mpx_dtype_label(&s->fmts, t[2 * i + b]), s->inst[MPX_KIND_BACKEND].env.label);
                free(t);
                return -1;
            }
    }
    s->param_gemm = t;
    return 0;
}

static int host_param_gemm_dtype(mpx_env *env, size_t param, int backward, mpx_dtype *out)
{
    mpx_session *s = impl(env)->s;
    char err[1024];
    if (mpx_session_param_gemm(s, err, sizeof err)) return MPX_FAIL(env, "%s", err);
    size_t n = s->inst[MPX_KIND_MODEL].rec->vt.model.n_params(s->inst[MPX_KIND_MODEL].self);
    if (param >= n) return MPX_FAIL(env, "param_gemm_dtype: parameter %zu of %zu", param, n);
    *out = s->param_gemm[2 * param + (backward ? 1 : 0)];
    return MPX_OK;
}

const mpx_host mpx_core_host = {
    .abi_major = MPX_ABI_MAJOR,
    .abi_minor = MPX_ABI_MINOR,
    .size = sizeof(mpx_host),
    .error = host_error,
    .opt_bool = host_opt_bool,
    .opt_int = host_opt_int,
    .opt_float = host_opt_float,
    .opt_string = host_opt_string,
    .opt_float_list = host_opt_float_list,
    .opt_string_list = host_opt_string_list,
    .alloc = host_alloc,
    .release = host_release,
    .ops = host_ops,
    .seed = host_seed,
    .precision = host_precision,
    .apply_update = host_apply_update,
    .allreduce_sum = host_allreduce_sum,
    .note = host_note,
    .format = host_format,
    .dtype_by_name = host_dtype_by_name,
    .tensor_scale = host_tensor_scale,
    .gemm_input_stats = host_gemm_input_stats,
    .param_gemm_dtype = host_param_gemm_dtype,
};
