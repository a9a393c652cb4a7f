/* data.task = "squad": SQuAD v1.1 feature windows as batches for a QA model
 * (input_ids, segment_ids, input_mask, start_positions, end_positions: int32
 * [batch, seq]), and start/end logits back to EM/F1 through the official metric. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../datasets/bert_tokenizer.h"
#include "../../datasets/sha256.h"
#include "../../datasets/squad_features.h"
#include "../../datasets/squad_metric.h"
#include "../../datasets/squad_postprocess.h"
#include "../../datasets/squad_reader.h"
#include "mpx/numerics.h"
#include "length_group.h"
#include "../record/notes.h"
#include "../record/provenance.h"
#include "../config/config.h"
#include "tasks.h"

#define SQUAD_SHUFFLE_SITE 0x53510001u

typedef struct squad_task {
    const char *train_path, *dev_path;
    char vocab_path[4096];
    mpx_squad_dataset train_all, train, dev_all, dev;
    int has_train_all, has_train, has_dev_all, has_dev;
    mpx_bert_tokenizer *tok;
    mpx_squad_features *train_fs, *dev_fs;
    int dynamic_padding, group_by_length;
    int32_t max_seq, train_batch;
    int64_t eval_batch, n_best, max_answer;
    int32_t *order;            /* this epoch's window order */
    int32_t cursor;
    uint32_t epoch;
    int32_t *host[5];          /* one batch on the host: ids, segments, mask, start, end */
    int32_t *dev_buf[5];       /* the same in backend memory */
    mpx_itensor tensors[5];
} squad_task;

static const char *const tensor_names[5] = { "input_ids", "segment_ids", "input_mask",
                                             "start_positions", "end_positions" };

/* A slice of `n` questions (0 = all), first or seeded, per data.squad.sample. */
static int load_slice(const char *path, int64_t n, const char *how, uint64_t seed,
                      mpx_squad_dataset *all, int *has_all, mpx_squad_dataset *out, int *has_out,
                      char *err, size_t errlen)
{
    if (mpx_squad_load(path, all, err, errlen)) return -1;
    *has_all = 1;
    if (n <= 0 || n >= all->n_questions) {
        *out = *all;
        *has_all = 0; /* `out` owns it now */
        *has_out = 1;
        return 0;
    }
    int rc = strcmp(how, "seeded") == 0 ? mpx_squad_slice_sample(all, (int32_t)n, seed, out, err, errlen)
                                        : mpx_squad_slice_first(all, (int32_t)n, out, err, errlen);
    if (rc == 0) *has_out = 1;
    return rc;
}

/* This epoch's window order: shuffled, then (data.squad.group_by_length) grouped by
 * length as transformers' group_by_length. -1 when out of memory. */
static int shuffle(squad_task *d, uint64_t seed)
{
    int32_t n = d->train_fs->n_features;
    for (int32_t i = 0; i < n; i++) d->order[i] = i;
    for (int32_t i = n; i > 1; i--) { /* Fisher-Yates on the Philox stream of this epoch */
        int32_t j = (int32_t)(mpx_philox_draw(seed, SQUAD_SHUFFLE_SITE, d->epoch, (uint64_t)i) % (uint32_t)i);
        int32_t t = d->order[i - 1]; d->order[i - 1] = d->order[j]; d->order[j] = t;
    }
    d->cursor = 0;
    if (!d->group_by_length) return 0;
    int32_t *len = malloc((size_t)n * sizeof *len);
    int rc = len ? 0 : -1;
    for (int32_t i = 0; !rc && i < n; i++) len[i] = mpx_squad_feature_length(d->train_fs, i);
    if (!rc) rc = mpx_group_by_length(d->order, n, len, d->train_batch);
    free(len);
    return rc;
}

/* Fill the batch of windows `which` (labels when `labels`), upload, describe. */
static int make_batch(mpx_session *s, squad_task *d, const mpx_squad_features *fs, const int32_t *which,
                      int rows, int labels, mpx_batch *out, int64_t *tokens, int32_t *seq_out)
{
    int32_t seq = d->dynamic_padding ? mpx_squad_batch_max_length(fs, which, rows) : d->max_seq;
    int64_t tok = 0;
    for (int r = 0; r < rows; r++) {
        size_t o = (size_t)r * (size_t)seq;
        tok += mpx_squad_feature_fill(fs, which[r], seq, d->host[0] + o, d->host[1] + o, d->host[2] + o);
        if (labels) {
            d->host[3][r] = fs->features[which[r]].start_position;
            d->host[4][r] = fs->features[which[r]].end_position;
        }
    }
    int n_t = labels ? 5 : 3;
    for (int i = 0; i < n_t; i++) {
        size_t bytes = (size_t)rows * (i < 3 ? (size_t)seq : 1) * 4;
        if (s->ops->to_device(s->be, d->dev_buf[i], d->host[i], bytes)) return -1;
        d->tensors[i] = (mpx_itensor){ tensor_names[i], d->dev_buf[i], i < 3 ? 2 : 1,
                                       { rows, i < 3 ? seq : 0 } };
    }
    *out = (mpx_batch){ .size = sizeof *out, .tensors = d->tensors, .n_tensors = n_t,
                        .training = labels, .tick = s->tick, .host = (const int32_t *const *)d->host };
    if (tokens) *tokens = tok;
    if (seq_out) *seq_out = seq;
    return 0;
}

static int squad_next(mpx_task *t, mpx_session *s, int rows, mpx_batch *out, int64_t *tokens,
                      char *err, size_t errlen)
{
    squad_task *d = t->self;
    int32_t which[4096];
    if (rows > t->max_batch) { snprintf(err, errlen, "squad: batch of %d over %d", rows, t->max_batch); return -1; }
    for (int r = 0; r < rows; r++) {
        if (d->cursor == d->train_fs->n_features) {
            d->epoch++;
            if (shuffle(d, s->seed)) { snprintf(err, errlen, "squad: out of memory ordering the windows"); return -1; }
        }
        which[r] = d->order[d->cursor++];
    }
    if (make_batch(s, d, d->train_fs, which, rows, 1, out, tokens, NULL)) {
        snprintf(err, errlen, "squad: cannot copy the batch to the backend");
        return -1;
    }
    return 0;
}

static void squad_position(const mpx_task *t, uint64_t pos[2])
{
    const squad_task *d = t->self;
    pos[0] = d->epoch;
    pos[1] = (uint64_t)d->cursor;
}

static int squad_seek(mpx_task *t, mpx_session *s, const uint64_t pos[2], char *err, size_t errlen)
{
    squad_task *d = t->self;
    if (!d->train_fs || pos[0] > UINT32_MAX || pos[1] > (uint64_t)d->train_fs->n_features) {
        snprintf(err, errlen, "squad: data position (epoch %llu, window %llu) outside the training windows",
                 (unsigned long long)pos[0], (unsigned long long)pos[1]);
        return -1;
    }
    d->epoch = (uint32_t)pos[0];
    if (shuffle(d, s->seed)) { snprintf(err, errlen, "squad: out of memory ordering the windows"); return -1; }
    d->cursor = (int32_t)pos[1];
    return 0;
}

/* Logits of one eval batch into rows of the full [n_features][max_seq] arrays;
 * *nonfinite counts NaN and inf among them (the padding past seq is -inf on purpose). */
static int read_logits(mpx_session *s, const mpx_forward_out *fo, int32_t first, int rows, int32_t seq,
                       int32_t row_len, float *start, float *end, float *tmp, void *dev32, size_t *nonfinite)
{
    for (int k = 0; k < 2; k++) {
        size_t n = fo->rows * fo->cols;
        if (s->ops->cast(s->be, fo->outputs[k], mpx_a(dev32, MPX_F32), n) ||
            s->ops->to_host(s->be, tmp, dev32, n * 4))
            return -1;
        float *dst = k == 0 ? start : end;
        for (int r = 0; r < rows; r++)
            for (int32_t c = 0; c < row_len; c++) {
                float v = c < seq ? tmp[(size_t)r * fo->cols + (size_t)c] : -INFINITY;
                *nonfinite += c < seq && !isfinite(v);
                dst[(size_t)(first + r) * (size_t)row_len + (size_t)c] = v;
            }
    }
    return 0;
}

static int squad_evaluate(mpx_task *t, mpx_session *s, json_t *metrics, const char *dir,
                          char *err, size_t errlen)
{
    squad_task *d = t->self;
    const mpx_squad_features *fs = d->dev_fs;
    mpx_instance *m = &s->inst[MPX_KIND_MODEL];
    size_t n_rows = (size_t)fs->n_features, row_len = (size_t)d->max_seq;
    float *start = malloc(n_rows * row_len * 4), *end = malloc(n_rows * row_len * 4);
    float *tmp = malloc((size_t)t->max_batch * row_len * 4);
    void *dev32 = mpx_session_alloc(s, MPX_ROLE_SCRATCH, (size_t)t->max_batch * row_len * 4, "eval logits");
    int rc = -1;
    size_t nonfinite = 0;
    mpx_squad_predictions *pred = NULL;
    double *q_em = NULL, *q_f1 = NULL;
    if (!start || !end || !tmp || !dev32) { snprintf(err, errlen, "out of memory for the eval logits"); goto out; }
    for (int32_t first = 0; first < fs->n_features; first += (int32_t)d->eval_batch) {
        int rows = (int)(fs->n_features - first < d->eval_batch ? fs->n_features - first : d->eval_batch);
        int32_t which[4096], seq;
        for (int r = 0; r < rows; r++) which[r] = first + r;
        mpx_batch b;
        mpx_forward_out fo = { .size = sizeof fo };
        if (make_batch(s, d, fs, which, rows, 0, &b, NULL, &seq)) {
            snprintf(err, errlen, "squad: cannot copy an eval batch to the backend");
            goto out;
        }
        if (m->rec->vt.model.forward(m->self, &b, &fo)) { mpx_session_error(s, MPX_KIND_MODEL, err, errlen); goto out; }
        if (fo.n_outputs < 2 || fo.rows != (size_t)rows || fo.cols != (size_t)seq) {
            snprintf(err, errlen, "%s: forward gave %d outputs of %zu x %zu, expected start/end logits of %d x %d",
                     m->env.label, fo.n_outputs, fo.rows, fo.cols, rows, seq);
            goto out;
        }
        if (read_logits(s, &fo, first, rows, seq, (int32_t)row_len, start, end, tmp, dev32, &nonfinite)) {
            snprintf(err, errlen, "squad: cannot read the logits back");
            goto out;
        }
    }
    if (nonfinite) {
        json_t *bad = json_object_get(metrics, "first_nonfinite_loss_step");
        char when[160];
        if (bad) snprintf(when, sizeof when, "the training loss first went non-finite at step %lld",
                          (long long)json_integer_value(bad));
        else if (!json_array_size(json_object_get(metrics, "losses")))   /* mpx eval, train.epochs = 0 */
            snprintf(when, sizeof when, "no training step ran: the weights as loaded give them");
        else snprintf(when, sizeof when, "the training loss stayed finite");
        snprintf(err, errlen, "evaluation: %zu start/end logits are not finite (NaN or inf): the model diverged; %s",
                 nonfinite, when);
        goto out;
    }
    mpx_squad_postprocess_config pc = { (int32_t)d->n_best, (int32_t)d->max_answer };
    if (mpx_squad_postprocess(fs, start, end, (int32_t)row_len, &pc, &pred, err, errlen)) goto out;
    mpx_squad_scores sc;
    size_t nq = d->dev.n_questions > 0 ? (size_t)d->dev.n_questions : 1;
    if (!(q_em = malloc(nq * sizeof *q_em)) || !(q_f1 = malloc(nq * sizeof *q_f1))) {
        snprintf(err, errlen, "out of memory for the per-question scores");
        goto out;
    }
    if (mpx_squad_evaluate_each(&d->dev, (const char *const *)pred->text, &sc, q_em, q_f1, err, errlen)) goto out;
    json_object_set_new(metrics, "exact_match", json_real(sc.exact_match));
    json_object_set_new(metrics, "f1", json_real(sc.f1));
    json_object_set_new(metrics, "eval_questions", json_integer(sc.n_questions));
    json_object_set_new(metrics, "eval_features", json_integer(fs->n_features));
    if (dir) { /* written beside, then renamed: never half a file */
        char t1[4200], t2[4200], p1[4200], p2[4200];
        snprintf(t1, sizeof t1, "%s/predictions.json.tmp", dir);
        snprintf(t2, sizeof t2, "%s/nbest_predictions.json.tmp", dir);
        snprintf(p1, sizeof p1, "%s/predictions.json", dir);
        snprintf(p2, sizeof p2, "%s/nbest_predictions.json", dir);
        if (mpx_squad_predictions_write(pred, &d->dev, t1, t2, err, errlen)) goto out;
        snprintf(p1, sizeof p1, "%s/question_scores.csv", dir);
        if (mpx_squad_write_question_scores(p1, &d->dev, q_em, q_f1, 1, err, errlen)) goto out;
        snprintf(p1, sizeof p1, "%s/predictions.json", dir);
        if (rename(t1, p1) || rename(t2, p2)) {
            snprintf(err, errlen, "cannot rename the predictions into %.2000s", dir);
            goto out;
        }
    }
    rc = 0;
out:
    if (pred) mpx_squad_predictions_free(pred);
    free(q_em);
    free(q_f1);
    if (dev32) mpx_core_host.release(&s->inst[MPX_KIND_BACKEND].env.pub, dev32);
    free(start);
    free(end);
    free(tmp);
    return rc;
}

static json_t *squad_files(mpx_task *t)
{
    squad_task *d = t->self;
    json_t *o = json_object();
    mpx_provenance_add_file(o, d->train_path);
    mpx_provenance_add_file(o, d->dev_path);
    mpx_provenance_add_file(o, d->vocab_path);
    return o;
}

/* What else the features leave out or cut (run_squad.py does the same, silently), for
 * the record and the note: answers past answers[0] (training labels come from the first),
 * queries cut to max_query_length, evaluation questions with no window (scored 0). */
static void report_cut(json_t *o, const mpx_squad_features *fs, int training, char *text, size_t len)
{
    int32_t q_max = fs->cfg.max_query_length;
    if (training && fs->n_extra_answers) {
        json_object_set_new(o, "extra_answers", json_integer(fs->n_extra_answers));
        snprintf(text + strlen(text), len - strlen(text), "; %d extra answers ignored (training reads answers[0] only)",
                 fs->n_extra_answers);
    }
    if (fs->n_truncated_queries) {
        json_object_set_new(o, "truncated_queries", json_integer(fs->n_truncated_queries));
        snprintf(text + strlen(text), len - strlen(text), "; %d questions cut to %d query sub-tokens "
                 "(data.squad.max_query_length)", fs->n_truncated_queries, q_max);
    }
    if (!training && fs->n_windowless) {
        json_object_set_new(o, "questions_without_windows", json_integer(fs->n_windowless));
        snprintf(text + strlen(text), len - strlen(text), "; %d questions have no window (their context gives no "
                 "sub-tokens): no prediction, scored 0", fs->n_windowless);
    }
}

/* data_dropped.KEY, created on first use. */
static json_t *dropped_split(mpx_task *t, const char *key, const char *file, int32_t n_q)
{
    if (!t->dropped && !(t->dropped = json_object())) return NULL;
    json_t *o = json_object_get(t->dropped, key);
    if (!o) json_object_set_new(t->dropped, key, o = json_pack("{s:s, s:i}", "file", file, "questions", n_q));
    return o;
}

/* Training questions the features leave out (run_squad.py drops them silently): counted
 * by reason for the record, a note on stderr, and an error when they are most of the file. */
static int report_skipped(mpx_task *t, squad_task *d, char *err, size_t errlen)
{
    const mpx_squad_features *fs = d->train_fs;
    int32_t n_q = d->train.n_questions;
    char text[512] = "", cut[1024] = "";
    json_t *cuts = json_object();
    report_cut(cuts, fs, 1, cut, sizeof cut);
    if (fs->n_skipped == 0 && !cut[0]) {
        json_decref(cuts);
        return 0;
    }
    json_t *o = dropped_split(t, "train", d->train_path, n_q);
    if (o) json_object_update(o, cuts);
    json_decref(cuts);
    if (fs->n_skipped == 0) {
        mpx_note("%s: %s; counted in run.json data_dropped", d->train_path, cut + 2);
        return 0;
    }
    json_t *reasons = json_object();
    for (int r = 0; r < MPX_SQUAD_SKIP_COUNT; r++) {
        if (!fs->skip_reasons[r]) continue;
        const char *name = mpx_squad_skip_reason_name((mpx_squad_skip_reason)r);
        json_object_set_new(reasons, name, json_integer(fs->skip_reasons[r]));
        snprintf(text + strlen(text), sizeof text - strlen(text), "%s%s %d", text[0] ? ", " : "", name, fs->skip_reasons[r]);
    }
    if (o) {
        json_object_set_new(o, "skipped_questions", json_integer(fs->n_skipped));
        json_object_set_new(o, "reasons", reasons);
    } else json_decref(reasons);
    if ((int64_t)fs->n_skipped * 2 > n_q) {
        snprintf(err, errlen, "%s: %d of %d training questions are unusable (%s): is this a SQuAD v1.1 file?",
                 d->train_path, fs->n_skipped, n_q, text);
        return -1;
    }
    mpx_note("%s: %d of %d training questions skipped (%s)%s; counted in run.json data_dropped", d->train_path,
             fs->n_skipped, n_q, text, cut);
    return 0;
}

/* The same for the evaluation questions (nothing is an error there). */
static void report_dev_cut(mpx_task *t, squad_task *d)
{
    char cut[1024] = "";
    json_t *cuts = json_object();
    report_cut(cuts, d->dev_fs, 0, cut, sizeof cut);
    json_t *o = cut[0] ? dropped_split(t, "dev", d->dev_path, d->dev.n_questions) : NULL;
    if (o) json_object_update(o, cuts);
    json_decref(cuts);
    if (cut[0]) mpx_note("%s: %s; counted in run.json data_dropped", d->dev_path, cut + 2);
}

static void squad_destroy(mpx_task *t)
{
    json_decref(t->dropped);
    t->dropped = NULL;
    squad_task *d = t->self;
    if (!d) return;
    if (d->train_fs) mpx_squad_features_free(d->train_fs);
    if (d->dev_fs) mpx_squad_features_free(d->dev_fs);
    if (d->tok) mpx_bert_tokenizer_free(d->tok);
    if (d->has_train) mpx_squad_free(&d->train);
    if (d->has_train_all) mpx_squad_free(&d->train_all);
    if (d->has_dev) mpx_squad_free(&d->dev);
    if (d->has_dev_all) mpx_squad_free(&d->dev_all);
    free(d->order);
    for (int i = 0; i < 5; i++) free(d->host[i]);
    free(d);
    t->self = NULL;
}

static int read_keys(mpx_session *s, squad_task *d, int64_t *seq, int64_t *stride, int64_t *query,
                     int64_t *n_train, int64_t *n_dev, const char **sample)
{
    const mpx_config *c = s->cfg;
    const char *vocab, *ckpt = "";
    int rc = mpx_config_get_string(c, "data.squad.train_file", &d->train_path);
    rc |= mpx_config_get_string(c, "data.squad.dev_file", &d->dev_path);
    rc |= mpx_config_get_string(c, "data.squad.vocab", &vocab);
    rc |= mpx_config_get_int(c, "data.squad.max_seq_length", seq);
    rc |= mpx_config_get_int(c, "data.squad.doc_stride", stride);
    rc |= mpx_config_get_int(c, "data.squad.max_query_length", query);
    rc |= mpx_config_get_int(c, "data.squad.train_questions", n_train);
    rc |= mpx_config_get_int(c, "data.squad.dev_questions", n_dev);
    rc |= mpx_config_get_string(c, "data.squad.sample", sample);
    rc |= mpx_config_get_bool(c, "data.squad.dynamic_padding", &d->dynamic_padding);
    rc |= mpx_config_get_bool(c, "data.squad.group_by_length", &d->group_by_length);
    rc |= mpx_config_get_int(c, "eval.batch_size", &d->eval_batch);
    rc |= mpx_config_get_int(c, "eval.n_best_size", &d->n_best);
    rc |= mpx_config_get_int(c, "eval.max_answer_length", &d->max_answer);
    mpx_config_get_string(c, "model.checkpoint", &ckpt);
    /* the vocabulary defaults to the checkpoint's own */
    snprintf(d->vocab_path, sizeof d->vocab_path, "%s%s%s", vocab[0] ? vocab : ckpt,
             vocab[0] ? "" : "/", vocab[0] ? "" : "vocab.txt");
    return rc;
}

/* Every id of the vocabulary must index the model's word embeddings: a vocab.txt longer
 * than the model's vocab_size is refused when the task is opened (mpx check, and mpx run
 * before training), not by the model at the first batch holding such a token. */
static int check_vocab_fits(const squad_task *d, const mpx_session *s, char *err, size_t errlen)
{
    int64_t limit = mpx_session_input_limit(s, "input_ids");
    int32_t n = mpx_bert_vocab_size(d->tok);
    if (!limit || n <= limit) return 0;
    const char *ckpt = "";
    mpx_config_get_string(s->cfg, "model.checkpoint", &ckpt);
    snprintf(err, errlen, "data.squad.vocab: %s holds %d tokens, but the model's vocab_size is %lld (%s, model.checkpoint "
             "\"%s\"): token ids %lld to %d would index past its word embeddings; use the checkpoint's own vocab.txt",
             d->vocab_path, (int)n, (long long)limit, s->inst[MPX_KIND_MODEL].env.label, ckpt, (long long)limit,
             (int)n - 1);
    return -1;
}

static int by_id(const void *a, const void *b)
{
    return strcmp((*(const mpx_squad_question *const *)a)->id, (*(const mpx_squad_question *const *)b)->id);
}

/* What the evaluation needs of the dev questions, refused before any training: every one
 * with at least one answer (the official metric takes the max over them) and one id each
 * (predictions are keyed by id). */
static int check_dev(const mpx_squad_dataset *dev, const char *path, char *err, size_t errlen)
{
    size_t n = (size_t)dev->n_questions;
    for (size_t i = 0; i < n; i++)
        if (dev->questions[i].n_answers < 1) {
            snprintf(err, errlen, "%s: dev question %s has no answers: the metric scores each prediction against "
                     "its answers (evaluate-v1.1 fails on it too)", path, dev->questions[i].id);
            return -1;
        }
    const mpx_squad_question **q = malloc((n ? n : 1) * sizeof *q);
    if (!q) { snprintf(err, errlen, "%s: out of memory", path); return -1; }
    for (size_t i = 0; i < n; i++) q[i] = &dev->questions[i];
    qsort(q, n, sizeof *q, by_id);
    int rc = 0;
    for (size_t i = 1; i < n && !rc; i++)
        if (!strcmp(q[i]->id, q[i - 1]->id)) {
            snprintf(err, errlen, "%s: the dev id %s is given to two questions: predictions are keyed by id", path,
                     q[i]->id);
            rc = -1;
        }
    free(q);
    return rc;
}

int mpx_task_squad_open(mpx_task *t, mpx_session *s, int need_train, char *err, size_t errlen)
{
    squad_task *d = calloc(1, sizeof *d);
    if (!d) { snprintf(err, errlen, "out of memory"); return -1; }
    t->self = d;
    t->destroy = squad_destroy;
    int64_t seq, stride, query, n_train, n_dev, batch = 1;
    const char *sample;
    if (read_keys(s, d, &seq, &stride, &query, &n_train, &n_dev, &sample) ||
        mpx_config_get_int(s->cfg, "train.batch_size", &batch)) {
        snprintf(err, errlen, "data.squad: incomplete configuration");
        return -1;
    }
    d->max_seq = (int32_t)seq;
    d->train_batch = (int32_t)batch;
    if (batch > 4096 || d->eval_batch > 4096) { snprintf(err, errlen, "batch sizes above 4096 are not supported"); return -1; }
    char e2[2048];
    if (mpx_bert_tokenizer_load(d->vocab_path, &d->tok, e2, sizeof e2)) {
        snprintf(err, errlen, "data.squad.vocab: %s", e2);
        return -1;
    }
    if (check_vocab_fits(d, s, err, errlen)) return -1;
    mpx_squad_feature_config fc = { (int32_t)seq, (int32_t)stride, (int32_t)query, 1 };
    if (need_train) {
        if (load_slice(d->train_path, n_train, sample, s->seed, &d->train_all, &d->has_train_all, &d->train,
                       &d->has_train, err, errlen) ||
            mpx_squad_features_build(&d->train, d->tok, &fc, &d->train_fs, err, errlen))
            return -1;
        if (report_skipped(t, d, err, errlen)) return -1;
        if (d->train_fs->n_features == 0) { snprintf(err, errlen, "%s: no training windows", d->train_path); return -1; }
        if (!(d->order = malloc((size_t)d->train_fs->n_features * sizeof *d->order)) || shuffle(d, s->seed)) {
            snprintf(err, errlen, "squad: out of memory ordering the windows");
            return -1;
        }
        t->n_train = (size_t)d->train_fs->n_features;
    }
    fc.is_training = 0;
    if (load_slice(d->dev_path, n_dev, sample, s->seed, &d->dev_all, &d->has_dev_all, &d->dev, &d->has_dev,
                   err, errlen) ||
        check_dev(&d->dev, d->dev_path, err, errlen) ||
        mpx_squad_features_build(&d->dev, d->tok, &fc, &d->dev_fs, err, errlen))
        return -1;
    report_dev_cut(t, d);
    t->max_batch = (int)(batch > d->eval_batch ? batch : d->eval_batch);
    t->max_seq = (int)seq;
    for (int i = 0; i < 5; i++) {
        size_t n = (size_t)t->max_batch * (i < 3 ? (size_t)seq : 1);
        d->host[i] = malloc(n * 4);
        d->dev_buf[i] = mpx_session_alloc(s, MPX_ROLE_SCRATCH, n * 4, tensor_names[i]);
        if (!d->host[i] || !d->dev_buf[i]) { snprintf(err, errlen, "out of memory for batches"); return -1; }
    }
    t->name = "squad";
    t->next = squad_next;
    t->position = squad_position;
    t->seek = squad_seek;
    t->evaluate = squad_evaluate;
    t->data_files = squad_files;
    return 0;
}
