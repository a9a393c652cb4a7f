/* mpx run CONFIG [-s KEY=VALUE]... */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "provenance.h"
#include "record.h"
#include "train.h"
#include "train_state.h"

extern const char *const mpx_metrics_columns[];
extern const size_t mpx_n_metrics_columns;

static const char run_usage[] =
    "usage: mpx run CONFIG [-s KEY=VALUE]... [--plugin-dir DIR]... [--out DIR]\n"
    "       mpx run [CONFIG [-s KEY=VALUE]...] --resume DIR\n"
    "  trains and evaluates as CONFIG says; writes <run.output_dir>/<run.name>/run.json\n"
    "  (or DIR/run.json with --out)\n"
    "  (status, effective config, plugins, metrics, counted memory) and metrics.csv\n"
    "  (one row per step); exit 0 finished, 1 failed, 2 usage\n"
    "  --resume DIR continues the run in DIR from its last training-state checkpoint\n"
    "  (train.checkpoint_every), with the checkpoint's configuration or CONFIG, which\n"
    "  must then be the same run\n";

static json_t *new_root(mpx_session *s, int argc, char **argv, const mpx_cli *c, const char *what)
{
    char when[32];
    json_t *overrides = json_array();
    for (size_t i = 0; i < c->n_overrides; i++) json_array_append_new(overrides, json_string(c->overrides[i]));
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "mpx %s", what);
    for (int i = 0; i < argc; i++) {
        size_t used = strlen(cmd);
        snprintf(cmd + used, sizeof cmd - used, " %s", argv[i]);
    }
    return json_pack("{s:i, s:s, s:s, s:s, s:I, s:{s:s, s:o, s:o}, s:o, s:o, s:o, s:o}",
                     "schema_version", 1, "command", cmd, "started", mpx_now_iso(when, sizeof when),
                     "git_commit", mpx_git_commit(), "pid", (json_int_t)getpid(),
                     "config", "file", c->config, "overrides", overrides, "effective", mpx_config_to_json(s->cfg),
                     "plugins", mpx_provenance_plugins(s), "precision", mpx_provenance_precision(&s->prec, &s->fmts),
                     "machine", mpx_provenance_machine(s), "metrics", json_object());
}

/* Counted model-state bytes (DESIGN: never a formula). Persistent roles make the
 * bytes-per-parameter figure; scratch is reported apart. */
static json_t *memory_report(const mpx_session *s)
{
    static const char *roles[MPX_ROLE_COUNT] = { "weights", "grads", "grad_acc", "master",
                                                 "opt_state", "compensation", "scratch" };
    json_t *by = json_object(), *peak = json_object();
    size_t persistent = 0;
    for (int r = 0; r < MPX_ROLE_COUNT; r++) {
        json_object_set_new(by, roles[r], json_integer((json_int_t)s->bytes[r]));
        json_object_set_new(peak, roles[r], json_integer((json_int_t)s->peak[r]));
        if (r != MPX_ROLE_SCRATCH) persistent += s->bytes[r];
    }
    return json_pack("{s:I, s:I, s:f, s:I, s:o, s:o}", "n_params", (json_int_t)s->numel,
                     "persistent_bytes", (json_int_t)persistent,
                     "bytes_per_param", s->numel ? (double)persistent / (double)s->numel : 0.0,
                     "transient_peak_bytes", (json_int_t)s->peak[MPX_ROLE_SCRATCH],
                     "bytes_by_role", by, "peak_by_role", peak);
}

static int run_dir(const mpx_session *s, const char *out_dir, int train, char *dir, size_t len)
{
    if (out_dir) return snprintf(dir, len, "%s", out_dir) >= (int)len ? -1 : 0;
    const char *out, *name;
    if (mpx_config_get_string(s->cfg, "run.output_dir", &out) || mpx_config_get_string(s->cfg, "run.name", &name))
        return -1;
    return snprintf(dir, len, "%s/%s%s", out, name, train ? "" : "-eval") >= (int)len ? -1 : 0;
}

/* sha256 of the checkpoint the run starts from (model.checkpoint), when there is one. */
static json_t *checkpoint_files(const mpx_session *s)
{
    json_t *o = json_object();
    const char *ckpt = "";
    mpx_config_get_string(s->cfg, "model.checkpoint", &ckpt);
    static const char *const names[] = { "config.json", "model.safetensors" };
    for (size_t i = 0; ckpt[0] && i < sizeof names / sizeof *names; i++) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", ckpt, names[i]);
        if (access(path, R_OK) == 0) mpx_provenance_add_file(o, path);
    }
    return o;
}

/* The trained weights as a checkpoint folder <dir>/checkpoint (the master copy when
 * there is one, else the weights widened to fp32), written to a temp folder and renamed
 * so a crash never leaves half a checkpoint. */
static int save_model(mpx_session *s, const char *dir, char *err, size_t errlen)
{
    int save = 0;
    mpx_config_get_bool(s->cfg, "train.save_model", &save);
    if (!save) return 0;
    char tmp[PATH_MAX + 32], final[PATH_MAX + 32];
    snprintf(tmp, sizeof tmp, "%s/checkpoint.tmp", dir);
    snprintf(final, sizeof final, "%s/checkpoint", dir);
    float *host = malloc(s->numel * 4);
    void *dev = mpx_session_alloc(s, MPX_ROLE_SCRATCH, s->numel * 4, "checkpoint staging");
    int rc = !host || !dev || mpx_mkdirs(tmp) ||
             s->ops->cast(s->be, s->master.p ? s->master : s->weights, mpx_a(dev, MPX_F32), s->numel) ||
             s->ops->to_host(s->be, host, dev, s->numel * 4);
    if (rc) snprintf(err, errlen, "cannot stage the weights for saving in %s", tmp);
    mpx_instance *m = &s->inst[MPX_KIND_MODEL];
    if (!rc && m->rec->vt.model.save(m->self, tmp, host, s->offsets)) {
        mpx_session_error(s, MPX_KIND_MODEL, err, errlen);
        rc = -1;
    }
    if (!rc) {
        char cmd[3 * PATH_MAX];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", final);
        if (system(cmd) != 0 || rename(tmp, final) != 0) {
            snprintf(err, errlen, "cannot move the new checkpoint into %.1000s: %s", final, strerror(errno));
            rc = -1;
        }
    }
    free(host);
    if (dev) mpx_core_host.release(&s->inst[MPX_KIND_BACKEND].env.pub, dev);
    return rc;
}

/* Everything after the record exists; failures end up in the record. */
static int train_and_eval(mpx_session *s, mpx_task *t, mpx_record *rec, int train, const char *from,
                          char *err, size_t errlen)
{
    json_t *metrics = json_object_get(rec->root, "metrics");
    if (train && mpx_train_resume(s, t, rec, metrics, from, err, errlen)) return -1;
    json_object_set_new(rec->root, "memory", memory_report(s));
    if (train && save_model(s, rec->dir, err, errlen)) return -1;
    if (t->evaluate(t, s, metrics, rec->dir, err, errlen)) return -1;
    return 0;
}

/* --resume DIR: the run folder is DIR; the configuration the checkpoint's unless given. */
static int resume_args(mpx_cli *c, int train, const char *usage, char *from, size_t len, char *cfg, size_t cfg_len)
{
    if (!train || c->n_positional > 1 || (c->out_dir && strcmp(c->out_dir, c->resume_dir) != 0)) {
        fputs(usage, stderr);
        return 2;
    }
    if (mpx_train_state_find(c->resume_dir, from, len)) {
        fprintf(stderr, "mpx run: --resume %s: no training state there (%s/train_state/state.json; "
                "is train.checkpoint_every set?)\n", c->resume_dir, c->resume_dir);
        return 1;
    }
    snprintf(cfg, cfg_len, "%s/config.cfg", from);
    c->config = c->n_positional ? c->positional[0] : cfg;
    c->out_dir = c->resume_dir;
    return 0;
}

/* One run (or evaluation) in its own session; `from` a training-state folder or NULL. */
static int run_session(const mpx_cli *cp, int argc, char **argv, int train, const char *what, const char *from)
{
    mpx_cli c = *cp;
    mpx_session s;
    mpx_task t;
    memset(&t, 0, sizeof t);
    char err[8192] = "", dir[PATH_MAX];
    if (mpx_session_open(&s, c.plugin_dirs, c.n_plugin_dirs)) {
        fprintf(stderr, "mpx %s: cannot scan plugin folders\n", what);
        return 1;
    }
    /* Before the record exists, errors go to stderr only. */
    if (mpx_session_configure(&s, c.config, c.overrides, c.n_overrides, err, sizeof err) ||
        mpx_session_check_compat(&s, err, sizeof err) || run_dir(&s, c.out_dir, train, dir, sizeof dir)) {
        fprintf(stderr, "mpx %s: %s\n", what, err[0] ? err : "run.output_dir/run.name too long");
        mpx_session_close(&s);
        return 1;
    }
    mpx_record rec;
    int rc = mpx_session_start(&s, err, sizeof err);
    json_t *root = new_root(&s, argc, argv, &c, what);
    if (mpx_record_open(&rec, dir, root, mpx_metrics_columns, mpx_n_metrics_columns, err + 4096, 4096)) {
        fprintf(stderr, "mpx %s: %s\n", what, err + 4096);
        json_decref(root);
        mpx_session_close(&s);
        return 1;
    }
    if (!rc) rc = mpx_task_open(&t, &s, train, err, sizeof err);
    if (!rc) {
        json_object_set_new(root, "data_files", t.data_files(&t));
        if (t.dropped) json_object_set(root, "data_dropped", t.dropped);
        json_object_set_new(root, "checkpoint_files", checkpoint_files(&s));
        rc = train ? mpx_session_alloc_state(&s, t.max_batch, t.max_seq, err, sizeof err)
                   : mpx_session_alloc_eval_state(&s, t.max_batch, t.max_seq, err, sizeof err);
    }
    if (!rc) rc = train_and_eval(&s, &t, &rec, train, from, err, sizeof err);
    if (!rc && train) mpx_train_state_remove(dir);
    if (mpx_record_close(&rec, rc ? "failed" : "finished", rc ? err : NULL) != 0) {
        fprintf(stderr, "mpx %s: cannot write the record %s (or close %s/metrics.csv): %s\n", what, rec.json_path,
                dir, strerror(errno));
        rc = 1;
    }
    if (rc) fprintf(stderr, "mpx %s: %s\n", what, err);
    else fprintf(stderr, "mpx %s: finished; record in %s/run.json\n", what, dir);
    json_decref(root);
    if (t.destroy) t.destroy(&t);
    mpx_session_close(&s);
    return rc ? 1 : 0;
}

/* mpx run and mpx eval: the same session; eval skips training and the training data. */
static int run_or_eval(int argc, char **argv, int train, const char *usage, const char *what)
{
    mpx_cli c;
    int rc = mpx_cli_parse(&c, argc, argv, usage);
    if (rc) return rc == 1 ? 0 : rc;
    if (c.resume_dir) {
        char from[PATH_MAX], cfg[PATH_MAX + 16];
        rc = resume_args(&c, train, usage, from, sizeof from, cfg, sizeof cfg);
        return rc ? rc : run_session(&c, argc, argv, train, what, from);
    }
    if (c.n_positional != 1) {
        fputs(usage, stderr);
        return 2;
    }
    c.config = c.positional[0];
    return run_session(&c, argc, argv, train, what, NULL);
}

static const char eval_usage[] =
    "usage: mpx eval CONFIG [-s KEY=VALUE]... [--plugin-dir DIR]... [--out DIR]\n"
    "  evaluates model.checkpoint on the configured evaluation data without training;\n"
    "  writes <run.output_dir>/<run.name>-eval/run.json (or DIR/run.json) and predictions.json\n";

int mpx_cmd_run(int argc, char **argv) { return run_or_eval(argc, argv, 1, run_usage, "run"); }
int mpx_cmd_eval(int argc, char **argv) { return run_or_eval(argc, argv, 0, eval_usage, "eval"); }
