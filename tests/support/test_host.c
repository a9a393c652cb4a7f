#include "test_host.h"

#include "../../core/engine/format_table.h"
#include "../../core/engine/scaling.h"

#include <dlfcn.h>
#include <libconfig.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct th_env_impl {
    mpx_env pub;                  /* must stay first */
    config_t options, run;
    int has_options, has_run;
    mpx_precision_desc prec;
    char error[1024];
    size_t bytes[MPX_ROLE_COUNT];
    const mpx_ops *ops;
    void *be;
    const mpx_backend_vtable *bv;
    mpx_arg target, comp;
    mpx_format_table fmts;        /* the core's: built-in formats (+ th_declare_formats) */
    mpx_scaling_state scaling;    /* the core's per-tensor scaling, for e->prec's recipe */
    struct th_env_impl *owner;    /* a backend's env: formats and scales are its owner's */
    mpx_env *benv;                /* the backend's env (th_use_cpu_backend), freed with this one */
    mpx_quant_stats gemm_stats[2];/* the last gemm_input_stats call's, operands a and b */
    int n_gemm_stats;             /* calls so far */
} th_env_impl;

static th_env_impl *impl(mpx_env *env) { return (th_env_impl *)env; }

static void th_error_fn(mpx_env *env, const char *file, int line, const char *fmt, ...)
{
    th_env_impl *e = impl(env);
    int n = snprintf(e->error, sizeof e->error, "%s:%d: ", file, line);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->error + n, sizeof e->error - (size_t)n, fmt, ap);
    va_end(ap);
}

static char th_note_buf[2048];
static void th_note_fn(mpx_env *env, const char *fmt, ...)
{
    (void)env;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(th_note_buf, sizeof th_note_buf, fmt, ap);
    va_end(ap);
}

const char *th_last_note(void) { return th_note_buf; }

static config_setting_t *lookup(mpx_env *env, const char *key)
{
    th_env_impl *e = impl(env);
    if (strchr(key, '.'))
        return e->has_run ? config_lookup(&e->run, key) : NULL;
    return e->has_options ? config_lookup(&e->options, key) : NULL;
}

static int th_opt_bool(mpx_env *env, const char *key, int *out)
{
    config_setting_t *s = lookup(env, key);
    if (!s || config_setting_type(s) != CONFIG_TYPE_BOOL) return MPX_FAIL(env, "no bool option '%s'", key);
    *out = config_setting_get_bool(s);
    return 0;
}

static int th_opt_int(mpx_env *env, const char *key, int64_t *out)
{
    config_setting_t *s = lookup(env, key);
    if (!s || (config_setting_type(s) != CONFIG_TYPE_INT && config_setting_type(s) != CONFIG_TYPE_INT64))
        return MPX_FAIL(env, "no int option '%s'", key);
    *out = config_setting_get_int64(s);
    return 0;
}

static int th_opt_float(mpx_env *env, const char *key, double *out)
{
    config_setting_t *s = lookup(env, key);
    if (!s) return MPX_FAIL(env, "no float option '%s'", key);
    switch (config_setting_type(s)) {
    case CONFIG_TYPE_FLOAT: *out = config_setting_get_float(s); return 0;
    case CONFIG_TYPE_INT: case CONFIG_TYPE_INT64: *out = (double)config_setting_get_int64(s); return 0;
    default: return MPX_FAIL(env, "option '%s' is not a number", key);
    }
}

static int th_opt_string(mpx_env *env, const char *key, const char **out)
{
    config_setting_t *s = lookup(env, key);
    if (!s || config_setting_type(s) != CONFIG_TYPE_STRING) return MPX_FAIL(env, "no string option '%s'", key);
    *out = config_setting_get_string(s);
    return 0;
}

static int th_opt_float_list(mpx_env *env, const char *key, double *out, size_t cap, size_t *n)
{
    config_setting_t *s = lookup(env, key);
    if (!s || !config_setting_is_aggregate(s)) return MPX_FAIL(env, "no list option '%s'", key);
    *n = (size_t)config_setting_length(s);
    for (size_t i = 0; i < *n && i < cap; i++) {
        config_setting_t *x = config_setting_get_elem(s, (unsigned)i);
        out[i] = config_setting_type(x) == CONFIG_TYPE_FLOAT ? config_setting_get_float(x)
                                                             : (double)config_setting_get_int64(x);
    }
    return 0;
}

static int th_opt_string_list(mpx_env *env, const char *key, const char **out, size_t cap, size_t *n)
{
    config_setting_t *s = lookup(env, key);
    if (!s || !config_setting_is_aggregate(s)) return MPX_FAIL(env, "no list option '%s'", key);
    *n = (size_t)config_setting_length(s);
    for (size_t i = 0; i < *n && i < cap; i++)
        out[i] = config_setting_get_string(config_setting_get_elem(s, (unsigned)i));
    return 0;
}

/* Each allocation is prefixed with its role and size so release can count it down. */
typedef struct { size_t bytes; int role; int pad[13]; } th_hdr; /* 64 bytes: keeps alignment */

static void *th_alloc(mpx_env *env, mpx_role role, size_t bytes, const char *what)
{
    th_env_impl *e = impl(env);
    if (e->ops) {
        void *p = e->ops->alloc(e->be, bytes);
        if (!p) { th_error_fn(env, __FILE__, __LINE__, "out of memory for %s", what); return NULL; }
        e->bytes[role] += bytes; /* backend pointers are not prefixed: counted only */
        return p;
    }
    th_hdr *h = aligned_alloc(64, sizeof(th_hdr) + ((bytes + 63) / 64) * 64);
    if (!h) { th_error_fn(env, __FILE__, __LINE__, "out of memory for %s", what); return NULL; }
    memset(h + 1, 0, bytes);
    h->bytes = bytes;
    h->role = (int)role;
    e->bytes[role] += bytes;
    return h + 1;
}

static void th_release(mpx_env *env, void *ptr)
{
    th_env_impl *e = impl(env);
    if (!ptr) return;
    if (e->ops) { e->ops->free(e->be, ptr); return; }
    th_hdr *h = (th_hdr *)ptr - 1;
    e->bytes[h->role] -= h->bytes;
    free(h);
}

static const mpx_ops *th_ops(mpx_env *env, void **be)
{
    th_env_impl *e = impl(env);
    if (be) *be = e->be;
    return e->ops;
}

static uint64_t th_seed(mpx_env *env) { (void)env; return 42; }

static const mpx_precision_desc *th_precision(mpx_env *env) { return &impl(env)->prec; }

static int th_apply_update(mpx_env *env, const mpx_piece *piece, const float *update)
{
    th_env_impl *e = impl(env);
    if (!e->target.p) return MPX_FAIL(env, "test host: no update target set");
    mpx_arg w = mpx_at(e->target, piece->offset);
    mpx_arg c = e->comp.p ? mpx_at(e->comp, piece->offset) : e->comp;
    if (e->ops) {
        mpx_rng rng = { 42, piece->site, 0, piece->tensor_offset };
        return e->ops->apply_update(e->be, w, c, update + piece->offset, piece->len, e->prec.rounding, rng);
    }
    if (w.t != MPX_F32) return MPX_FAIL(env, "test host without backend: fp32 targets only");
    float *wp = w.p;
    for (size_t i = 0; i < piece->len; i++) wp[i] += update[piece->offset + i];
    return 0;
}

static int th_allreduce_sum(mpx_env *env, double *vals, size_t n) { (void)env; (void)vals; (void)n; return 0; }

static th_env_impl *owner(mpx_env *env) { return impl(env)->owner ? impl(env)->owner : impl(env); }

static const mpx_format *th_format(mpx_env *env, mpx_dtype t) { return mpx_format_of(&owner(env)->fmts, t); }

static int th_dtype_by_name(mpx_env *env, const char *name, mpx_dtype *out)
{
    if (mpx_dtype_parse(&owner(env)->fmts, name, out)) return MPX_FAIL(env, "test host: no format '%s'", name);
    return MPX_OK;
}

static int th_tensor_scale(mpx_env *env, mpx_dtype t, const void *tensor, float amax, float *scale)
{
    th_env_impl *e = owner(env);
    const mpx_format *f = mpx_format_of(&e->fmts, t);
    if (!f) return MPX_FAIL(env, "test host: dtype %d is no format", (int)t);
    if (e->scaling.recipe != e->prec.scaling) {
        mpx_scaling_free(&e->scaling);
        mpx_scaling_init(&e->scaling, &e->prec);
    }
    if (mpx_scaling_get(&e->scaling, t, f, tensor, "test tensor", amax, scale)) return MPX_FAIL(env, "out of memory");
    return MPX_OK;
}

void th_scaling_end_step(mpx_env *env) { mpx_scaling_end_step(&impl(env)->scaling); }

static void th_gemm_input_stats(mpx_env *env, mpx_dtype t, const void *a, const mpx_quant_stats *sa,
                                const void *b, const mpx_quant_stats *sb)
{
    (void)t; (void)a; (void)b;
    th_env_impl *e = owner(env);
    e->gemm_stats[0] = sa ? *sa : (mpx_quant_stats){ 0 };
    e->gemm_stats[1] = sb ? *sb : (mpx_quant_stats){ 0 };
    e->n_gemm_stats++;
}

int th_last_gemm_stats(mpx_env *env, mpx_quant_stats *a, mpx_quant_stats *b)
{
    th_env_impl *e = owner(env);
    *a = e->gemm_stats[0];
    *b = e->gemm_stats[1];
    return e->n_gemm_stats;
}

int th_declare_formats(mpx_env *env, const mpx_format *f, size_t n)
{
    char err[512];
    if (mpx_format_table_declare(&impl(env)->fmts, f, n, "test", err, sizeof err))
        return MPX_FAIL(env, "%s", err);
    return MPX_OK;
}

static const mpx_host th_host = {
    .abi_major = MPX_ABI_MAJOR, .abi_minor = MPX_ABI_MINOR, .size = sizeof(mpx_host),
    .error = th_error_fn,
    .opt_bool = th_opt_bool, .opt_int = th_opt_int, .opt_float = th_opt_float,
    .opt_string = th_opt_string, .opt_float_list = th_opt_float_list,
    .opt_string_list = th_opt_string_list,
    .alloc = th_alloc, .release = th_release, .ops = th_ops, .seed = th_seed,
    .precision = th_precision, .apply_update = th_apply_update,
    .allreduce_sum = th_allreduce_sum, .note = th_note_fn,
    .format = th_format, .dtype_by_name = th_dtype_by_name, .tensor_scale = th_tensor_scale,
    .gemm_input_stats = th_gemm_input_stats,
};

mpx_precision_desc th_fp32_policy(void)
{
    mpx_precision_desc d = {
        .size = sizeof d, .weights = MPX_F32, .gemm_in = MPX_F32, .act = MPX_F32,
        .grads = MPX_F32, .grad_acc = MPX_DTYPE_NONE, .master = MPX_DTYPE_NONE,
        .opt_state = MPX_F32, .comm = MPX_F32, .eval_logits = MPX_F32,
        .islands = MPX_ISLAND_ALL, .loss_scale = "none", .rounding = MPX_ROUND_NEAREST,
    };
    return d;
}

static int read_text(config_t *c, const char *text, const char *what)
{
    config_init(c);
    if (config_read_string(c, text) == CONFIG_TRUE) return 1;
    fprintf(stderr, "test host: bad %s text, line %d: %s\n", what, config_error_line(c), config_error_text(c));
    abort();
}

mpx_env *th_env(const char *options, const char *run_config, const mpx_precision_desc *prec)
{
    th_env_impl *e = calloc(1, sizeof *e);
    if (!e) abort();
    e->pub.host = &th_host;
    if (options) e->has_options = read_text(&e->options, options, "options");
    if (run_config) e->has_run = read_text(&e->run, run_config, "run config");
    e->prec = prec ? *prec : th_fp32_policy();
    mpx_format_table_init(&e->fmts);
    mpx_scaling_init(&e->scaling, &e->prec);
    return &e->pub;
}

void th_env_free(mpx_env *env)
{
    th_env_impl *e = impl(env);
    if (e->has_options) config_destroy(&e->options);
    if (e->has_run) config_destroy(&e->run);
    if (e->bv && e->be) e->bv->destroy(e->be);
    if (e->benv) th_env_free(e->benv); /* after the backend that reported through it */
    mpx_scaling_free(&e->scaling);
    free(e);
}

const char *th_error(mpx_env *env) { return impl(env)->error; }
void th_clear(mpx_env *env) { impl(env)->error[0] = 0; }
size_t th_bytes(mpx_env *env, mpx_role role) { return impl(env)->bytes[role]; }

void th_set_update_target(mpx_env *env, mpx_arg target, mpx_arg comp)
{
    impl(env)->target = target;
    impl(env)->comp = comp;
}

const mpx_plugin_desc *th_load(const char *path, const char **why)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) { *why = dlerror(); return NULL; }
    mpx_plugin_entry_fn entry = (mpx_plugin_entry_fn)(uintptr_t)dlsym(h, MPX_PLUGIN_ENTRY_SYMBOL);
    if (!entry) { *why = "no mpx_plugin_entry"; return NULL; }
    return entry(&th_host);
}

int th_use_backend(mpx_env *env, const char *path, const char *backend_options)
{
    th_env_impl *e = impl(env);
    const char *why = NULL;
    const mpx_plugin_desc *d = th_load(path, &why);
    if (!d) { snprintf(e->error, sizeof e->error, "cannot load %s: %s", path, why); return -1; }
    /* The backend reads its own options through a separate env, its schema's defaults
     * filled in for the keys not given (as the core does). */
    char opts[4096];
    size_t len = (size_t)snprintf(opts, sizeof opts, "%s", backend_options ? backend_options : "");
    for (size_t i = 0; i < d->n_options && len < sizeof opts; i++) {
        char pat[128];
        snprintf(pat, sizeof pat, "%s =", d->options[i].key);
        if (!backend_options || !strstr(backend_options, pat))
            len += (size_t)snprintf(opts + len, sizeof opts - len, " %s = %s;", d->options[i].key, d->options[i].def);
    }
    mpx_env *benv = th_env(opts, NULL, &e->prec);
    impl(benv)->owner = e;
    e->benv = benv;
    e->bv = d->vtable;
    if (e->bv->create(benv, &e->be) != 0) {
        snprintf(e->error, sizeof e->error, "%s: create failed: %s", path, th_error(benv));
        e->be = NULL;
        return -1;
    }
    /* ABI 1.16: the instance's own table where the backend has one (as the core takes it);
     * a vtable shorter than the field has none */
    e->ops = e->bv->size >= offsetof(mpx_backend_vtable, instance_ops) + sizeof e->bv->instance_ops &&
             e->bv->instance_ops ? e->bv->instance_ops(e->be) : e->bv->ops;
    return 0; /* benv lives as long as env: the backend keeps it for its errors */
}

int th_use_cpu_backend(mpx_env *env, const char *backend_options)
{
    return th_use_backend(env, "build/plugins/backend-cpu.so", backend_options ? backend_options : "threads = 0;");
}

const mpx_ops *th_ops_of(mpx_env *env, void **be) { return th_ops(env, be); }

mpx_env *th_backend_env(mpx_env *env) { return impl(env)->benv ? impl(env)->benv : env; }

void th_share_backend(mpx_env *env, mpx_env *from)
{
    th_env_impl *e = impl(env), *f = impl(from);
    e->ops = f->ops;
    e->be = f->be;
    /* bv and benv stay NULL: `from` owns (and destroys) the instance and its env */
}
