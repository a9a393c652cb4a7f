/* The core's configuration schema (DESIGN "Config"). Defaults are libconfig literals;
 * a selector ("plugin", "task", "type") is one of a group's keys, its default naming the
 * default plugin or sub-schema. Help strings appear in `mpx check` errors and docs. */
#include "core_schema.h"

#include <math.h>


#define OPT(k, t, d, lo_hi, h) { .key = (k), .type = (t), .def = (d), lo_hi, .help = (h) }
/* Designated initialisers cannot take the "min, max" pair as one macro argument, so
 * ranges go through these two. */
#define RANGE(lo, hi) .min = (lo), .max = (hi)
#define NORANGE .min = 1.0, .max = 0.0

#define CHOICE(k, d, ch, h) { .key = (k), .type = MPX_OPT_CHOICE, .def = (d), NORANGE, .choices = (ch), .help = (h) }
#define SELECTOR(def, h) OPT("plugin", MPX_OPT_STRING, def, NORANGE, h)

static const mpx_option run_opts[] = {
    OPT("name", MPX_OPT_STRING, "\"run\"", NORANGE, "run name: the folder under output_dir"),
    OPT("output_dir", MPX_OPT_STRING, "\"runs\"", NORANGE, "where runs write their records"),
    OPT("seed", MPX_OPT_INT, "42", RANGE(0, INFINITY), "the run's random seed"),
    OPT("max_memory", MPX_OPT_FLOAT, "0", RANGE(0, INFINITY),
        "bytes the model state may take (e.g. 8e9); 0 = the machine's physical memory"),
    OPT("ranks", MPX_OPT_INT, "1", RANGE(1, 4096),
        "data-parallel ranks; mpx run starts them with mpirun (--ranks N sets it; under an MPI launcher, the launched count)"),
};

static const mpx_option data_opts[] = {
    OPT("task", MPX_OPT_STRING, "\"squad\"", NORANGE, "dataset and task: squad or toy"),
};

static const mpx_option squad_opts[] = {
    OPT("train_file", MPX_OPT_STRING, "\"datasets/data/train-v1.1.json\"", NORANGE, "SQuAD v1.1 training file"),
    OPT("dev_file", MPX_OPT_STRING, "\"datasets/data/dev-v1.1.json\"", NORANGE, "SQuAD v1.1 dev file"),
    OPT("vocab", MPX_OPT_STRING, "\"\"", NORANGE, "WordPiece vocabulary; \"\" = the checkpoint's vocab.txt"),
    OPT("max_seq_length", MPX_OPT_INT, "384", RANGE(16, 4096), "tokens per feature window"),
    OPT("doc_stride", MPX_OPT_INT, "128", RANGE(1, INFINITY), "stride between windows of a long context"),
    OPT("max_query_length", MPX_OPT_INT, "64", RANGE(1, INFINITY), "question tokens kept"),
    OPT("train_questions", MPX_OPT_INT, "0", RANGE(0, INFINITY), "training questions used; 0 = all"),
    OPT("dev_questions", MPX_OPT_INT, "0", RANGE(0, INFINITY), "dev questions evaluated; 0 = all"),
    CHOICE("sample", "\"first\"", "first|seeded", "which questions a subset takes: the first N or a seeded sample"),
    OPT("dynamic_padding", MPX_OPT_BOOL, "false", NORANGE, "pad each batch to its longest feature, not max_seq_length"),
    OPT("group_by_length", MPX_OPT_BOOL, "false", NORANGE,
        "batch training windows of similar length (transformers' group_by_length): less padding with dynamic_padding"),
};

static const mpx_option toy_opts[] = {
    OPT("examples", MPX_OPT_INT, "1024", RANGE(1, INFINITY), "number of synthetic examples"),
    OPT("seq_len", MPX_OPT_INT, "8", RANGE(1, INFINITY), "tokens per example"),
    OPT("vocab", MPX_OPT_INT, "32", RANGE(2, INFINITY), "vocabulary size"),
    OPT("classes", MPX_OPT_INT, "8", RANGE(2, INFINITY), "number of classes"),
};

static const mpx_subschema data_subs[] = {
    { "squad", squad_opts, MPX_COUNT(squad_opts) },
    { "toy", toy_opts, MPX_COUNT(toy_opts) },
};

static const mpx_option model_opts[] = {
    SELECTOR("\"bert-qa\"", "model plugin (mpx plugins lists them)"),
    OPT("checkpoint", MPX_OPT_STRING, "\"models/checkpoints/minilm-l6\"", NORANGE, "checkpoint folder the model loads"),
};

static const mpx_option train_opts[] = {
    OPT("batch_size", MPX_OPT_INT, "3", RANGE(1, INFINITY), "examples per micro-batch per rank"),
    OPT("gradient_accumulation_steps", MPX_OPT_INT, "1", RANGE(1, INFINITY), "micro-batches per optimizer step"),
    OPT("epochs", MPX_OPT_INT, "1", RANGE(0, INFINITY), "passes over the training data"),
    OPT("max_steps", MPX_OPT_INT, "0", RANGE(0, INFINITY), "optimizer steps; 0 = run the epochs"),
    OPT("gradient_clipping", MPX_OPT_FLOAT, "1.0", RANGE(0, INFINITY), "global gradient-norm clip; 0 = off"),
    OPT("log_every", MPX_OPT_INT, "1", RANGE(1, INFINITY),
        "steps between run.json updates and diagnostics rows"),
    OPT("diagnostics", MPX_OPT_BOOL, "true", NORANGE,
        "per-group underflow, stalled updates, update/weight ratios and 8-bit GEMM-input saturation, flushes and scales every log_every steps (diagnostics.csv)"),
    OPT("save_model", MPX_OPT_BOOL, "true", NORANGE, "save the trained weights in the run folder"),
    OPT("update_chunk", MPX_OPT_INT, "1048576", RANGE(0, INFINITY),
        "elements per optimizer update window: the fp32 gradient and update buffers hold one window, not the "
        "model (results unchanged); 0 = the whole shard at once"),
    OPT("update_threads", MPX_OPT_INT, "0", RANGE(0, 256),
        "threads the optimizer's update runs on (optimizers that declare MPX_OPT_CONCURRENT: adam, adamw, sgd; "
        "results bitwise the same for any count); 0 = as the backend's threads (backend.cpu.threads, else "
        "every available core); 1 = one thread"),
    OPT("checkpoint_every", MPX_OPT_INT, "0", RANGE(0, INFINITY),
        "steps between training-state checkpoints (<run>/train_state, for mpx run --resume); 0 = none"),
};

static const mpx_option precision_opts[] = {
    SELECTOR("\"fp32\"", "precision plugin (mpx plugins lists them)"),
    OPT("islands", MPX_OPT_STRING, "\"policy\"", NORANGE,
        "ops kept in fp32: policy, all, none, or a comma list of layernorm,softmax,loss,residual"),
    OPT("eval_logits", MPX_OPT_STRING, "\"policy\"", NORANGE, "dtype of the logits at evaluation: policy, fp32, fp16, bf16 or a format name"),
    OPT("comm_dtype", MPX_OPT_STRING, "\"policy\"", NORANGE, "dtype of gradient communication: policy, fp32, fp16, bf16 or a format name"),
    OPT("opt_state", MPX_OPT_STRING, "\"policy\"", NORANGE, "dtype of the optimizer state: policy, fp32, fp16, bf16 or a format name (fp8-e4m3, ...)"),
    OPT("opt_state_sq", MPX_OPT_STRING, "\"policy\"", NORANGE,
        "dtype of the optimizer state after the first buffer (Adam's exp_avg_sq): policy (as opt_state unless the policy says), fp32, fp16, bf16 or a format; fp16 and formats are kept with a per-tensor scale"),
    CHOICE("scaling", "\"policy\"", "policy|none|delayed|current|mx", "scaling of GEMM inputs in 8-bit formats"),
    OPT("amax_history_len", MPX_OPT_INT, "0", RANGE(0, 100000), "delayed scaling: amax window in steps; 0 = the policy's"),
    CHOICE("amax_compute_algo", "\"policy\"", "policy|max|most_recent", "delayed scaling: amax of the window"),
    OPT("margin", MPX_OPT_INT, "-1", RANGE(-1, 64), "delayed/current scaling: scale = (max / amax) / 2^margin; -1 = the policy's"),
    CHOICE("loss_scale", "\"policy\"",
           "policy|none|static|pytorch|deepspeed-fp16-optimizer|deepspeed-zero|deepspeed-zero-keys",
           "loss-scaler preset"),
    CHOICE("rounding", "\"policy\"", "policy|nearest|stochastic|kahan", "rounding when writing weights"),
    CHOICE("master_init", "\"policy\"", "policy|weights|checkpoint",
           "the fp32 master starts as the cast 16-bit weights (DeepSpeed) or as the fp32 checkpoint"),
    CHOICE("optimizer_init_step", "\"policy\"", "policy|on|off",
           "one zero-gradient optimizer step before training (DeepSpeed's fp16/bf16 wrappers): step count and decay one ahead"),
    CHOICE("unscale_with", "\"policy\"", "policy|updated|used",
           "unscale with the loss scale after this step's update (DeepSpeed FP16_Optimizer) or the one the step used"),
    OPT("initial_scale_power", MPX_OPT_INT, "-1", RANGE(-1, 64), "initial loss scale 2^N; -1 = the preset's"),
    OPT("loss_scale_window", MPX_OPT_INT, "0", RANGE(0, INFINITY), "good steps before the scale grows; 0 = the preset's"),
    OPT("hysteresis", MPX_OPT_INT, "0", RANGE(0, INFINITY), "overflows tolerated before the scale shrinks; 0 = the preset's"),
    OPT("min_loss_scale", MPX_OPT_FLOAT, "0", RANGE(0, INFINITY), "floor of the loss scale; 0 = the preset's"),
    OPT("static_loss_scale", MPX_OPT_FLOAT, "1.0", RANGE(0, INFINITY), "the scale of loss_scale = \"static\""),
};

static const mpx_option optimizer_opts[] = {
    SELECTOR("\"adam\"", "optimizer plugin (mpx plugins lists them)"),
    OPT("lr", MPX_OPT_FLOAT, "1e-4", RANGE(0, INFINITY), "peak learning rate"),
    { .key = "no_decay", .type = MPX_OPT_STRING_LIST, .def = "[]", NORANGE,
      .help = "parameter-name patterns without weight decay; empty = the model's defaults (biases, LayerNorm weights)" },
};

static const mpx_option scheduler_opts[] = {
    OPT("type", MPX_OPT_STRING, "\"constant\"", NORANGE,
        "learning-rate schedule: constant, warmup_linear, warmup_lr, warmup_decay_lr"),
    OPT("total_steps", MPX_OPT_INT, "0", RANGE(0, INFINITY), "steps the schedule spans; 0 = counted from data and batch size"),
};

static const mpx_option warmup_linear_opts[] = {
    OPT("warmup_proportion", MPX_OPT_FLOAT, "0.1", RANGE(0, 1), "fraction of total steps spent warming up"),
};

#define WARMUP_OPTS \
    OPT("warmup_min_lr", MPX_OPT_FLOAT, "0", RANGE(0, INFINITY), "lr at step 0"), \
    OPT("warmup_max_lr", MPX_OPT_FLOAT, "1e-3", RANGE(0, INFINITY), "lr at the end of warmup"), \
    OPT("warmup_num_steps", MPX_OPT_INT, "1000", RANGE(0, INFINITY), "warmup steps"), \
    CHOICE("warmup_type", "\"log\"", "log|linear", "warmup curve")

static const mpx_option warmup_lr_opts[] = { WARMUP_OPTS };
static const mpx_option warmup_decay_lr_opts[] = {
    WARMUP_OPTS,
    OPT("total_num_steps", MPX_OPT_INT, "0", RANGE(0, INFINITY), "step where the decay reaches 0; 0 = scheduler.total_steps"),
};

static const mpx_subschema scheduler_subs[] = {
    { "constant", NULL, 0 },
    { "warmup_linear", warmup_linear_opts, MPX_COUNT(warmup_linear_opts) },
    { "warmup_lr", warmup_lr_opts, MPX_COUNT(warmup_lr_opts) },
    { "warmup_decay_lr", warmup_decay_lr_opts, MPX_COUNT(warmup_decay_lr_opts) },
};

static const mpx_option zero_opts[] = {
    SELECTOR("\"stage0\"", "ZeRO stage plugin (mpx plugins lists them)"),
    CHOICE("deepspeed_bf16_reduce", "\"fp32-buffer\"", "fp32-buffer|lp-grads",
           "which gradient DeepSpeed's BF16_Optimizer (a 16-bit policy with a wider gradient accumulator, stages 0 "
           "and 1) all-reduces: fp32-buffer = the accumulator, as DeepSpeed >= 0.13.3; lp-grads = the 16-bit grads, "
           "which nothing reads again, after each rank added its own into its accumulator, as DeepSpeed 0.8.0 to "
           "0.13.2: every rank steps its master partition on its unreduced gradient, clipped by its own norm "
           "(docs/RANKS.md)"),
};
static const mpx_option backend_opts[] = { SELECTOR("\"cpu\"", "compute backend plugin (mpx plugins lists them)") };
static const mpx_option comm_opts[] = { SELECTOR("\"local\"", "communicator plugin (mpx plugins lists them)") };

static const mpx_option eval_opts[] = {
    OPT("batch_size", MPX_OPT_INT, "8", RANGE(1, INFINITY), "examples per evaluation batch"),
    OPT("n_best_size", MPX_OPT_INT, "20", RANGE(1, INFINITY), "start/end candidates kept per feature"),
    OPT("max_answer_length", MPX_OPT_INT, "30", RANGE(1, INFINITY), "longest answer span in tokens"),
    OPT("every", MPX_OPT_INT, "0", RANGE(0, INFINITY), "steps between evaluations; 0 = at the end only"),
};

#define CORE_GROUP(n, h, o) { .name = (n), .help = (h), .opts = (o), .n_opts = MPX_COUNT(o), .plugin_kind = -1 }
#define PLUGIN_GROUP(n, h, o, k) { .name = (n), .help = (h), .opts = (o), .n_opts = MPX_COUNT(o), \
                                    .selector = "plugin", .plugin_kind = (k) }

const mpx_group_schema mpx_core_groups[] = {
    CORE_GROUP("run", "the run's name, output folder and seed", run_opts),
    { .name = "data", .help = "the dataset and how it is cut into features", .opts = data_opts,
      .n_opts = MPX_COUNT(data_opts), .selector = "task", .plugin_kind = -1, .subs = data_subs,
      .n_subs = MPX_COUNT(data_subs) },
    PLUGIN_GROUP("model", "the model plugin and its checkpoint", model_opts, MPX_KIND_MODEL),
    CORE_GROUP("train", "batch size, steps and clipping", train_opts),
    PLUGIN_GROUP("precision", "the precision policy and the core's overrides of it", precision_opts, MPX_KIND_PRECISION),
    PLUGIN_GROUP("optimizer", "the optimizer plugin, learning rate and weight-decay exclusions", optimizer_opts, MPX_KIND_OPTIMIZER),
    { .name = "scheduler", .help = "the learning-rate schedule", .opts = scheduler_opts,
      .n_opts = MPX_COUNT(scheduler_opts), .selector = "type", .plugin_kind = -1,
      .subs = scheduler_subs, .n_subs = MPX_COUNT(scheduler_subs) },
    PLUGIN_GROUP("zero", "the ZeRO stage", zero_opts, MPX_KIND_ZERO),
    PLUGIN_GROUP("backend", "the compute backend", backend_opts, MPX_KIND_BACKEND),
    PLUGIN_GROUP("comm", "the communicator", comm_opts, MPX_KIND_COMM),
    CORE_GROUP("eval", "evaluation batch size, answer extraction and frequency", eval_opts),
};

const size_t mpx_n_core_groups = MPX_COUNT(mpx_core_groups);
