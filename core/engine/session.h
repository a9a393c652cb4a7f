/* A session: one configuration, its loaded plugins and their instances, the host table
 * they call, and the counted model-state memory. `mpx check`, `mpx run` and `mpx eval`
 * each build one. */
#ifndef MPX_SESSION_H
#define MPX_SESSION_H

#include "../config/config.h"
#include "format_table.h"
#include "registry.h"
#include "scaling.h"
#include "update_window.h"

typedef struct mpx_session mpx_session;

/* What the host keeps per plugin instance; plugins see only the leading mpx_env. */
typedef struct mpx_env_impl {
    mpx_env pub;
    mpx_session *s;
    char label[96];     /* "optimizer/sgd" */
    char sub[128];      /* "optimizer.sgd": where its own options live */
    char err[2048];
    struct mpx_opt_defer *defer; /* a copy on an update thread: apply_update is recorded (opt_threads.h) */
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
    /* stage 3 (weight_gather.h): s->weights is [weights_base, + weights_len) of the padded
     * buffer (elsewhere 0 and numel_pad); the gather hook the model calls and its buffer */
    size_t weights_base, weights_len;
    mpx_weight_gather wg;
    mpx_arg wg_buf, wg_whole;
    size_t wg_cap;
    int wg_held;
    void *src_keep;          /* the schema source the config points to */
};

extern const mpx_host mpx_core_host;

/* Scan plugin folders (cli_dirs first) — every command starts here. */
int mpx_session_open(mpx_session *s, const char *const *cli_dirs, size_t n_cli);

/* Load and validate the configuration against the core schema and the plugins found. */
int mpx_session_configure(mpx_session *s, const char *path, const char *const *overrides,
                          size_t n_overrides, char *err, size_t errlen);

/* Forget the configuration (and the selected plugins) but keep the scanned registry, so
 * that another configuration can be checked (mpx sweep's planner, mpx plugins --compat). */
void mpx_session_unconfigure(mpx_session *s);

/* Check the selected plugins exist and may be combined (declared incompatibilities and
 * check callbacks). Returns 0, or non-zero with every reason in err. */
int mpx_session_check_compat(mpx_session *s, char *err, size_t errlen);

/* The effective precision descriptor: the policy's defaults, then the core's keys. */
int mpx_session_precision(mpx_session *s, char *err, size_t errlen);

/* Instantiate backend, precision (+ core overrides), comm, zero, model, optimizer. */
int mpx_session_start(mpx_session *s, char *err, size_t errlen);

/* The parameter layout and the memory plan (memory_plan.h), nothing allocated: refuses
 * sizes that overflow and a plan over run.max_memory or the machine's memory. */
int mpx_session_plan(mpx_session *s, char *err, size_t errlen);

/* Allocate the flat model state and fill the weights from the model (checkpoint or
 * random init); max_batch/max_seq size the model's activations. */
int mpx_session_alloc_state(mpx_session *s, int max_batch, int max_seq, char *err, size_t errlen);
/* The same for evaluation only (mpx eval): the weights alone — no grads, master copy or
 * optimizer state — and the model bound forward-only (mpx_model_bind.grads.p NULL). */
int mpx_session_alloc_eval_state(mpx_session *s, int max_batch, int max_seq, char *err, size_t errlen);

void mpx_session_close(mpx_session *s);

/* The instance of a kind and its vtable. */
#define SESSION_VT(s, kind, field) ((s)->inst[kind].rec->vt.field)

/* Counted allocation outside any plugin (the core's own model-state buffers). */
void *mpx_session_alloc(mpx_session *s, mpx_role role, size_t bytes, const char *what);

/* Error text of the instance of `kind`, prefixed with its KIND/NAME. */
const char *mpx_session_error(mpx_session *s, mpx_kind kind, char *buf, size_t len);

/* Resolve the `precision` core keys over the policy's defaults. */
int mpx_precision_apply_overrides(const mpx_config *cfg, const mpx_format_table *fmts, mpx_precision_desc *d,
                                  char *err, size_t errlen);

/* Build s->param_gemm (ABI 1.3) once the model exists; 0 or -1 with err. */
int mpx_session_param_gemm(mpx_session *s, char *err, size_t errlen);

/* A name for the tensor at `p` (a parameter's name, or the buffer holding it). */
void mpx_session_tensor_name(const mpx_session *s, const void *p, char *buf, size_t len);
/* Zero the 8-bit GEMM-input counts (mpx_session.gemm_in). */
void mpx_session_gemm_in_reset(mpx_session *s);

#endif
