/* config.json of a Hugging Face BERT checkpoint -> bert_config. */
#include "bert.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *read_text_file(mpx_env *env, const char *path, int *rc)
{
    FILE *f = fopen(path, "rb");
    if (!f) { *rc = MPX_FAIL(env, "cannot open %s", path); return NULL; }
    char *buf = NULL;
    size_t len = 0, cap = 0, n;
    char chunk[4096];
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (len + n + 1 > cap) {
            cap = (len + n + 1) * 2;
            char *nb = realloc(buf, cap);
            if (!nb) { free(buf); fclose(f); *rc = MPX_FAIL(env, "out of memory reading %s", path); return NULL; }
            buf = nb;
        }
        memcpy(buf + len, chunk, n);
        len += n;
    }
    int err = ferror(f);
    fclose(f);
    if (err || !buf) { free(buf); *rc = MPX_FAIL(env, "cannot read %s (empty or I/O error)", path); return NULL; }
    buf[len] = 0;
    *rc = 0;
    return buf;
}

/* An integer key; `def` < 0 means required. Sizes must be positive. */
static int get_int(mpx_env *env, json_t *root, const char *path, const char *key, int def, int *out)
{
    json_t *v = json_object_get(root, key);
    if (!v) {
        if (def < 0) return MPX_FAIL(env, "%s: missing key \"%s\"", path, key);
        *out = def;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > (1 << 30))
        return MPX_FAIL(env, "%s: \"%s\" must be a positive integer", path, key);
    *out = (int)json_integer_value(v);
    return 0;
}

/* num_hidden_layers may be 0 (embeddings straight into the QA head). */
static int get_layers(mpx_env *env, json_t *root, const char *path, int *out)
{
    json_t *v = json_object_get(root, "num_hidden_layers");
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 1000)
        return MPX_FAIL(env, "%s: \"num_hidden_layers\" must be an integer in [0, 1000]", path);
    *out = (int)json_integer_value(v);
    return 0;
}

/* pad_token_id: absent = 0 (BertConfig's default), null = no padding row. */
static int get_pad(mpx_env *env, json_t *root, const char *path, int vocab, int *out)
{
    json_t *v = json_object_get(root, "pad_token_id");
    *out = v ? -1 : 0;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= vocab)
        return MPX_FAIL(env, "%s: \"pad_token_id\" must be null or an integer in [0, vocab_size)", path);
    *out = (int)json_integer_value(v);
    return 0;
}

static int get_num(mpx_env *env, json_t *root, const char *path, const char *key, double def,
                   double lo, double hi, double *out)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) { *out = def; return 0; }
    if (!json_is_number(v)) return MPX_FAIL(env, "%s: \"%s\" must be a number", path, key);
    *out = json_number_value(v);
    if (*out < lo || *out > hi)
        return MPX_FAIL(env, "%s: \"%s\" = %g is outside [%g, %g]", path, key, *out, lo, hi);
    return 0;
}

static int check_arch(mpx_env *env, json_t *root, const char *path)
{
    json_t *act = json_object_get(root, "hidden_act");
    if (act && (!json_is_string(act) || strcmp(json_string_value(act), "gelu") != 0))
        return MPX_FAIL(env, "%s: hidden_act \"%s\" is not supported (only \"gelu\", the erf form)",
                        path, json_is_string(act) ? json_string_value(act) : "?");
    json_t *pe = json_object_get(root, "position_embedding_type");
    if (pe && (!json_is_string(pe) || strcmp(json_string_value(pe), "absolute") != 0))
        return MPX_FAIL(env, "%s: position_embedding_type must be \"absolute\"", path);
    return 0;
}

static int parse_config(mpx_env *env, json_t *root, const char *path, bert_config *c)
{
    if (!json_is_object(root)) return MPX_FAIL(env, "%s: not a JSON object", path);
    MPX_TRY(check_arch(env, root, path));
    MPX_TRY(get_int(env, root, path, "vocab_size", -1, &c->vocab));
    MPX_TRY(get_int(env, root, path, "hidden_size", -1, &c->hidden));
    MPX_TRY(get_layers(env, root, path, &c->layers));
    MPX_TRY(get_int(env, root, path, "num_attention_heads", -1, &c->heads));
    MPX_TRY(get_int(env, root, path, "intermediate_size", -1, &c->inter));
    MPX_TRY(get_int(env, root, path, "max_position_embeddings", -1, &c->max_pos));
    MPX_TRY(get_int(env, root, path, "type_vocab_size", 2, &c->type_vocab));
    MPX_TRY(get_num(env, root, path, "layer_norm_eps", 1e-12, 0.0, 1.0, &c->ln_eps));
    MPX_TRY(get_num(env, root, path, "hidden_dropout_prob", 0.1, 0.0, 0.99, &c->hidden_dropout));
    MPX_TRY(get_num(env, root, path, "attention_probs_dropout_prob", 0.1, 0.0, 0.99, &c->attn_dropout));
    MPX_TRY(get_num(env, root, path, "initializer_range", 0.02, 0.0, 10.0, &c->init_range));
    MPX_TRY(get_pad(env, root, path, c->vocab, &c->pad_id));
    if (c->hidden % c->heads != 0)
        return MPX_FAIL(env, "%s: hidden_size %d is not a multiple of num_attention_heads %d",
                        path, c->hidden, c->heads);
    return 0;
}

int bert_config_read(mpx_env *env, const char *path, bert_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    int rc;
    char *text = read_text_file(env, path, &rc);
    if (!text) return rc;
    json_error_t jerr;
    json_t *root = json_loads(text, 0, &jerr);
    if (!root) {
        free(text);
        return MPX_FAIL(env, "%s:%d:%d: %s", path, jerr.line, jerr.column, jerr.text);
    }
    rc = parse_config(env, root, path, cfg);
    json_decref(root);
    cfg->path = strdup(path);
    if (rc != 0 || !cfg->path) {
        free(text);
        free(cfg->path);
        cfg->path = NULL;
        return rc != 0 ? rc : MPX_FAIL(env, "out of memory");
    }
    cfg->text = text;
    return 0;
}

void bert_config_free(bert_config *cfg)
{
    free(cfg->text);
    free(cfg->path);
    cfg->text = cfg->path = NULL;
}
