/* Models: a parameter table, forward, backward, checkpoint I/O.
 * Models compute only through the op API (mpx/ops.h) with the dtypes of the effective
 * precision descriptor, and never parse data: the core's task glue builds batches. */
#ifndef MPX_MODEL_H
#define MPX_MODEL_H

#include "mpx/abi.h"
#include "mpx/ops.h"
#include "mpx/precision.h"

typedef enum mpx_group {
    MPX_GROUP_EMBEDDING = 0,
    MPX_GROUP_ATTENTION = 1,
    MPX_GROUP_FFN = 2,
    MPX_GROUP_NORM = 3,
    MPX_GROUP_HEAD = 4,
    MPX_GROUP_COUNT
} mpx_group;

static inline const char *mpx_group_name(mpx_group g)
{
    static const char *names[] = { "embedding", "attention", "ffn", "norm", "head" };
    return (unsigned)g < MPX_GROUP_COUNT ? names[g] : "?";
}

typedef enum mpx_init {
    MPX_INIT_ZEROS = 0,
    MPX_INIT_ONES = 1,
    MPX_INIT_NORMAL = 2,   /* mean 0, std init_std */
} mpx_init;

#define MPX_MAX_DIMS 4

typedef struct mpx_param_info {
    const char *name;      /* checkpoint name, e.g. "encoder.layer.0.attention.self.query.weight" */
    int ndim;
    int64_t shape[MPX_MAX_DIMS];
    int layer;             /* encoder layer index, -1 outside the layers */
    mpx_group group;
    int no_decay;          /* default weight-decay exemption (biases, LayerNorm weights) */
    mpx_init init;         /* for random initialisation */
    float init_std;
    uint32_t site;         /* Philox site for this tensor's init and stochastic rounding */
} mpx_param_info;

/* A random-number site the model draws from (dropout places). */
typedef struct mpx_site {
    uint32_t id;
    const char *name;
} mpx_site;

/* A batch: a set of named int32 tensors in backend memory (input_ids, segment_ids,
 * input_mask, start_positions, end_positions for BERT; whatever the toy needs). */
typedef struct mpx_itensor {
    const char *name;
    const int32_t *data;
    int ndim;
    int64_t shape[2];
} mpx_itensor;

typedef struct mpx_batch {
    uint32_t size;
    const mpx_itensor *tensors;
    int n_tensors;
    int training;          /* dropout on, labels present */
    uint32_t tick;         /* step * accumulation_steps + micro_batch, for mpx_rng */
    /* ABI 1.18 (read only when `size` covers it): host[i] holds tensors[i]'s values in
     * host memory (the task's copy, valid until the next batch), or host is NULL: a model
     * that checks its inputs reads them there instead of copying them back, which on a
     * GPU would wait for the device. */
    const int32_t *const *host;
} mpx_batch;

static inline const mpx_itensor *mpx_batch_get(const mpx_batch *b, const char *name)
{
    for (int i = 0; i < b->n_tensors; i++) {
        const char *x = b->tensors[i].name, *y = name;
        while (*x && *x == *y) { x++; y++; }
        if (*x == *y) return &b->tensors[i];
    }
    return NULL;
}

/* Where the host put the model's state: flat buffers, parameter i at offsets[i]. */
typedef struct mpx_model_bind {
    uint32_t size;
    mpx_arg weights;       /* flat, precision->weights dtype */
    mpx_arg grads;         /* flat, precision->grads dtype; p NULL: bound for forward
                            * only (mpx eval): no backward and no training batch follow,
                            * so the model may skip what only they need */
    const size_t *offsets; /* element offset of each parameter in both buffers */
    size_t numel;          /* total elements */
} mpx_model_bind;

/* Outputs of forward. logits are backend memory owned by the model, valid until the
 * next forward. */
#define MPX_MAX_OUTPUTS 4
typedef struct mpx_forward_out {
    uint32_t size;
    double loss;           /* unscaled mean loss (NaN when the batch has no labels) */
    int n_outputs;
    const char *names[MPX_MAX_OUTPUTS]; /* "start_logits", "end_logits"; toy: "logits" */
    mpx_arg outputs[MPX_MAX_OUTPUTS];
    size_t rows, cols;     /* each output is rows × cols */
} mpx_forward_out;

/* ABI 1.7: ZeRO-3's weights (zero/stage3; DESIGN, One training step, items 1 and 3).
 * Each rank holds only its slice of the flat weights; the host makes a run of parameters
 * whole for as long as the model reads them. */
typedef struct mpx_weight_gather {
    uint32_t size;
    void *ctx;
    /* Makes parameters [first, end) of the table readable: *w then holds them in the
     * weights dtype, parameter i at element offsets[i] - offsets[first] of *w. Collective:
     * every rank makes the same calls in the same order. At most one range is held at a
     * time: the model releases it before gathering the next. */
    int (*gather)(void *ctx, size_t first, size_t end, mpx_arg *w);
    /* Gives back what the last gather made readable (its memory is reused). */
    int (*release)(void *ctx);
} mpx_weight_gather;

typedef struct mpx_model_vtable {
    uint32_t size;
    /* Read options (model.checkpoint, sizes) and the checkpoint's config; no weights yet. */
    int (*create)(mpx_env *env, void **self);
    void (*destroy)(void *self);

    size_t (*n_params)(void *self);
    const mpx_param_info *(*param)(void *self, size_t i);
    size_t (*n_sites)(void *self);
    const mpx_site *(*site)(void *self, size_t i);

    /* Fill the flat fp32 host array (numel elements, laid out by `offsets`) from the
     * checkpoint, or by random initialisation seeded with `seed`. The host casts it into
     * the weights (and master) in the policy's dtypes. */
    int (*init_weights)(void *self, float *flat, const size_t *offsets, uint64_t seed);

    /* The host has allocated weights and grads; the model allocates its activations
     * (role scratch) for up to `max_batch` × `max_seq` inputs. */
    int (*bind)(void *self, const mpx_model_bind *bind, int max_batch, int max_seq);

    /* Forward on one batch. Computes the loss when labels are present. */
    int (*forward)(void *self, const mpx_batch *batch, mpx_forward_out *out);

    /* Backward of (loss * loss_scale) for the batch of the last forward, writing the
     * grads (accumulate != 0: adding to them). */
    int (*backward)(void *self, const mpx_batch *batch, float loss_scale, int accumulate);

    /* Save a checkpoint folder (same format as loaded) from the flat fp32 host array. */
    int (*save)(void *self, const char *dir, const float *flat, const size_t *offsets);

    /* Optional (NULL: not supported). Point the gradient writes at another flat buffer,
     * possibly of another dtype, with the same offsets; the host uses it on diagnostic
     * steps to see each gradient's fp32 value before it is rounded to its storage dtype,
     * then points them back. */
    int (*set_grads)(void *self, mpx_arg grads);

    /* ---- ABI 1.7 ---- */
    /* Optional (NULL, or a model built before 1.7: zero/stage3 refuses the model). Called
     * after bind when the weights are partitioned (bind->weights.p is then NULL): from then
     * on the model reads a parameter only between g->gather and g->release of a range
     * holding it, a layer (or the embeddings, or the head) at a time, in forward and again
     * in backward, as DeepSpeed's ZeRO-3 fetches a module's parameters before its forward
     * and its backward and releases them after. g stays valid while the model is bound;
     * the gradient buffer is whole as before. */
    int (*set_weight_gather)(void *self, const mpx_weight_gather *g);

    /* ---- ABI 1.14 ---- */
    /* Optional (NULL, or a model built before 1.14: no bound known). The exclusive upper
     * bound of the values the int32 input tensor `name` may hold (bert-qa: input_ids
     * below vocab_size), 0 when the model sets none. Asked after create, before any
     * weights: the task refuses data that could hold a value past it (a vocab.txt
     * longer than vocab_size) when it is opened, under mpx check and before training,
     * rather than the model at its first forward. */
    int64_t (*input_limit)(void *self, const char *name);
} mpx_model_vtable;

#endif
