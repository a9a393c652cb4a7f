/* bert-qa checkpoints and parameter table: the loader's accepted variants (no `bert.`,
 * LayerNorm.gamma/beta, BF16/F16 tensors, ignored pooler/cls/position_ids), the seeded
 * QA head, random initialisation, and the errors for truncated, corrupt, mis-shaped,
 * unexpected or missing tensors and configs that disagree with them. */
#include "test_bert_util.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

TestSuite(bert_ckpt, .fini = tb_cleanup);

#define TINY "tests/fixtures/bert/tiny"
#define TINY_MIXED "tests/fixtures/bert/tiny_mixed"

/* A temp checkpoint folder: tiny's config.json (or `config`) and model.safetensors. */
static void make_ckpt(char *dir, const char *config, const char *weights_from)
{
    char path[160];
    tb_tempdir(dir, 64);
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (config) tb_write(path, config, strlen(config));
    else tb_copy(TINY "/config.json", path);
    if (!weights_from) return;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    tb_copy(weights_from, path);
}

/* tiny's config.json with one "key": value replaced. */
static char *tiny_config_with(const char *key, const char *value)
{
    char *cfg = ts_slurp(TINY "/config.json", NULL), *out = malloc(strlen(cfg) + 64);
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    char *p = strstr(cfg, pat);
    cr_assert(p, "tiny config has no %s", key);
    char *end = p + strcspn(p, ",\n}");
    sprintf(out, "%.*s%s%s%s", (int)(p - cfg), cfg, pat, value, end);
    free(cfg);
    return out;
}

/* create + init_weights must fail with an error containing every needle. */
static void expect_init_error(const char *dir, const char *opts, const char *n1, const char *n2)
{
    tb_model t;
    int rc = tb_create(&t, dir, opts);
    if (rc == 0) rc = tb_init(&t, 1);
    cr_assert_neq(rc, 0, "loading %s should fail", dir);
    const char *e = tb_error(&t);
    cr_log_info("error: %s", e);
    cr_expect(strstr(e, n1), "error '%s' should mention '%s'", e, n1);
    if (n2) cr_expect(strstr(e, n2), "error '%s' should mention '%s'", e, n2);
    tb_free(&t);
}

/* ---- the parameter table ---- */

Test(bert_params, table_matches_the_pytorch_model)
{
    tb_model t;
    cr_assert_eq(tb_create(&t, TINY, NULL), 0, "%s", tb_error(&t));
    cr_assert_eq(t.n_params, 5 + 16 * 2 + 2);
    fx_file *fx = fx_open("tests/fixtures/bert/tiny_ref.safetensors");
    uint32_t sites[64];
    size_t n_sites = 0;
    for (size_t i = 0; i < t.n_params; i++) {
        const mpx_param_info *p = t.vt->param(t.m, i);
        char name[160];
        snprintf(name, sizeof name, "grad.%s", p->name);
        size_t n;
        cr_assert(fx_f32(fx, name, &n), "%s is not a BertForQuestionAnswering parameter", p->name);
        cr_expect_eq(tb_numel(&t, i), n, "%s size", p->name);
        int is_ln = strstr(p->name, "LayerNorm") != NULL, is_bias = strstr(p->name, ".bias") != NULL;
        cr_expect_eq(p->no_decay, is_ln || is_bias, "%s no_decay", p->name);
        mpx_group want = !strncmp(p->name, "qa_outputs", 10) ? MPX_GROUP_HEAD
                       : is_ln ? MPX_GROUP_NORM
                       : !strncmp(p->name, "embeddings", 10) ? MPX_GROUP_EMBEDDING
                       : strstr(p->name, "attention") ? MPX_GROUP_ATTENTION : MPX_GROUP_FFN;
        cr_expect_eq(p->group, want, "%s group %s", p->name, mpx_group_name(p->group));
        int layer = -1;
        sscanf(p->name, "encoder.layer.%d.", &layer);
        cr_expect_eq(p->layer, layer, "%s layer", p->name);
        mpx_init init = is_ln && !is_bias ? MPX_INIT_ONES : is_ln || is_bias ? MPX_INIT_ZEROS : MPX_INIT_NORMAL;
        cr_expect_eq(p->init, init, "%s init", p->name);
        if (init == MPX_INIT_NORMAL) cr_expect_float_eq(p->init_std, 0.05f, 1e-7f, "%s init_std", p->name);
        sites[n_sites++] = p->site;
    }
    cr_assert_eq(t.vt->n_sites(t.m), 1 + 3 * 2, "one dropout site on the embeddings, three per layer");
    for (size_t i = 0; i < t.vt->n_sites(t.m); i++) sites[n_sites++] = t.vt->site(t.m, i)->id;
    for (size_t i = 0; i < n_sites; i++)
        for (size_t j = i + 1; j < n_sites; j++) cr_expect_neq(sites[i], sites[j], "site ids %zu and %zu", i, j);
    fx_close(fx);
    tb_free(&t);
}

/* ---- accepted variants ---- */

Test(bert_ckpt, bf16_f16_gamma_beta_no_prefix_and_ignored_tensors_load_like_the_f32_file)
{
    tb_model a, b;
    cr_assert_eq(tb_create(&a, TINY, NULL), 0, "%s", tb_error(&a));
    cr_assert_eq(tb_init(&a, 5), 0, "%s", tb_error(&a));
    cr_assert_eq(tb_create(&b, TINY_MIXED, NULL), 0, "%s", tb_error(&b));
    cr_assert_eq(tb_init(&b, 5), 0, "%s", tb_error(&b));
    int hw = tb_param(&a, "qa_outputs.weight");
    for (int i = 0; i < hw; i++)
        cr_expect_arr_eq(a.flat + a.off[i], b.flat + b.off[i], tb_numel(&a, (size_t)i) * 4, "%s",
                         a.vt->param(a.m, (size_t)i)->name);
    /* tiny_mixed has no QA head: seeded normal(initializer_range) weight, zero bias */
    double s2 = 0;
    for (int k = 0; k < 128; k++) s2 += (double)b.flat[b.off[hw] + k] * b.flat[b.off[hw] + k];
    double sd = sqrt(s2 / 128);
    cr_expect(sd > 0.05 * 0.75 && sd < 0.05 * 1.25, "head weight std %g, initializer_range 0.05", sd);
    cr_expect(b.flat[b.off[hw + 1]] == 0.0f && b.flat[b.off[hw + 1] + 1] == 0.0f, "head bias zero");
    tb_model c;
    cr_assert_eq(tb_create(&c, TINY_MIXED, NULL), 0, "%s", tb_error(&c));
    cr_assert_eq(tb_init(&c, 5), 0, "%s", tb_error(&c));
    cr_expect_arr_eq(b.flat + b.off[hw], c.flat + c.off[hw], 128 * 4, "same seed, same head");
    cr_assert_eq(tb_init(&c, 6), 0, "%s", tb_error(&c));
    cr_expect(memcmp(b.flat + b.off[hw], c.flat + c.off[hw], 128 * 4) != 0, "another seed, another head");
    tb_free(&a);
    tb_free(&b);
    tb_free(&c);
}

/* A safetensors file written here byte by byte: known F16 / BF16 bit patterns. */
static void write_st(const char *path, const char *header, const void *data, size_t len)
{
    size_t hl = strlen(header);
    unsigned char *buf = malloc(8 + hl + len);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, header, hl);
    memcpy(buf + 8 + hl, data, len);
    tb_write(path, buf, 8 + hl + len);
    free(buf);
}

Test(bert_ckpt, extra_tensors_in_f16_and_bf16_replace_the_head)
{
    char dir[64], path[128], opts[256];
    make_ckpt(dir, NULL, NULL);
    snprintf(path, sizeof path, "%s/head.safetensors", dir);
    /* qa_outputs.bias F16 [1.0, -2.0]; qa_outputs.weight BF16 [2, 64] all 0.15625 (0x3E20) */
    uint16_t data[2 + 128];
    data[0] = 0x3C00;
    data[1] = 0xC000;
    for (int i = 0; i < 128; i++) data[2 + i] = 0x3E20;
    write_st(path, "{\"qa_outputs.bias\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]},"
                   "\"qa_outputs.weight\":{\"dtype\":\"BF16\",\"shape\":[2,64],\"data_offsets\":[4,260]}}",
             data, sizeof data);
    snprintf(opts, sizeof opts, "extra_tensors = \"%s\";", path);
    tb_model t; /* no model.safetensors: random weights, then the extra tensors */
    cr_assert_eq(tb_create(&t, dir, opts), 0, "%s", tb_error(&t));
    cr_assert_eq(tb_init(&t, 1), 0, "%s", tb_error(&t));
    int hw = tb_param(&t, "qa_outputs.weight");
    cr_expect_eq(t.flat[t.off[hw + 1]], 1.0f);
    cr_expect_eq(t.flat[t.off[hw + 1] + 1], -2.0f);
    for (int i = 0; i < 128; i++) cr_expect_eq(t.flat[t.off[hw] + i], 0.15625f);
    /* the record says the run starts from 16-bit weights (make device-study's bf16 MiniLM) */
    cr_expect(strstr(th_last_note(), "head.safetensors: 2 of its 2 parameter tensors are stored in 16 bits (1 bf16, "
                                     "1 fp16), widened exactly to fp32: the run starts from 16-bit-rounded weights"),
              "note: %s", th_last_note());
    tb_free(&t);
}

Test(bert_ckpt, config_only_folder_and_random_init_give_seeded_bert_init)
{
    char dir[64];
    make_ckpt(dir, NULL, NULL);
    tb_model a, b;
    cr_assert_eq(tb_create(&a, dir, NULL), 0, "%s", tb_error(&a));
    cr_assert_eq(tb_init(&a, 11), 0, "%s", tb_error(&a));
    cr_assert_eq(tb_create(&b, TINY, "random_init = true;"), 0, "%s", tb_error(&b));
    cr_assert_eq(tb_init(&b, 11), 0, "%s", tb_error(&b));
    cr_expect_arr_eq(a.flat, b.flat, a.numel * 4, "random_init ignores the weights file; same seed, same weights");
    for (size_t i = 0; i < a.n_params; i++) {
        const mpx_param_info *p = a.vt->param(a.m, i);
        size_t n = tb_numel(&a, i);
        const float *x = a.flat + a.off[i];
        if (p->init == MPX_INIT_NORMAL) {
            double s = 0, s2 = 0;
            for (size_t k = 0; k < n; k++) { s += x[k]; s2 += (double)x[k] * x[k]; }
            double mean = s / n, sd = sqrt(s2 / n - mean * mean), se = 0.05 / sqrt((double)n);
            cr_expect(fabs(mean) < 5 * se && fabs(sd / 0.05 - 1) < 5 * sqrt(0.5 / n) + 1e-3,
                      "%s: mean %g sd %g (n %zu)", p->name, mean, sd, n);
        } else {
            float v = p->init == MPX_INIT_ONES ? 1.0f : 0.0f;
            for (size_t k = 0; k < n; k++) cr_assert_eq(x[k], v, "%s[%zu]", p->name, k);
        }
    }
    cr_assert_eq(tb_init(&b, 12), 0, "%s", tb_error(&b));
    cr_expect(memcmp(a.flat, b.flat, a.numel * 4) != 0, "another seed, other weights");
    tb_free(&a);
    tb_free(&b);
}

/* ---- errors ---- */

Test(bert_ckpt, truncated_or_corrupt_safetensors_is_an_error_naming_the_problem)
{
    char dir[64], path[128];
    make_ckpt(dir, NULL, TINY "/model.safetensors");
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    size_t n;
    char *buf = ts_slurp(TINY "/model.safetensors", &n);
    tb_write(path, buf, n - 1000);
    expect_init_error(dir, NULL, "truncated", "model.safetensors");
    tb_write(path, buf, 5);
    expect_init_error(dir, NULL, "truncated", NULL);
    tb_write(path, buf, 200);
    expect_init_error(dir, NULL, "truncated", NULL);
    buf[8] = '#';
    tb_write(path, buf, n);
    expect_init_error(dir, NULL, "corrupt header", "column");
    free(buf);
}

Test(bert_ckpt, config_that_disagrees_with_the_tensors_is_an_error)
{
    char dir[64];
    char *cfg = tiny_config_with("hidden_size", "32");
    make_ckpt(dir, cfg, TINY "/model.safetensors");
    expect_init_error(dir, NULL, "has shape", "hidden_size=32");
    free(cfg);
    cfg = tiny_config_with("num_hidden_layers", "1");
    make_ckpt(dir, cfg, TINY "/model.safetensors");
    expect_init_error(dir, NULL, "unexpected tensor 'bert.encoder.layer.1.", "num_hidden_layers=1");
    free(cfg);
    cfg = tiny_config_with("num_hidden_layers", "3");
    make_ckpt(dir, cfg, TINY "/model.safetensors");
    expect_init_error(dir, NULL, "missing tensor 'encoder.layer.2.", NULL);
    free(cfg);
    cfg = tiny_config_with("vocab_size", "100");
    make_ckpt(dir, cfg, TINY "/model.safetensors");
    expect_init_error(dir, NULL, "embeddings.word_embeddings.weight", "[128, 64]");
    free(cfg);
    cfg = tiny_config_with("num_attention_heads", "5");
    make_ckpt(dir, cfg, NULL);
    expect_init_error(dir, NULL, "not a multiple of num_attention_heads", NULL);
    free(cfg);
    cfg = tiny_config_with("hidden_act", "\"relu\"");
    make_ckpt(dir, cfg, NULL);
    expect_init_error(dir, NULL, "hidden_act", NULL);
    free(cfg);
}

Test(bert_ckpt, unexpected_misshaped_or_wrongly_typed_tensors_are_errors)
{
    char dir[64], path[128], opts[256];
    make_ckpt(dir, NULL, TINY "/model.safetensors");
    snprintf(path, sizeof path, "%s/extra.safetensors", dir);
    snprintf(opts, sizeof opts, "extra_tensors = \"%s\";", path);
    float zeros[3 * 64] = { 0 };
    write_st(path, "{\"foo.weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", zeros, 8);
    expect_init_error(dir, opts, "unexpected tensor 'foo.weight'", "extra.safetensors");
    write_st(path, "{\"qa_outputs.weight\":{\"dtype\":\"F32\",\"shape\":[3,64],\"data_offsets\":[0,768]}}", zeros, 768);
    expect_init_error(dir, opts, "qa_outputs.weight", "[3, 64]");
    write_st(path, "{\"qa_outputs.bias\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]}}", zeros, 16);
    expect_init_error(dir, opts, "qa_outputs.bias", "I64");
    write_st(path, "{\"qa_outputs.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,12]}}", zeros, 12);
    expect_init_error(dir, opts, "qa_outputs.bias", "data bytes");
}

Test(bert_ckpt, missing_checkpoint_or_config_is_an_error)
{
    tb_model t;
    cr_assert_neq(tb_create(&t, "tests/fixtures/bert/no-such-folder", NULL), 0);
    cr_expect(strstr(tb_error(&t), "no-such-folder/config.json"), "%s", tb_error(&t));
    tb_free(&t);
    char dir[64], path[128];
    make_ckpt(dir, "{\"hidden_size\": 64,}", NULL);
    cr_assert_neq(tb_create(&t, dir, NULL), 0);
    snprintf(path, sizeof path, "%s/config.json:1:", dir);
    cr_expect(strstr(tb_error(&t), path), "JSON error with line and column: %s", tb_error(&t));
    tb_free(&t);
}

Test(bert_inputs, out_of_range_ids_and_oversized_batches_are_errors)
{
    tb_model t;
    cr_assert_eq(tb_create(&t, TINY, NULL), 0, "%s", tb_error(&t));
    cr_assert_eq(tb_init(&t, 1), 0, "%s", tb_error(&t));
    cr_assert_neq(tb_bind(&t, 2, 65), 0, "max_seq beyond max_position_embeddings");
    cr_expect(strstr(tb_error(&t), "max_position_embeddings"), "%s", tb_error(&t));
    cr_assert_eq(tb_bind(&t, 2, 16), 0, "%s", tb_error(&t));
    int32_t ids[32], zero[32] = { 0 }, one[32];
    for (int i = 0; i < 32; i++) { ids[i] = i; one[i] = 1; }
    ids[5] = 128;
    tb_batch b = { 0 };
    tb_batch_add(&t, &b, "input_ids", ids, 2, 2, 16);
    tb_batch_add(&t, &b, "segment_ids", zero, 2, 2, 16);
    tb_batch_add(&t, &b, "input_mask", one, 2, 2, 16);
    mpx_forward_out o = { .size = sizeof o };
    cr_assert_neq(t.vt->forward(t.m, &b.b, &o), 0);
    cr_expect(strstr(tb_error(&t), "'input_ids'[5] = 128"), "%s", tb_error(&t));
    cr_assert_neq(t.vt->backward(t.m, &b.b, 1.0f, 0), 0, "backward without a forward");
    tb_batch_free(&t, &b);
    tb_batch_add(&t, &b, "input_ids", zero, 2, 1, 32);
    tb_batch_add(&t, &b, "segment_ids", zero, 2, 1, 32);
    tb_batch_add(&t, &b, "input_mask", one, 2, 1, 32);
    cr_assert_neq(t.vt->forward(t.m, &b.b, &o), 0);
    cr_expect(strstr(tb_error(&t), "bind allowed"), "%s", tb_error(&t));
    tb_batch_free(&t, &b);
    tb_free(&t);
}
