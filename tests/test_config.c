/* Config validation: unknown keys at every level (with line and suggestion), types,
 * ranges, choices, lists, plugin selection, required options, overrides, integers for
 * floats, defaults filled in (written out and read back by plain libconfig), JSON.
 * Plugins come from a fake schema source: two per kind, a few options each. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../core/config/config.h"
#include "../core/config/core_schema.h"
#include "../core/config/suggest.h"

#define FIX "tests/fixtures/config/"

/* ---- The fake plugins ----------------------------------------------------------------- */

#define NR .min = 1.0, .max = 0.0
static const mpx_option adam_opts[] = {
    { .key = "betas", .type = MPX_OPT_FLOAT_LIST, .def = "[0.9, 0.999]", .min = 0, .max = 1, .list_len = 2, .help = "b1, b2" },
    { .key = "eps", .type = MPX_OPT_FLOAT, .def = "1e-8", .min = 0, .max = INFINITY, .help = "eps" },
    { .key = "weight_decay", .type = MPX_OPT_FLOAT, .def = "0.01", NR, .help = "wd" },
};
static const mpx_option sgd_opts[] = {
    { .key = "momentum", .type = MPX_OPT_FLOAT, .def = "0.0", .min = 0, .max = 1, .help = "momentum" },
    { .key = "nesterov", .type = MPX_OPT_BOOL, .def = "false", NR, .help = "nesterov" },
};
static const mpx_option amp_opts[] = {
    { .key = "opt_level", .type = MPX_OPT_CHOICE, .def = "\"O1\"", NR, .choices = "O1|O2", .help = "level" },
};
static const mpx_option stage1_opts[] = {
    { .key = "bucket_size", .type = MPX_OPT_INT, .def = "500000000", .min = 1, .max = INFINITY, .help = "bytes" },
};
static const mpx_option bert_opts[] = {
    { .key = "hidden_dropout", .type = MPX_OPT_FLOAT, .def = "0.1", .min = 0, .max = 1, .help = "dropout" },
    { .key = "labels", .type = MPX_OPT_STRING_LIST, .def = "[\"start\", \"end\"]", NR, .help = "labels" },
};
static const mpx_option toy_opts[] = {
    { .key = "hidden", .type = MPX_OPT_INT, .def = "16", .min = 1, .max = INFINITY, .help = "width" },
    { .key = "depth", .type = MPX_OPT_INT, .def = NULL, .min = 1, .max = INFINITY, .help = "layers (required)" },
};
static const mpx_option cpu_opts[] = {
    { .key = "threads", .type = MPX_OPT_INT, .def = "0", .min = 0, .max = INFINITY, .help = "threads" },
};
static const mpx_option mpi_opts[] = {
    { .key = "timeout_s", .type = MPX_OPT_FLOAT, .def = "30.0", .min = 0, .max = INFINITY, .help = "timeout" },
};

#define DESC(k, n, o, c) { MPX_DESC_HEADER, .kind = (k), .name = (n), .version = "1.0.0", .summary = n, \
                           .options = (o), .n_options = (c) }
static const mpx_plugin_desc fakes[] = {
    DESC(MPX_KIND_PRECISION, "fp32", NULL, 0),
    DESC(MPX_KIND_PRECISION, "amp", amp_opts, MPX_COUNT(amp_opts)),
    DESC(MPX_KIND_OPTIMIZER, "adam", adam_opts, MPX_COUNT(adam_opts)),
    DESC(MPX_KIND_OPTIMIZER, "sgd", sgd_opts, MPX_COUNT(sgd_opts)),
    DESC(MPX_KIND_ZERO, "stage0", NULL, 0),
    DESC(MPX_KIND_ZERO, "stage1", stage1_opts, MPX_COUNT(stage1_opts)),
    DESC(MPX_KIND_MODEL, "bert-qa", bert_opts, MPX_COUNT(bert_opts)),
    DESC(MPX_KIND_MODEL, "toy", toy_opts, MPX_COUNT(toy_opts)),
    DESC(MPX_KIND_BACKEND, "cpu", cpu_opts, MPX_COUNT(cpu_opts)),
    DESC(MPX_KIND_BACKEND, "cuda", NULL, 0),
    DESC(MPX_KIND_COMM, "local", NULL, 0),
    DESC(MPX_KIND_COMM, "mpi", mpi_opts, MPX_COUNT(mpi_opts)),
};

static size_t fake_count(void *ctx, mpx_kind kind)
{
    (void)ctx;
    size_t n = 0;
    for (size_t i = 0; i < MPX_COUNT(fakes); i++) n += fakes[i].kind == kind;
    return n;
}

static const mpx_plugin_desc *fake_get(void *ctx, mpx_kind kind, size_t i)
{
    (void)ctx;
    for (size_t k = 0; k < MPX_COUNT(fakes); k++)
        if (fakes[k].kind == kind && i-- == 0) return &fakes[k];
    return NULL;
}

static size_t fake_count_no_models(void *ctx, mpx_kind kind)
{
    return kind == MPX_KIND_MODEL ? 0 : fake_count(ctx, kind);
}

static const mpx_schema_source fake_src = { NULL, fake_count, fake_get, NULL };

/* ---- Helpers -------------------------------------------------------------------------- */

static char err[8192];

static mpx_config *load_ok(const char *path, const char *const *ov, size_t n)
{
    mpx_config *c = NULL;
    int rc = mpx_config_load(&c, path, ov, n, mpx_core_groups, mpx_n_core_groups, &fake_src, err, sizeof err);
    cr_assert_eq(rc, 0, "load %s failed:\n%s", path ? path : "(none)", err);
    cr_assert_not_null(c);
    return c;
}

static void load_fails(const char *path, const char *const *ov, size_t n)
{
    mpx_config *c = (mpx_config *)1;
    int rc = mpx_config_load(&c, path, ov, n, mpx_core_groups, mpx_n_core_groups, &fake_src, err, sizeof err);
    cr_assert_neq(rc, 0, "load %s should fail", path ? path : "(none)");
    cr_assert_null(c);
}

#define HAS(text) cr_assert(strstr(err, (text)) != NULL, "expected\n  %s\nin\n%s", (text), err)
#define LACKS(text) cr_assert(strstr(err, (text)) == NULL, "did not expect\n  %s\nin\n%s", (text), err)

static int64_t get_int(const mpx_config *c, const char *k)
{
    int64_t v = -12345;
    cr_assert_eq(mpx_config_get_int(c, k, &v), 0, "get_int %s", k);
    return v;
}

static double get_float(const mpx_config *c, const char *k)
{
    double v = NAN;
    cr_assert_eq(mpx_config_get_float(c, k, &v), 0, "get_float %s", k);
    return v;
}

static const char *get_string(const mpx_config *c, const char *k)
{
    const char *v = NULL;
    cr_assert_eq(mpx_config_get_string(c, k, &v), 0, "get_string %s", k);
    return v;
}

static int count_lines(const char *s)
{
    int n = *s ? 1 : 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

/* ---- Did you mean ------------------------------------------------------------------------ */

Test(suggest, distances_by_hand)
{
    cr_assert_eq(mpx_edit_distance("max_stpes", "max_steps"), 1); /* one transposition */
    cr_assert_eq(mpx_edit_distance("kitten", "sitting"), 3);
    cr_assert_eq(mpx_edit_distance("", "abc"), 3);
    cr_assert_eq(mpx_edit_distance("LR", "lr"), 0);
    /* Optimal string alignment: "ca" -> "abc" takes 3 (no edit inside a transposed pair). */
    cr_assert_eq(mpx_edit_distance("ca", "abc"), 3);
}

Test(suggest, picks_nearest_within_limit)
{
    mpx_suggester s;
    mpx_suggest_init(&s, "max_stpes");
    mpx_suggest_offer(&s, "batch_size");
    mpx_suggest_offer(&s, "max_steps");
    mpx_suggest_offer(&s, "epochs");
    cr_assert_str_eq(mpx_suggest_best(&s), "max_steps");
    mpx_suggest_init(&s, "xyz");
    mpx_suggest_offer(&s, "lr");
    mpx_suggest_offer(&s, "seed");
    cr_assert_null(mpx_suggest_best(&s));
    /* Long words allow a third of their length: 4 edits on 12 letters. */
    mpx_suggest_init(&s, "gradientclip");
    mpx_suggest_offer(&s, "gradient_clipping");
    cr_assert_null(mpx_suggest_best(&s)); /* 5 edits */
    mpx_suggest_init(&s, "gradient_clip");
    mpx_suggest_offer(&s, "gradient_clipping");
    cr_assert_str_eq(mpx_suggest_best(&s), "gradient_clipping"); /* 4 edits, 13/3 = 4 */
}

/* ---- Defaults and the effective configuration ------------------------------------------- */

Test(config, empty_config_gets_every_default)
{
    mpx_config *c = load_ok(NULL, NULL, 0);
    cr_assert_null(mpx_config_path(c));
    cr_assert_str_eq(get_string(c, "run.name"), "run");
    cr_assert_str_eq(get_string(c, "run.output_dir"), "runs");
    cr_assert_eq(get_int(c, "run.seed"), 42);
    cr_assert_eq(get_int(c, "train.batch_size"), 3);
    cr_assert_eq(get_int(c, "train.max_steps"), 0);
    cr_assert_float_eq(get_float(c, "train.gradient_clipping"), 1.0, 0);
    int b = -1;
    cr_assert_eq(mpx_config_get_bool(c, "train.save_model", &b), 0);
    cr_assert_eq(b, 1);
    cr_assert_float_eq(get_float(c, "optimizer.lr"), 1e-4, 0);
    cr_assert_str_eq(get_string(c, "model.checkpoint"), "models/checkpoints/minilm-l6");
    cr_assert_str_eq(get_string(c, "precision.rounding"), "policy");
    cr_assert_eq(get_int(c, "precision.initial_scale_power"), -1);
    cr_assert_eq(get_int(c, "data.squad.max_seq_length"), 384);
    cr_assert_str_eq(get_string(c, "data.squad.sample"), "first");
    cr_assert_eq(get_int(c, "eval.n_best_size"), 20);
    /* Selectors default, and the selected plugin's sub-group is made with its defaults. */
    cr_assert_str_eq(mpx_config_selected(c, "optimizer"), "adam");
    cr_assert_str_eq(mpx_config_selected(c, "model"), "bert-qa");
    cr_assert_str_eq(mpx_config_selected(c, "precision"), "fp32");
    cr_assert_str_eq(mpx_config_selected(c, "zero"), "stage0");
    cr_assert_str_eq(mpx_config_selected(c, "backend"), "cpu");
    cr_assert_str_eq(mpx_config_selected(c, "comm"), "local");
    cr_assert_str_eq(mpx_config_selected(c, "scheduler"), "constant");
    cr_assert_str_eq(mpx_config_selected(c, "data"), "squad");
    cr_assert_null(mpx_config_selected(c, "train"));
    cr_assert_float_eq(get_float(c, "optimizer.adam.eps"), 1e-8, 0);
    double betas[4];
    size_t n = 0;
    cr_assert_eq(mpx_config_get_float_list(c, "optimizer.adam.betas", betas, 4, &n), 0);
    cr_assert_eq(n, 2);
    cr_assert_float_eq(betas[0], 0.9, 0);
    cr_assert_float_eq(betas[1], 0.999, 0);
    cr_assert_eq(mpx_config_get_string_list(c, "optimizer.no_decay", NULL, 0, &n), 0);
    cr_assert_eq(n, 0);
    cr_assert_eq(get_int(c, "backend.cpu.threads"), 0);
    /* Only the selected plugins' sub-groups are made. */
    cr_assert_null(mpx_config_lookup(c, "optimizer.sgd"));
    cr_assert_null(mpx_config_lookup(c, "data.toy"));
    mpx_config_free(c);
}

Test(config, getters_refuse_absent_and_wrong_type)
{
    mpx_config *c = load_ok(NULL, NULL, 0);
    int64_t i = 77;
    double f;
    const char *s;
    int b;
    cr_assert_neq(mpx_config_get_int(c, "train.no_such_key", &i), 0);
    cr_assert_eq(i, 77, "a miss leaves the output alone");
    cr_assert_neq(mpx_config_get_int(c, "run.name", &i), 0);
    cr_assert_neq(mpx_config_get_int(c, "optimizer.lr", &i), 0);
    cr_assert_neq(mpx_config_get_float(c, "run.name", &f), 0);
    cr_assert_neq(mpx_config_get_string(c, "run.seed", &s), 0);
    cr_assert_neq(mpx_config_get_bool(c, "run.seed", &b), 0);
    double two[1];
    size_t n;
    cr_assert_neq(mpx_config_get_float_list(c, "optimizer.adam.betas", two, 1, &n), 0);
    cr_assert_eq(n, 2, "the length is told even when the room is short");
    cr_assert_float_eq(get_float(c, "run.seed"), 42.0, 0, "an int reads as a float");
    mpx_config_free(c);
}

Test(config, every_core_selector_is_one_of_its_keys)
{
    for (size_t g = 0; g < mpx_n_core_groups; g++) {
        const mpx_group_schema *gs = &mpx_core_groups[g];
        if (!gs->selector) continue;
        int found = 0;
        for (size_t k = 0; k < gs->n_opts; k++)
            found |= strcmp(gs->opts[k].key, gs->selector) == 0 && gs->opts[k].def != NULL;
        cr_assert(found, "group %s: selector %s has no default among its keys", gs->name, gs->selector);
    }
    cr_assert_eq(mpx_n_core_groups, 11);
}

Test(config, file_values_and_unselected_subgroups)
{
    mpx_config *c = load_ok(FIX "good.cfg", NULL, 0);
    cr_assert_str_eq(mpx_config_path(c), FIX "good.cfg");
    cr_assert_str_eq(get_string(c, "run.name"), "good");
    cr_assert_eq(get_int(c, "run.seed"), 7);
    cr_assert_eq(get_int(c, "train.batch_size"), 4);
    cr_assert_str_eq(mpx_config_selected(c, "optimizer"), "sgd");
    cr_assert_float_eq(get_float(c, "optimizer.sgd.momentum"), 0.5, 0);
    int b = -1;
    cr_assert_eq(mpx_config_get_bool(c, "optimizer.sgd.nesterov", &b), 0);
    cr_assert_eq(b, 0);
    /* The unselected adam sub-group is validated and completed too. */
    cr_assert_float_eq(get_float(c, "optimizer.adam.eps"), 1e-6, 0);
    cr_assert_float_eq(get_float(c, "optimizer.adam.weight_decay"), 0.01, 0);
    const char *nd[4];
    size_t n = 0;
    cr_assert_eq(mpx_config_get_string_list(c, "optimizer.no_decay", nd, 4, &n), 0);
    cr_assert_eq(n, 2);
    cr_assert_str_eq(nd[1], "LayerNorm.weight");
    cr_assert_str_eq(mpx_config_selected(c, "scheduler"), "warmup_decay_lr");
    cr_assert_eq(get_int(c, "scheduler.warmup_decay_lr.warmup_num_steps"), 5);
    cr_assert_float_eq(get_float(c, "scheduler.warmup_decay_lr.warmup_max_lr"), 1e-3, 0);
    cr_assert_eq(get_int(c, "data.toy.examples"), 64);
    cr_assert_eq(get_int(c, "data.toy.classes"), 8);
    cr_assert_eq(get_int(c, "model.toy.depth"), 2);
    mpx_config_free(c);
}

/* ---- Unknown keys at every level ------------------------------------------------------- */

Test(config, unknown_top_level_key)
{
    load_fails(FIX "unknown_top.cfg", NULL, 0);
    HAS(FIX "unknown_top.cfg:2: unknown key 'trian' at the top level — did you mean 'train'?");
}

Test(config, unknown_group_key_names_line_and_suggestion)
{
    load_fails(FIX "unknown_group.cfg", NULL, 0);
    HAS(FIX "unknown_group.cfg:4: unknown key 'max_stpes' in group 'train' — did you mean 'max_steps'?");
    cr_assert_eq(count_lines(err), 1, "one problem, one line:\n%s", err);
}

Test(config, unknown_plugin_subgroup_key)
{
    load_fails(FIX "unknown_plugin_key.cfg", NULL, 0);
    HAS(FIX "unknown_plugin_key.cfg:4: unknown key 'epss' in group 'optimizer.adam' — did you mean 'eps'?");
}

Test(config, unknown_core_subgroup_key)
{
    load_fails(FIX "unknown_core_sub_key.cfg", NULL, 0);
    HAS(FIX "unknown_core_sub_key.cfg:3: unknown key 'warmup_proportoin' in group "
            "'scheduler.warmup_linear' — did you mean 'warmup_proportion'?");
}

Test(config, unknown_key_without_close_match_gets_no_suggestion)
{
    const char *ov[] = { "eval.zzzzzz=1" };
    load_fails(NULL, ov, 1);
    HAS("-s eval.zzzzzz=1: unknown key 'zzzzzz' in group 'eval'");
    LACKS("did you mean");
}

Test(config, group_inside_core_group_is_unknown)
{
    load_fails(FIX "sub_not_group_name.cfg", NULL, 0);
    HAS(FIX "sub_not_group_name.cfg:1: unknown key 'extra' in group 'run'");
}

Test(config, subgroup_of_plugin_not_installed)
{
    load_fails(FIX "not_installed.cfg", NULL, 0);
    HAS(FIX "not_installed.cfg:3: unknown sub-group 'optimizer.adan'");
    HAS("installed optimizer plugins: adam, sgd");
    HAS("did you mean 'adam'?");
}

Test(config, selected_plugin_not_installed)
{
    load_fails(FIX "unknown_selected.cfg", NULL, 0);
    HAS(FIX "unknown_selected.cfg:2: 'optimizer.plugin' = \"sgdd\"");
    HAS("installed optimizer plugins: adam, sgd");
    HAS("did you mean 'sgd'?");
}

Test(config, selected_core_subschema_unknown)
{
    load_fails(FIX "unknown_core_sub.cfg", NULL, 0);
    HAS(FIX "unknown_core_sub.cfg:2: 'scheduler.type' = \"warmup_liner\"");
    HAS("constant, warmup_linear, warmup_lr, warmup_decay_lr");
    HAS("did you mean 'warmup_linear'?");
}

Test(config, group_and_plugin_subgroup_must_be_groups)
{
    load_fails(FIX "not_group.cfg", NULL, 0);
    HAS(FIX "not_group.cfg:1: 'train' must be a group { ... }");
    HAS("got an integer (3)");
    HAS(FIX "not_group.cfg:2: 'optimizer.sgd' must be a group { ... } of sgd's options, got an integer (1)");
}

/* ---- Types, ranges, choices, lists ---------------------------------------------------- */

Test(config, wrong_types_all_reported_with_lines)
{
    load_fails(FIX "types.cfg", NULL, 0);
    HAS(FIX "types.cfg:1: 'run.name' must be a string in double quotes, got an integer (5)");
    HAS(FIX "types.cfg:3: 'train.batch_size' must be an integer >= 1, got a string (\"3\")");
    HAS(FIX "types.cfg:4: 'train.save_model' must be a boolean (true or false), got an integer (1)");
    HAS(FIX "types.cfg:5: 'train.epochs' must be an integer >= 0, got a float (2)");
    HAS(FIX "types.cfg:7: 'optimizer.lr' must be a number >= 0, got a string (\"fast\")");
    cr_assert_eq(count_lines(err), 5, "%s", err);
}

Test(config, out_of_range)
{
    load_fails(FIX "ranges.cfg", NULL, 0);
    HAS(FIX "ranges.cfg:2: 'train.batch_size' = 0 is out of range: it must be >= 1");
    HAS(FIX "ranges.cfg:3: 'train.gradient_clipping' = -0.5 is out of range: it must be >= 0");
    HAS(FIX "ranges.cfg:5: 'precision.initial_scale_power' = 65 is out of range: it must be in [-1, 64]");
    HAS(FIX "ranges.cfg:8: 'scheduler.warmup_linear.warmup_proportion' = 1.5 is out of range: it must be in [0, 1]");
    cr_assert_eq(count_lines(err), 4, "%s", err);
}

Test(config, range_bounds_are_inclusive)
{
    mpx_config *c = load_ok(FIX "bounds.cfg", NULL, 0);
    cr_assert_eq(get_int(c, "train.batch_size"), 1);
    cr_assert_eq(get_int(c, "precision.initial_scale_power"), -1);
    cr_assert_float_eq(get_float(c, "scheduler.warmup_linear.warmup_proportion"), 1.0, 0);
    cr_assert_eq(get_int(c, "data.squad.max_seq_length"), 4096);
    mpx_config_free(c);
    const char *below[] = { "precision.initial_scale_power=-2" };
    load_fails(NULL, below, 1);
    HAS("'precision.initial_scale_power' = -2 is out of range");
}

Test(config, choices_listed_with_suggestion)
{
    load_fails(FIX "choices.cfg", NULL, 0);
    HAS(FIX "choices.cfg:2: 'precision.rounding' = \"nearst\" is not allowed: it must be one of "
            "\"policy\", \"nearest\", \"stochastic\", \"kahan\" — did you mean 'nearest'?");
    HAS(FIX "choices.cfg:3: 'precision.loss_scale' must be one of \"policy\", \"none\", \"static\"");
    HAS("got an integer (3)");
}

Test(config, plugin_choice_option)
{
    const char *ok[] = { "precision.plugin=\"amp\"", "precision.amp.opt_level=\"O2\"" };
    mpx_config *c = load_ok(NULL, ok, 2);
    cr_assert_str_eq(get_string(c, "precision.amp.opt_level"), "O2");
    mpx_config_free(c);
    const char *bad[] = { "precision.amp.opt_level=\"O3\"" };
    load_fails(NULL, bad, 1);
    HAS("-s precision.amp.opt_level=\"O3\": 'precision.amp.opt_level' = \"O3\" is not allowed: it must be one of \"O1\", \"O2\"");
}

Test(config, lists_length_and_item_types)
{
    load_fails(FIX "lists.cfg", NULL, 0);
    HAS(FIX "lists.cfg:2: 'optimizer.no_decay[1]' must be a string in double quotes, got an integer (3)");
    HAS(FIX "lists.cfg:4: 'optimizer.adam.betas' has 1 items: it must be a list of exactly 2 numbers in [0, 1]");
    cr_assert_eq(count_lines(err), 2, "%s", err);
}

Test(config, list_items_range_checked)
{
    load_fails(FIX "list_range.cfg", NULL, 0);
    HAS(FIX "list_range.cfg:2: 'optimizer.adam.betas[1]' = 1.5 is out of range: it must be in [0, 1]");
}

/* ---- Integers for floats ---------------------------------------------------------------- */

Test(config, integer_for_float_in_file_becomes_float)
{
    mpx_config *c = load_ok(FIX "int_for_float.cfg", NULL, 0);
    config_setting_t *lr = mpx_config_lookup(c, "optimizer.lr");
    cr_assert_not_null(lr);
    cr_assert_eq(config_setting_type(lr), CONFIG_TYPE_FLOAT);
    cr_assert_float_eq(config_setting_get_float(lr), 2.0, 0);
    cr_assert_eq(config_setting_type(mpx_config_lookup(c, "train.gradient_clipping")), CONFIG_TYPE_FLOAT);
    cr_assert_eq(config_setting_type(mpx_config_lookup(c, "optimizer.adam.eps")), CONFIG_TYPE_FLOAT);
    config_setting_t *betas = mpx_config_lookup(c, "optimizer.adam.betas");
    cr_assert_eq(config_setting_type(config_setting_get_elem(betas, 0)), CONFIG_TYPE_FLOAT);
    cr_assert_float_eq(config_setting_get_float_elem(betas, 0), 1.0, 0);
    /* A float default written as an integer literal ("0") is a float too. */
    cr_assert_eq(config_setting_type(mpx_config_lookup(c, "precision.min_loss_scale")), CONFIG_TYPE_FLOAT);
    mpx_config_free(c);
}

Test(config, integer_for_float_in_override)
{
    const char *ov[] = { "optimizer.lr=3", "optimizer.adam.betas=[0, 1]" };
    mpx_config *c = load_ok(NULL, ov, 2);
    cr_assert_eq(config_setting_type(mpx_config_lookup(c, "optimizer.lr")), CONFIG_TYPE_FLOAT);
    cr_assert_float_eq(get_float(c, "optimizer.lr"), 3.0, 0);
    double b[2];
    size_t n;
    cr_assert_eq(mpx_config_get_float_list(c, "optimizer.adam.betas", b, 2, &n), 0);
    cr_assert_float_eq(b[1], 1.0, 0);
    mpx_config_free(c);
}

Test(config, float_for_integer_refused)
{
    const char *ov[] = { "train.batch_size=3.0" };
    load_fails(NULL, ov, 1);
    HAS("-s train.batch_size=3.0: 'train.batch_size' must be an integer >= 1, got a float (3)");
}

/* ---- Required options ------------------------------------------------------------------- */

Test(config, required_option_of_selected_plugin)
{
    load_fails(FIX "required.cfg", NULL, 0);
    HAS(FIX "required.cfg:3: missing required key 'model.toy.depth' (integer: layers (required))");
    const char *ov[] = { "model.toy.depth=3" };
    mpx_config *c = load_ok(FIX "required.cfg", ov, 1);
    cr_assert_eq(get_int(c, "model.toy.depth"), 3);
    cr_assert_eq(get_int(c, "model.toy.hidden"), 8);
    mpx_config_free(c);
}

Test(config, required_option_when_selected_by_override_only)
{
    const char *ov[] = { "model.plugin=\"toy\"" };
    load_fails(NULL, ov, 1);
    HAS("-s model.plugin=\"toy\": missing required key 'model.toy.depth'");
}

Test(config, present_unselected_subgroup_is_validated)
{
    load_fails(FIX "required_unselected.cfg", NULL, 0);
    HAS(FIX "required_unselected.cfg:2: missing required key 'model.toy.depth'");
}

/* ---- Overrides -------------------------------------------------------------------------- */

Test(config, override_adds_and_replaces)
{
    const char *ov[] = { "train.max_steps=7", "run.name=\"from -s\"", "train.batch_size = 5",
                         "optimizer.sgd.momentum=0.25" };
    mpx_config *c = load_ok(FIX "good.cfg", ov, 4);
    cr_assert_eq(get_int(c, "train.max_steps"), 7);       /* replaced (file said 10) */
    cr_assert_str_eq(get_string(c, "run.name"), "from -s");
    cr_assert_eq(get_int(c, "train.batch_size"), 5);
    cr_assert_float_eq(get_float(c, "optimizer.sgd.momentum"), 0.25, 0);
    cr_assert_eq(get_int(c, "run.seed"), 7, "untouched keys keep the file's value");
    mpx_config_free(c);
    /* A new sub-group through an override: created and filled. */
    const char *ov2[] = { "optimizer.sgd.nesterov=true" };
    c = load_ok(NULL, ov2, 1);
    int b = 0;
    cr_assert_eq(mpx_config_get_bool(c, "optimizer.sgd.nesterov", &b), 0);
    cr_assert_eq(b, 1);
    cr_assert_float_eq(get_float(c, "optimizer.sgd.momentum"), 0.0, 0);
    mpx_config_free(c);
}

Test(config, later_override_wins)
{
    const char *ov[] = { "train.epochs=2", "train.epochs=9" };
    mpx_config *c = load_ok(NULL, ov, 2);
    cr_assert_eq(get_int(c, "train.epochs"), 9);
    mpx_config_free(c);
}

Test(config, override_group_literal)
{
    const char *ov[] = { "optimizer.adam={ eps = 1e-5; }" };
    mpx_config *c = load_ok(NULL, ov, 1);
    cr_assert_float_eq(get_float(c, "optimizer.adam.eps"), 1e-5, 0);
    cr_assert_float_eq(get_float(c, "optimizer.adam.weight_decay"), 0.01, 0);
    mpx_config_free(c);
}

Test(config, override_unknown_key_cites_override)
{
    const char *ov[] = { "train.max_stpes=5" };
    load_fails(FIX "good.cfg", ov, 1);
    HAS("-s train.max_stpes=5: unknown key 'max_stpes' in group 'train' — did you mean 'max_steps'?");
    const char *ov2[] = { "trian.batch_size=5" };
    load_fails(NULL, ov2, 1);
    HAS("-s trian.batch_size=5: unknown key 'trian' at the top level — did you mean 'train'?");
    const char *ov3[] = { "optimizer.adam.epss=1.0" };
    load_fails(NULL, ov3, 1);
    HAS("-s optimizer.adam.epss=1.0: unknown key 'epss' in group 'optimizer.adam' — did you mean 'eps'?");
}

Test(config, override_malformed_values)
{
    const char *unquoted[] = { "precision.plugin=amp" };
    load_fails(NULL, unquoted, 1);
    HAS("-s precision.plugin=amp: malformed value 'amp'");
    HAS("-s 'precision.plugin=\"amp\"'");
    const char *two[] = { "train.epochs=1; run = 2" };
    load_fails(NULL, two, 1);
    HAS("malformed value '1; run = 2'");
    const char *noeq[] = { "train.epochs" };
    load_fails(NULL, noeq, 1);
    HAS("-s train.epochs: expected KEY=VALUE");
    const char *empty[] = { "train.epochs=" };
    load_fails(NULL, empty, 1);
    HAS("-s train.epochs=: empty VALUE");
    const char *badname[] = { "train.9x=1" };
    load_fails(NULL, badname, 1);
    HAS("-s train.9x=1: '9x' is not a valid key name");
    const char *through[] = { "train.batch_size.x=1" };
    load_fails(FIX "good.cfg", through, 1);
    HAS("-s train.batch_size.x=1: 'batch_size' is a value, not a group");
    load_fails(NULL, through, 1); /* no batch_size yet: the group is made, then refused */
    HAS("-s train.batch_size.x=1: 'train.batch_size' must be an integer >= 1, got a group");
}

Test(config, override_errors_cite_override_not_file)
{
    const char *ov[] = { "train.batch_size=0" };
    load_fails(FIX "good.cfg", ov, 1);
    HAS("-s train.batch_size=0: 'train.batch_size' = 0 is out of range");
    LACKS("good.cfg");
}

Test(config, set_revalidates_and_keeps_old_on_failure)
{
    mpx_config *c = load_ok(FIX "good.cfg", NULL, 0);
    const char *old_name = get_string(c, "run.name");
    cr_assert_eq(mpx_config_set(c, "run.name=\"renamed\"", err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(get_string(c, "run.name"), "renamed");
    cr_assert_str_eq(old_name, "good", "earlier strings stay valid until free");
    cr_assert_neq(mpx_config_set(c, "train.batch_size=0", err, sizeof err), 0);
    HAS("-s train.batch_size=0: 'train.batch_size' = 0 is out of range");
    cr_assert_eq(get_int(c, "train.batch_size"), 4, "a refused set changes nothing");
    cr_assert_str_eq(get_string(c, "run.name"), "renamed");
    cr_assert_eq(mpx_config_set(c, "optimizer.plugin=\"adam\"", err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(mpx_config_selected(c, "optimizer"), "adam");
    cr_assert_eq(mpx_config_set(c, "optimizer.lr=1", err, sizeof err), 0, "%s", err);
    cr_assert_eq(config_setting_type(mpx_config_lookup(c, "optimizer.lr")), CONFIG_TYPE_FLOAT);
    mpx_config_free(c);
}

/* ---- File problems ------------------------------------------------------------------------ */

Test(config, syntax_error_names_file_and_line)
{
    load_fails(FIX "syntax.cfg", NULL, 0);
    HAS(FIX "syntax.cfg:3: syntax error");
}

Test(config, missing_file)
{
    load_fails(FIX "no_such_file.cfg", NULL, 0);
    HAS(FIX "no_such_file.cfg: cannot read the config file");
}

/* ---- Output: write, read back, JSON ------------------------------------------------------ */

/* What a writer (mpx_config_write, mpx_config_write_requested) makes of c, malloc'd. */
static char *written(const mpx_config *c, int (*write)(const mpx_config *, FILE *))
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    cr_assert_not_null(f);
    cr_assert_eq(write(c, f), 0);
    fclose(f);
    return text;
}

Test(config, write_reads_back_with_plain_libconfig)
{
    const char *ov[] = { "run.name=\"quote\\\" and \\\\ back\"", "optimizer.lr=0.1" };
    mpx_config *c = load_ok(FIX "good.cfg", ov, 2);
    char *text = written(c, mpx_config_write);
    config_t raw;
    config_init(&raw);
    cr_assert(config_read_string(&raw, text), "written config does not parse: %s\n%s",
              config_error_text(&raw), text);
    /* Values the file gave, values overrides gave, and defaults the file did not. */
    const char *s;
    cr_assert(config_lookup_string(&raw, "run.name", &s));
    cr_assert_str_eq(s, "quote\" and \\ back");
    double d;
    cr_assert(config_lookup_float(&raw, "optimizer.lr", &d));
    cr_assert_eq(d, 0.1, "exact round trip of 0.1");
    cr_assert(config_lookup_float(&raw, "train.gradient_clipping", &d));
    cr_assert_eq(d, 2.0);
    cr_assert(config_lookup_float(&raw, "optimizer.adam.weight_decay", &d));
    cr_assert_eq(d, 0.01);
    cr_assert(config_lookup_float(&raw, "optimizer.adam.eps", &d));
    cr_assert_eq(d, 1e-6);
    int i;
    cr_assert(config_lookup_int(&raw, "eval.max_answer_length", &i));
    cr_assert_eq(i, 30);
    cr_assert(config_lookup_int(&raw, "scheduler.total_steps", &i));
    cr_assert_eq(i, 0);
    cr_assert(config_lookup_bool(&raw, "train.save_model", &i));
    cr_assert_eq(i, 0);
    cr_assert(config_lookup_string(&raw, "precision.eval_logits", &s));
    cr_assert_str_eq(s, "policy");
    cr_assert(config_lookup_string(&raw, "zero.plugin", &s));
    cr_assert_str_eq(s, "stage0");
    config_setting_t *betas = config_lookup(&raw, "optimizer.adam.betas");
    cr_assert_not_null(betas);
    cr_assert_eq(config_setting_type(config_setting_get_elem(betas, 0)), CONFIG_TYPE_FLOAT);
    cr_assert_eq(config_setting_get_float_elem(betas, 0), 1.0);
    /* Groups in schema order. */
    const char *order[] = { "run", "data", "model", "train", "precision", "optimizer",
                            "scheduler", "zero", "backend", "comm", "eval" };
    config_setting_t *root = config_root_setting(&raw);
    cr_assert_eq(config_setting_length(root), 11);
    for (int k = 0; k < 11; k++)
        cr_assert_str_eq(config_setting_name(config_setting_get_elem(root, (unsigned)k)), order[k]);
    config_destroy(&raw);

    /* And through the loader again: the same effective configuration. */
    char path[] = "/tmp/mpx-test-config-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    FILE *out = fdopen(fd, "w");
    fputs(text, out);
    fclose(out);
    mpx_config *again = load_ok(path, NULL, 0);
    json_t *a = mpx_config_to_json(c), *b = mpx_config_to_json(again);
    cr_assert(json_equal(a, b), "reloaded effective config differs");
    json_decref(a);
    json_decref(b);
    mpx_config_free(again);
    unlink(path);
    free(text);
    mpx_config_free(c);
}

Test(config, json_mirrors_effective_config)
{
    mpx_config *c = load_ok(FIX "int_for_float.cfg", NULL, 0);
    json_t *j = mpx_config_to_json(c);
    cr_assert_not_null(j);
    cr_assert(json_is_integer(json_object_get(json_object_get(j, "train"), "batch_size")));
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(j, "train"), "batch_size")), 3);
    json_t *lr = json_object_get(json_object_get(j, "optimizer"), "lr");
    cr_assert(json_is_real(lr), "an integer given for a float key is a real in JSON");
    cr_assert_eq(json_real_value(lr), 2.0);
    json_t *betas = json_object_get(json_object_get(json_object_get(j, "optimizer"), "adam"), "betas");
    cr_assert(json_is_array(betas));
    cr_assert_eq(json_array_size(betas), 2);
    cr_assert(json_is_true(json_object_get(json_object_get(j, "train"), "save_model")));
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(j, "precision"), "plugin")), "fp32");
    cr_assert_eq(json_object_size(j), 11);
    const char *first = json_object_iter_key(json_object_iter(j));
    cr_assert_str_eq(first, "run");
    json_decref(j);
    mpx_config_free(c);
}

Test(config, default_plugin_not_installed)
{
    /* No model plugin installed: the default "bert-qa" cannot be used. */
    const mpx_schema_source empty_models = { NULL, fake_count_no_models, fake_get, NULL };
    mpx_config *c = NULL;
    int rc = mpx_config_load(&c, FIX "bounds.cfg", NULL, 0, mpx_core_groups, mpx_n_core_groups,
                             &empty_models, err, sizeof err);
    cr_assert_neq(rc, 0);
    cr_assert_eq(count_lines(err), 1, "%s", err);
    HAS(FIX "bounds.cfg: 'model.plugin' is not set and its default \"bert-qa\" is not installed "
            "(installed model plugins: none)");
}

/* ---- Without a plugin source -------------------------------------------------------------- */

Test(config, without_source_plugin_subgroups_are_kept_unchecked)
{
    mpx_config *c = NULL;
    const char *ov[] = { "optimizer.plugin=\"anything\"", "optimizer.anything.x=1" };
    int rc = mpx_config_load(&c, NULL, ov, 2, mpx_core_groups, mpx_n_core_groups, NULL, err, sizeof err);
    cr_assert_eq(rc, 0, "%s", err);
    cr_assert_str_eq(mpx_config_selected(c, "optimizer"), "anything");
    cr_assert_eq(get_int(c, "optimizer.anything.x"), 1);
    mpx_config_free(c);
    /* Core sub-schemas are still checked. */
    const char *bad[] = { "scheduler.type=\"nope\"" };
    rc = mpx_config_load(&c, NULL, bad, 1, mpx_core_groups, mpx_n_core_groups, NULL, err, sizeof err);
    cr_assert_neq(rc, 0);
    HAS("'scheduler.type' = \"nope\"");
}

/* ---- The requested configuration (sweep cell hashes) ------------------------------------ */

static char *requested_text(const mpx_config *c) { return written(c, mpx_config_write_requested); }

/* adam with one more option than the fakes' (as a later mpx version would add) */
static const mpx_option adam_opts_v2[] = {
    { .key = "betas", .type = MPX_OPT_FLOAT_LIST, .def = "[0.9, 0.999]", .min = 0, .max = 1, .list_len = 2, .help = "b1, b2" },
    { .key = "eps", .type = MPX_OPT_FLOAT, .def = "1e-8", .min = 0, .max = INFINITY, .help = "eps" },
    { .key = "weight_decay", .type = MPX_OPT_FLOAT, .def = "0.01", NR, .help = "wd" },
    { .key = "new_knob", .type = MPX_OPT_FLOAT, .def = "2.5", NR, .help = "added later" },
};
static const mpx_plugin_desc adam_v2 = DESC(MPX_KIND_OPTIMIZER, "adam", adam_opts_v2, MPX_COUNT(adam_opts_v2));
static const mpx_plugin_desc *fake_get_v2(void *ctx, mpx_kind kind, size_t i)
{
    const mpx_plugin_desc *d = fake_get(ctx, kind, i);
    return d && d->kind == MPX_KIND_OPTIMIZER && !strcmp(d->name, "adam") ? &adam_v2 : d;
}

/* What the file and the overrides set, as validated (integers for floats converted), and
 * nothing filled from a default: so a key a later version adds with a default does not
 * change it — that is what keeps a long study's finished sweep cells finished. */
Test(config, requested_text_leaves_defaults_out)
{
    char path[] = "/tmp/mpx-test-config-XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    const char *text = "train = { max_steps = 7; };\noptimizer = { plugin = \"adam\"; lr = 1; adam = { eps = 1e-6; }; };\n";
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    const char *ov[] = { "run.seed=5" };
    mpx_config *c = load_ok(path, ov, 1);
    char *t1 = requested_text(c);
    cr_assert_str_eq(t1, "run = {\n  seed = 5;\n};\ntrain = {\n  max_steps = 7;\n};\noptimizer = {\n  plugin = \"adam\";\n"
                         "  lr = 1.0;\n  adam = {\n    eps = 1e-06;\n  };\n};\n");
    mpx_config_free(c);
    static const mpx_schema_source v2 = { NULL, fake_count, fake_get_v2, NULL };
    mpx_config *c2 = NULL;
    cr_assert_eq(mpx_config_load(&c2, path, ov, 1, mpx_core_groups, mpx_n_core_groups, &v2, err, sizeof err), 0, "%s", err);
    double knob = 0;
    cr_assert_eq(mpx_config_get_float(c2, "optimizer.adam.new_knob", &knob), 0);
    cr_assert_float_eq(knob, 2.5, 0, "the new key is there, from its default");
    char *t2 = requested_text(c2);
    cr_assert_str_eq(t2, t1);
    free(t1);
    free(t2);
    mpx_config_free(c2);
    unlink(path);
}
