/* bert-qa: the descriptor, options and vtable of the BERT question-answering model.
 *
 * model.checkpoint (core key) names a Hugging Face folder. config.json is required;
 * model.safetensors is loaded when present, otherwise (or with random_init) every
 * parameter is initialised from the seed as BERT does (normal(initializer_range) for
 * matrices and embeddings, zeros for biases, ones for LayerNorm weights), so a folder
 * holding only a config.json describes a random model of any size. */
#include "bert.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const mpx_option bert_options[] = {
    { "hidden_dropout", MPX_OPT_FLOAT, "-1.0", -1.0, 0.99, NULL,
      "dropout on embeddings and hidden states; -1 = hidden_dropout_prob of config.json", 0 },
    { "attention_dropout", MPX_OPT_FLOAT, "-1.0", -1.0, 0.99, NULL,
      "dropout on attention probabilities; -1 = attention_probs_dropout_prob of config.json", 0 },
    { "random_init", MPX_OPT_BOOL, "false", MPX_NO_RANGE, NULL,
      "ignore model.safetensors: seeded random weights of config.json's sizes", 0 },
    { "extra_tensors", MPX_OPT_STRING, "\"\"", MPX_NO_RANGE, NULL,
      "a safetensors file loaded after the checkpoint, replacing the tensors it holds (e.g. a QA head)", 0 },
    { "freeze_pad_row", MPX_OPT_BOOL, "false", MPX_NO_RANGE, NULL,
      "no gradient for the word embedding of pad_token_id (Hugging Face's padding_idx); BingBertSquad's "
      "NVIDIA model has none, so the default trains it", 0 },
};

static int read_dropout(bert *m, const char *key, double from_config, float *out)
{
    double v;
    MPX_TRY(m->env->host->opt_float(m->env, key, &v));
    if (v < 0.0) v = from_config;
    if (!(v >= 0.0 && v < 1.0)) return MPX_FAIL(m->env, "%s = %g must be in [0, 1) or -1", key, v);
    *out = (float)v;
    return 0;
}

static char *dup_or_fail(bert *m, const char *s, int *rc)
{
    char *d = strdup(s);
    if (!d) *rc = MPX_FAIL(m->env, "out of memory");
    return d;
}

static int read_options(bert *m)
{
    mpx_env *env = m->env;
    const char *ckpt, *extra;
    if (env->host->opt_string(env, "model.checkpoint", &ckpt) != 0 || !*ckpt)
        return MPX_FAIL(env, "model.checkpoint is not set: a folder with config.json (and model.safetensors)");
    int rc = 0;
    m->ckpt_dir = dup_or_fail(m, ckpt, &rc);
    MPX_TRY(rc);
    MPX_TRY(env->host->opt_bool(env, "random_init", &m->random_init));
    MPX_TRY(env->host->opt_bool(env, "freeze_pad_row", &m->freeze_pad_row));
    MPX_TRY(env->host->opt_string(env, "extra_tensors", &extra));
    m->extra_tensors = dup_or_fail(m, extra, &rc);
    MPX_TRY(rc);
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", m->ckpt_dir);
    MPX_TRY(bert_config_read(env, path, &m->cfg));
    MPX_TRY(read_dropout(m, "hidden_dropout", m->cfg.hidden_dropout, &m->p_hidden));
    return read_dropout(m, "attention_dropout", m->cfg.attn_dropout, &m->p_attn);
}

static void bert_destroy(void *self)
{
    bert *m = self;
    if (!m) return;
    bert_unbind(m);
    bert_params_free(m);
    bert_config_free(&m->cfg);
    free(m->ckpt_dir);
    free(m->extra_tensors);
    free(m);
}

static int bert_create(mpx_env *env, void **self)
{
    bert *m = calloc(1, sizeof *m);
    if (!m) return MPX_FAIL(env, "out of memory");
    m->env = env;
    int rc = read_options(m);
    if (!rc) rc = bert_params_build(m);
    if (!rc) rc = bert_check_checkpoint(m);
    if (rc) { bert_destroy(m); return rc; }
    *self = m;
    return 0;
}

static size_t bert_n_params(void *self) { return ((bert *)self)->n_params; }
static size_t bert_n_sites(void *self) { return ((bert *)self)->n_sites; }

static const mpx_param_info *bert_param(void *self, size_t i)
{
    bert *m = self;
    return i < m->n_params ? &m->params[i] : NULL;
}

static const mpx_site *bert_site_info(void *self, size_t i)
{
    bert *m = self;
    return i < m->n_sites ? &m->sites[i] : NULL;
}

static int vt_init_weights(void *self, float *flat, const size_t *offsets, uint64_t seed)
{
    return bert_init_weights(self, flat, offsets, seed);
}

static int vt_bind(void *self, const mpx_model_bind *b, int max_batch, int max_seq)
{
    return bert_bind(self, b, max_batch, max_seq);
}

static int vt_forward(void *self, const mpx_batch *batch, mpx_forward_out *out)
{
    return bert_forward(self, batch, out);
}

static int vt_backward(void *self, const mpx_batch *batch, float loss_scale, int accumulate)
{
    return bert_backward(self, batch, loss_scale, accumulate);
}

static int vt_save(void *self, const char *dir, const float *flat, const size_t *offsets)
{
    return bert_save(self, dir, flat, offsets);
}

static int vt_set_grads(void *self, mpx_arg grads)
{
    bert *m = self;
    m->G = grads;
    m->dt_grad = grads.t;
    return MPX_OK;
}

static int vt_set_weight_gather(void *self, const mpx_weight_gather *g) { return bert_set_weight_gather(self, g); }

/* input_ids index the word embeddings, segment_ids the token-type ones */
static int64_t vt_input_limit(void *self, const char *name)
{
    const bert *m = self;
    if (!strcmp(name, "input_ids")) return m->cfg.vocab;
    if (!strcmp(name, "segment_ids")) return m->cfg.type_vocab;
    return 0;
}

static const mpx_model_vtable bert_vtable = {
    .size = sizeof(mpx_model_vtable),
    .create = bert_create, .destroy = bert_destroy,
    .n_params = bert_n_params, .param = bert_param,
    .n_sites = bert_n_sites, .site = bert_site_info,
    .init_weights = vt_init_weights, .bind = vt_bind,
    .forward = vt_forward, .backward = vt_backward, .save = vt_save,
    .set_grads = vt_set_grads, .set_weight_gather = vt_set_weight_gather,
    .input_limit = vt_input_limit,
};

static const mpx_plugin_desc bert_desc = {
    MPX_DESC_HEADER,
    .kind = MPX_KIND_MODEL,
    .name = "bert-qa",
    .version = "1.0.0",
    .summary = "BERT for extractive question answering (Hugging Face checkpoints, BingBertSquad semantics)",
    .options = bert_options, .n_options = MPX_COUNT(bert_options),
    .incompat = NULL, .n_incompat = 0, .check = NULL,
    .vtable = &bert_vtable,
};

MPX_PLUGIN_ENTRY { (void)host; return &bert_desc; }
