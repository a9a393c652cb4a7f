/* The session's types: the state a session owns and the pieces of the engine serve
 * (mpx_session and what it embeds), with a few inline views of that state. This header
 * is the bottom of core/engine: the session (session.h, session.c) creates and owns the
 * state; host.c, shard.c, weight_gather.c, update_window.c, opt_threads.c,
 * memory_plan.c, diagnostics.c and nonfinite.c serve it through this header and their
 * own, never through session.h, so no file of the engine includes another back.
 * It includes no header of the engine above it and nothing of the config layer (the
 * configuration is an opaque pointer here; settings.h holds what the engine reads). */
#ifndef MPX_SESSION_TYPES_H
#define MPX_SESSION_TYPES_H

#include <stddef.h>
#include <stdint.h>

#include "mpx/optimizer.h"
#include "format_table.h"
#include "registry.h"
#include "scaling.h"
#include "settings.h"

typedef struct mpx_config mpx_config;
typedef struct mpx_diagnostics mpx_diagnostics;

typedef struct mpx_update_window {
    size_t base, len;      /* elements of this rank's slice */
    size_t first, n;       /* its pieces: pieces[first .. first + n) */
} mpx_update_window;

typedef struct mpx_update_plan {
    int on;                /* the step goes window by window */
    size_t chunk;          /* elements of the fp32 buffers (the shard's length when off) */
    mpx_update_window *w;
    size_t n_w;
    mpx_piece *pieces;     /* cut to the windows, offsets relative to their window */
    size_t *src, *src_off; /* per cut piece: the shard piece it comes from, where in it */
    float *grad;           /* one window's fp32 gradient when there is no whole copy */
    struct mpx_opt_threads *threads; /* the optimizer on several threads, or NULL (opt_threads.h) */
} mpx_update_plan;

typedef struct mpx_session mpx_session;

/* What the host keeps per plugin instance; plugins see only the leading mpx_env. */
typedef struct mpx_env_impl {
    mpx_env pub;
    mpx_session *s;
    char label[96];     /* "optimizer/sgd" */
    char sub[128];      /* "optimizer.sgd": where its own options live */
    char err[2048];
    /* a copy on an update thread (opt_threads.c): apply_update calls defer_apply, which
     * records the piece and its update instead of applying it */
    struct mpx_opt_defer *defer;
    int (*defer_apply)(struct mpx_opt_defer *d, mpx_env *env, const mpx_piece *piece, const float *update);
} mpx_env_impl;

typedef struct mpx_instance {
    const mpx_plugin_rec *rec;
    mpx_env_impl env;
    void *self;
} mpx_instance;

typedef struct mpx_alloc_rec {
    void *ptr;
    size_t bytes;
    mpx_role role;
    int on_backend;
    char what[48];       /* the buffer's name (scale records name tensors by it) */
} mpx_alloc_rec;

struct mpx_session {
    mpx_config *cfg;
    mpx_settings set;        /* what the engine reads of cfg, resolved once (settings.h) */
    mpx_registry reg;
    mpx_instance inst[MPX_KIND_COUNT];

    const mpx_ops *ops;    /* the backend's (through ops_own) */
    mpx_ops *ops_own;      /* the session's copy of the backend's table (nonfinite.h) */
    void *be;
    mpx_precision_desc prec;
    mpx_format_table fmts;   /* built-in formats + the policy's (ABI 1.2) */
    mpx_scaling_state scaling; /* per-tensor scales of GEMM inputs (run state) */
    /* 8-bit GEMM inputs per parameter group (+1: GEMMs with no weight operand), counted
     * through host->gemm_input_stats since the diagnostics last reset them */
    struct mpx_gemm_in_group {
        uint64_t n, nonzero, saturated, flushed;
        float scale_min, scale_max; /* of the per-tensor scales applied; NaN: none */
    } gemm_in[MPX_GROUP_COUNT + 1];
    mpx_dtype *param_gemm;   /* [n_params][2] forward/backward GEMM dtypes (ABI 1.3), built on first use */
    uint64_t seed;

    size_t bytes[MPX_ROLE_COUNT], peak[MPX_ROLE_COUNT];
    mpx_alloc_rec *allocs;
    size_t n_allocs, cap_allocs;

    /* model state (flat buffers; DESIGN, One training step) */
    size_t n_params, numel;
    size_t *offsets;
    mpx_arg weights, grads, grad_acc, master, comp;
    mpx_arg state[MPX_MAX_OPT_STATE];
    float *state_scale[MPX_MAX_OPT_STATE]; /* per-tensor scales of fp16/format state (ABI 1.8), else NULL */
    int n_state;
    float *grad32, *update;  /* fp32 gradient (whole, or NULL: per window) and update (scratch) */
    mpx_piece *pieces;
    size_t n_pieces;
    mpx_update_plan upd;     /* the update window by window (update_window.h) */
    size_t upd_base;         /* where in the slice the optimizer's pieces start (apply_update) */
    uint32_t tick;           /* the window's micro-batch: (step * accumulation + micro) * ranks + rank (shard.h) */

    /* data parallelism (shard.h): this rank's slice of the flat state */
    int rank, world, stage;
    size_t numel_pad;        /* numel rounded up to a multiple of the world size */
    size_t shard_begin, shard_len; /* the owned range [begin, begin + len) of numel_pad */
    mpx_arg grad_shard;      /* stage 2: this rank's reduced gradient slice */
    mpx_arg comm_buf;        /* the gradient in precision.comm_dtype when it differs */
    /* zero.deepspeed_bf16_reduce = "lp-grads" at several ranks (DeepSpeed 0.8.0 to 0.13.2,
     * shard.h): the 16-bit grads are all-reduced and left unread, each rank steps on its
     * own accumulator */
    int lp_unread;
    /* stage 3 (weight_gather.h): s->weights is [weights_base, + weights_len) of the padded
     * buffer (elsewhere 0 and numel_pad); the gather hook the model calls and its buffer */
    size_t weights_base, weights_len;
    mpx_weight_gather wg;
    mpx_arg wg_buf, wg_whole;
    size_t wg_cap;
    int wg_held;
    size_t wg_lo, wg_hi;     /* the held range's flat elements (the locate pass names them) */
    void *src_keep;          /* the schema source the config points to */
};


/* The instance of a kind and its vtable. */
#define SESSION_VT(s, kind, field) ((s)->inst[kind].rec->vt.field)


/* Whether some optimizer state buffer is in fp16 or a format: one scale per tensor
 * (ABI 1.8), set from the amax over the whole piece, so the update is not elementwise. */
static inline int mpx_session_state_scaled(const mpx_session *s)
{
    for (int i = 0; i < MPX_MAX_OPT_STATE; i++)
        if (mpx_opt_state_scaled(mpx_opt_state_dtype(&s->prec, i))) return 1;
    return 0;
}

/* Elements of an fp32 staging buffer for n elements: train.update_chunk (0: n), at
 * most n. The initial weights go onto the backend in such chunks. */
static inline size_t mpx_staging_elems(const mpx_session *s, size_t n)
{
    int64_t chunk = s->set.update_chunk;
    return chunk > 0 && (uint64_t)chunk < n ? (size_t)chunk : n ? n : 1;
}

/* This rank's slice of the weights (shard_len elements at shard_begin), at any stage:
 * at stage 3 s->weights holds only it (weight_gather.h). */
static inline mpx_arg mpx_shard_weights(const mpx_session *s)
{
    return mpx_at(s->weights, s->shard_begin - s->weights_base);
}

#endif
