/* Weights in and out: a Hugging Face checkpoint folder (config.json, model.safetensors,
 * vocab.txt), optional extra tensors (e.g. a QA head), and seeded initialisation.
 *
 * Names in a file are accepted with or without `bert.`, with LayerNorm.gamma/beta for
 * weight/bias; pooler.*, cls.* and *.position_ids are ignored (and noted). Anything else
 * that is not in the parameter table, mis-shaped, or missing is an error naming it; only
 * an absent QA head (both tensors) is initialised instead.
 *
 * Random numbers: element 2j and 2j+1 of a tensor come from Box-Muller on the Philox
 * block j/2 of the mpx stream (key = seed, site = the tensor's site, tick 0), words
 * 2(j%2) and 2(j%2)+1, each turned into a uniform in (0, 1]. */
#include "bert.h"
#include "safetensors.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

void bert_init_normal(float *dst, size_t n, float std, uint64_t seed, uint32_t site)
{
    for (size_t j = 0; 2 * j < n; j++) {
        mpx_philox_out o = mpx_philox_block(seed, site, 0, j / 2);
        uint32_t x1 = o.v[2 * (j % 2)], x2 = o.v[2 * (j % 2) + 1];
        double u1 = ((double)(x1 >> 8) + 1.0) * 0x1p-24, u2 = ((double)(x2 >> 8) + 1.0) * 0x1p-24;
        double r = sqrt(-2.0 * log(u1)), a = 2.0 * M_PI * u2;
        dst[2 * j] = (float)(std * r * cos(a));
        if (2 * j + 1 < n) dst[2 * j + 1] = (float)(std * r * sin(a));
    }
}

static void init_param(const bert *m, size_t i, float *dst, uint64_t seed)
{
    const mpx_param_info *p = &m->params[i];
    size_t n = bert_numel(m, i);
    if (p->init == MPX_INIT_NORMAL) { bert_init_normal(dst, n, p->init_std, seed, p->site); return; }
    float v = p->init == MPX_INIT_ONES ? 1.0f : 0.0f;
    for (size_t k = 0; k < n; k++) dst[k] = v;
}

/* ---- name mapping ---- */

static int ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

static int is_ignored(const char *name)
{
    return !strncmp(name, "pooler.", 7) || !strncmp(name, "cls.", 4) || ends_with(name, "position_ids");
}

/* The canonical name of a file's tensor: no `bert.`, LayerNorm.gamma/beta -> weight/bias. */
static void canonical_name(const char *in, char *out, size_t cap)
{
    if (!strncmp(in, "bert.", 5)) in += 5;
    snprintf(out, cap, "%s", in);
    size_t n = strlen(out);
    if (ends_with(out, "LayerNorm.gamma") && n + 1 < cap) strcpy(out + n - 5, "weight");
    else if (ends_with(out, "LayerNorm.beta")) strcpy(out + n - 4, "bias");
}

static void shape_str(char *buf, size_t cap, int ndim, const int64_t *shape)
{
    size_t at = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < ndim && at < cap; d++)
        at += (size_t)snprintf(buf + at, cap - at, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (at < cap) snprintf(buf + at, cap - at, "]");
}

static int check_shape(const bert *m, const st_file *sf, const st_tensor *t, size_t i)
{
    const mpx_param_info *p = &m->params[i];
    int ok = t->ndim == p->ndim;
    for (int d = 0; ok && d < p->ndim; d++) ok = t->shape[d] == p->shape[d];
    if (ok) return 0;
    char got[96], want[96];
    shape_str(got, sizeof got, t->ndim, t->shape);
    shape_str(want, sizeof want, p->ndim, p->shape);
    const bert_config *c = &m->cfg;
    return MPX_FAIL(m->env, "%s: tensor '%s' has shape %s but %s implies %s (vocab_size=%d, hidden_size=%d, "
                    "intermediate_size=%d, max_position_embeddings=%d, type_vocab_size=%d)",
                    sf->path, t->name, got, c->path, want, c->vocab, c->hidden, c->inter, c->max_pos,
                    c->type_vocab);
}

static int unexpected(const bert *m, const st_file *sf, const st_tensor *t)
{
    int l;
    if (sscanf(t->name + (strncmp(t->name, "bert.", 5) ? 0 : 5), "encoder.layer.%d.", &l) == 1 && l >= m->cfg.layers)
        return MPX_FAIL(m->env, "%s: unexpected tensor '%s': %s has num_hidden_layers=%d",
                        sf->path, t->name, m->cfg.path, m->cfg.layers);
    return MPX_FAIL(m->env, "%s: unexpected tensor '%s'", sf->path, t->name);
}

static int file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* Every tensor of `sf` that names a parameter has that parameter's shape and a dtype
 * st_read_f32 reads (an F64 or BOOL tensor is refused here, not at the first load). */
static int check_file_shapes(const bert *m, const st_file *sf, int allow_ignored)
{
    char name[256];
    for (size_t k = 0; k < sf->n; k++) {
        canonical_name(sf->t[k].name, name, sizeof name);
        if (allow_ignored && is_ignored(name)) continue;
        int i = bert_find_param(m, name);
        if (i < 0) return unexpected(m, sf, &sf->t[k]);
        MPX_TRY(check_shape(m, sf, &sf->t[k], (size_t)i));
        MPX_TRY(st_check_float(m->env, sf, &sf->t[k]));
    }
    return 0;
}

/* The checkpoint's shapes against config.json's, from the safetensors headers alone,
 * before the host allocates anything (a config.json that disagrees with its
 * model.safetensors must not cost the memory its sizes imply). */
int bert_check_checkpoint(const bert *m)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", m->ckpt_dir);
    const char *files[2] = { !m->random_init && file_exists(path) ? path : NULL,
                             m->extra_tensors && *m->extra_tensors ? m->extra_tensors : NULL };
    for (int f = 0; f < 2; f++) {
        if (!files[f]) continue;
        st_file sf;
        MPX_TRY(st_open(m->env, files[f], &sf));
        int rc = check_file_shapes(m, &sf, f == 0);
        st_close(&sf);
        if (rc) return rc;
    }
    return 0;
}

/* Load every tensor of `sf` that names a parameter; seen[i] marks the ones loaded. */
static int load_file(bert *m, st_file *sf, float *flat, const size_t *off, char *seen, int allow_ignored)
{
    char name[256], ignored[512] = "";
    size_t n_ignored = 0, n_loaded = 0, n_16[2] = { 0, 0 }; /* F16, BF16 */
    for (size_t k = 0; k < sf->n; k++) {
        const st_tensor *t = &sf->t[k];
        canonical_name(t->name, name, sizeof name);
        if (allow_ignored && is_ignored(name)) {
            if (strlen(ignored) + strlen(t->name) + 3 < sizeof ignored)
                strcat(strcat(ignored, n_ignored ? ", " : ""), t->name);
            n_ignored++;
            continue;
        }
        int i = bert_find_param(m, name);
        if (i < 0) return unexpected(m, sf, t);
        if (seen[i] == 1)
            return MPX_FAIL(m->env, "%s: tensor '%s' appears twice (as '%s' too)", sf->path, name, t->name);
        MPX_TRY(check_shape(m, sf, t, (size_t)i));
        MPX_TRY(st_read_f32(m->env, sf, t, flat + off[i]));
        seen[i] = 1;
        n_loaded++;
        if (t->dtype == ST_F16 || t->dtype == ST_BF16) n_16[t->dtype == ST_BF16]++;
    }
    if (n_ignored)
        m->env->host->note(m->env, "%s: ignored %zu tensors: %s", sf->path, n_ignored, ignored);
    /* widened exactly, but a run from such a file starts from 16-bit-rounded weights,
     * not the fp32 ones it may have been rounded from: the record says so */
    if (n_16[0] || n_16[1])
        m->env->host->note(m->env, "%s: %zu of its %zu parameter tensors are stored in 16 bits (%zu bf16, %zu fp16), "
                           "widened exactly to fp32: the run starts from 16-bit-rounded weights", sf->path,
                           n_16[0] + n_16[1], n_loaded, n_16[1], n_16[0]);
    return 0;
}

/* Missing parameters: an absent QA head is initialised, anything else is an error. */
static int fill_missing(bert *m, const char *path, float *flat, const size_t *off, const char *seen, uint64_t seed)
{
    size_t hw = bert_head_param(m, 0), hb = hw + 1;
    for (size_t i = 0; i < m->n_params; i++) {
        if (seen[i] || i == hw || i == hb) continue;
        return MPX_FAIL(m->env, "%s: missing tensor '%s' (nor 'bert.%s')", path, m->params[i].name, m->params[i].name);
    }
    if (seen[hw] != seen[hb])
        return MPX_FAIL(m->env, "%s: missing tensor '%s'", path, m->params[seen[hw] ? hb : hw].name);
    if (!seen[hw]) {
        init_param(m, hw, flat + off[hw], seed);
        init_param(m, hb, flat + off[hb], seed);
        m->env->host->note(m->env, "%s has no qa_outputs: initialised (normal, std %g, seed %llu)",
                           path, m->cfg.init_range, (unsigned long long)seed);
    }
    return 0;
}

static int load_checkpoint(bert *m, const char *path, float *flat, const size_t *off, uint64_t seed)
{
    char *seen = calloc(m->n_params, 1);
    if (!seen) return MPX_FAIL(m->env, "out of memory");
    st_file sf;
    int rc = st_open(m->env, path, &sf);
    if (!rc) {
        rc = load_file(m, &sf, flat, off, seen, 1);
        if (!rc) rc = fill_missing(m, path, flat, off, seen, seed);
        st_close(&sf);
    }
    if (!rc && m->extra_tensors && *m->extra_tensors) {
        memset(seen, 2, m->n_params); /* 2: already loaded, may be replaced once */
        rc = st_open(m->env, m->extra_tensors, &sf);
        if (!rc) {
            rc = load_file(m, &sf, flat, off, seen, 0);
            st_close(&sf);
        }
    }
    free(seen);
    return rc;
}


int bert_init_weights(bert *m, float *flat, const size_t *offsets, uint64_t seed)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", m->ckpt_dir);
    if (!m->random_init && file_exists(path)) return load_checkpoint(m, path, flat, offsets, seed);
    if (!m->random_init)
        m->env->host->note(m->env, "%s not found: random initialisation of %s", path, m->cfg.path);
    for (size_t i = 0; i < m->n_params; i++) init_param(m, i, flat + offsets[i], seed);
    if (m->extra_tensors && *m->extra_tensors) {
        char *seen = calloc(m->n_params, 1);
        if (!seen) return MPX_FAIL(m->env, "out of memory");
        st_file sf;
        int rc = st_open(m->env, m->extra_tensors, &sf);
        if (!rc) { rc = load_file(m, &sf, flat, offsets, seen, 0); st_close(&sf); }
        free(seen);
        return rc;
    }
    return 0;
}

/* ---- save ---- */

static int write_text(mpx_env *env, const char *path, const char *text, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f) return MPX_FAIL(env, "cannot create %s: %s", path, strerror(errno));
    size_t w = fwrite(text, 1, len, f);
    /* with errno's words: mpx run records a full disk as such (record.h) */
    if (fclose(f) != 0 || w != len) return MPX_FAIL(env, "cannot write %s: %s", path, strerror(errno));
    return 0;
}

static int copy_vocab(bert *m, const char *dir)
{
    char src[4096], dst[4096];
    snprintf(src, sizeof src, "%s/vocab.txt", m->ckpt_dir);
    snprintf(dst, sizeof dst, "%s/vocab.txt", dir);
    char *a = realpath(m->ckpt_dir, NULL), *b = realpath(dir, NULL);
    int same = a && b && !strcmp(a, b);
    free(a);
    free(b);
    if (same) return 0; /* saving over the checkpoint it came from: vocab.txt is there */
    FILE *f = fopen(src, "rb");
    if (!f) {
        m->env->host->note(m->env, "no %s to copy into %s", src, dir);
        return 0;
    }
    FILE *g = fopen(dst, "wb");
    int rc = g ? 0 : MPX_FAIL(m->env, "cannot create %s: %s", dst, strerror(errno));
    char buf[65536];
    size_t n;
    while (!rc && (n = fread(buf, 1, sizeof buf, f)) > 0)
        if (fwrite(buf, 1, n, g) != n) rc = MPX_FAIL(m->env, "cannot write %s: %s", dst, strerror(errno));
    if (!rc && ferror(f)) rc = MPX_FAIL(m->env, "cannot read %s", src);
    fclose(f);
    if (g && fclose(g) != 0 && !rc) rc = MPX_FAIL(m->env, "cannot write %s: %s", dst, strerror(errno));
    return rc;
}

/* Hugging Face BertForQuestionAnswering names: `bert.` + name, qa_outputs.* as is. */
int bert_save(bert *m, const char *dir, const float *flat, const size_t *offsets)
{
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return MPX_FAIL(m->env, "cannot create folder %s: %s", dir, strerror(errno));
    st_out *t = calloc(m->n_params, sizeof *t);
    char *names = calloc(m->n_params, 80);
    if (!t || !names) { free(t); free(names); return MPX_FAIL(m->env, "out of memory"); }
    for (size_t i = 0; i < m->n_params; i++) {
        const mpx_param_info *p = &m->params[i];
        int head = p->group == MPX_GROUP_HEAD;
        snprintf(names + i * 80, 80, "%s%s", head ? "" : "bert.", p->name);
        t[i] = (st_out){ names + i * 80, p->ndim, p->shape, flat + offsets[i] };
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    int rc = st_write_f32(m->env, path, t, m->n_params);
    free(t);
    free(names);
    if (rc) return rc;
    snprintf(path, sizeof path, "%s/config.json", dir);
    MPX_TRY(write_text(m->env, path, m->cfg.text, strlen(m->cfg.text)));
    return copy_vocab(m, dir);
}
