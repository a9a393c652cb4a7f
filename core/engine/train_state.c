#include "train_state.h"
#include "train_state_io.h"
#include "../record/fsutil.h"
#include "session_provenance.h"
#include "../../datasets/sha256.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- the buffers a step depends on --------------------------------------------------- */

size_t mpx_ts_buffers(const mpx_session *s, state_buf *out)
{
    static const char *const opt_names[MPX_MAX_OPT_STATE] = { "opt_state0", "opt_state1", "opt_state2", "opt_state3" };
    static const char *const scale_names[MPX_MAX_OPT_STATE] = { "opt_state0_scale", "opt_state1_scale",
                                                                "opt_state2_scale", "opt_state3_scale" };
    size_t n = 0;
    out[n++] = (state_buf){ "weights", s->weights, s->numel };
    if (s->master.p) out[n++] = (state_buf){ "master", s->master, s->numel };
    if (s->comp.p) out[n++] = (state_buf){ "compensation", s->comp, s->numel };
    for (int i = 0; i < s->n_state && i < MPX_MAX_OPT_STATE; i++) out[n++] = (state_buf){ opt_names[i], s->state[i], s->numel };
    /* the per-tensor scales of fp16/format state (ABI 1.8): without them the codes mean nothing */
    for (int i = 0; i < s->n_state && i < MPX_MAX_OPT_STATE; i++)
        if (s->state_scale[i]) out[n++] = (state_buf){ scale_names[i], mpx_a(s->state_scale[i], MPX_F32), s->n_params };
    return n;
}

/* With ranks (ZeRO), a rank holds the whole padded buffer or only its slice: the master,
 * the Kahan buffer and the optimizer state from stage 1, the weights at stage 3. The
 * checkpoint always holds whole buffers of numel elements, so it does not depend on the
 * stage: rank 0 writes the slices every rank all-gathered, and each rank reads back its
 * own slice. */
static size_t held_len(const mpx_session *s, const state_buf *b)
{
    return b->a.p == s->weights.p ? s->weights_len : s->shard_len;
}

/* (the per-tensor scales of fp16/format optimizer state, n_params long, are whole) */
int mpx_ts_sliced(const mpx_session *s, const state_buf *b)
{
    return b->numel == s->numel && held_len(s, b) < s->numel_pad;
}

/* The whole buffer: itself, or (collective) its slices all-gathered into *tmp, which the
 * caller gives back with release_tmp. */
static int whole_buffer(mpx_session *s, const state_buf *b, mpx_arg *out, void **tmp)
{
    *tmp = NULL;
    *out = b->a;
    if (!mpx_ts_sliced(s, b)) return 0;
    size_t es = mpx_dtype_size(b->a.t);
    if (!(*tmp = mpx_session_alloc(s, MPX_ROLE_SCRATCH, s->numel_pad * es, "training state staging"))) return -1;
    mpx_arg all = mpx_a(*tmp, b->a.t), mine = mpx_at(all, s->shard_begin);
    const mpx_instance *c = &s->inst[MPX_KIND_COMM];
    if (s->ops->copy(s->be, mine.p, b->a.p, s->shard_len * es) ||
        c->rec->vt.comm.allgather(c->self, mine, all, s->shard_len))
        return -1;
    *out = all;
    return 0;
}

static void release_tmp(mpx_session *s, void *tmp)
{
    if (tmp) mpx_core_host.release(&s->inst[MPX_KIND_BACKEND].env.pub, tmp);
}

/* A rank other than 0 takes part in rank 0's all-gathers, in the same order. */
static int gather_for_rank0(mpx_session *s, char *err, size_t errlen)
{
    state_buf b[3 + MPX_MAX_OPT_STATE];
    size_t n = mpx_ts_buffers(s, b);
    for (size_t i = 0; i < n; i++) {
        mpx_arg w;
        void *tmp;
        int rc = whole_buffer(s, &b[i], &w, &tmp);
        release_tmp(s, tmp);
        if (rc) { snprintf(err, errlen, "gathering the %s for the training state failed", b[i].name); return -1; }
    }
    return 0;
}

/* ---- files ------------------------------------------------------------------------- */

static int write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) { if (w == 0) errno = EIO; return -1; }
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

int mpx_ts_pread_all(int fd, void *p, size_t n, off_t at)
{
    char *c = p;
    while (n) {
        ssize_t r = pread(fd, c, n, at);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) { if (r == 0) errno = EIO; return -1; }
        c += r;
        at += r;
        n -= (size_t)r;
    }
    return 0;
}

static int fsync_path(const char *path)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

/* Copy src to dst (synced); a missing src is fine when `optional`. */
int mpx_ts_copy_file(const char *src, const char *dst, int optional, char *err, size_t errlen)
{
    int in = open(src, O_RDONLY);
    if (in < 0) {
        if (optional && errno == ENOENT) return 0;
        snprintf(err, errlen, "cannot read %s: %s", src, strerror(errno));
        return -1;
    }
    int out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (out < 0) {
        snprintf(err, errlen, "cannot write %s: %s", dst, strerror(errno));
        close(in);
        return -1;
    }
    char buf[65536];
    int rc = 0;
    for (;;) {
        ssize_t r = read(in, buf, sizeof buf);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) { snprintf(err, errlen, "cannot read %s: %s", src, strerror(errno)); rc = -1; break; }
        if (r == 0) break;
        if (write_all(out, buf, (size_t)r)) { snprintf(err, errlen, "cannot write %s: %s", dst, strerror(errno)); rc = -1; break; }
    }
    if (!rc && fsync(out) != 0) { snprintf(err, errlen, "cannot sync %s: %s", dst, strerror(errno)); rc = -1; }
    close(in);
    if (close(out) != 0 && !rc) { snprintf(err, errlen, "cannot write %s: %s", dst, strerror(errno)); rc = -1; }
    return rc;
}

/* Remove a checkpoint folder: a link in its place, or inside it, is removed itself and
 * never followed (fsutil.h). */
static int remove_files_dir(const char *dir) { return mpx_remove_tree(dir); }

static int exists(const char *path) { return access(path, F_OK) == 0; }

int mpx_train_state_find(const char *dir, char *path, size_t len)
{
    static const char *const names[] = { "train_state", "train_state.old" };
    for (size_t i = 0; i < 2; i++) {
        char json[PATH_MAX + 64];
        snprintf(path, len, "%s/%s", dir, names[i]);
        snprintf(json, sizeof json, "%s/state.json", path);
        if (exists(json)) return 0;
    }
    return -1;
}

void mpx_train_state_remove(const char *dir)
{
    static const char *const names[] = { "train_state", "train_state.old", "train_state.tmp" };
    char path[PATH_MAX + 32];
    for (size_t i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        remove_files_dir(path);
    }
}

/* ---- save ------------------------------------------------------------------------- */

static int write_buffers(mpx_session *s, const char *path, const state_buf *b, size_t n, json_t *layout,
                         char hex[65], char *err, size_t errlen)
{
    /* each rank scales its own part of a tensor's optimizer state (ABI 1.8): one file
     * cannot hold them yet */
    for (size_t i = 0; s->world > 1 && i < n; i++)
        if (b[i].numel != s->numel) {
            snprintf(err, errlen, "%s: a training-state checkpoint with ranks cannot hold per-tensor optimizer-state "
                     "scales (precision.opt_state/opt_state_sq in fp16 or an 8-bit format) yet", path);
            return -1;
        }
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0) { snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno)); return -1; }
    char *host = malloc(CHUNK);
    uint64_t offset = 0;
    int rc = host ? 0 : -1;
    if (!host) snprintf(err, errlen, "out of memory staging %s", path);
    mpx_sha256_ctx h;   /* the file's checksum, of the bytes as written */
    mpx_sha256_init(&h);
    for (size_t i = 0; !rc && i < n; i++) {
        size_t bytes = b[i].numel * mpx_dtype_size(b[i].a.t);
        mpx_arg whole;
        void *tmp;
        if (whole_buffer(s, &b[i], &whole, &tmp)) {
            snprintf(err, errlen, "gathering the %s from every rank for %s failed", b[i].name, path);
            rc = -1;
        }
        for (size_t done = 0; !rc && done < bytes; done += CHUNK) {
            size_t k = bytes - done < CHUNK ? bytes - done : CHUNK;
            if (s->ops->to_host(s->be, host, (const char *)whole.p + done, k)) {
                snprintf(err, errlen, "cannot copy the %s to the host for %s", b[i].name, path);
                rc = -1;
            } else if (write_all(fd, host, k)) {
                snprintf(err, errlen, "cannot write %s (%s): %s", path, b[i].name, strerror(errno));
                rc = -1;
            } else {
                mpx_sha256_update(&h, host, k);
            }
        }
        release_tmp(s, tmp);
        json_array_append_new(layout, json_pack("{s:s, s:s, s:I, s:I, s:I}", "name", b[i].name,
                                                "dtype", mpx_dtype_name(b[i].a.t), "numel", (json_int_t)b[i].numel,
                                                "offset", (json_int_t)offset, "bytes", (json_int_t)bytes));
        offset += bytes;
    }
    if (!rc && fsync(fd) != 0) { snprintf(err, errlen, "cannot sync %s: %s", path, strerror(errno)); rc = -1; }
    if (close(fd) != 0 && !rc) { snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno)); rc = -1; }
    free(host);
    uint8_t d[32];
    mpx_sha256_final(&h, d);
    mpx_sha256_hex(d, 32, hex);
    return rc;
}

static json_t *real_or_null(double v) { return isfinite(v) ? json_real(v) : json_null(); }

static json_t *scaler_json(const mpx_loss_scaler *ls)
{
    return json_pack("{s:s, s:f, s:I, s:I, s:I, s:i, s:I}", "preset", ls->preset, "scale", ls->scale,
                     "iter", (json_int_t)ls->iter, "last_overflow_iter", (json_int_t)ls->last_overflow_iter,
                     "growth_tracker", (json_int_t)ls->growth_tracker, "cur_hysteresis", ls->cur_hysteresis,
                     "overflows", (json_int_t)ls->overflows);
}

static json_t *diag_json(const mpx_diagnostics *d)
{
    json_t *a = json_array();
    for (int g = 0; g < MPX_GROUP_COUNT; g++) {
        const mpx_diag_group *x = &d->g[g];
        json_array_append_new(a, json_pack("[f, f, f, I, I, I]", x->sum_underflow, x->sum_stalled, x->sum_ratio,
                                           (json_int_t)x->n_steps_u, (json_int_t)x->n_steps_s, (json_int_t)x->n_steps_r));
    }
    json_t *q = json_array();   /* 8-bit GEMM inputs per group (+ no_weight) */
    for (int g = 0; g <= MPX_GROUP_COUNT; g++)
        json_array_append_new(q, json_pack("[f, f, I]", d->gemm[g].sum_saturated, d->gemm[g].sum_flushed,
                                           (json_int_t)d->gemm[g].n_steps));
    return json_pack("{s:o, s:o, s:f}", "groups", a, "gemm_in", q, "seconds", d->seconds);
}

/* ---- what a checkpoint proves about itself ------------------------------------------ */

int mpx_ts_json_sha256(json_t *st, char hex[65])
{
    json_t *c = json_copy(st);   /* shallow: the members are shared, not dumped twice */
    if (!c) return -1;
    json_object_del(c, STATE_SELF_SUM);
    char *text = json_dumps(c, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENSURE_ASCII);
    json_decref(c);
    if (!text) return -1;
    uint8_t d[32];
    mpx_sha256(text, strlen(text), d);
    mpx_sha256_hex(d, 32, hex);
    free(text);
    return 0;
}

json_t *mpx_ts_policy(const mpx_session *s) { return mpx_provenance_precision(&s->prec, &s->fmts); }

json_t *mpx_ts_plugins(const mpx_session *s)
{
    json_t *all = mpx_provenance_plugins(s), *v;
    const char *k;
    json_object_foreach(all, k, v) json_object_del(v, "path");
    return all;
}

static json_t *config_sha256(json_t *config)
{
    char *text = json_dumps(config, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENSURE_ASCII);
    if (!text) return json_null();
    uint8_t d[32];
    char hex[65];
    mpx_sha256(text, strlen(text), d);
    mpx_sha256_hex(d, 32, hex);
    free(text);
    return json_string(hex);
}

static json_t *state_json(mpx_session *s, mpx_task *t, const mpx_record *rec, const mpx_loss_scaler *ls,
                          const mpx_diagnostics *diag, const mpx_train_progress *p, json_t *metrics, json_t *layout,
                          json_t *files)
{
    uint64_t pos[2] = { 0, 0 };
    if (t->position) t->position(t, pos);
    json_t *evals = json_object_get(metrics, "evals");
    json_t *m = json_pack("{s:O, s:O, s:O, s:o}", "losses", p->losses, "loss_scale_trace", p->trace,
                          "overflow_steps", p->overflows, "evals", evals ? json_deep_copy(evals) : json_array());
    for (size_t i = 0; m && i < mpx_n_train_state_kept_metrics; i++) {   /* measured so far (divergence.h) */
        json_t *v = json_object_get(metrics, mpx_train_state_kept_metrics[i]);
        if (v) json_object_set_new(m, mpx_train_state_kept_metrics[i], json_deep_copy(v));
    }
    json_t *data = json_object_get(rec->root, "data_files");
    json_t *st = json_pack("{s:s, s:i, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:o, s:o, s:f, s:[I, I], s:o, s:o, s:o, s:o, s:o, s:o}",
                     "format", STATE_FORMAT, "version", STATE_VERSION, "step", (json_int_t)p->step,
                     "total_steps", (json_int_t)p->total, "tick", (json_int_t)s->tick, "seed", (json_int_t)s->seed,
                     "updates", (json_int_t)p->updates, "skipped", (json_int_t)p->skipped,
                     "tokens_total", (json_int_t)p->tokens_total, "first_loss", real_or_null(p->first_loss),
                     "last_loss", real_or_null(p->last_loss), "elapsed_s", p->elapsed,
                     "data_position", (json_int_t)pos[0], (json_int_t)pos[1], "loss_scaler", scaler_json(ls),
                     "diagnostics", diag_json(diag), "metrics", m, "buffers", layout,
                     "config", json_deep_copy(s->set.config_json), "scaling", mpx_scaling_checkpoint(&s->scaling));
    if (!st) { json_decref(files); return NULL; }
    /* what the resume verifies before it touches the record (mpx_train_state_precheck) */
    json_object_set_new(st, "files", files);
    json_object_set_new(st, "config_sha256", config_sha256(s->set.config_json));
    json_object_set_new(st, "data_files", json_is_object(data) ? json_deep_copy(data) : json_object());
    json_object_set_new(st, "policy", mpx_ts_policy(s));
    json_object_set_new(st, "plugins", mpx_ts_plugins(s));
    char hex[65];
    if (mpx_ts_json_sha256(st, hex)) { json_decref(st); return NULL; }
    json_object_set_new(st, STATE_SELF_SUM, json_string(hex));
    return st;
}

static int write_config(const mpx_session *s, const char *path, char *err, size_t errlen)
{
    FILE *f = mpx_fopen_nofollow(path, 0);
    int rc = !f || fwrite(s->set.config_text, 1, s->set.config_text_len, f) != s->set.config_text_len ||
             fflush(f) != 0 || fsync(fileno(f)) != 0;
    if (rc) snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
    if (f && fclose(f) != 0 && !rc) { snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno)); rc = 1; }
    return rc ? -1 : 0;
}

int mpx_train_state_save(mpx_session *s, mpx_task *t, mpx_record *rec, const mpx_loss_scaler *ls,
                         const mpx_diagnostics *diag, const mpx_train_progress *p, json_t *metrics,
                         char *err, size_t errlen)
{
    if (s->rank != 0) return gather_for_rank0(s, err, errlen); /* rank 0 writes the files */
    char tmp[PATH_MAX + 32], fin[PATH_MAX + 32], old[PATH_MAX + 32], path[PATH_MAX + 64], src[PATH_MAX + 64];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    snprintf(tmp, sizeof tmp, "%s/train_state.tmp", rec->dir);
    snprintf(fin, sizeof fin, "%s/train_state", rec->dir);
    snprintf(old, sizeof old, "%s/train_state.old", rec->dir);
    if (remove_files_dir(tmp) != 0 || mkdir(tmp, 0777) != 0) {
        snprintf(err, errlen, "cannot create %s: %s", tmp, strerror(errno));
        return -1;
    }
    state_buf b[MAX_STATE_BUFS];
    size_t n = mpx_ts_buffers(s, b);
    json_t *layout = json_array(), *files = json_object();
    char hex[65];
    snprintf(path, sizeof path, "%s/state.bin", tmp);
    if (write_buffers(s, path, b, n, layout, hex, err, errlen)) { json_decref(layout); json_decref(files); return -1; }
    json_object_set_new(files, "state.bin", json_string(hex));
    if (rec->csv) fflush(rec->csv);
    if (diag->csv) fflush(diag->csv);
    static const char *const rows[] = { "metrics.csv", "diagnostics.csv" };
    for (size_t i = 0; i < 2; i++) {
        snprintf(src, sizeof src, "%s/%s", rec->dir, rows[i]);
        snprintf(path, sizeof path, "%s/%s", tmp, rows[i]);
        if (mpx_ts_copy_file(src, path, i == 1, err, errlen)) { json_decref(layout); json_decref(files); return -1; }
        if (access(path, F_OK) == 0) {
            if (mpx_sha256_file(path, hex, err, errlen)) { json_decref(layout); json_decref(files); return -1; }
            json_object_set_new(files, rows[i], json_string(hex));
        }
    }
    snprintf(path, sizeof path, "%s/config.cfg", tmp);
    if (write_config(s, path, err, errlen) || mpx_sha256_file(path, hex, err, errlen)) {
        json_decref(layout);
        json_decref(files);
        return -1;
    }
    json_object_set_new(files, "config.cfg", json_string(hex));
    json_t *st = state_json(s, t, rec, ls, diag, p, metrics, layout, files);
    snprintf(path, sizeof path, "%s/state.json", tmp);
    int rc = !st || json_dump_file(st, path, JSON_INDENT(1) | JSON_SORT_KEYS) != 0 || fsync_path(path) != 0;
    json_decref(st);
    if (rc) { snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno)); return -1; }
    /* swap in: the previous checkpoint stays whole until the new one has its name */
    if (fsync_path(tmp) != 0 || remove_files_dir(old) != 0 ||
        (exists(fin) && rename(fin, old) != 0) || rename(tmp, fin) != 0 || fsync_path(rec->dir) != 0) {
        snprintf(err, errlen, "cannot move the training state into %s: %s", fin, strerror(errno));
        return -1;
    }
    remove_files_dir(old);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    uint64_t bytes = 0;
    for (size_t i = 0; i < n; i++) bytes += (uint64_t)b[i].numel * mpx_dtype_size(b[i].a.t);
    json_object_set_new(rec->root, "train_state",
                        json_pack("{s:s, s:I, s:I, s:f}", "dir", fin, "step", (json_int_t)p->step, "bytes", (json_int_t)bytes,
                                  "seconds", (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec)));
    return 0;
}
