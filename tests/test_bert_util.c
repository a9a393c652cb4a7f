#include "test_bert_util.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <unistd.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- fixture files: safetensors written by tests/fixtures/bert/make_fixture.py ---- */

struct fx_file {
    char *buf;
    size_t len, data_start;
    json_t *hdr;
};

fx_file *fx_open(const char *path)
{
    fx_file *f = calloc(1, sizeof *f);
    f->buf = ts_slurp(path, &f->len);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = (hl << 8) | (unsigned char)f->buf[i];
    json_error_t e;
    f->hdr = json_loadb(f->buf + 8, hl, 0, &e);
    cr_assert(f->hdr, "%s: bad header: %s", path, e.text);
    f->data_start = 8 + hl;
    return f;
}

void fx_close(fx_file *f)
{
    json_decref(f->hdr);
    free(f->buf);
    free(f);
}

static const void *fx_get(fx_file *f, const char *name, const char *dtype, size_t *n, int64_t shape[2])
{
    json_t *t = json_object_get(f->hdr, name);
    if (!t) return NULL;
    cr_assert_str_eq(json_string_value(json_object_get(t, "dtype")), dtype, "fixture tensor %s", name);
    json_t *sh = json_object_get(t, "shape");
    size_t cnt = 1;
    for (size_t d = 0; d < json_array_size(sh); d++) {
        cnt *= (size_t)json_integer_value(json_array_get(sh, d));
        if (shape && d < 2) shape[d] = json_integer_value(json_array_get(sh, d));
    }
    if (n) *n = cnt;
    size_t begin = (size_t)json_integer_value(json_array_get(json_object_get(t, "data_offsets"), 0));
    return f->buf + f->data_start + begin;
}

const float *fx_f32(fx_file *f, const char *name, size_t *n) { return fx_get(f, name, "F32", n, NULL); }
const int32_t *fx_i32(fx_file *f, const char *name, size_t *n, int64_t shape[2])
{
    return fx_get(f, name, "I32", n, shape);
}

/* ---- the model harness ---- */

int tb_create(tb_model *t, const char *checkpoint, const char *extra)
{
    return tb_create_prec(t, checkpoint, extra, NULL);
}

int tb_create_prec(tb_model *t, const char *checkpoint, const char *extra, const mpx_precision_desc *prec)
{
    memset(t, 0, sizeof *t);
    t->prec = prec ? *prec : th_fp32_policy();
    char opts[2048], run[1024];
    /* the references are Hugging Face's BertForQuestionAnswering: padding_idx on */
    snprintf(opts, sizeof opts, "hidden_dropout = 0.0; attention_dropout = 0.0; random_init = false; "
             "extra_tensors = \"\"; freeze_pad_row = true;\n%s", extra ? extra : "");
    snprintf(run, sizeof run, "model = { checkpoint = \"%s\"; };", checkpoint);
    /* libconfig refuses a duplicate setting: drop the defaults the caller overrides */
    static const char *keys[] = { "hidden_dropout", "attention_dropout", "random_init", "extra_tensors",
                                  "freeze_pad_row" };
    for (size_t k = 0; extra && k < sizeof keys / sizeof *keys; k++) {
        if (!strstr(extra, keys[k])) continue;
        char *p = strstr(opts, keys[k]), *semi = strchr(p, ';');
        memset(p, ' ', (size_t)(semi - p + 1));
    }
    t->env = th_env(opts, run, &t->prec);
    cr_assert_eq(th_use_cpu_backend(t->env, "threads = 2;"), 0, "%s", th_error(t->env));
    const char *why = NULL;
    const mpx_plugin_desc *d = th_load("build/plugins/model-bert-qa.so", &why);
    cr_assert(d, "cannot load model-bert-qa.so: %s", why);
    cr_assert_eq(d->kind, MPX_KIND_MODEL);
    t->vt = d->vtable;
    t->ops = t->env->host->ops(t->env, &t->be);
    if (t->vt->create(t->env, &t->m) != 0) { t->m = NULL; return -1; }
    t->n_params = t->vt->n_params(t->m);
    t->off = calloc(t->n_params, sizeof *t->off);
    /* offsets with gaps, as a host aligning each tensor might lay them out */
    size_t at = 0;
    for (size_t i = 0; i < t->n_params; i++) {
        const mpx_param_info *p = t->vt->param(t->m, i);
        size_t n = 1;
        for (int k = 0; k < p->ndim; k++) n *= (size_t)p->shape[k];
        t->off[i] = at;
        at += (n + 15) / 16 * 16 + 16;
    }
    t->numel = at;
    t->flat = calloc(t->numel, sizeof(float));
    return 0;
}

int tb_init(tb_model *t, uint64_t seed)
{
    return t->vt->init_weights(t->m, t->flat, t->off, seed) == 0 ? 0 : -1;
}

int tb_bind(tb_model *t, int max_batch, int max_seq)
{
    const mpx_host *h = t->env->host;
    if (!t->w.p) {
        t->w = mpx_a(h->alloc(t->env, MPX_ROLE_WEIGHTS, t->numel * mpx_dtype_size(t->prec.weights), "weights"),
                     t->prec.weights);
        t->g = mpx_a(h->alloc(t->env, MPX_ROLE_GRADS, t->numel * mpx_dtype_size(t->prec.grads), "grads"),
                     t->prec.grads);
        cr_assert(t->w.p && t->g.p);
    }
    void *tmp = t->ops->alloc(t->be, t->numel * 4);
    cr_assert_eq(t->ops->to_device(t->be, tmp, t->flat, t->numel * 4), 0);
    cr_assert_eq(t->ops->cast(t->be, mpx_a(tmp, MPX_F32), t->w, t->numel), 0); /* round to nearest even */
    t->ops->free(t->be, tmp);
    mpx_model_bind b = { sizeof b, t->w, t->g, t->off, t->numel };
    return t->vt->bind(t->m, &b, max_batch, max_seq) == 0 ? 0 : -1;
}

void tb_free(tb_model *t)
{
    if (t->m) t->vt->destroy(t->m);
    if (t->w.p) t->env->host->release(t->env, t->w.p);
    if (t->g.p) t->env->host->release(t->env, t->g.p);
    free(t->off);
    free(t->flat);
    th_env_free(t->env);
}

const char *tb_error(tb_model *t) { return th_error(t->env); }

int tb_param(tb_model *t, const char *name)
{
    for (size_t i = 0; i < t->n_params; i++)
        if (!strcmp(t->vt->param(t->m, i)->name, name)) return (int)i;
    return -1;
}

void tb_to_f32(tb_model *t, mpx_arg a, size_t n, float *out)
{
    void *tmp = t->ops->alloc(t->be, n * 4);
    cr_assert_eq(t->ops->cast(t->be, a, mpx_a(tmp, MPX_F32), n), 0);
    cr_assert_eq(t->ops->to_host(t->be, out, tmp, n * 4), 0);
    t->ops->free(t->be, tmp);
}

size_t tb_numel(tb_model *t, size_t i)
{
    const mpx_param_info *p = t->vt->param(t->m, i);
    size_t n = 1;
    for (int k = 0; k < p->ndim; k++) n *= (size_t)p->shape[k];
    return n;
}

void tb_batch_add(tb_model *t, tb_batch *b, const char *name, const int32_t *data, int ndim, int64_t d0, int64_t d1)
{
    int i = b->b.n_tensors++;
    size_t n = (size_t)d0 * (size_t)(ndim == 2 ? d1 : 1);
    b->mem[i] = t->ops->alloc(t->be, n * 4);
    cr_assert_eq(t->ops->to_device(t->be, b->mem[i], data, n * 4), 0);
    b->t[i] = (mpx_itensor){ name, b->mem[i], ndim, { d0, ndim == 2 ? d1 : 0 } };
    b->b.size = sizeof b->b;
    b->b.tensors = b->t;
}

void tb_batch_free(tb_model *t, tb_batch *b)
{
    for (int i = 0; i < b->b.n_tensors; i++) t->ops->free(t->be, b->mem[i]);
    b->b.n_tensors = 0;
}

double rel_err(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Every temp folder of this test process, removed by tb_cleanup (a suite's .fini). */
static char tb_dirs[32][64];
static int tb_n_dirs;

void tb_tempdir(char *buf, size_t cap)
{
    snprintf(buf, cap, "/tmp/test_bert_XXXXXX");
    cr_assert(mkdtemp(buf), "mkdtemp failed");
    if (tb_n_dirs < 32) snprintf(tb_dirs[tb_n_dirs++], sizeof tb_dirs[0], "%s", buf);
}

void tb_cleanup(void)
{
    for (int i = 0; i < tb_n_dirs; i++) {
        DIR *d = opendir(tb_dirs[i]);
        struct dirent *e;
        char path[4400];
        while (d && (e = readdir(d)) != NULL) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            snprintf(path, sizeof path, "%s/%s", tb_dirs[i], e->d_name);
            remove(path);
        }
        if (d) closedir(d);
        rmdir(tb_dirs[i]);
    }
    tb_n_dirs = 0;
}

void tb_write(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    cr_assert(f && fwrite(data, 1, len, f) == len && fclose(f) == 0, "cannot write %s", path);
}

void tb_copy(const char *src, const char *dst)
{
    size_t n;
    char *b = ts_slurp(src, &n);
    tb_write(dst, b, n);
    free(b);
}

void tb_ref_batch(tb_model *t, fx_file *fx, tb_batch *b, int labels, int training, uint32_t tick)
{
    memset(b, 0, sizeof *b);
    int64_t sh[2] = { 0, 0 };
    static const char *const in[3] = { "input_ids", "segment_ids", "input_mask" };
    for (int i = 0; i < 3; i++) {
        const int32_t *d = fx_i32(fx, in[i], NULL, sh);
        cr_assert(d, "fixture has no %s", in[i]);
        tb_batch_add(t, b, in[i], d, 2, sh[0], sh[1]);
    }
    if (labels) {
        tb_batch_add(t, b, "start_positions", fx_i32(fx, "start_positions", NULL, NULL), 1, sh[0], 0);
        tb_batch_add(t, b, "end_positions", fx_i32(fx, "end_positions", NULL, NULL), 1, sh[0], 0);
    }
    b->b.training = training;
    b->b.tick = tick;
}
