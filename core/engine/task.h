/* Task glue: turns a data set into batches of named int32 tensors for the model, and
 * model outputs into metrics (DESIGN: models never parse data). */
#ifndef MPX_TASK_H
#define MPX_TASK_H

#include <jansson.h>

#include "session.h"

typedef struct mpx_task mpx_task;

struct mpx_task {
    const char *name;
    void *self;
    int max_batch, max_seq;          /* for the model's activations */
    size_t n_train;                  /* training examples (feature windows for SQuAD) */
    /* The next training micro-batch of `rows` examples (seeded shuffle per epoch);
     * *tokens counts the non-padding tokens. The batch stays valid until the next call. */
    int (*next)(mpx_task *t, mpx_session *s, int rows, mpx_batch *out, int64_t *tokens,
                char *err, size_t errlen);
    /* Evaluate the current weights; adds metrics (e.g. "exact_match", "f1", "accuracy")
     * to `metrics` and writes predictions under `dir` (may be NULL). */
    int (*evaluate)(mpx_task *t, mpx_session *s, json_t *metrics, const char *dir,
                    char *err, size_t errlen);
    /* Where the training data order stands (epoch, position in its shuffled order),
     * and a jump back there (training-state checkpoints; train_state.h). */
    void (*position)(const mpx_task *t, uint64_t pos[2]);
    int (*seek)(mpx_task *t, mpx_session *s, const uint64_t pos[2], char *err, size_t errlen);
    /* What the task left out of the data and why (NULL: nothing), for run.json's
     * "data_dropped"; owned by the task. */
    json_t *dropped;
    /* Data files the run used (path → sha256), for the record. */
    json_t *(*data_files)(mpx_task *t);
    void (*destroy)(mpx_task *t);
};

/* The tasks themselves live in core/tasks/ (tasks.h opens the one data.task names). */

#endif
