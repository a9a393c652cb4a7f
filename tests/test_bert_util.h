/* Shared by the bert-qa suites: a reader for the PyTorch-made fixture files (safetensors,
 * parsed here independently of the plugin's own reader), and a harness that plays the
 * host around one bert-qa instance on the CPU backend (flat fp32 weights and grads). */
#ifndef TEST_BERT_UTIL_H
#define TEST_BERT_UTIL_H

#include "support/test_host.h"
#include "support/shell.h"

/* ---- fixture files ---- */
typedef struct fx_file fx_file;
fx_file *fx_open(const char *path);               /* aborts the test on failure */
void fx_close(fx_file *f);
/* The tensor's data (F32 or I32 as named) and element count; NULL if absent. */
const float *fx_f32(fx_file *f, const char *name, size_t *n);
const int32_t *fx_i32(fx_file *f, const char *name, size_t *n, int64_t shape[2]);

/* ---- a bert-qa instance ---- */
typedef struct tb_model {
    mpx_env *env;
    const mpx_model_vtable *vt;
    void *m;
    size_t n_params, numel;
    size_t *off;
    float *flat;               /* init_weights output (host fp32) */
    mpx_arg w, g;              /* backend buffers the model is bound to */
    const mpx_ops *ops;
    void *be;
    mpx_precision_desc prec;
} tb_model;

/* Options in the plugin's own group: `extra` is appended to the defaults
 * (hidden_dropout = 0, attention_dropout = 0, random_init = false, extra_tensors = ""),
 * a later setting of the same key wins. Returns 0, or -1 with the error in `err`. */
int tb_create(tb_model *t, const char *checkpoint, const char *extra);
/* The same under a precision descriptor (weights/grads buffers in its dtypes). */
int tb_create_prec(tb_model *t, const char *checkpoint, const char *extra, const mpx_precision_desc *prec);
/* Parameter i's gradient (or a forward output) widened to fp32. */
void tb_to_f32(tb_model *t, mpx_arg a, size_t n, float *out);
/* init_weights with `seed` (flat filled), then weights/grads allocated and bound. */
int tb_init(tb_model *t, uint64_t seed);
int tb_bind(tb_model *t, int max_batch, int max_seq);   /* copies flat into the weights */
void tb_free(tb_model *t);
const char *tb_error(tb_model *t);
int tb_param(tb_model *t, const char *name);          /* index or -1 */
size_t tb_numel(tb_model *t, size_t i);

/* A batch of int32 tensors copied to backend memory. */
typedef struct tb_batch {
    mpx_batch b;
    mpx_itensor t[5];
    void *mem[5];
} tb_batch;
void tb_batch_add(tb_model *t, tb_batch *b, const char *name, const int32_t *data, int ndim, int64_t d0, int64_t d1);
void tb_batch_free(tb_model *t, tb_batch *b);
/* A fixture's input_ids, segment_ids, input_mask (and start/end_positions when `labels`). */
void tb_ref_batch(tb_model *t, fx_file *fx, tb_batch *b, int labels, int training, uint32_t tick);

/* ‖a − b‖ / ‖b‖ */
double rel_err(const float *a, const float *b, size_t n);
/* A fresh folder under /tmp, its name written to buf (64 bytes are enough). */
void tb_tempdir(char *buf, size_t cap);
void tb_cleanup(void);   /* removes them: use as a suite's .fini */
void tb_write(const char *path, const void *data, size_t len);
void tb_copy(const char *src, const char *dst);

#endif
