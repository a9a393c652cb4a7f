/* mpx run CONFIG [-s KEY=VALUE]... */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cli.h"
#include "../config/config.h"
#include "../engine/launch.h"
#include "../engine/opt_threads.h"
#include "../engine/session_provenance.h"
#include "../record/fsutil.h"
#include "../record/provenance.h"
#include "../record/record.h"
#include "../engine/shard.h"
#include "../engine/train.h"
#include "../engine/update_window.h"
#include "../tasks/tasks.h"
#include "../engine/train_state.h"
#include "../engine/weight_gather.h"

extern const char *const mpx_metrics_columns[];
extern const size_t mpx_n_metrics_columns;

static const char run_usage[] =
    "usage: mpx run CONFIG [-s KEY=VALUE]... [--plugin-dir DIR]... [--out DIR] [--ranks N]\n"
    "       mpx run [CONFIG [-s KEY=VALUE]...] --resume DIR\n"
    "  trains and evaluates as CONFIG says; writes <run.output_dir>/<run.name>/run.json\n"
    "  (or DIR/run.json with --out)\n"
    "  (status, effective config, plugins, metrics, counted memory) and metrics.csv\n"
    "  (one row per step); exit 0 finished, 1 failed, 2 usage\n"
    "  --resume DIR continues the run in DIR from its last training-state checkpoint\n"
    "  (train.checkpoint_every), with the checkpoint's configuration or CONFIG, which\n"
    "  must then be the same run; first it verifies the checkpoint (the sha256 of its\n"
    "  files and of the data files, its policy, plugins and DIR's run.json) and refuses\n"
    "  one that differs, naming what, before it changes anything in DIR\n"
    "  --ranks N (or run.ranks) starts N data-parallel ranks with mpirun; started by mpirun\n"
    "  or srun, mpx joins the launch (rank 0 writes the record)\n";

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

static const char *const role_names[MPX_ROLE_COUNT] = { "weights", "grads", "grad_acc", "master",
                                                        "opt_state", "compensation", "scratch" };

static json_t *bytes_per_role(const double *bytes, size_t numel, double *per_param)
{
    json_t *by = json_object();
    double persistent = 0;
    for (int r = 0; r < MPX_ROLE_COUNT; r++) {
        json_object_set_new(by, role_names[r], json_integer((json_int_t)bytes[r]));
        if (r != MPX_ROLE_SCRATCH) persistent += bytes[r];
    }
    *per_param = numel ? persistent / (double)numel : 0.0;
    return by;
}

/* Counted model-state bytes (DESIGN: never a formula). Persistent roles make the
 * bytes-per-parameter figure; scratch is reported apart. With ranks, the figures are
 * rank 0's and "per_rank" has every rank's (table: mpx_shard_memory_table). */
static json_t *memory_report(const mpx_session *s, const double *table)
{
    json_t *peak = json_object();
    double mine[MPX_ROLE_COUNT], bpp;
    size_t persistent = 0;
    for (int r = 0; r < MPX_ROLE_COUNT; r++) {
        mine[r] = (double)s->bytes[r];
        json_object_set_new(peak, role_names[r], json_integer((json_int_t)s->peak[r]));
        if (r != MPX_ROLE_SCRATCH) persistent += s->bytes[r];
    }
    json_t *by = bytes_per_role(mine, s->numel, &bpp);
    json_t *m = json_pack("{s:I, s:I, s:f, s:I, s:o, s:o}", "n_params", (json_int_t)s->numel,
                          "persistent_bytes", (json_int_t)persistent, "bytes_per_param", bpp,
                          "transient_peak_bytes", (json_int_t)s->peak[MPX_ROLE_SCRATCH],
                          "bytes_by_role", by, "peak_by_role", peak);
    int world = s->world > 0 ? s->world : 1;
    json_object_set_new(m, "ranks", json_integer(world));
    json_object_set_new(m, "zero_stage", json_integer(s->stage));
    json_object_set_new(m, "padding_elements", json_integer((json_int_t)(s->numel_pad - s->numel)));
    json_object_set_new(m, "owned_elements", json_integer((json_int_t)s->shard_len));
    /* the core's fp32 step buffers (update_window.h) and the process's peak resident set */
    json_object_set_new(m, "update_window_elements", json_integer((json_int_t)s->upd.chunk));
    /* the threads the optimizer's update ran on (train.update_threads, opt_threads.h) */
    json_object_set_new(m, "update_threads", json_integer(mpx_opt_threads_count(s->upd.threads)));
    json_object_set_new(m, "update_buffers_bytes", json_integer((json_int_t)mpx_update_buffer_bytes(s)));
    json_t *per = json_array();   /* rss_peak_bytes after the evaluation: record_rss */
    for (int r = 0; table && r < world; r++) {
        double b;
        json_t *row = bytes_per_role(table + (size_t)r * MPX_ROLE_COUNT, s->numel, &b);
        json_array_append_new(per, json_pack("{s:i, s:f, s:o}", "rank", r, "bytes_per_param", b, "bytes_by_role", row));
    }
    json_object_set_new(m, "per_rank", per);
    return m;
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
    int rc = !host || !dev;
    if (rc) snprintf(err, errlen, "out of memory staging the weights for saving in %s", tmp);
    /* every rank takes part in gathering a partitioned master; rank 0 writes */
    if (!rc && mpx_shard_gather_fp32(s, dev, err, errlen)) rc = -1;
    if (!rc && s->rank != 0) { free(host); mpx_core_host.release(&s->inst[MPX_KIND_BACKEND].env.pub, dev); return 0; }
    if (!rc && (mpx_mkdirs(tmp) || s->ops->to_host(s->be, host, dev, s->numel * 4))) {
        snprintf(err, errlen, "cannot stage the weights for saving in %s", tmp);
        rc = -1;
    }
    mpx_instance *m = &s->inst[MPX_KIND_MODEL];
    if (!rc && m->rec->vt.model.save(m->self, tmp, host, s->offsets)) {
        mpx_session_error(s, MPX_KIND_MODEL, err, errlen);
        rc = -1;
    }
    if (!rc) {
        /* the old checkpoint, its links removed and never followed (no shell: run names are the user's) */
        if (mpx_remove_tree(final) != 0 || rename(tmp, final) != 0) {
            snprintf(err, errlen, "cannot move the new checkpoint into %.1000s: %s", final, strerror(errno));
            rc = -1;
        }
    }
    free(host);
    if (dev) mpx_core_host.release(&s->inst[MPX_KIND_BACKEND].env.pub, dev);
    return rc;
}

/* MPX_DUMP_FINAL_WEIGHTS=FILE: the trained fp32 master (or weights), numel raw floats
 * in parameter order, from rank 0 (a test hook: runs compared element by element). */
static int dump_final_weights(mpx_session *s, char *err, size_t errlen)
{
    const char *path = getenv("MPX_DUMP_FINAL_WEIGHTS");
    if (!path || !*path) return 0;
    float *host = malloc(s->numel * 4);
    void *dev = mpx_session_alloc(s, MPX_ROLE_SCRATCH, s->numel * 4, "final weights dump");
    int rc = !host || !dev ? -1 : mpx_shard_gather_fp32(s, dev, err, errlen);
    if (!rc && s->rank == 0) {
        FILE *f = NULL;
        if (s->ops->to_host(s->be, host, dev, s->numel * 4) || !(f = fopen(path, "wb")) ||
            fwrite(host, 4, s->numel, f) != s->numel) {
            snprintf(err, errlen, "MPX_DUMP_FINAL_WEIGHTS: cannot write %s", path);
            rc = -1;
        }
        if (f && fclose(f)) rc = -1;
    }
    free(host);
    if (dev) mpx_core_host.release(&s->inst[MPX_KIND_BACKEND].env.pub, dev);
    return rc;
}

/* Every rank's peak resident set, taken after the evaluation (rank 0's includes it), into
 * memory.rss_peak_bytes (rank 0's) and memory.ranks_rss_peak_bytes (one per rank: a
 * measurement, kept apart from per_rank's counted bytes so that mpx diff tells them
 * apart). Collective. */
static int record_rss(mpx_session *s, json_t *memory, char *err, size_t errlen)
{
    int world = s->world > 0 ? s->world : 1;
    double *rss = calloc((size_t)world, sizeof *rss);
    struct rusage ru;
    if (!rss) { snprintf(err, errlen, "out of memory"); return -1; }
    if (getrusage(RUSAGE_SELF, &ru) == 0) rss[s->rank] = (double)ru.ru_maxrss * 1024.0;
    if (world > 1 && mpx_core_host.allreduce_sum(&s->inst[MPX_KIND_COMM].env.pub, rss, (size_t)world)) {
        free(rss);
        snprintf(err, errlen, "gathering every rank's peak resident set failed");
        return -1;
    }
    json_t *per = json_array();
    json_object_set_new(memory, "rss_peak_bytes", json_integer((json_int_t)rss[0]));
    for (int r = 0; r < world; r++) json_array_append_new(per, json_integer((json_int_t)rss[r]));
    json_object_set_new(memory, "ranks_rss_peak_bytes", per);
    free(rss);
    return 0;
}

/* Everything after the record exists; failures end up in the record. */
static int train_and_eval(mpx_session *s, mpx_task *t, mpx_record *rec, int train, const char *from,
                          char *err, size_t errlen)
{
    json_t *metrics = json_object_get(rec->root, "metrics");
    if (train && mpx_train_resume(s, t, rec, metrics, from, err, errlen)) return -1;
    int world = s->world > 0 ? s->world : 1;
    double *table = calloc((size_t)world * MPX_ROLE_COUNT, sizeof *table);
    if (!table || mpx_shard_memory_table(s, table)) {
        free(table);
        snprintf(err, errlen, "gathering every rank's counted memory failed");
        return -1;
    }
    json_object_set_new(rec->root, "memory", memory_report(s, table));
    free(table);
    if (train && (save_model(s, rec->dir, err, errlen) || dump_final_weights(s, err, errlen))) return -1;
    /* rank 0 evaluates alone: at stage 3 every rank first gathers the weights for it */
    if (mpx_wgather_begin_whole(s, err, errlen)) return -1;
    int rc = s->rank == 0 ? t->evaluate(t, s, metrics, rec->dir, err, errlen) : 0;
    mpx_wgather_end_whole(s);
    if (rc) return -1;   /* rank 0 alone: the others are ended by the abort (fail_ranks) */
    return record_rss(s, json_object_get(rec->root, "memory"), err, errlen);
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

static int has_override(const mpx_cli *c, const char *key)
{
    size_t n = strlen(key);
    for (size_t i = 0; i < c->n_overrides; i++)
        if (!strncmp(c->overrides[i], key, n) && c->overrides[i][n] == '=') return 1;
    return 0;
}

/* Under an MPI launch of `world` ranks: the record says how many, and the ranks talk
 * through comm/mpi unless -s names another communicator. */
static int join_overrides(mpx_cli *c, int world, char *ranks_kv, size_t len)
{
    if (world < 2) return 0; /* a launch of one (srun -n 1, a batch step): a plain run */
    snprintf(ranks_kv, len, "run.ranks=%d", world);
    size_t cap = sizeof c->overrides / sizeof *c->overrides;
    if (c->n_overrides + 2 > cap) return -1;
    c->overrides[c->n_overrides++] = ranks_kv;
    if (world > 1 && !has_override(c, "comm.plugin")) c->overrides[c->n_overrides++] = "comm.plugin=\"mpi\"";
    return 0;
}

/* A failure with ranks: rank 0 has its record; the others leave their error beside it;
 * then every rank is ended so that none waits in a collective. */
static void fail_ranks(mpx_session *s, int rank, const char *dir, const char *err)
{
    if (rank != 0) mpx_launch_rank_error(dir, rank, err);
    mpx_shard_abort(s);
}

/* One run (or evaluation) in its own session; `from` a training-state folder or NULL. */
static int run_session(const mpx_cli *cp, int argc, char **argv, int train, const char *what, const char *from)
{
    mpx_cli c = *cp;
    int env_rank = 0, launched = mpx_launch_world(&env_rank);
    char ranks_kv[40];
    if (join_overrides(&c, launched, ranks_kv, sizeof ranks_kv)) {
        fprintf(stderr, "mpx %s: too many -s overrides\n", what);
        return 2;
    }
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
        mpx_session_check_compat(&s, err, sizeof err) || mpx_session_precision(&s, err, sizeof err) ||
        run_dir(&s, c.out_dir, train, dir, sizeof dir)) {
        fprintf(stderr, "mpx %s: %s\n", what, err[0] ? err : "run.output_dir/run.name too long");
        mpx_session_close(&s);
        return 1;
    }
    /* one process at a time in a run folder: rank 0 (or the launcher, which tells its
     * ranks it holds it) locks it before the record is opened, a checkpoint read or a file
     * removed; the lock ends with the process */
    const char *held = getenv("MPX_RUN_LOCK_HELD");
    if (env_rank == 0 && !(held && !strcmp(held, dir)) &&
        (mpx_refuse_run_folder_links(dir, err, sizeof err) || mpx_mkdirs(dir) != 0 ||
         mpx_lock_folder(dir, err, sizeof err) < 0)) {
        fprintf(stderr, "mpx %s: %s\n", what, err[0] ? err : strerror(errno));
        mpx_session_close(&s);
        return 1;
    }
    /* a checkpoint that cannot be this run's is refused before the ranks start and the
     * record is opened: run.json, metrics.csv and the checkpoint stay as they were */
    if (from && mpx_train_state_precheck(from, dir, &s, err, sizeof err)) {
        fprintf(stderr, "mpx %s: --resume: %s (nothing in %s was changed)\n", what, err, dir);
        mpx_session_close(&s);
        return 1;
    }
    int64_t ranks = 1;
    mpx_config_get_int(s.cfg, "run.ranks", &ranks);
    if (launched == 1 && ranks > 1) { /* a launch of one process cannot be N ranks */
        fprintf(stderr, "mpx %s: started by a launcher as 1 process (mpirun -np 1, srun -n 1), but run.ranks = %lld: "
                "launch %lld processes, or run mpx %s outside a launcher and it starts the ranks itself (nothing in %s "
                "was changed)\n", what, (long long)ranks, (long long)ranks, what, dir);
        mpx_session_close(&s);
        return 1;
    }
    if (!launched && ranks > 1) { /* start the ranks ourselves; they join */
        mpx_session_close(&s);
        setenv("MPX_RUN_LOCK_HELD", dir, 1);
        return mpx_launch_ranks((int)ranks, what, argc, argv, dir);
    }
    mpx_record rec;
    int rc = mpx_session_start(&s, err, sizeof err);
    /* an evaluation its memory plan refuses is refused before the record is opened and
     * the data read: a previous record in the folder stays as it was */
    if (!rc && !train && mpx_session_plan_eval(&s, err, sizeof err)) {
        fprintf(stderr, "mpx %s: %s (refused before anything was allocated; no record written in %s)\n", what, err,
                dir);
        mpx_session_close(&s);
        return 1;
    }
    int rank = s.inst[MPX_KIND_COMM].self ? s.rank : env_rank;
    if (!rc && launched > 1 && s.world != launched) {
        snprintf(err, sizeof err, "started as %d ranks, but %s is a world of %d (comm.plugin = \"mpi\" joins the launch)",
                 launched, s.inst[MPX_KIND_COMM].env.label, s.world);
        rc = -1;
    }
    json_t *root = new_root(&s, argc, argv, &c, what);
    if (rank != 0) mpx_record_open_quiet(&rec, dir, root);
    else if (mpx_record_open(&rec, dir, root, mpx_metrics_columns, mpx_n_metrics_columns, err + 4096, 4096)) {
        fprintf(stderr, "mpx %s: %s\n", what, err + 4096);
        json_decref(root);
        fail_ranks(&s, rank, dir, err + 4096);
        mpx_session_close(&s);
        return 1;
    }
    if (!rc) rc = mpx_task_open(&t, &s, train, err, sizeof err);
    if (!rc) {
        json_object_set_new(root, "data_files", t.data_files(&t));
        if (t.dropped) json_object_set(root, "data_dropped", t.dropped);
        json_object_set_new(root, "checkpoint_files", checkpoint_files(&s));
        /* the data's and the checkpoint's notes in run.json before the first step */
        if (mpx_record_sync(&rec) != 0) {
            snprintf(err, sizeof err, "cannot write the record %s: %s", rec.json_path, strerror(errno));
            rc = -1;
        }
        if (!rc) rc = train ? mpx_session_alloc_state(&s, t.max_batch, t.max_seq, err, sizeof err)
                   : mpx_session_alloc_eval_state(&s, t.max_batch, t.max_seq, err, sizeof err);
    }
    if (!rc) rc = train_and_eval(&s, &t, &rec, train, from, err, sizeof err);
    if (!rc && train && rank == 0) mpx_train_state_remove(dir);
    if (mpx_record_close(&rec, rc ? "failed" : "finished", rc ? err : NULL) != 0) {
        fprintf(stderr, "mpx %s: cannot write the record %s (or close %s/metrics.csv): %s\n", what, rec.json_path,
                dir, strerror(errno));
        rc = 1;
    }
    if (rc) {
        fprintf(stderr, "mpx %s: %s%s\n", what, launched > 1 ? (rank ? "rank other than 0: " : "rank 0: ") : "", err);
        fail_ranks(&s, rank, dir, err);
    } else if (rank == 0) {
        fprintf(stderr, "mpx %s: finished; record in %s/run.json\n", what, dir);
    }
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
