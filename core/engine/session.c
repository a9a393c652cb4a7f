/* Session set-up: plugin discovery, configuration, compatibility, instances, and the
 * flat model-state buffers (DESIGN, One training step). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../config/config.h"
#include "../config/core_schema.h"
#include "decay.h"
#include "loss_scaler.h"
#include "memory_plan.h"
#include "nonfinite.h"
#include "precision_keys.h"
#include "../record/notes.h"
#include "session.h"
#include "shard.h"
#include "update_window.h"
#include "vtable_check.h"
#include "weight_gather.h"

static size_t src_count(void *ctx, mpx_kind kind) { return mpx_registry_count(ctx, kind); }

static const mpx_plugin_desc *src_get(void *ctx, mpx_kind kind, size_t i)
{
    const mpx_plugin_rec *r = mpx_registry_get(ctx, kind, i);
    return r ? &r->desc : NULL;
}

static const char *src_refused(void *ctx, mpx_kind kind, const char *name, char *buf, size_t len)
{
    return mpx_registry_refusal(ctx, kind, name, buf, len);
}

int mpx_session_open(mpx_session *s, const char *const *cli_dirs, size_t n_cli)
{
    memset(s, 0, sizeof *s);
    char **dirs;
    size_t n;
    if (mpx_registry_default_dirs(cli_dirs, n_cli, &dirs, &n)) return -1;
    return mpx_registry_scan(&s->reg, dirs, n, &mpx_core_host);
}

int mpx_session_configure(mpx_session *s, const char *path, const char *const *overrides,
                          size_t n_overrides, char *err, size_t errlen)
{
    mpx_schema_source local = { &s->reg, src_count, src_get, src_refused };
    /* the config keeps a pointer to its source: keep one per session */
    mpx_schema_source *keep = malloc(sizeof *keep);
    if (!keep) { snprintf(err, errlen, "out of memory"); return -1; }
    *keep = local;
    int rc = mpx_config_load(&s->cfg, path, overrides, n_overrides, mpx_core_groups,
                             mpx_n_core_groups, keep, err, errlen);
    if (rc) { free(keep); return rc; }
    s->src_keep = keep;
    if (mpx_settings_resolve(&s->set, s->cfg, err, errlen)) {
        mpx_session_unconfigure(s);
        return -1;
    }
    int64_t seed = 0;
    mpx_config_get_int(s->cfg, "run.seed", &seed);
    s->seed = (uint64_t)seed;
    return 0;
}

void mpx_session_unconfigure(mpx_session *s)
{
    if (s->cfg) mpx_config_free(s->cfg);
    mpx_settings_free(&s->set);
    free(s->src_keep);
    s->cfg = NULL;
    s->src_keep = NULL;
    memset(s->inst, 0, sizeof s->inst);
}

static const char *const kind_group[MPX_KIND_COUNT] = {
    [MPX_KIND_PRECISION] = "precision", [MPX_KIND_OPTIMIZER] = "optimizer",
    [MPX_KIND_ZERO] = "zero", [MPX_KIND_MODEL] = "model",
    [MPX_KIND_BACKEND] = "backend", [MPX_KIND_COMM] = "comm",
};

/* Find the selected plugin of each kind and give it an env. */
static int select_plugins(mpx_session *s, char *err, size_t errlen)
{
    for (int k = 0; k < MPX_KIND_COUNT; k++) {
        const char *name = mpx_config_selected(s->cfg, kind_group[k]);
        const mpx_plugin_rec *rec = name ? mpx_registry_find(&s->reg, (mpx_kind)k, name) : NULL;
        if (!rec) {
            char names[512], dirs[2048];
            snprintf(err, errlen, "%s.plugin: %s/%s not found (installed: %s; searched: %s)",
                     kind_group[k], kind_group[k], name ? name : "?",
                     mpx_registry_names(&s->reg, (mpx_kind)k, names, sizeof names),
                     mpx_registry_dirs_text(&s->reg, dirs, sizeof dirs));
            return -1;
        }
        /* a refused file of this name that would have won (an earlier folder, or the
         * same): the user meant it, and gets another one */
        static unsigned noted;   /* once a process per kind: mpx plugins --compat selects for every pair */
        const mpx_plugin_rec *bad = mpx_registry_refused(&s->reg, (mpx_kind)k, name);
        if (bad && bad->dir_index <= rec->dir_index && !(noted & 1u << k) && (noted |= 1u << k))
            mpx_note("%s/%s: using %s, because %s, of the same kind and name, was refused: %s", kind_group[k], name,
                     rec->path, bad->path, bad->error);
        mpx_instance *in = &s->inst[k];
        in->rec = rec;
        in->env.pub.host = &mpx_core_host;
        in->env.s = s;
        snprintf(in->env.label, sizeof in->env.label, "%s/%s", kind_group[k], rec->desc.name);
        snprintf(in->env.sub, sizeof in->env.sub, "%s.%s", kind_group[k], rec->desc.name);
    }
    return 0;
}

static int matches(const char *other, mpx_session *s)
{
    char name[128];
    int kind;
    if (mpx_parse_plugin_ref(other, &kind, name, sizeof name) == 0 && kind >= 0)
        return strcmp(s->inst[kind].rec->desc.name, name) == 0;
    kind = mpx_kind_from_name(other); /* "KIND" alone: any plugin of that kind */
    return kind >= 0;
}

static void append(char *err, size_t errlen, const char *fmt, const char *a, const char *b, const char *c)
{
    size_t used = strlen(err);
    if (used >= errlen) return;
    snprintf(err + used, errlen - used, fmt, a, b, c);
}

int mpx_session_check_compat(mpx_session *s, char *err, size_t errlen)
{
    err[0] = 0;
    if (select_plugins(s, err, errlen)) return -1;
    for (int k = 0; k < MPX_KIND_COUNT; k++) {
        mpx_instance *in = &s->inst[k];
        const mpx_plugin_desc *d = &in->rec->desc;
        for (size_t i = 0; i < d->n_incompat; i++)
            if (matches(d->incompat[i].other, s))
                append(err, errlen, "%s cannot be combined with %s: %s\n", in->env.label,
                       d->incompat[i].other, d->incompat[i].reason);
        if (d->check) {
            char why[1024] = "";
            if (d->check(&in->env.pub, why, sizeof why) != 0)
                append(err, errlen, "%s refuses this configuration: %s%s\n", in->env.label, why, "");
        }
    }
    /* zero/stage3 reads the weights through the model's gather hook (weight_gather.h) */
    char why[512];
    if (!strcmp(s->inst[MPX_KIND_ZERO].rec->desc.name, "stage3") && mpx_wgather_model_refuses(s, why, sizeof why))
        append(err, errlen, "%s%s%s\n", why, "", "");
    /* DeepSpeed takes BF16_Optimizer without ZeRO or at stage 1 (with fp32 accumulation);
     * from stage 2 its ZeRO optimizer reduces what it steps on */
    const char *zn = s->inst[MPX_KIND_ZERO].rec->desc.name;
    if (s->set.ds_lp_grads && (!strcmp(zn, "stage2") || !strcmp(zn, "stage3")))
        append(err, errlen, "zero.deepspeed_bf16_reduce = \"lp-grads\" emulates DeepSpeed's BF16_Optimizer, which "
               "runs without ZeRO or at stage 1; zero/%s reduces the gradients it steps on (DeepSpeed's ZeRO "
               "optimizer)%s%s\n", zn, "", "");
    /* a policy with a number format on a backend without them (ABI 1.15); a policy that
     * cannot describe itself here is left to mpx_session_precision's own message */
    if (!err[0] && !mpx_session_backend_formats(s)) {
        char why[1024];
        if (mpx_session_precision(s, why, sizeof why) == 0 && mpx_session_format_refused(s, why, sizeof why))
            append(err, errlen, "%s%s%s\n", why, "", "");
    }
    size_t n = strlen(err);
    if (n && err[n - 1] == '\n') err[n - 1] = 0;
    return n ? -1 : 0;
}

/* Calls `call`; on failure writes the plugin's prefixed message to err. */
#define START(kind, call)                                                          \
    do {                                                                          \
        if ((call) != 0) { mpx_session_error(s, kind, err, errlen); return -1; }   \
    } while (0)

int mpx_session_format_refused(mpx_session *s, char *err, size_t errlen)
{
    if (mpx_session_backend_formats(s)) return 0;
    const mpx_precision_desc *d = &s->prec;
    const struct { const char *field; mpx_dtype t; } used[] = {
        { "weights", d->weights }, { "gemm_in", d->gemm_in }, { "act", d->act }, { "grads", d->grads },
        { "grad_acc", d->grad_acc }, { "master", d->master }, { "opt_state", mpx_opt_state_dtype(d, 0) },
        { "opt_state_sq", mpx_opt_state_dtype(d, 1) }, { "comm", d->comm }, { "eval_logits", d->eval_logits },
        { "grad_gemm_in", mpx_grad_gemm_dtype(d) },
    };
    char list[512] = "";
    size_t len = 0;
    for (size_t i = 0; i < MPX_COUNT(used) && len < sizeof list; i++)
        if (mpx_dtype_is_format(used[i].t))
            len += (size_t)snprintf(list + len, sizeof list - len, "%s%s = %s", len ? ", " : "", used[i].field,
                                    mpx_dtype_label(&s->fmts, used[i].t));
    if (!len) return 0;
    snprintf(err, errlen, "%s: a number format in its dtypes (%s), and %s runs none (its op table lacks "
             "MPX_OPS_FORMATS): run it on a backend that does (backend/cpu), or with fp32, fp16 or bf16 there",
             s->inst[MPX_KIND_PRECISION].env.label, list, s->inst[MPX_KIND_BACKEND].env.label);
    return -1;
}

int mpx_session_precision(mpx_session *s, char *err, size_t errlen)
{
    if (!s->inst[0].rec && select_plugins(s, err, errlen)) return -1;
    mpx_instance *p = &s->inst[MPX_KIND_PRECISION];
    const mpx_precision_vtable *vt = &p->rec->vt.precision;
    mpx_format_table_init(&s->fmts);
    if (vt->size >= offsetof(mpx_precision_vtable, n_formats) + sizeof vt->n_formats && vt->n_formats &&
        mpx_format_table_declare(&s->fmts, vt->formats, vt->n_formats, p->env.label, err, errlen))
        return -1;
    /* the ABI 1.2 fields keep these defaults for a policy built against 1.0 or 1.1 */
    const mpx_precision_desc defaults = {
        .size = sizeof defaults, .grad_gemm_in = MPX_DTYPE_NONE, .scaling = MPX_SCALING_NONE,
        .amax_history_len = 1, .amax_algo = MPX_AMAX_MAX, .margin = 0,
    };
    /* (zeros would do as well: precision.h makes all-zero ABI 1.2 fields mean 1.1) */
    s->prec = defaults;
    START(MPX_KIND_PRECISION, vt->describe(&p->env.pub, &s->prec));
    /* An ABI 1.0 policy has no `upstream`: it sits in what was tail padding (the struct
     * is 64 bytes either way), so the plugin's minor decides, then the declared size. */
    if (p->rec->desc.abi_minor < 1 || s->prec.size < offsetof(mpx_precision_desc, upstream) + sizeof s->prec.upstream)
        s->prec.upstream = 0;
    if (p->rec->desc.abi_minor < 2 || s->prec.size < offsetof(mpx_precision_desc, opt_state_sq)) {
        size_t from = offsetof(mpx_precision_desc, grad_gemm_in), to = offsetof(mpx_precision_desc, opt_state_sq);
        memcpy((char *)&s->prec + from, (const char *)&defaults + from, to - from);
    }
    /* ABI 1.8: a shorter descriptor keeps its second moment in opt_state's dtype */
    if (p->rec->desc.abi_minor < 8 || s->prec.size < sizeof s->prec) s->prec.opt_state_sq = MPX_DTYPE_NONE;
    s->prec.size = sizeof s->prec;
    if (mpx_precision_apply_overrides(s->cfg, &s->fmts, &s->prec, err, errlen)) return -1;
    /* the preset is the policy's unless precision.loss_scale (a checked choice) names one */
    if (s->prec.loss_scale && !mpx_scaler_known(s->prec.loss_scale)) { /* NULL: "none" */
        snprintf(err, errlen, "%s: its descriptor's loss_scale \"%s\" is not a loss-scale preset (%s)", p->env.label,
                 s->prec.loss_scale, mpx_scaler_names());
        return -1;
    }
    /* BF16_Optimizer: 16-bit grads added into a wider accumulator, no loss scaling */
    const mpx_precision_desc *d = &s->prec;
    if (s->set.ds_lp_grads && (d->grad_acc == MPX_DTYPE_NONE || d->grad_acc == d->grads ||
                               (d->grads != MPX_BF16 && d->grads != MPX_F16) ||
                               (d->loss_scale && strcmp(d->loss_scale, "none") != 0))) {
        snprintf(err, errlen, "zero.deepspeed_bf16_reduce = \"lp-grads\" emulates DeepSpeed's BF16_Optimizer (16-bit "
                 "grads added into an fp32 accumulator, no loss scaling); %s has %s grads, %s, and loss scale \"%s\" "
                 "(bf16-master is that policy)", p->env.label, mpx_dtype_label(&s->fmts, d->grads),
                 d->grad_acc == MPX_DTYPE_NONE || d->grad_acc == d->grads ? "no wider accumulator" : "a wider accumulator",
                 d->loss_scale ? d->loss_scale : "none");
        return -1;
    }
    /* the gradient all-reduce sums in its wire dtype: fp32, fp16 or bf16 (an 8-bit sum
     * would need per-tensor scaling, which no communicator here does) */
    mpx_dtype wire = d->comm != MPX_DTYPE_NONE ? d->comm : d->grad_acc != MPX_DTYPE_NONE ? d->grad_acc : d->grads;
    if (s->set.ranks > 1 && wire != MPX_F32 && wire != MPX_F16 && wire != MPX_BF16) {
        snprintf(err, errlen, "precision.comm_dtype: %s reduces gradients across ranks in %s, and mpx sums them in "
                 "fp32, fp16 or bf16 only (an 8-bit sum needs per-tensor scaling); at %lld ranks set "
                 "precision.comm_dtype = \"bf16\" (or \"fp32\")", p->env.label, mpx_dtype_label(&s->fmts, wire),
                 (long long)s->set.ranks);
        return -1;
    }
    /* train_state.c writes whole buffers; each rank's per-tensor state scales are its own */
    if (s->set.ranks > 1 && s->set.checkpoint_every > 0 && mpx_session_state_scaled(s)) {
        snprintf(err, errlen, "train.checkpoint_every = %lld at %lld ranks: %s keeps optimizer state in %s / %s with a "
                 "scale per tensor on each rank, which a training-state checkpoint with ranks cannot hold yet; set "
                 "train.checkpoint_every = 0, or precision.opt_state and opt_state_sq to \"fp32\" or \"bf16\"",
                 (long long)s->set.checkpoint_every, (long long)s->set.ranks, p->env.label,
                 mpx_dtype_label(&s->fmts, mpx_opt_state_dtype(d, 0)), mpx_dtype_label(&s->fmts, mpx_opt_state_dtype(d, 1)));
        return -1;
    }
    mpx_scaling_free(&s->scaling);
    free(s->param_gemm);
    s->param_gemm = NULL;
    mpx_scaling_init(&s->scaling, &s->prec);
    return 0;
}

int mpx_session_start_backend(mpx_session *s, char *err, size_t errlen)
{
    if (!s->inst[0].rec && select_plugins(s, err, errlen)) return -1;
    mpx_instance *b = &s->inst[MPX_KIND_BACKEND];
    START(MPX_KIND_BACKEND, b->rec->vt.backend.create(&b->env.pub, &b->self));
    s->be = b->self;
    const mpx_backend_vtable *vt = &b->rec->vt.backend;
    /* ABI 1.16: the instance's own table (the record's copy of a shorter vtable holds NULL) */
    s->ops = vt->instance_ops ? vt->instance_ops(b->self) : vt->ops;
    if (!s->ops) {
        snprintf(err, errlen, "%s: instance_ops gave no op table", b->env.label);
        return -1;
    }
    return 0;
}

int mpx_session_start(mpx_session *s, char *err, size_t errlen)
{
    if (mpx_session_start_backend(s, err, errlen)) return -1;
    mpx_instance *b = &s->inst[MPX_KIND_BACKEND];
    /* every ABI 1.0 op is required; later fields are optional (MPX_OPS_HAS). The loader
     * checked the backend's `ops`; an instance's own table (instance_ops) is checked here. */
    char names[768];
    if (mpx_ops_missing(s->ops, names, sizeof names)) {
        snprintf(err, errlen, "%s: its instance's op table has no %s: every ABI 1.0 op is required", b->env.label, names);
        return -1;
    }
    if (mpx_nonfinite_own_ops(s, err, errlen)) return -1;
    if (mpx_session_precision(s, err, errlen)) return -1;
    mpx_instance *c = &s->inst[MPX_KIND_COMM];
    START(MPX_KIND_COMM, c->rec->vt.comm.create(&c->env.pub, &c->self));
    s->rank = c->rec->vt.comm.rank(c->self);
    s->world = c->rec->vt.comm.world(c->self);
    mpx_instance *z = &s->inst[MPX_KIND_ZERO];
    START(MPX_KIND_ZERO, z->rec->vt.zero.create(&z->env.pub, &z->self));
    s->stage = z->rec->vt.zero.stage(z->self);
    s->lp_unread = s->set.ds_lp_grads && s->world > 1;
    if (s->set.ds_lp_grads && s->stage >= 2) {
        snprintf(err, errlen, "zero.deepspeed_bf16_reduce = \"lp-grads\" emulates DeepSpeed's BF16_Optimizer (no ZeRO or "
                 "stage 1); %s is stage %d", z->env.label, s->stage);
        return -1;
    }
    mpx_instance *m = &s->inst[MPX_KIND_MODEL];
    if (s->stage >= 3 && mpx_wgather_model_refuses(s, err, errlen)) return -1;
    START(MPX_KIND_MODEL, m->rec->vt.model.create(&m->env.pub, &m->self));
    /* a policy's per-parameter GEMM dtypes, checked against a backend without the formats */
    if (!mpx_session_backend_formats(s) && mpx_session_param_gemm(s, err, errlen)) return -1;
    mpx_instance *o = &s->inst[MPX_KIND_OPTIMIZER];
    START(MPX_KIND_OPTIMIZER, o->rec->vt.optimizer.create(&o->env.pub, &o->self));
    return 0;
}

/* Elements of one parameter in checked arithmetic; -1 when a dimension is negative or
 * the product overflows. */
static int param_numel(const mpx_param_info *p, size_t *n)
{
    *n = 1;
    if (p->ndim < 0 || p->ndim > MPX_MAX_DIMS) return -1;
    for (int d = 0; d < p->ndim; d++)
        if (p->shape[d] < 0 || __builtin_mul_overflow(*n, (size_t)p->shape[d], n)) return -1;
    return 0;
}

/* No-decay flags of every tensor: the model's defaults, or optimizer.no_decay substrings
 * when given (as BingBertSquad's list). A substring matching nothing is worth a note. */
static int no_decay_flags(mpx_session *s, const mpx_model_vtable *mv, void *model, int *flags,
                          char *err, size_t errlen)
{
    size_t n = s->n_params, n_sub = 0;
    const char **names = calloc(n ? n : 1, sizeof *names);
    int *defaults = calloc(n ? n : 1, sizeof *defaults);
    const char *subs[64];
    size_t matches[64];
    int rc = -1;
    if (!names || !defaults) { snprintf(err, errlen, "out of memory"); goto out; }
    for (size_t i = 0; i < n; i++) {
        const mpx_param_info *p = mv->param(model, i);
        names[i] = p->name;
        defaults[i] = p->no_decay;
    }
    if (mpx_config_get_string_list(s->cfg, "optimizer.no_decay", subs, 64, &n_sub)) {
        snprintf(err, errlen, "optimizer.no_decay: more than 64 substrings");
        goto out;
    }
    if (mpx_decay_flags(names, defaults, n, subs, n_sub, flags, matches) < 0) {
        snprintf(err, errlen, "optimizer.no_decay: an empty substring would match every tensor");
        goto out;
    }
    for (size_t i = 0; i < n_sub; i++)
        if (!matches[i]) mpx_note("optimizer.no_decay: \"%s\" matches no parameter", subs[i]);
    rc = 0;
out:
    free(names);
    free(defaults);
    return rc;
}

static void *must_alloc(mpx_session *s, mpx_role role, size_t bytes, const char *what,
                        char *err, size_t errlen)
{
    void *p = mpx_session_alloc(s, role, bytes, what);
    if (!p) snprintf(err, errlen, "out of memory allocating %zu bytes for %s", bytes, what);
    return p;
}

static int plan_pieces(mpx_session *s, char *err, size_t errlen)
{
    mpx_instance *m = &s->inst[MPX_KIND_MODEL];
    const mpx_model_vtable *mv = &m->rec->vt.model;
    s->n_params = mv->n_params(m->self);
    s->offsets = calloc(s->n_params + 1, sizeof *s->offsets);
    s->pieces = calloc(s->n_params ? s->n_params : 1, sizeof *s->pieces);
    if (!s->offsets || !s->pieces) { snprintf(err, errlen, "out of memory"); return -1; }
    int *no_decay = calloc(s->n_params ? s->n_params : 1, sizeof *no_decay);
    if (!no_decay || no_decay_flags(s, mv, m->self, no_decay, err, errlen)) { free(no_decay); return -1; }
    double wd = 0;
    char key[160];
    snprintf(key, sizeof key, "%s.weight_decay", s->inst[MPX_KIND_OPTIMIZER].env.sub);
    if (mpx_config_lookup(s->cfg, key)) mpx_config_get_float(s->cfg, key, &wd);
    size_t off = 0;
    for (size_t i = 0; i < s->n_params; i++) {
        const mpx_param_info *p = mv->param(m->self, i);
        size_t n;
        /* sizes come from files (config.json): a wrapped sum would under-allocate */
        if (param_numel(p, &n) || __builtin_add_overflow(off, n, &(size_t){ 0 }) || off + n > ((size_t)1 << 48)) {
            snprintf(err, errlen, "%s: parameter '%s' (%d dimensions) takes the model past 2^48 elements: "
                     "its sizes overflow", m->env.label, p->name, p->ndim);
            free(no_decay);
            return -1;
        }
        s->offsets[i] = off;
        s->pieces[i] = (mpx_piece){ .param = i, .offset = off, .len = n, .tensor_offset = 0,
                                    .tensor_numel = n, .weight_decay = no_decay[i] ? 0.0f : (float)wd,
                                    .site = p->site };
        off += n;
    }
    free(no_decay);
    s->offsets[s->n_params] = off;
    s->numel = off;
    s->n_pieces = s->n_params;
    return 0;
}

static int fill_weights(mpx_session *s, char *err, size_t errlen)
{
    mpx_instance *m = &s->inst[MPX_KIND_MODEL];
    float *host = calloc(s->numel_pad, sizeof *host);
    if (!host) { snprintf(err, errlen, "out of memory for the initial weights"); return -1; }
    int rc = m->rec->vt.model.init_weights(m->self, host, s->offsets, s->seed);
    if (rc) { free(host); mpx_session_error(s, MPX_KIND_MODEL, err, errlen); return -1; }
    /* onto the backend a chunk at a time (train.update_chunk), so that no whole-model
     * fp32 copy sits beside the host's */
    size_t n = s->numel_pad, chunk = mpx_staging_elems(s, n), sb = s->shard_begin, se = sb + s->shard_len;
    float *dev = must_alloc(s, MPX_ROLE_SCRATCH, chunk * 4, "initial fp32 weights", err, errlen);
    if (!dev) { free(host); return -1; }
    int from_weights = (s->prec.upstream & MPX_UPSTREAM_MASTER_FROM_WEIGHTS) != 0;
    for (size_t o = 0; !rc && o < n; o += chunk) {
        size_t m = n - o < chunk ? n - o : chunk, lo = o > sb ? o : sb, hi = o + m < se ? o + m : se;
        rc = s->ops->to_device(s->be, dev, host + o, m * 4);
        /* (stage 3: only this rank's slice of the weights, [weights_base, + weights_len)) */
        size_t wl = o > s->weights_base ? o : s->weights_base, wh = s->weights_base + s->weights_len;
        if (wh > o + m) wh = o + m;
        if (!rc && wl < wh)
            rc = s->ops->cast(s->be, mpx_a(dev + (wl - o), MPX_F32), mpx_at(s->weights, wl - s->weights_base), wh - wl);
        /* the master holds this rank's slice only */
        if (!rc && s->master.p && !from_weights && lo < hi)
            rc = s->ops->copy(s->be, (float *)s->master.p + (lo - sb), dev + (lo - o), (hi - lo) * 4);
    }
    free(host);
    /* DeepSpeed casts the module before its optimizer wrapper clones the fp32 master */
    if (!rc && s->master.p && from_weights)
        rc = s->ops->cast(s->be, mpx_shard_weights(s), s->master, s->shard_len);
    s->inst[MPX_KIND_BACKEND].env.pub.host->release(&s->inst[MPX_KIND_BACKEND].env.pub, dev);
    if (rc) mpx_session_error(s, MPX_KIND_BACKEND, err, errlen);
    return rc;
}

int mpx_session_plan(mpx_session *s, char *err, size_t errlen)
{
    if (!s->offsets && plan_pieces(s, err, errlen)) return -1;
    mpx_instance *o = &s->inst[MPX_KIND_OPTIMIZER];
    int n_state = o->rec->vt.optimizer.n_state(o->self);
    return mpx_memory_plan_check(s, n_state > 0 ? n_state : 0, err, errlen);
}

int mpx_session_plan_eval(mpx_session *s, char *err, size_t errlen)
{
    if (!s->offsets && plan_pieces(s, err, errlen)) return -1;
    return mpx_memory_plan_check_eval(s, err, errlen);
}

/* The model bound to the buffers (grads.p NULL: forward-only; partitioned weights: the
 * gather hook, weight_gather.h). */
static int bind_model(mpx_session *s, int max_batch, int max_seq, char *err, size_t errlen)
{
    mpx_instance *m = &s->inst[MPX_KIND_MODEL];
    int partitioned = s->weights_len < s->numel_pad;
    mpx_model_bind bind = { .size = sizeof bind, .weights = partitioned ? mpx_a(NULL, s->weights.t) : s->weights,
                            .grads = s->grads, .offsets = s->offsets, .numel = s->numel };
    START(MPX_KIND_MODEL, m->rec->vt.model.bind(m->self, &bind, max_batch, max_seq));
    return s->stage >= 3 && s->grads.p ? mpx_wgather_bind(s, err, errlen) : 0;
}

/* Forward-only (mpx eval): the weights alone, and the model bound with no grads. */
static int alloc_eval_state(mpx_session *s, int max_batch, int max_seq, char *err, size_t errlen)
{
    const mpx_precision_desc *d = &s->prec;
    s->weights = mpx_a(must_alloc(s, MPX_ROLE_WEIGHTS, s->numel_pad * mpx_dtype_size(d->weights), "weights", err, errlen), d->weights);
    if (!s->weights.p) return -1;
    s->weights_base = 0;   /* whole, at every stage: evaluation runs on one rank */
    s->weights_len = s->numel_pad;
    s->grads = mpx_a(NULL, d->grads);
    return fill_weights(s, err, errlen) ? -1 : bind_model(s, max_batch, max_seq, err, errlen);
}

int mpx_session_alloc_eval_state(mpx_session *s, int max_batch, int max_seq, char *err, size_t errlen)
{
    if (mpx_session_plan_eval(s, err, errlen) || mpx_shard_plan(s, err, errlen)) return -1;
    return alloc_eval_state(s, max_batch, max_seq, err, errlen);
}

int mpx_session_alloc_state(mpx_session *s, int max_batch, int max_seq, char *err, size_t errlen)
{
    if (mpx_session_plan(s, err, errlen) || mpx_shard_plan(s, err, errlen)) return -1;
    const mpx_precision_desc *d = &s->prec;
    /* weights, grads and the accumulator are whole on every rank (padded to a multiple of
     * the world size); master, optimizer state and the Kahan buffer only this rank's
     * slice; from stage 2 the whole-model grads are the reduction bucket backward writes
     * and the reduced slice is kept apart (shard.h); at stage 3 the weights are this
     * rank's slice too, gathered layer by layer for the model (weight_gather.h) */
    size_t n = s->numel_pad, sh = s->shard_len;
    s->weights_base = s->stage >= 3 ? s->shard_begin : 0;
    s->weights_len = s->stage >= 3 ? sh : n;
    s->weights = mpx_a(must_alloc(s, MPX_ROLE_WEIGHTS, s->weights_len * mpx_dtype_size(d->weights), "weights", err, errlen), d->weights);
    if (!s->weights.p) return -1;
    if (d->master != MPX_DTYPE_NONE) {
        s->master = mpx_a(must_alloc(s, MPX_ROLE_MASTER, sh * mpx_dtype_size(d->master), "master weights", err, errlen), d->master);
        if (!s->master.p) return -1;
    }
    /* filled before the other buffers exist: the model's whole fp32 host copy of the
     * initial weights then peaks beside the weights and master alone (the process's
     * resident peak, docs/PRECISION-POLICIES.md) */
    if (fill_weights(s, err, errlen)) return -1;
    int bucket = s->stage >= 2;
    s->grads = mpx_a(must_alloc(s, bucket ? MPX_ROLE_SCRATCH : MPX_ROLE_GRADS, n * mpx_dtype_size(d->grads),
                                bucket ? "gradient reduction bucket" : "grads", err, errlen), d->grads);
    if (!s->grads.p) return -1;
    if (d->grad_acc != MPX_DTYPE_NONE && d->grad_acc != d->grads) {
        s->grad_acc = mpx_a(must_alloc(s, MPX_ROLE_GRAD_ACC, n * mpx_dtype_size(d->grad_acc), "grad accumulator", err, errlen), d->grad_acc);
        if (!s->grad_acc.p) return -1;
    }
    if (bucket) {
        mpx_dtype t = s->grad_acc.p ? s->grad_acc.t : s->grads.t;
        s->grad_shard = mpx_a(must_alloc(s, MPX_ROLE_GRADS, sh * mpx_dtype_size(t), "grads (owned slice)", err, errlen), t);
        if (!s->grad_shard.p) return -1;
    }
    if (d->rounding == MPX_ROUND_KAHAN && d->master == MPX_DTYPE_NONE) {
        s->comp = mpx_a(must_alloc(s, MPX_ROLE_COMPENSATION, sh * mpx_dtype_size(d->weights), "Kahan compensation", err, errlen), d->weights);
        if (!s->comp.p) return -1;
    }
    mpx_instance *o = &s->inst[MPX_KIND_OPTIMIZER];
    s->n_state = o->rec->vt.optimizer.n_state(o->self);
    if (s->n_state < 0 || s->n_state > MPX_MAX_OPT_STATE) {
        snprintf(err, errlen, "%s: asks for %d state buffers (at most %d)", o->env.label, s->n_state, MPX_MAX_OPT_STATE);
        return -1;
    }
    for (int i = 0; i < s->n_state; i++) {
        mpx_dtype t = mpx_opt_state_dtype(d, i);
        s->state[i] = mpx_a(must_alloc(s, MPX_ROLE_OPT_STATE, sh * mpx_dtype_size(t), "optimizer state", err, errlen), t);
        if (!s->state[i].p) return -1;
        if (!mpx_opt_state_scaled(t)) continue;
        /* one scale per parameter tensor (MS-AMP's per-tensor ScalingTensor state), 1 at
         * the start; host memory: only host-addressable optimizers take scaled state */
        s->state_scale[i] = must_alloc(s, MPX_ROLE_OPT_STATE, s->n_params * sizeof(float), "optimizer state scales", err, errlen);
        if (!s->state_scale[i]) return -1;
        float *ones = malloc(s->n_params * sizeof *ones);
        if (!ones) { snprintf(err, errlen, "out of memory"); return -1; }
        for (size_t k = 0; k < s->n_params; k++) ones[k] = 1.0f;
        int rc = s->ops->to_device(s->be, s->state_scale[i], ones, s->n_params * sizeof *ones);
        free(ones);
        if (rc) { snprintf(err, errlen, "setting the optimizer state scales failed"); return -1; }
    }
    /* the fp32 gradient and update the optimizer reads and writes (update_window.h) */
    if (mpx_update_plan_make(s, err, errlen)) return -1;
    return bind_model(s, max_batch, max_seq, err, errlen);
}

int64_t mpx_session_input_limit(const mpx_session *s, const char *name)
{
    const mpx_instance *m = &s->inst[MPX_KIND_MODEL];
    if (!m->self || !m->rec->vt.model.input_limit) return 0;
    int64_t limit = m->rec->vt.model.input_limit(m->self, name);
    return limit > 0 ? limit : 0;
}

void mpx_session_close(mpx_session *s)
{
    /* plugins first (they may release their buffers), then the backend */
    static const mpx_kind order[] = { MPX_KIND_OPTIMIZER, MPX_KIND_MODEL, MPX_KIND_ZERO, MPX_KIND_COMM };
    for (size_t i = 0; i < MPX_COUNT(order); i++) {
        mpx_instance *in = &s->inst[order[i]];
        if (!in->self) continue;
        switch (order[i]) {
        case MPX_KIND_OPTIMIZER: in->rec->vt.optimizer.destroy(in->self); break;
        case MPX_KIND_MODEL: in->rec->vt.model.destroy(in->self); break;
        case MPX_KIND_ZERO: in->rec->vt.zero.destroy(in->self); break;
        case MPX_KIND_COMM: in->rec->vt.comm.destroy(in->self); break;
        default: break;
        }
        in->self = NULL;
    }
    while (s->n_allocs) mpx_core_host.release(&s->inst[MPX_KIND_BACKEND].env.pub, s->allocs[s->n_allocs - 1].ptr);
    mpx_instance *b = &s->inst[MPX_KIND_BACKEND];
    if (b->self) b->rec->vt.backend.destroy(b->self);
    mpx_nonfinite_free_ops(s);
    free(s->allocs);
    free(s->offsets);
    mpx_scaling_free(&s->scaling);
    free(s->param_gemm);
    free(s->pieces);
    mpx_update_plan_free(&s->upd);
    if (s->cfg) mpx_config_free(s->cfg);
    mpx_settings_free(&s->set);
    free(s->src_keep);
    mpx_registry_free(&s->reg);
    memset(s, 0, sizeof *s);
}
