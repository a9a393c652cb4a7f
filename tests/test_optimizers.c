/* Optimizer plugins against trajectories PyTorch computed (tests/fixtures/optim/optim.json,
 * made by make_fixture.py there): 10 steps of fixed gradients on three tensors, a
 * different lr each step, the parameters compared after every step. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/test_host.h"

#define FIXTURE "tests/fixtures/optim/optim.json"
#define N_TENSORS 3
#ifndef TOL
#define TOL 1e-6 /* norm-relative, per tensor */
#endif

typedef struct fixture {
    json_t *root;
    size_t numel[N_TENSORS], total;
    int no_decay[N_TENSORS];
    int steps;
    float *init;          /* total */
    float *grads;         /* steps * total */
} fixture;

static void read_floats(json_t *arr, float *out, size_t n, const char *what)
{
    cr_assert(json_is_array(arr) && json_array_size(arr) == n, "%s: expected %zu numbers", what, n);
    for (size_t i = 0; i < n; i++) out[i] = (float)json_number_value(json_array_get(arr, i));
}

/* A fixture of three tensors' sizes, no-decay flags, initial values and per-step
 * gradients: optim.json, and the AnyPrecisionAdamW and MS-AMP ones beside it. */
static fixture load_fixture(const char *path)
{
    fixture f = { 0 };
    json_error_t err;
    f.root = json_load_file(path, 0, &err);
    cr_assert(f.root, "%s:%d:%d: %s", path, err.line, err.column, err.text);
    for (int i = 0; i < N_TENSORS; i++) {
        f.numel[i] = (size_t)json_integer_value(json_array_get(json_object_get(f.root, "numel"), i));
        f.no_decay[i] = (int)json_integer_value(json_array_get(json_object_get(f.root, "no_decay"), i));
        f.total += f.numel[i];
    }
    f.steps = (int)json_integer_value(json_object_get(f.root, "steps"));
    f.init = malloc(f.total * sizeof *f.init);
    f.grads = malloc((size_t)f.steps * f.total * sizeof *f.grads);
    cr_assert(f.init && f.grads);
    read_floats(json_object_get(f.root, "init"), f.init, f.total, "init");
    for (int t = 0; t < f.steps; t++)
        read_floats(json_array_get(json_object_get(f.root, "grads"), (size_t)t),
                    f.grads + (size_t)t * f.total, f.total, "grads");
    return f;
}

static void free_fixture(fixture *f)
{
    json_decref(f->root);
    free(f->init);
    free(f->grads);
}

static json_t *find_config(const fixture *f, const char *name)
{
    json_t *cfgs = json_object_get(f->root, "configs");
    for (size_t i = 0; i < json_array_size(cfgs); i++) {
        json_t *c = json_array_get(cfgs, i);
        if (strcmp(json_string_value(json_object_get(c, "name")), name) == 0) return c;
    }
    cr_assert_fail("fixture has no config '%s'", name);
    return NULL;
}

/* The plugin's schema defaults, with the settings named in `overrides` replaced: the
 * test host does not fill defaults, so this also checks the schema's defaults. */
static char *options_text(const mpx_plugin_desc *d, const char *overrides)
{
    size_t cap = 4096, len = 0;
    char *out = malloc(cap);
    cr_assert(out);
    out[0] = 0;
    for (size_t i = 0; i < d->n_options; i++) {
        char pat[128];
        snprintf(pat, sizeof pat, "%s =", d->options[i].key);
        const char *hit = strstr(overrides, pat);
        int overridden = hit && (hit == overrides || hit[-1] == ' ' || hit[-1] == ';');
        if (!overridden)
            len += (size_t)snprintf(out + len, cap - len, "%s = %s; ", d->options[i].key, d->options[i].def);
    }
    snprintf(out + len, cap - len, "%s", overrides);
    return out;
}

/* How the test lays the tensors out: `split` cuts every tensor in two pieces and
 * `param_stride` spaces the parameter indices (LAMB groups tensors by index). */
typedef struct layout {
    int split;
    size_t param_stride;
} layout;

static size_t make_pieces(const fixture *f, float wd, layout lay, mpx_piece *pieces)
{
    size_t n = 0, off = 0;
    for (size_t t = 0; t < N_TENSORS; t++) {
        size_t cut = lay.split ? f->numel[t] / 2 + 1 : f->numel[t];
        for (size_t start = 0; start < f->numel[t]; start += cut) {
            size_t len = f->numel[t] - start < cut ? f->numel[t] - start : cut;
            pieces[n++] = (mpx_piece){
                .param = t * lay.param_stride, .offset = off + start, .len = len,
                .tensor_offset = start, .tensor_numel = f->numel[t],
                .weight_decay = f->no_decay[t] ? 0.0f : wd, .site = (uint32_t)t,
            };
        }
        off += f->numel[t];
    }
    return n;
}

static double rel_error(const float *x, json_t *ref, size_t off, size_t n)
{
    double d2 = 0, r2 = 0;
    for (size_t i = off; i < off + n; i++) {
        double r = json_number_value(json_array_get(ref, i));
        d2 += (x[i] - r) * (x[i] - r);
        r2 += r * r;
    }
    return sqrt(d2 / r2);
}

/* The largest norm-relative error over the tensors, each measured on its own so that a
 * small tensor (the no-decay bias) is not hidden by a large one; *worst names it. */
static double tensor_error(const fixture *f, const float *x, json_t *ref, size_t *worst)
{
    double e = 0;
    size_t off = 0;
    for (size_t t = 0; t < N_TENSORS; t++) {
        double et = rel_error(x, ref, off, f->numel[t]);
        if (isnan(et)) { *worst = t; return NAN; } /* a NaN anywhere is the worst error */
        if (et > e || t == 0) { e = et; *worst = t; }
        off += f->numel[t];
    }
    return e;
}

typedef struct run {
    mpx_env *env;
    const mpx_optimizer_vtable *vt;
    void *self;
    int n_state;
    void *state[MPX_MAX_OPT_STATE];
    float *param;
    uint32_t flags;       /* mpx_opt_step.flags the steps pass (ABI 1.12) */
} run;

/* build/plugins/optimizer-PLUGIN.so created under `prec` with its schema defaults and
 * `overrides` (and the cpu backend with `cpu_options`, when not NULL); its env. */
static mpx_env *open_optimizer(const char *plugin, const char *overrides, const mpx_precision_desc *prec,
                               const char *cpu_options, const mpx_optimizer_vtable **vt, void **self)
{
    char path[256];
    const char *why = NULL;
    snprintf(path, sizeof path, "build/plugins/optimizer-%s.so", plugin);
    const mpx_plugin_desc *d = th_load(path, &why);
    cr_assert(d, "cannot load %s: %s", path, why);
    cr_assert_eq(d->kind, MPX_KIND_OPTIMIZER);
    cr_assert_str_eq(d->name, plugin);
    char *opts = options_text(d, overrides);
    mpx_env *env = th_env(opts, NULL, prec);
    free(opts);
    if (cpu_options) cr_assert_eq(th_use_cpu_backend(env, cpu_options), 0, "%s", th_error(env));
    *vt = d->vtable;
    cr_assert_eq((*vt)->create(env, self), 0, "%s create: %s", plugin, th_error(env));
    return env;
}

static run start_run(const fixture *f, const char *plugin, const char *overrides, mpx_dtype state_t)
{
    mpx_precision_desc prec = th_fp32_policy();
    prec.opt_state = state_t;
    run r = { 0 };
    r.env = open_optimizer(plugin, overrides, &prec, NULL, &r.vt, &r.self);
    r.n_state = r.vt->n_state(r.self);
    for (int i = 0; i < r.n_state; i++) {
        r.state[i] = calloc(f->total, mpx_dtype_size(state_t));
        cr_assert(r.state[i]);
    }
    r.param = malloc(f->total * sizeof *r.param);
    cr_assert(r.param);
    memcpy(r.param, f->init, f->total * sizeof *r.param);
    th_set_update_target(r.env, mpx_a(r.param, MPX_F32), mpx_a(NULL, MPX_F32));
    return r;
}

static void end_run(run *r)
{
    r->vt->destroy(r->self);
    for (int i = 0; i < r->n_state; i++) free(r->state[i]);
    free(r->param);
    th_env_free(r->env);
}

/* One step t (0-based) at the fixture's lr rule: lr * (1 + 0.1 t). */
static void do_step(run *r, const fixture *f, int t, double base_lr, mpx_dtype state_t,
                    const mpx_piece *pieces, size_t n_pieces)
{
    float *grad = f->grads + (size_t)t * f->total;
    float *update = calloc(f->total, sizeof *update);
    cr_assert(update);
    mpx_opt_step s = {
        .size = sizeof s, .pieces = pieces, .n_pieces = n_pieces,
        .lr = base_lr * (1.0 + 0.1 * t), .step = t + 1,
        .param = mpx_a(r->param, MPX_F32), .grad = grad, .update = update, .flags = r->flags,
    };
    for (int i = 0; i < r->n_state; i++) s.state[i] = mpx_a(r->state[i], state_t);
    cr_assert_eq(r->vt->step(r->self, r->env, &s), 0, "step %d: %s", t + 1, th_error(r->env));
    free(update);
}

static void check_trajectory(const char *config, layout lay)
{
    fixture f = load_fixture(FIXTURE);
    json_t *c = find_config(&f, config);
    const char *plugin = json_string_value(json_object_get(c, "plugin"));
    double lr = json_number_value(json_object_get(c, "lr"));
    float wd = (float)json_number_value(json_object_get(c, "weight_decay"));
    run r = start_run(&f, plugin, json_string_value(json_object_get(c, "options")), MPX_F32);
    mpx_piece pieces[2 * N_TENSORS];
    size_t n_pieces = make_pieces(&f, wd, lay, pieces);
    json_t *traj = json_object_get(c, "trajectory");
    for (int t = 0; t < f.steps; t++) {
        do_step(&r, &f, t, lr, MPX_F32, pieces, n_pieces);
        size_t w;
        double e = tensor_error(&f, r.param, json_array_get(traj, (size_t)t), &w);
        cr_assert(e <= TOL, "%s (optimizer/%s) step %d: tensor %zu norm-relative error %.3g > %g",
                  config, plugin, t + 1, w, e, TOL);
    }
    end_run(&r);
    free_fixture(&f);
}

static const layout whole = { 0, 1 };

Test(adam, l2_mode_matches_torch_adam) { check_trajectory("adam_l2", whole); }
Test(adam, defaults_match_torch_adamw) { check_trajectory("adam_default", whole); }
Test(adam, without_bias_correction) { check_trajectory("adam_no_bias_correction", whole); }
Test(adam, split_pieces) { check_trajectory("adam_l2", (layout){ 1, 1 }); }
Test(adamw, matches_torch_adamw) { check_trajectory("adamw", whole); }
Test(sgd, plain_matches_torch) { check_trajectory("sgd_plain", whole); }
Test(sgd, momentum_dampening_weight_decay) { check_trajectory("sgd_momentum", whole); }
Test(sgd, nesterov_weight_decay) { check_trajectory("sgd_nesterov", whole); }
Test(lamb, matches_reference) { check_trajectory("lamb", whole); }
Test(lamb, clamps_trust_ratio) { check_trajectory("lamb_tight", whole); }
/* Each tensor in two pieces, with parameter indices in different norm windows: the
 * trust ratio must still come from whole-tensor norms. */
Test(lamb, split_pieces_far_indices) { check_trajectory("lamb", (layout){ 1, 700 }); }

/* ---- ABI 1.12: MPX_STEP_ADD_IN_PLACE ----
 * Where the host's apply_update would add the update into an fp32 param, it grants the
 * flag and adam and adamw add the update themselves. Two runs of the same steps, one
 * through apply_update and one granted the flag, must hold bitwise the same param and
 * state after every step, and the granted one must not call apply_update: its target is a
 * decoy buffer that has to stay zero. */
static void check_add_in_place(const char *config, layout lay, mpx_dtype state_t)
{
    fixture f = load_fixture(FIXTURE);
    json_t *c = find_config(&f, config);
    const char *plugin = json_string_value(json_object_get(c, "plugin"));
    const char *opts = json_string_value(json_object_get(c, "options"));
    double lr = json_number_value(json_object_get(c, "lr"));
    float wd = (float)json_number_value(json_object_get(c, "weight_decay"));
    run a = start_run(&f, plugin, opts, state_t), b = start_run(&f, plugin, opts, state_t);
    float *decoy = calloc(f.total, sizeof *decoy);
    cr_assert(decoy);
    th_set_update_target(b.env, mpx_a(decoy, MPX_F32), mpx_a(NULL, MPX_F32));
    b.flags = MPX_STEP_ADD_IN_PLACE;
    mpx_piece pieces[2 * N_TENSORS];
    size_t n_pieces = make_pieces(&f, wd, lay, pieces);
    for (int t = 0; t < f.steps; t++) {
        do_step(&a, &f, t, lr, state_t, pieces, n_pieces);
        do_step(&b, &f, t, lr, state_t, pieces, n_pieces);
        for (size_t i = 0; i < f.total; i++) {
            cr_assert(memcmp(&a.param[i], &b.param[i], sizeof(float)) == 0,
                      "%s (optimizer/%s) step %d element %zu: %.9g added in place, %.9g through apply_update", config,
                      plugin, t + 1, i, (double)b.param[i], (double)a.param[i]);
            cr_assert(decoy[i] == 0.0f && !signbit(decoy[i]), "%s step %d: apply_update was called (element %zu)",
                      config, t + 1, i);
        }
        for (int k = 0; k < a.n_state; k++)
            cr_assert(memcmp(a.state[k], b.state[k], f.total * mpx_dtype_size(state_t)) == 0,
                      "%s step %d: state %d differs", config, t + 1, k);
    }
    free(decoy);
    end_run(&a);
    end_run(&b);
    free_fixture(&f);
}

Test(adam, adds_in_place_as_apply_update_l2_mode) { check_add_in_place("adam_l2", whole, MPX_F32); }
Test(adam, adds_in_place_as_apply_update_split_bf16_state) { check_add_in_place("adam_default", (layout){ 1, 1 }, MPX_BF16); }
Test(adamw, adds_in_place_as_apply_update) { check_add_in_place("adamw", whole, MPX_F32); }

static uint16_t bf16_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (uint16_t)(u >> 16); /* fixture values are bf16 already: exact */
}

/* adam with bf16 moments: the update is computed in fp32 from widened moments, which
 * are stored back rounded to nearest. The reference rounds the moments the same way. */
Test(adam, bf16_state)
{
    fixture f = load_fixture(FIXTURE);
    json_t *bf = json_object_get(f.root, "adam_bf16_state");
    run r = start_run(&f, "adam", "weight_decay = 0.01;", MPX_BF16);
    cr_assert_eq(r.n_state, 2);
    mpx_piece pieces[N_TENSORS];
    size_t n_pieces = make_pieces(&f, 0.01f, whole, pieces);
    json_t *fp32_traj = json_object_get(find_config(&f, "adam_default"), "trajectory");
    double drift = 0;
    for (int t = 0; t < f.steps; t++) {
        do_step(&r, &f, t, 1e-2, MPX_BF16, pieces, n_pieces);
        size_t w;
        double e = tensor_error(&f, r.param, json_array_get(json_object_get(bf, "trajectory"), (size_t)t), &w);
        cr_assert(e <= 1e-5, "bf16-state adam step %d: tensor %zu error %.3g against the bf16 reference",
                  t + 1, w, e);
        drift = tensor_error(&f, r.param, json_array_get(fp32_traj, (size_t)t), &w);
        cr_assert(drift <= 1e-2, "bf16-state adam step %d: tensor %zu drifts %.3g from fp32 AdamW",
                  t + 1, w, drift);
    }
    cr_assert(drift > 1e-7, "bf16 state gave the fp32 trajectory (drift %.3g): not rounded?", drift);
    /* The state buffers hold bf16 bit patterns equal to the reference's moments. */
    const char *names[2] = { "exp_avg", "exp_avg_sq" };
    for (int k = 0; k < 2; k++) {
        const uint16_t *bits = r.state[k];
        json_t *ref = json_object_get(bf, names[k]);
        size_t exact = 0;
        for (size_t i = 0; i < f.total; i++) {
            uint16_t want = bf16_bits((float)json_number_value(json_array_get(ref, i)));
            int diff = abs((int)bits[i] - (int)want);
            cr_assert(diff <= 1, "%s[%zu]: bits 0x%04x, reference 0x%04x", names[k], i, bits[i], want);
            exact += diff == 0;
        }
        cr_assert(exact >= f.total * 95 / 100, "%s: only %zu of %zu bf16 values exact", names[k], exact, f.total);
    }
    end_run(&r);
    free_fixture(&f);
}

Test(sgd, state_only_with_momentum)
{
    fixture f = load_fixture(FIXTURE);
    run plain = start_run(&f, "sgd", "", MPX_F32);
    cr_assert_eq(plain.n_state, 0);
    end_run(&plain);
    run mom = start_run(&f, "sgd", "momentum = 0.9;", MPX_F32);
    cr_assert_eq(mom.n_state, 1);
    cr_assert_str_eq(mom.vt->state_name(mom.self, 0), "momentum_buffer");
    end_run(&mom);
    free_fixture(&f);
}

Test(sgd, nesterov_needs_momentum)
{
    const mpx_plugin_desc *d = th_load("build/plugins/optimizer-sgd.so", &(const char *){ NULL });
    cr_assert(d);
    mpx_env *env = th_env("momentum = 0.0; dampening = 0.0; nesterov = true; weight_decay = 0.0;", NULL, NULL);
    void *self = NULL;
    cr_assert_neq(((const mpx_optimizer_vtable *)d->vtable)->create(env, &self), 0);
    cr_assert(strstr(th_error(env), "nesterov"), "error: %s", th_error(env));
    th_env_free(env);
}

/* A first step of `plugin` with both states in `state_t` (the fixture's first gradients,
 * lr 1e-3), which the plugin must refuse with an error naming `why`; the step stays in
 * x->s for more tries, and refused_end frees it all. */
typedef struct refused {
    fixture f;
    run r;
    mpx_piece pieces[N_TENSORS];
    float *update;
    mpx_opt_step s;
} refused;

static void expect_refused(refused *x, const char *plugin, mpx_dtype state_t, const char *why)
{
    x->f = load_fixture(FIXTURE);
    x->r = start_run(&x->f, plugin, "", state_t);
    size_t n_pieces = make_pieces(&x->f, 0.0f, whole, x->pieces);
    x->update = calloc(x->f.total, sizeof *x->update);
    cr_assert(x->update);
    x->s = (mpx_opt_step){
        .size = sizeof x->s, .pieces = x->pieces, .n_pieces = n_pieces, .lr = 1e-3, .step = 1,
        .param = mpx_a(x->r.param, MPX_F32), .grad = x->f.grads, .update = x->update,
        .state = { mpx_a(x->r.state[0], state_t), mpx_a(x->r.state[1], state_t) },
    };
    cr_assert_neq(x->r.vt->step(x->r.self, x->r.env, &x->s), 0, "%s accepted the step", plugin);
    cr_assert(strstr(th_error(x->r.env), why), "%s: error: %s", plugin, th_error(x->r.env));
}

static void refused_end(refused *x)
{
    free(x->update);
    end_run(&x->r);
    free_fixture(&x->f);
}

/* fp16 and 8-bit state is for adam/adamw (below); LAMB still refuses it, by name. */
Test(lamb, refuses_fp16_state)
{
    refused x;
    expect_refused(&x, "lamb", MPX_F16, "fp16");
    refused_end(&x);
}

Test(lamb, state_names_and_defaults)
{
    const mpx_plugin_desc *d = th_load("build/plugins/optimizer-lamb.so", &(const char *){ NULL });
    cr_assert(d);
    int seen = 0;
    for (size_t i = 0; i < d->n_options; i++) {
        if (!strcmp(d->options[i].key, "max_coeff")) { cr_assert_str_eq(d->options[i].def, "10.0"); seen++; }
        if (!strcmp(d->options[i].key, "min_coeff")) { cr_assert_str_eq(d->options[i].def, "0.01"); seen++; }
    }
    cr_assert_eq(seen, 2);
}

/* With bf16 moments and round-to-nearest, beta2 = 0.999 never decays the second moment:
 * 0.999 v is within half a bf16 ulp of v (a relative change of 1e-3 against at least
 * 2^-9), so v rounds back to itself on every zero-gradient step. In fp32 it decays as
 * 0.999^t. One step at g = 1, then 1000 at g = 0. */
Test(adam, bf16_second_moment_never_decays)
{
    enum { N = 64, STEPS = 1000 };
    const char *why = NULL;
    const mpx_plugin_desc *d = th_load("build/plugins/optimizer-adam.so", &why);
    cr_assert(d, "%s", why);
    double v_end[2];
    for (int k = 0; k < 2; k++) {
        mpx_dtype st = k ? MPX_BF16 : MPX_F32;
        mpx_precision_desc prec = th_fp32_policy();
        prec.opt_state = st;
        char *opts = options_text(d, "");
        mpx_env *env = th_env(opts, NULL, &prec);
        free(opts);
        const mpx_optimizer_vtable *vt = d->vtable;
        void *self;
        cr_assert_eq(vt->create(env, &self), 0, "%s", th_error(env));
        float param[N], grad[N], update[N];
        void *state[2] = { calloc(N, 4), calloc(N, 4) };
        cr_assert(state[0] && state[1]);
        for (int i = 0; i < N; i++) param[i] = 1.0f;
        th_set_update_target(env, mpx_a(param, MPX_F32), mpx_a(NULL, MPX_F32));
        mpx_piece piece = { .param = 0, .offset = 0, .len = N, .tensor_numel = N };
        for (int t = 0; t <= STEPS; t++) {
            for (int i = 0; i < N; i++) grad[i] = t == 0 ? 1.0f : 0.0f;
            mpx_opt_step s = { .size = sizeof s, .pieces = &piece, .n_pieces = 1, .lr = 1e-6, .step = t + 1,
                               .param = mpx_a(param, MPX_F32), .grad = grad, .update = update };
            s.state[0] = mpx_a(state[0], st);
            s.state[1] = mpx_a(state[1], st);
            cr_assert_eq(vt->step(self, env, &s), 0, "%s", th_error(env));
        }
        v_end[k] = st == MPX_BF16 ? mpx_bf16_to_f32(((uint16_t *)state[1])[0]) : ((float *)state[1])[0];
        vt->destroy(self);
        free(state[0]);
        free(state[1]);
        th_env_free(env);
    }
    double v1 = mpx_bf16_to_f32(mpx_f32_to_bf16(0.001f)), decayed = 0.001 * pow(0.999, STEPS);
    cr_log_info("exp_avg_sq after 1 step at g = 1 and %d at g = 0: fp32 %.6g (0.001 * 0.999^%d = %.6g), bf16 %.6g",
                STEPS, v_end[0], STEPS, decayed, v_end[1]);
    cr_expect(fabs(v_end[0] - decayed) <= 1e-4 * decayed, "fp32 v %.9g, want %.9g", v_end[0], decayed);
    cr_expect_eq(v_end[1], v1, "bf16 v %.9g, want it stuck at %.9g", v_end[1], v1);
}

/* ---- AnyPrecisionAdamW (tests/fixtures/optim/make_anyprecision_fixture.py) ---- */

static double ulps_bf16(float a, float b)
{
    /* distance in bf16 steps between two bf16 values (same sign assumed near each other) */
    int32_t ia = (int16_t)mpx_f32_to_bf16(a), ib = (int16_t)mpx_f32_to_bf16(b);
    if (ia < 0) ia = (int32_t)0x8000 - ia;  /* order negative values */
    if (ib < 0) ib = (int32_t)0x8000 - ib;
    return fabs((double)ia - (double)ib);
}

/* bf16 weights, gradients and moments, every op rounded as AnyPrecisionAdamW's PyTorch
 * ops round: the trajectory equals the real optimizer's bitwise, or within one bf16 ulp,
 * per tensor and step; the final moments likewise. */
static void check_anyprecision(const char *plugin)
{
    fixture f = load_fixture("tests/fixtures/optim/anyprecision_bf16.json");
    json_t *root = f.root;
    size_t total = f.total, *numel = f.numel;
    int steps = f.steps;
    double wd = json_number_value(json_object_get(root, "weight_decay"));
    char over[128];
    snprintf(over, sizeof over, "anyprecision = true; weight_decay = %g;", wd);
    mpx_precision_desc prec = th_fp32_policy();
    prec.weights = prec.opt_state = MPX_BF16;
    const mpx_optimizer_vtable *vt;
    void *self;
    mpx_env *env = open_optimizer(plugin, over, &prec, "threads = 1;", &vt, &self);
    uint16_t *w = calloc(total, 2), *m = calloc(total, 2), *v = calloc(total, 2);
    float *grad = calloc(total, 4), *update = calloc(total, 4), *ref = calloc(total, 4);
    cr_assert(w && m && v && grad && update && ref);
    for (size_t i = 0; i < total; i++) w[i] = mpx_f32_to_bf16(f.init[i]);
    th_set_update_target(env, mpx_a(w, MPX_BF16), mpx_a(NULL, MPX_BF16));
    mpx_piece pieces[N_TENSORS];
    make_pieces(&f, (float)wd, whole, pieces);
    size_t exact = 0, compared = 0;
    for (int s = 0; s < steps; s++) {
        memcpy(grad, f.grads + (size_t)s * total, total * sizeof *grad);
        mpx_opt_step st = { .size = sizeof st, .pieces = pieces, .n_pieces = 3,
                            .lr = json_number_value(json_array_get(json_object_get(root, "lr"), (size_t)s)),
                            .step = s + 1, .param = mpx_a(w, MPX_BF16), .grad = grad, .update = update };
        st.state[0] = mpx_a(m, MPX_BF16);
        st.state[1] = mpx_a(v, MPX_BF16);
        cr_assert_eq(vt->step(self, env, &st), 0, "%s", th_error(env));
        read_floats(json_array_get(json_object_get(root, "trajectory"), (size_t)s), ref, total, "trajectory");
        for (size_t t = 0; t < 3; t++)
            for (size_t i = pieces[t].offset; i < pieces[t].offset + numel[t]; i++) {
                double du = ulps_bf16(mpx_bf16_to_f32(w[i]), ref[i]);
                cr_assert(du <= 1.0, "%s step %d tensor %zu element %zu: %.9g vs AnyPrecisionAdamW %.9g (%g ulps)",
                          plugin, s + 1, t, i, mpx_bf16_to_f32(w[i]), ref[i], du);
                exact += du == 0.0;
                compared++;
            }
    }
    const char *mom[2] = { "exp_avg", "exp_avg_sq" };
    const uint16_t *mine[2] = { m, v };
    for (int k = 0; k < 2; k++) {
        read_floats(json_object_get(root, mom[k]), ref, total, mom[k]);
        for (size_t i = 0; i < total; i++)
            cr_assert(ulps_bf16(mpx_bf16_to_f32(mine[k][i]), ref[i]) <= 1.0, "%s %s element %zu: %.9g vs %.9g", plugin,
                      mom[k], i, mpx_bf16_to_f32(mine[k][i]), ref[i]);
    }
    cr_log_info("%s anyprecision: %zu of %zu weights after each of %d steps bitwise equal to AnyPrecisionAdamW, the rest within 1 bf16 ulp",
                plugin, exact, compared, steps);
    vt->destroy(self);
    free(w); free(m); free(v); free(grad); free(update); free(ref);
    th_env_free(env);
    free_fixture(&f);
}

Test(adam, anyprecision_matches_anyprecision_adamw) { check_anyprecision("adam"); }
Test(adamw, anyprecision_matches_anyprecision_adamw) { check_anyprecision("adamw"); }

/* ---- MS-AMP O2 state (tests/fixtures/optim/make_msamp_fixture.py) ----
 * exp_avg in E4M3 and exp_avg_sq in fp16, each with a per-tensor power-of-two scale, 8
 * steps against a numpy transcription of MS-AMP's storage with ml_dtypes rounding: the
 * weights after every step, the scales after every step and the final codes, all
 * bitwise (the same fp32 operations in the same order). */
static uint32_t f32_bits(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }

static void check_msamp_o2(const char *plugin)
{
    fixture f = load_fixture("tests/fixtures/optim/msamp_o2.json");
    json_t *root = f.root;
    size_t total = f.total;
    int steps = f.steps;
    double wd = json_number_value(json_object_get(root, "weight_decay"));
    double base_lr = json_number_value(json_object_get(root, "base_lr"));
    char over[160];
    snprintf(over, sizeof over, "weight_decay = %g; betas = [0.9, 0.999]; eps = 1e-8;", wd);
    mpx_precision_desc prec = th_fp32_policy();
    prec.opt_state = MPX_FP8_E4M3;
    prec.opt_state_sq = MPX_F16;
    const mpx_optimizer_vtable *vt;
    void *self;
    mpx_env *env = open_optimizer(plugin, over, &prec, NULL, &vt, &self);
    uint8_t *m = calloc(total, 1);
    uint16_t *v = calloc(total, 2);
    float *p = calloc(total, 4), *grad = calloc(total, 4), *update = calloc(total, 4), *ref = calloc(total, 4);
    float scale_m[3] = { 1, 1, 1 }, scale_v[3] = { 1, 1, 1 };
    cr_assert(m && v && p && grad && update && ref);
    memcpy(p, f.init, total * sizeof *p);
    th_set_update_target(env, mpx_a(p, MPX_F32), mpx_a(NULL, MPX_F32));
    mpx_piece pieces[N_TENSORS];
    make_pieces(&f, (float)wd, whole, pieces);
    for (int s = 0; s < steps; s++) {
        memcpy(grad, f.grads + (size_t)s * total, total * sizeof *grad);
        mpx_opt_step st = { .size = sizeof st, .pieces = pieces, .n_pieces = 3, .lr = base_lr * (1.0 + 0.1 * s),
                            .step = s + 1, .param = mpx_a(p, MPX_F32), .grad = grad, .update = update };
        st.state[0] = mpx_a(m, MPX_FP8_E4M3);
        st.state[1] = mpx_a(v, MPX_F16);
        st.state_scale[0] = scale_m;
        st.state_scale[1] = scale_v;
        cr_assert_eq(vt->step(self, env, &st), 0, "%s step %d: %s", plugin, s + 1, th_error(env));
        read_floats(json_array_get(json_object_get(root, "trajectory"), (size_t)s), ref, total, "trajectory");
        for (size_t i = 0; i < total; i++)
            cr_assert_eq(f32_bits(p[i]), f32_bits(ref[i]), "%s step %d element %zu: %.9g, reference %.9g", plugin,
                         s + 1, i, p[i], ref[i]);
        json_t *sc = json_array_get(json_object_get(root, "scales"), (size_t)s);
        for (size_t t = 0; t < 3; t++) {
            double want_m = json_number_value(json_array_get(json_array_get(sc, t), 0));
            double want_v = json_number_value(json_array_get(json_array_get(sc, t), 1));
            cr_assert(scale_m[t] == want_m && scale_v[t] == want_v, "%s step %d tensor %zu: scales %g/%g, reference %g/%g",
                      plugin, s + 1, t, scale_m[t], scale_v[t], want_m, want_v);
        }
    }
    size_t zero = 0, sub = 0;
    for (size_t i = 0; i < total; i++) {
        int cm = (int)json_integer_value(json_array_get(json_object_get(root, "exp_avg_codes"), i));
        int cv = (int)json_integer_value(json_array_get(json_object_get(root, "exp_avg_sq_codes"), i));
        cr_assert_eq(m[i], cm, "%s exp_avg[%zu]: E4M3 code 0x%02x, reference 0x%02x", plugin, i, m[i], cm);
        cr_assert_eq(v[i], cv, "%s exp_avg_sq[%zu]: fp16 code 0x%04x, reference 0x%04x", plugin, i, v[i], cv);
        zero += (m[i] & 0x7f) == 0;
        sub += (m[i] & 0x78) == 0 && (m[i] & 0x07) != 0;
    }
    /* the fixture reaches E4M3's subnormals and its flush to zero */
    cr_assert(zero > 0 && sub > 0, "fixture too tame: %zu zero and %zu subnormal exp_avg codes", zero, sub);
    cr_log_info("%s, MS-AMP O2 state: %d steps bitwise equal to the numpy reference (%zu exp_avg codes zero, %zu subnormal)",
                plugin, steps, zero, sub);
    vt->destroy(self);
    free(m); free(v); free(p); free(grad); free(update); free(ref);
    th_env_free(env);
    free_fixture(&f);
}

Test(adam, msamp_o2_state_matches_numpy_reference) { check_msamp_o2("adam"); }
Test(adamw, msamp_o2_state_matches_numpy_reference) { check_msamp_o2("adamw"); }

/* An 8-bit state without scales (a host older than ABI 1.8 would pass none) is refused. */
Test(adam, fp8_state_needs_scales)
{
    refused x;
    expect_refused(&x, "adam", MPX_FP8_E4M3, "no scales");
    x.s.size = offsetof(mpx_opt_step, state_scale);
    cr_assert_neq(x.r.vt->step(x.r.self, x.r.env, &x.s), 0);
    cr_assert(strstr(th_error(x.r.env), "ABI 1.8"), "error: %s", th_error(x.r.env));
    refused_end(&x);
}
