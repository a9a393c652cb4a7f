/* mpx plugin ABI: the one entry symbol, the descriptor every plugin returns, the host
 * table the core hands to plugins, option schemas and declared incompatibilities.
 *
 * Rules (LV2 / SQLite style):
 *  - A plugin exports only `mpx_plugin_entry`. It returns a descriptor whose first
 *    fields are the ABI major/minor it was built against and its own struct size.
 *  - The core refuses another major or a newer minor, and reads no descriptor field
 *    beyond the size the plugin declares.
 *  - Every table (host, descriptor, kind vtables) is append-only: new fields go at the
 *    end, with a minor bump. Each starts with its size so both sides can tell.
 *  - Plugins never print and never exit(): every call returns an mpx_status and sets its
 *    message through host->error; the core prefixes the plugin's KIND/NAME.
 *  - Plugins keep no global mutable state: all state hangs off the objects they create.
 */
#ifndef MPX_ABI_H
#define MPX_ABI_H

#include <stddef.h>
#include <stdint.h>

#define MPX_ABI_MAJOR 1
/* Minor history (append-only additions):
 *  1.1  policies' upstream details (mpx_precision_desc.upstream, 16-bit cross_entropy);
 *  1.2  number formats and scaling (mpx/formats.h);
 *  1.3  per-parameter GEMM dtypes (precision param_gemm, host param_gemm_dtype);
 *  1.4  mpx_ops: `flags` (MPX_OPS_DEVICE_MEMORY) and `fused_update` (optimizers on
 *       device memory), added with the cuda backend;
 *  1.5  mpx_comm_vtable.abort (optional): end every rank after one failed;
 *  1.6  mpx_optimizer_vtable.flags (MPX_OPT_ELEMENTWISE: the host may run the update
 *       window by window, mpx/optimizer.h);
 *  1.7  mpx_model_vtable.set_weight_gather (optional, mpx/model.h): ZeRO-3's weights,
 *       gathered layer by layer just in time;
 *  1.8  optimizer state in any format: mpx_precision_desc.opt_state_sq (the second
 *       moment's dtype) and mpx_opt_step.state_scale (per-tensor state scales); the
 *       host's gemm_input_stats (saturation and flush counts of 8-bit GEMM inputs);
 *  1.9  MPX_OPT_CONCURRENT in mpx_optimizer_vtable.flags (mpx/optimizer.h): the host may
 *       run one step's pieces on several threads (train.update_threads);
 *  1.10 mpx_ops.softmax_dropout_fwd / dropout_softmax_bwd (optional, mpx/ops.h): the
 *       attention softmax and its dropout fused, bit for bit the two ops in sequence;
 *  1.11 mpx_ops.attention_fwd / attention_bwd (optional, mpx/ops.h): self-attention's
 *       core (scores, softmax, dropout, context and their gradients) in one op, bit for
 *       bit the GEMMs and row ops it stands for;
 *  1.12 mpx_opt_step.flags (MPX_STEP_ADD_IN_PLACE, mpx/optimizer.h): the host may let the
 *       optimizer add its fp32 update into an fp32 param itself, bit for bit apply_update;
 *  1.13 mpx_ops.gemm_bias (optional, mpx/ops.h): a linear layer's GEMM and its bias add
 *       in one op, bit for bit gemm then bias_add;
 *  1.14 mpx_model_vtable.input_limit (optional, mpx/model.h): the bound of an input's
 *       values (input_ids below vocab_size), so a task refuses data past it when opened;
 *  1.15 MPX_OPS_FORMATS in mpx_ops.flags (mpx/ops.h): whether a backend runs the number
 *       formats, so a policy that needs them is refused before it runs;
 *  1.16 mpx_backend_vtable.instance_ops (optional, mpx/ops.h): an instance's own op
 *       table, so that a backend's options can switch its optional ops;
 *  1.17 mpx_ops.dropout_add_layernorm_fwd (optional, mpx/ops.h): a post-LN block's tail
 *       (dropout, residual add, LayerNorm) in one pass, bit for bit the three ops;
 *  1.18 mpx_fused_update.add_in_place and MPX_OPS_FUSED_ADD_IN_PLACE (mpx/ops.h): on
 *       device memory too, ADAM and SGD add their update into an fp32 param in the same
 *       pass where the host grants MPX_STEP_ADD_IN_PLACE, bit for bit apply_update;
 *       mpx_ops.gemm_bias_as_c (optional, mpx/ops.h): a linear layer's forward into a
 *       16-bit C, the bias rounded to C's dtype read as the GEMM's C, in one op;
 *       mpx_batch.host (optional, mpx/model.h): the task's host copy of each input;
 *       MPX_OPS_LOSS_OPTIONAL (mpx/ops.h): cross_entropy without a loss to return. */
#define MPX_ABI_MINOR 18

#if defined(__GNUC__)
#define MPX_EXPORT __attribute__((visibility("default")))
#define MPX_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define MPX_EXPORT
#define MPX_PRINTF(a, b)
#endif

/* Every ABI call returns one of these; MPX_OK is 0. */
typedef enum mpx_status {
    MPX_OK = 0,
    MPX_ERR = -1,        /* generic failure, message set through host->error */
    MPX_ERR_NOMEM = -2,
    MPX_ERR_UNSUPPORTED = -3, /* the op/dtype/combination is not implemented */
} mpx_status;

typedef enum mpx_kind {
    MPX_KIND_PRECISION = 0,
    MPX_KIND_OPTIMIZER = 1,
    MPX_KIND_ZERO = 2,
    MPX_KIND_MODEL = 3,
    MPX_KIND_BACKEND = 4,
    MPX_KIND_COMM = 5,
    MPX_KIND_COUNT
} mpx_kind;

/* Storage types. 16-bit floats are stored as uint16_t bit patterns.
 * ABI 1.2: the values from MPX_FORMAT_FIRST on are number formats (mpx/formats.h) stored
 * as codes of 1 byte (16..63) or 2 bytes (64..111); the five OCP formats have fixed
 * values, the ones a precision plugin declares get theirs from the core when the run
 * starts (host->dtype_by_name; host->format gives any format's parameters and name). */
typedef enum mpx_dtype {
    MPX_F32 = 0,
    MPX_F16 = 1,
    MPX_BF16 = 2,
    MPX_I32 = 3,
    MPX_DTYPE_NONE = 15, /* "absent" (e.g. no master copy) or "same as another field" */
    MPX_FORMAT_FIRST = 16,
    MPX_FP8_E4M3 = 16,   /* OCP E4M3 ("fn": no inf, max 448) */
    MPX_FP8_E5M2 = 17,   /* OCP E5M2 (IEEE inf/NaN, max 57344) */
    MPX_FP6_E3M2 = 18,   /* OCP MX FP6 E3M2 (finite only) */
    MPX_FP6_E2M3 = 19,   /* OCP MX FP6 E2M3 */
    MPX_FP4_E2M1 = 20,   /* OCP MX FP4 E2M1 */
    MPX_FORMAT_FIRST_2B = 64,
    MPX_FORMAT_END = 112,
} mpx_dtype;

static inline int mpx_dtype_is_format(mpx_dtype t) { return t >= MPX_FORMAT_FIRST && t < MPX_FORMAT_END; }

static inline size_t mpx_dtype_size(mpx_dtype t)
{
    switch (t) {
    case MPX_F32: case MPX_I32: return 4;
    case MPX_F16: case MPX_BF16: return 2;
    default: return !mpx_dtype_is_format(t) ? 0 : t < MPX_FORMAT_FIRST_2B ? 1 : 2;
    }
}

/* A format a plugin declared has no fixed name here: ask host->format(env, t)->name. */
static inline const char *mpx_dtype_name(mpx_dtype t)
{
    switch (t) {
    case MPX_F32: return "fp32";
    case MPX_F16: return "fp16";
    case MPX_BF16: return "bf16";
    case MPX_I32: return "int32";
    case MPX_FP8_E4M3: return "fp8-e4m3";
    case MPX_FP8_E5M2: return "fp8-e5m2";
    case MPX_FP6_E3M2: return "e3m2";
    case MPX_FP6_E2M3: return "e2m3";
    case MPX_FP4_E2M1: return "e2m1";
    default: return mpx_dtype_is_format(t) ? "(declared format)" : "none";
    }
}

/* ---- Option schemas: a plugin's configuration described as data ------------------ */

typedef enum mpx_opt_type {
    MPX_OPT_BOOL = 0,
    MPX_OPT_INT = 1,
    MPX_OPT_FLOAT = 2,       /* an integer literal is accepted too */
    MPX_OPT_STRING = 3,
    MPX_OPT_CHOICE = 4,      /* a string from `choices` */
    MPX_OPT_FLOAT_LIST = 5,  /* [a, b, ...]; list_len > 0 fixes the length */
    MPX_OPT_STRING_LIST = 6,
} mpx_opt_type;

typedef struct mpx_option {
    const char *key;      /* no dots: it lives in the plugin's own sub-group */
    mpx_opt_type type;
    const char *def;      /* default as a libconfig literal: "0.9", "true", "\"x\"", "[0.9, 0.999]"; NULL = required */
    double min, max;      /* inclusive range for INT/FLOAT (and list items); ignored when min > max */
    const char *choices;  /* CHOICE: "a|b|c" */
    const char *help;     /* one line */
    int list_len;         /* FLOAT_LIST/STRING_LIST: required length, 0 = any */
} mpx_option;

#define MPX_NO_RANGE 1.0, 0.0

/* A combination this plugin cannot run in. `other` is "KIND/NAME", or "KIND" alone for every plugin of that kind. */
typedef struct mpx_incompat {
    const char *other;
    const char *reason;
} mpx_incompat;

/* ---- The host: what the core offers every plugin -------------------------------- */

typedef struct mpx_host mpx_host;

/* Per-instance context the host passes to every plugin call. Its first field is public
 * so plugins reach the host table without global state; the rest is the core's. */
typedef struct mpx_env {
    const mpx_host *host;
} mpx_env;

/* Memory roles: every model-state byte is allocated under one and counted. */
typedef enum mpx_role {
    MPX_ROLE_WEIGHTS = 0,
    MPX_ROLE_GRADS = 1,
    MPX_ROLE_GRAD_ACC = 2,
    MPX_ROLE_MASTER = 3,
    MPX_ROLE_OPT_STATE = 4,
    MPX_ROLE_COMPENSATION = 5,
    MPX_ROLE_SCRATCH = 6,   /* transient: activations, workspaces; reported apart */
    MPX_ROLE_COUNT
} mpx_role;

struct mpx_ops;             /* mpx/ops.h */
struct mpx_precision_desc;  /* mpx/precision.h */
struct mpx_piece;           /* mpx/optimizer.h */
struct mpx_format;          /* mpx/formats.h */

/* Rounding one tensor (scaled) to a format: its elements, the non-zero ones, those whose
 * scaled magnitude exceeded the format's largest finite value (saturated to it,
 * infinities included), those non-zero ones that rounded to +-0 (flushed), and the
 * per-tensor scale applied (1 without a recipe; NaN for MX, whose scales are per block). */
typedef struct mpx_quant_stats {
    uint64_t n, nonzero, saturated, flushed;
    float scale;
} mpx_quant_stats;


struct mpx_host {
    uint16_t abi_major, abi_minor;
    uint32_t size;

    /* Sets the calling instance's error message (file and line of the plugin source).
     * Returns nothing; the plugin then returns a non-zero mpx_status. */
    void (*error)(mpx_env *env, const char *file, int line, const char *fmt, ...) MPX_PRINTF(4, 5);

    /* Options. A key without a dot is looked up in the plugin's own sub-group (defaults
     * already filled in and validated against the schema); a dotted key
     * ("train.batch_size") is any key of the effective run configuration. */
    int (*opt_bool)(mpx_env *env, const char *key, int *out);
    int (*opt_int)(mpx_env *env, const char *key, int64_t *out);
    int (*opt_float)(mpx_env *env, const char *key, double *out);
    int (*opt_string)(mpx_env *env, const char *key, const char **out); /* valid for the run */
    int (*opt_float_list)(mpx_env *env, const char *key, double *out, size_t cap, size_t *n);
    int (*opt_string_list)(mpx_env *env, const char *key, const char **out, size_t cap, size_t *n);

    /* Backend memory, counted under `role`. `what` names the buffer in reports. */
    void *(*alloc)(mpx_env *env, mpx_role role, size_t bytes, const char *what);
    void (*release)(mpx_env *env, void *ptr);

    /* The run's compute backend: its op table and instance (NULL while loading the
     * backend itself). */
    const struct mpx_ops *(*ops)(mpx_env *env, void **backend);

    /* The run's 64-bit seed (run.seed). */
    uint64_t (*seed)(mpx_env *env);

    /* The effective precision descriptor (policy defaults + core overrides). */
    const struct mpx_precision_desc *(*precision)(mpx_env *env);

    /* Writes one optimizer piece's fp32 update into the master copy, or into the weights
     * when there is none, with the policy's rounding (nearest / stochastic / kahan).
     * `update` is indexed like the optimizer's param buffer (see mpx/optimizer.h).
     * Rounding has one owner: the host. */
    int (*apply_update)(mpx_env *env, const struct mpx_piece *piece, const float *update);

    /* Sum `n` doubles across all ranks in place (one rank: no-op). ZeRO extends it. */
    int (*allreduce_sum)(mpx_env *env, double *vals, size_t n);

    /* A warning or note for the user (plugins never print themselves): the core prints it
     * on stderr as "mpx: note: LABEL: ..." and keeps it in run.json's "notes". */
    void (*note)(mpx_env *env, const char *fmt, ...) MPX_PRINTF(2, 3);

    /* ---- ABI 1.2: number formats and scaling ---- */

    /* The parameters and name of a format dtype; NULL for fp32/fp16/bf16/int32 and for
     * values no format holds in this run. Valid for the run. */
    const struct mpx_format *(*format)(mpx_env *env, mpx_dtype t);
    /* The dtype a name denotes: fp32, fp16, bf16, a built-in format or one the run's
     * precision policy declared. Returns MPX_OK or MPX_ERR (message set). */
    int (*dtype_by_name)(mpx_env *env, const char *name, mpx_dtype *out);
    /* Per-tensor scaling (the policy's recipe, mpx/precision.h): the scale to multiply a
     * tensor by before rounding it to format `t`, given its amax now. `tensor` is a
     * stable key for one tensor (the address of its first element); the host keeps its
     * amax history (delayed scaling) as run state. Scales are 1 without a recipe. */
    int (*tensor_scale)(mpx_env *env, mpx_dtype t, const void *tensor, float amax, float *scale);

    /* ---- ABI 1.3 ---- */
    /* The compute dtype of parameter `param`'s GEMMs, forward (backward = 0) or backward:
     * the descriptor's gemm_in / backward GEMM dtype unless the policy's param_gemm hook
     * chose another for it (e.g. bf16 for the first and last layers of an fp8 run). */
    int (*param_gemm_dtype)(mpx_env *env, size_t param, int backward, mpx_dtype *out);

    /* ---- ABI 1.8 ---- */
    /* What rounding a GEMM's two inputs to format `t` did, for the diagnostics: for
     * operand a and operand b (keys as for tensor_scale: the stored operand's first
     * element), the counts in mpx_quant_stats. A backend calls it once per GEMM with a
     * format as compute dtype, when the host's size covers it. */
    void (*gemm_input_stats)(mpx_env *env, mpx_dtype t, const void *a, const mpx_quant_stats *sa,
                             const void *b, const mpx_quant_stats *sb);
};


/* Sets the error with the caller's file and line and evaluates to MPX_ERR. */
#define MPX_FAIL(env, ...) \
    ((env)->host->error((env), __FILE__, __LINE__, __VA_ARGS__), MPX_ERR)

/* Evaluates `call`; on a non-zero status returns it from the enclosing function. */
#define MPX_TRY(call) do { int mpx_rc_ = (call); if (mpx_rc_ != 0) return mpx_rc_; } while (0)

/* ---- The descriptor ------------------------------------------------------------- */

typedef struct mpx_plugin_desc {
    uint16_t abi_major, abi_minor; /* MPX_ABI_MAJOR / MPX_ABI_MINOR the plugin was built with */
    uint32_t size;                 /* sizeof(mpx_plugin_desc) as the plugin knows it */

    mpx_kind kind;
    const char *name;     /* unique within its kind */
    const char *version;  /* the plugin's own version, e.g. "1.0.0" */
    const char *summary;  /* one line */

    const mpx_option *options; /* config schema of the plugin's sub-group */
    size_t n_options;

    const mpx_incompat *incompat; /* declared incompatibilities */
    size_t n_incompat;
    /* Optional finer check on the whole configuration: returns 0 if the plugin can run
     * in it, else non-zero with the reason written to `why`. */
    int (*check)(mpx_env *env, char *why, size_t why_len);

    /* Kind-specific table: mpx_precision_vtable, mpx_model_vtable, ... (each starts with
     * its own uint32_t size). */
    const void *vtable;
} mpx_plugin_desc;

typedef const mpx_plugin_desc *(*mpx_plugin_entry_fn)(const mpx_host *host);

#define MPX_PLUGIN_ENTRY_SYMBOL "mpx_plugin_entry"
/* Define in exactly one file of each plugin:
 *   MPX_PLUGIN_ENTRY { return &my_descriptor; }   */
#define MPX_PLUGIN_ENTRY \
    MPX_EXPORT const mpx_plugin_desc *mpx_plugin_entry(const mpx_host *host); \
    MPX_EXPORT const mpx_plugin_desc *mpx_plugin_entry(const mpx_host *host)

#define MPX_DESC_HEADER .abi_major = MPX_ABI_MAJOR, .abi_minor = MPX_ABI_MINOR, \
                        .size = sizeof(mpx_plugin_desc)

#define MPX_COUNT(a) (sizeof(a) / sizeof((a)[0]))

#endif
