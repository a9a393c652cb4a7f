/* The parameter table (names as in Hugging Face checkpoints, without `bert.`) and the
 * dropout sites. Order: embeddings, then each layer, then the QA head. */
#include "bert.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const layer_names[L_COUNT] = {
    "attention.self.query.weight", "attention.self.query.bias",
    "attention.self.key.weight", "attention.self.key.bias",
    "attention.self.value.weight", "attention.self.value.bias",
    "attention.output.dense.weight", "attention.output.dense.bias",
    "attention.output.LayerNorm.weight", "attention.output.LayerNorm.bias",
    "intermediate.dense.weight", "intermediate.dense.bias",
    "output.dense.weight", "output.dense.bias",
    "output.LayerNorm.weight", "output.LayerNorm.bias",
};

#define NAME_LEN 64

size_t bert_layer_param(int layer, int which) { return P_EMB_COUNT + (size_t)layer * L_COUNT + (size_t)which; }
size_t bert_head_param(const bert *m, int which) { return bert_layer_param(m->cfg.layers, 0) + (size_t)which; }

int bert_find_param(const bert *m, const char *name)
{
    for (size_t i = 0; i < m->n_params; i++)
        if (!strcmp(m->params[i].name, name)) return (int)i;
    return -1;
}

/* A 2-D weight (normal init) or a 1-D bias/LayerNorm vector. */
static void set_param(bert *m, size_t i, char *name, int layer, mpx_group g, int64_t rows, int64_t cols)
{
    mpx_param_info *p = &m->params[i];
    p->name = name;
    p->layer = layer;
    p->group = g;
    p->site = BERT_PARAM_SITE_BASE + (uint32_t)i;
    p->ndim = cols ? 2 : 1;
    p->shape[0] = rows;
    p->shape[1] = cols;
    int is_ln = strstr(name, "LayerNorm.") != NULL;
    int is_bias = strlen(name) > 5 && !strcmp(name + strlen(name) - 5, ".bias");
    /* BingBertSquad: no decay for 'bias', 'LayerNorm.bias', 'LayerNorm.weight' */
    p->no_decay = is_ln || is_bias;
    p->init = is_ln && !is_bias ? MPX_INIT_ONES : (p->ndim == 2 ? MPX_INIT_NORMAL : MPX_INIT_ZEROS);
    p->init_std = p->init == MPX_INIT_NORMAL ? (float)m->cfg.init_range : 0.0f;
}

static void build_embeddings(bert *m, char *names)
{
    const bert_config *c = &m->cfg;
    static const char *const emb[P_EMB_COUNT] = {
        "embeddings.word_embeddings.weight", "embeddings.position_embeddings.weight",
        "embeddings.token_type_embeddings.weight", "embeddings.LayerNorm.weight",
        "embeddings.LayerNorm.bias",
    };
    const int64_t rows[P_EMB_COUNT] = { c->vocab, c->max_pos, c->type_vocab, c->hidden, c->hidden };
    for (int i = 0; i < P_EMB_COUNT; i++) {
        char *n = names + (size_t)i * NAME_LEN;
        snprintf(n, NAME_LEN, "%s", emb[i]);
        set_param(m, (size_t)i, n, -1, i < P_EMB_LN_W ? MPX_GROUP_EMBEDDING : MPX_GROUP_NORM,
                  rows[i], i < P_EMB_LN_W ? c->hidden : 0);
    }
}

static void build_layer(bert *m, char *names, int l)
{
    const int64_t H = m->cfg.hidden, I = m->cfg.inter;
    for (int w = 0; w < L_COUNT; w++) {
        size_t i = bert_layer_param(l, w);
        char *n = names + i * NAME_LEN;
        snprintf(n, NAME_LEN, "encoder.layer.%d.%s", l, layer_names[w]);
        int is_w = (w % 2) == 0;
        mpx_group g = w <= L_AO_B ? MPX_GROUP_ATTENTION
                    : (w == L_LN1_W || w == L_LN1_B || w >= L_LN2_W) ? MPX_GROUP_NORM : MPX_GROUP_FFN;
        int64_t rows = (w == L_FI_W || w == L_FI_B) ? I : H;
        int64_t cols = !is_w || g == MPX_GROUP_NORM ? 0 : (w == L_FO_W ? I : H);
        set_param(m, i, n, l, g, rows, cols);
    }
}

static void build_head(bert *m, char *names)
{
    size_t i = bert_head_param(m, 0);
    snprintf(names + i * NAME_LEN, NAME_LEN, "qa_outputs.weight");
    snprintf(names + (i + 1) * NAME_LEN, NAME_LEN, "qa_outputs.bias");
    set_param(m, i, names + i * NAME_LEN, -1, MPX_GROUP_HEAD, 2, m->cfg.hidden);
    set_param(m, i + 1, names + (i + 1) * NAME_LEN, -1, MPX_GROUP_HEAD, 2, 0);
}

static void build_sites(bert *m, char *names)
{
    for (size_t k = 0; k < m->n_sites; k++) {
        char *n = names + k * NAME_LEN;
        m->sites[k].id = BERT_DROPOUT_SITE_BASE + (uint32_t)k;
        m->sites[k].name = n;
        if (k == 0) { snprintf(n, NAME_LEN, "embeddings.dropout"); continue; }
        static const char *const what[S_PER_LAYER] = {
            "attention.probs_dropout", "attention.output.dropout", "output.dropout",
        };
        snprintf(n, NAME_LEN, "encoder.layer.%d.%s", (int)((k - 1) / S_PER_LAYER), what[(k - 1) % S_PER_LAYER]);
    }
}

int bert_params_build(bert *m)
{
    m->n_params = P_EMB_COUNT + (size_t)m->cfg.layers * L_COUNT + 2;
    m->n_sites = 1 + (size_t)m->cfg.layers * S_PER_LAYER;
    m->params = calloc(m->n_params, sizeof *m->params);
    m->sites = calloc(m->n_sites, sizeof *m->sites);
    m->names = calloc(m->n_params + m->n_sites, NAME_LEN);
    if (!m->params || !m->sites || !m->names) return MPX_FAIL(m->env, "out of memory for the parameter table");
    build_embeddings(m, m->names);
    for (int l = 0; l < m->cfg.layers; l++) build_layer(m, m->names, l);
    build_head(m, m->names);
    build_sites(m, m->names + m->n_params * NAME_LEN);
    return 0;
}

void bert_params_free(bert *m)
{
    free(m->params);
    free(m->sites);
    free(m->names);
    m->params = NULL;
    m->sites = NULL;
    m->names = NULL;
}
