/* data.task = "toy": a synthetic classification the toy model learns in seconds.
 * Example e has seq_len token ids drawn uniformly from [0, vocab) with Philox
 * (seed = run.seed, site TOY_SITE, counter = e) and label (ids[0] + 2 * ids[1]) % classes.
 * Training uses `examples` of them; evaluation the next 256, never trained on. */
#include <stdlib.h>
#include <string.h>

#include "mpx/numerics.h"
#include "../config/config.h"
#include "tasks.h"

#define TOY_SITE 0x70790000u
#define TOY_SHUFFLE_SITE 0x70790001u
#define TOY_EVAL 256

typedef struct toy_task {
    int64_t seq_len, vocab, classes, examples;
    int32_t *ids, *labels;          /* all examples, host memory */
    size_t *order;                  /* this epoch's shuffled order */
    size_t cursor;
    uint32_t epoch;
    int32_t *dev_ids, *dev_labels;  /* one batch, backend memory */
    mpx_itensor tensors[2];
} toy_task;

static uint32_t draw(uint64_t seed, uint32_t site, uint64_t n, uint32_t tick)
{
    return mpx_philox_draw(seed, site, tick, n);
}

static void make_examples(toy_task *d, uint64_t seed)
{
    size_t total = (size_t)d->examples + TOY_EVAL;
    for (size_t e = 0; e < total; e++) {
        int32_t *x = d->ids + e * (size_t)d->seq_len;
        for (int64_t l = 0; l < d->seq_len; l++)
            x[l] = (int32_t)(draw(seed, TOY_SITE, e * (uint64_t)d->seq_len + (uint64_t)l, 0) % (uint32_t)d->vocab);
        d->labels[e] = (int32_t)((x[0] + 2 * x[d->seq_len > 1]) % d->classes);
    }
}

static void shuffle(toy_task *d, uint64_t seed)
{
    size_t n = (size_t)d->examples;
    for (size_t i = 0; i < n; i++) d->order[i] = i;
    for (size_t i = n; i > 1; i--) { /* Fisher-Yates */
        size_t j = draw(seed, TOY_SHUFFLE_SITE, i, d->epoch) % i;
        size_t t = d->order[i - 1]; d->order[i - 1] = d->order[j]; d->order[j] = t;
    }
    d->cursor = 0;
}

static int upload(mpx_session *s, toy_task *d, const size_t *which, int rows, mpx_batch *out)
{
    int32_t ids[4096], labels[512];
    size_t L = (size_t)d->seq_len;
    for (int r = 0; r < rows; r++) {
        memcpy(ids + (size_t)r * L, d->ids + which[r] * L, L * sizeof *ids);
        labels[r] = d->labels[which[r]];
    }
    if (s->ops->to_device(s->be, d->dev_ids, ids, (size_t)rows * L * 4) ||
        s->ops->to_device(s->be, d->dev_labels, labels, (size_t)rows * 4))
        return -1;
    d->tensors[0] = (mpx_itensor){ "input_ids", d->dev_ids, 2, { rows, d->seq_len } };
    d->tensors[1] = (mpx_itensor){ "labels", d->dev_labels, 1, { rows, 0 } };
    *out = (mpx_batch){ .size = sizeof *out, .tensors = d->tensors, .n_tensors = 2, .tick = s->tick };
    return 0;
}

static int toy_next(mpx_task *t, mpx_session *s, int rows, mpx_batch *out, int64_t *tokens,
                    char *err, size_t errlen)
{
    toy_task *d = t->self;
    size_t which[512];
    if (rows > t->max_batch) { snprintf(err, errlen, "toy: batch of %d over %d", rows, t->max_batch); return -1; }
    for (int r = 0; r < rows; r++) {
        if (d->cursor == (size_t)d->examples) { d->epoch++; shuffle(d, s->seed); }
        which[r] = d->order[d->cursor++];
    }
    if (upload(s, d, which, rows, out)) { snprintf(err, errlen, "toy: cannot copy the batch to the backend"); return -1; }
    out->training = 1;
    *tokens = rows * d->seq_len;
    return 0;
}

static void toy_position(const mpx_task *t, uint64_t pos[2])
{
    const toy_task *d = t->self;
    pos[0] = d->epoch;
    pos[1] = d->cursor;
}

static int toy_seek(mpx_task *t, mpx_session *s, const uint64_t pos[2], char *err, size_t errlen)
{
    toy_task *d = t->self;
    if (pos[0] > UINT32_MAX || pos[1] > (uint64_t)d->examples) {
        snprintf(err, errlen, "toy: data position (epoch %llu, example %llu) outside the %lld examples",
                 (unsigned long long)pos[0], (unsigned long long)pos[1], (long long)d->examples);
        return -1;
    }
    d->epoch = (uint32_t)pos[0];
    shuffle(d, s->seed);
    d->cursor = (size_t)pos[1];
    return 0;
}

static int toy_evaluate(mpx_task *t, mpx_session *s, json_t *metrics, const char *dir,
                        char *err, size_t errlen)
{
    (void)dir;
    toy_task *d = t->self;
    mpx_instance *m = &s->inst[MPX_KIND_MODEL];
    size_t correct = 0;
    double loss_sum = 0;
    float logits[512 * 64];
    for (size_t start = 0; start < TOY_EVAL; start += (size_t)t->max_batch) {
        int rows = (int)(TOY_EVAL - start < (size_t)t->max_batch ? TOY_EVAL - start : (size_t)t->max_batch);
        size_t which[512];
        for (int r = 0; r < rows; r++) which[r] = (size_t)d->examples + start + (size_t)r;
        mpx_batch b;
        mpx_forward_out fo = { .size = sizeof fo };
        if (upload(s, d, which, rows, &b) || m->rec->vt.model.forward(m->self, &b, &fo)) {
            mpx_session_error(s, MPX_KIND_MODEL, err, errlen);
            return -1;
        }
        size_t n = fo.rows * fo.cols;
        float *dev = mpx_session_alloc(s, MPX_ROLE_SCRATCH, n * 4, "toy eval logits");
        if (!dev || n > MPX_COUNT(logits) || s->ops->cast(s->be, fo.outputs[0], mpx_a(dev, MPX_F32), n) ||
            s->ops->to_host(s->be, logits, dev, n * 4)) {
            snprintf(err, errlen, "toy: cannot read the logits back");
            return -1;
        }
        mpx_core_host.release(&s->inst[MPX_KIND_BACKEND].env.pub, dev);
        for (int r = 0; r < rows; r++) {
            const float *row = logits + (size_t)r * fo.cols;
            size_t best = 0;
            for (size_t c = 1; c < fo.cols; c++) if (row[c] > row[best]) best = c;
            correct += (int32_t)best == d->labels[which[r]];
        }
        loss_sum += fo.loss * rows;
    }
    json_object_set_new(metrics, "accuracy", json_real(100.0 * (double)correct / TOY_EVAL));
    json_object_set_new(metrics, "eval_loss", json_real(loss_sum / TOY_EVAL));
    return 0;
}

static json_t *toy_files(mpx_task *t) { (void)t; return json_object(); }

static void toy_destroy(mpx_task *t)
{
    toy_task *d = t->self;
    if (!d) return;
    free(d->ids);
    free(d->labels);
    free(d->order);
    free(d);
    t->self = NULL;
}

int mpx_task_toy_open(mpx_task *t, mpx_session *s, char *err, size_t errlen)
{
    toy_task *d = calloc(1, sizeof *d);
    int64_t batch = 1;
    if (!d) { snprintf(err, errlen, "out of memory"); return -1; }
    if (mpx_config_get_int(s->cfg, "data.toy.seq_len", &d->seq_len) ||
        mpx_config_get_int(s->cfg, "data.toy.vocab", &d->vocab) ||
        mpx_config_get_int(s->cfg, "data.toy.classes", &d->classes) ||
        mpx_config_get_int(s->cfg, "data.toy.examples", &d->examples) ||
        mpx_config_get_int(s->cfg, "train.batch_size", &batch)) {
        free(d);
        snprintf(err, errlen, "data.toy: incomplete configuration");
        return -1;
    }
    if (batch > 512 || batch * d->seq_len > 4096) {
        free(d);
        snprintf(err, errlen, "train.batch_size %lld: the toy task takes at most 512 rows and 4096 tokens a batch",
                 (long long)batch);
        return -1;
    }
    size_t total = (size_t)d->examples + TOY_EVAL;
    d->ids = malloc(total * (size_t)d->seq_len * sizeof *d->ids);
    d->labels = malloc(total * sizeof *d->labels);
    d->order = malloc((size_t)d->examples * sizeof *d->order);
    d->dev_ids = mpx_session_alloc(s, MPX_ROLE_SCRATCH, (size_t)(batch * d->seq_len) * 4 + 4 * 4096, "toy batch ids");
    d->dev_labels = mpx_session_alloc(s, MPX_ROLE_SCRATCH, 4 * 512, "toy batch labels");
    t->self = d;
    t->destroy = toy_destroy;
    if (!d->ids || !d->labels || !d->order || !d->dev_ids || !d->dev_labels) {
        snprintf(err, errlen, "out of memory for the toy data");
        return -1;
    }
    make_examples(d, s->seed);
    shuffle(d, s->seed);
    t->name = "toy";
    /* evaluation runs in batches of up to 64 rows, within the 4096-token batch bound */
    int64_t eval_rows = 4096 / d->seq_len < 64 ? 4096 / d->seq_len : 64;
    t->max_batch = (int)(batch > eval_rows ? batch : eval_rows);
    t->max_seq = (int)d->seq_len;
    t->n_train = (size_t)d->examples;
    t->next = toy_next;
    t->evaluate = toy_evaluate;
    t->position = toy_position;
    t->seek = toy_seek;
    t->data_files = toy_files;
    return 0;
}
