/* The training-state checkpoint read back (mpx run --resume): the configuration
 * compared, the step, the data position, the loss scaler, the diagnostics, the metrics
 * so far and every state buffer restored (train_state.h; the save is train_state.c). */
#include "train_state.h"
#include "train_state_io.h"
#include "../record/fsutil.h"
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

/* ---- load ------------------------------------------------------------------------- */

/* Keys a resumed run may change: where the records go and how often, and what does not
 * change a bit of the results (docs/CONFIG.md: update windows, update threads, the
 * backend's threads: `mpx sweep --jobs N` sets those per cell). */
static int neutral_key(const char *key)
{
    static const char *const keys[] = { "train.checkpoint_every", "run.name", "run.output_dir", "train.update_chunk",
                                        "train.update_threads" };
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        if (!strcmp(key, keys[i])) return 1;
    size_t n = strlen(key);   /* backend.<plugin>.threads */
    return !strncmp(key, "backend.", 8) && n > 8 + 8 && !strcmp(key + n - 8, ".threads") &&
           !memchr(key + 8, '.', n - 8 - 8);
}

static int diff_key(json_t *a, json_t *b, char *key, size_t len, size_t used)
{
    if (json_is_object(a) && json_is_object(b)) {
        const char *k;
        json_t *v;
        json_object_foreach(a, k, v) {
            int n = snprintf(key + used, len - used, "%s%s", used ? "." : "", k);
            size_t u = used + (n > 0 ? (size_t)n : 0);
            if (u >= len) u = len - 1;
            if (neutral_key(key)) continue;
            json_t *w = json_object_get(b, k);
            if (!w || diff_key(v, w, key, len, u)) return -1;
        }
        json_object_foreach(b, k, v) {
            if (json_object_get(a, k)) continue;
            snprintf(key + used, len - used, "%s%s", used ? "." : "", k);
            if (neutral_key(key)) continue;
            return -1;
        }
        key[used] = 0;
        return 0;
    }
    return json_equal(a, b) ? 0 : -1;
}

int mpx_train_state_same_config(json_t *a, json_t *b, char *key, size_t len)
{
    key[0] = 0;
    return diff_key(a, b, key, len, 0);
}

static int get_int(json_t *o, const char *k, int64_t *v)
{
    json_t *j = json_object_get(o, k);
    if (!json_is_integer(j)) return -1;
    *v = json_integer_value(j);
    return 0;
}

static double get_real(json_t *o, const char *k)
{
    json_t *j = json_object_get(o, k);
    return json_is_number(j) ? json_number_value(j) : NAN;
}

static int load_scaler(json_t *j, mpx_loss_scaler *ls)
{
    int64_t hyst = 0;
    const char *preset = json_string_value(json_object_get(j, "preset"));
    if (!preset || strcmp(preset, ls->preset) != 0 || get_int(j, "iter", &ls->iter) ||
        get_int(j, "last_overflow_iter", &ls->last_overflow_iter) || get_int(j, "growth_tracker", &ls->growth_tracker) ||
        get_int(j, "cur_hysteresis", &hyst) || get_int(j, "overflows", &ls->overflows) ||
        !json_is_number(json_object_get(j, "scale")))
        return -1;
    ls->cur_hysteresis = (int)hyst;
    ls->scale = json_number_value(json_object_get(j, "scale"));
    return 0;
}

static int load_diag(json_t *j, mpx_diagnostics *d)
{
    json_t *groups = json_object_get(j, "groups");
    if (!d->enabled) return 0;
    if (json_array_size(groups) != MPX_GROUP_COUNT) return -1;
    for (int g = 0; g < MPX_GROUP_COUNT; g++) {
        json_t *a = json_array_get(groups, (size_t)g);
        json_int_t u, st, r;
        mpx_diag_group *x = &d->g[g];
        if (json_unpack(a, "[F, F, F, I, I, I]", &x->sum_underflow, &x->sum_stalled, &x->sum_ratio, &u, &st, &r)) return -1;
        x->n_steps_u = u;
        x->n_steps_s = st;
        x->n_steps_r = r;
    }
    json_t *q = json_object_get(j, "gemm_in");   /* absent in checkpoints before ABI 1.8 */
    for (int g = 0; q && g <= MPX_GROUP_COUNT; g++) {
        json_int_t n;
        if (json_unpack(json_array_get(q, (size_t)g), "[F, F, I]", &d->gemm[g].sum_saturated, &d->gemm[g].sum_flushed, &n))
            return -1;
        d->gemm[g].n_steps = n;
    }
    d->seconds = get_real(j, "seconds");
    return 0;
}

static int read_buffers(mpx_session *s, const char *path, json_t *layout, char *err, size_t errlen)
{
    state_buf b[MAX_STATE_BUFS];
    size_t n = mpx_ts_buffers(s, b);
    if (json_array_size(layout) != n) {
        snprintf(err, errlen, "%s: holds %zu buffers, this run has %zu (another precision policy or optimizer?)",
                 path, json_array_size(layout), n);
        return -1;
    }
    int fd = open(path, O_RDONLY);
    if (fd < 0) { snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno)); return -1; }
    struct stat sb;
    uint64_t expect = 0;
    for (size_t i = 0; i < n; i++) expect += (uint64_t)b[i].numel * mpx_dtype_size(b[i].a.t);
    if (fstat(fd, &sb) != 0 || (uint64_t)sb.st_size != expect) {
        snprintf(err, errlen, "%s: %lld bytes, expected %llu (truncated or another model?)", path,
                 (long long)sb.st_size, (unsigned long long)expect);
        close(fd);
        return -1;
    }
    char *host = malloc(CHUNK);
    int rc = host ? 0 : -1;
    uint64_t file_off = 0;
    if (!host) snprintf(err, errlen, "out of memory staging %s", path);
    for (size_t i = 0; !rc && i < n; i++) {
        json_t *e = json_array_get(layout, i);
        const char *name = json_string_value(json_object_get(e, "name"));
        const char *dtype = json_string_value(json_object_get(e, "dtype"));
        int64_t numel = -1;
        get_int(e, "numel", &numel);
        if (!name || strcmp(name, b[i].name) || !dtype || strcmp(dtype, mpx_dtype_name(b[i].a.t)) ||
            numel != (int64_t)b[i].numel) {
            snprintf(err, errlen, "%s: buffer %zu is %s (%s, %lld elements); this run's is %s (%s, %zu elements)", path, i,
                     name ? name : "?", dtype ? dtype : "?", (long long)numel, b[i].name, mpx_dtype_name(b[i].a.t), b[i].numel);
            rc = -1;
            break;
        }
        /* the whole buffer, or this rank's slice of it (its padding past numel zeroed) */
        size_t es = mpx_dtype_size(b[i].a.t), lo = mpx_ts_sliced(s, &b[i]) ? s->shard_begin : 0;
        size_t hi = mpx_ts_sliced(s, &b[i]) ? s->shard_begin + s->shard_len : b[i].numel;
        if (hi > b[i].numel) hi = b[i].numel;
        if (lo > hi) lo = hi;
        size_t bytes = (hi - lo) * es;
        off_t at = (off_t)(file_off + lo * es);
        for (size_t done = 0; !rc && done < bytes; done += CHUNK) {
            size_t k = bytes - done < CHUNK ? bytes - done : CHUNK;
            if (mpx_ts_pread_all(fd, host, k, at + (off_t)done)) {
                snprintf(err, errlen, "cannot read %s (%s): %s", path, b[i].name, strerror(errno));
                rc = -1;
            } else if (s->ops->to_device(s->be, (char *)b[i].a.p + done, host, k)) {
                snprintf(err, errlen, "cannot copy the %s from %s to the backend", b[i].name, path);
                rc = -1;
            }
        }
        if (!rc && mpx_ts_sliced(s, &b[i]) && hi - lo < s->shard_len &&
            s->ops->fill_zero(s->be, (char *)b[i].a.p + bytes, (s->shard_len - (hi - lo)) * es)) {
            snprintf(err, errlen, "cannot zero the padding of the %s", b[i].name);
            rc = -1;
        }
        file_off += (uint64_t)b[i].numel * es;
    }
    free(host);
    close(fd);
    return rc;
}

static void replace_array(json_t *dst, json_t *src)
{
    json_array_clear(dst);
    if (json_is_array(src)) json_array_extend(dst, src);
}

/* metrics.csv / diagnostics.csv: the checkpoint's rows, appended to from here. */
static int restore_rows(const char *from, const char *dir, const char *name, FILE **f, char *err, size_t errlen)
{
    char src[PATH_MAX + 64], dst[PATH_MAX + 64];
    snprintf(src, sizeof src, "%s/%s", from, name);
    snprintf(dst, sizeof dst, "%s/%s", dir, name);
    if (!*f) return 0;
    fclose(*f);
    *f = NULL;
    if (mpx_ts_copy_file(src, dst, 0, err, errlen)) return -1;
    if (!(*f = mpx_fopen_nofollow(dst, 1))) {
        snprintf(err, errlen, "cannot append to %s: %s", dst, strerror(errno));
        return -1;
    }
    return 0;
}

/* <from>/state.json (its path into path), read and of this format and version; NULL with
 * err otherwise. */
static json_t *open_state(const char *from, char *path, size_t len, char *err, size_t errlen)
{
    snprintf(path, len, "%s/state.json", from);
    struct stat sb;
    int gone = lstat(path, &sb) != 0;
    if (gone || !S_ISREG(sb.st_mode)) {   /* never a link's target */
        snprintf(err, errlen, "%s: %s", path, gone ? strerror(errno) : "not a regular file (a link?)");
        return NULL;
    }
    json_error_t je;
    json_t *st = json_load_file(path, 0, &je);
    if (!st) { snprintf(err, errlen, "%s:%d: %s", path, je.line, je.text); return NULL; }
    const char *format = json_string_value(json_object_get(st, "format"));
    int64_t version = 0;
    if (!format || strcmp(format, STATE_FORMAT) || get_int(st, "version", &version) || version != STATE_VERSION) {
        snprintf(err, errlen, "%s: not an mpx training state of version %d", path, STATE_VERSION);
        json_decref(st);
        return NULL;
    }
    return st;
}

/* The first member at which JSON values a and b differ, as a dotted path after `prefix`
 * (compared whole: no neutral keys); 0 when equal. */
static int first_difference(json_t *a, json_t *b, const char *prefix, char *key, size_t len)
{
    if (json_is_object(a) && json_is_object(b)) {
        const char *k;
        json_t *v;
        char sub[256];
        json_object_foreach(a, k, v) {
            snprintf(sub, sizeof sub, "%s.%s", prefix, k);
            if (first_difference(v, json_object_get(b, k), sub, key, len)) return -1;
        }
        json_object_foreach(b, k, v) {
            if (json_object_get(a, k)) continue;
            snprintf(key, len, "%s.%s", prefix, k);
            return -1;
        }
        return 0;
    }
    if (a && b && json_equal(a, b)) return 0;
    snprintf(key, len, "%s", prefix);
    return -1;
}

/* Each file the checkpoint lists, hashed now against its sha256 then. The checkpoint's
 * own files (names without a '/', inside `from`) must all be there: state.bin,
 * metrics.csv and config.cfg at least. */
static int verify_files(const char *path, const char *from, json_t *files, int own, char *err, size_t errlen)
{
    static const char *const needed[] = { "state.bin", "metrics.csv", "config.cfg" };
    if (!json_is_object(files)) {
        snprintf(err, errlen, "%s: incomplete (%s)", path, own ? "files" : "data_files");
        return -1;
    }
    for (size_t i = 0; own && i < sizeof needed / sizeof *needed; i++)
        if (!json_is_string(json_object_get(files, needed[i]))) {
            snprintf(err, errlen, "%s: files: no checksum of %s", path, needed[i]);
            return -1;
        }
    const char *name;
    json_t *v;
    json_object_foreach(files, name, v) {
        char file[PATH_MAX + 300], hex[65], why[512];
        const char *want = json_string_value(v);
        if (own && (!name[0] || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, ".."))) {
            snprintf(err, errlen, "%s: files: \"%.200s\" is not a file of the checkpoint", path, name);
            return -1;
        }
        if (own) snprintf(file, sizeof file, "%s/%s", from, name);
        else snprintf(file, sizeof file, "%s", name);
        struct stat sb;
        if (!want || strlen(want) != 64) {
            snprintf(err, errlen, "%s: %s: \"%.200s\" has no sha256", path, own ? "files" : "data_files", name);
            return -1;
        }
        /* a checkpoint's file is never a link; a data file may be, but must be a file */
        int gone = (own ? lstat(file, &sb) : stat(file, &sb)) != 0;
        if (gone || !S_ISREG(sb.st_mode)) {
            snprintf(err, errlen, "%s: %s is %s", path, file,
                     gone ? strerror(errno) : "not a regular file (a link, folder or device?)");
            return -1;
        }
        if (mpx_sha256_file(file, hex, why, sizeof why)) {
            snprintf(err, errlen, "%s: %s", path, why);
            return -1;
        }
        if (strcmp(hex, want) != 0) {
            snprintf(err, errlen, own ? "%s: %s does not match its checksum (sha256 %.12s..., the checkpoint says %.12s...): "
                                        "corrupt or changed since it was written"
                                      : "%s: the data file %s changed since the checkpoint (sha256 %.12s..., then %.12s...)",
                     path, file, hex, want);
            return -1;
        }
    }
    return 0;
}

/* The run folder's record, when there is one, must be of the checkpoint's run: a
 * train_state dropped into another run's folder (say an fp16 run's into an fp32 folder)
 * would otherwise continue under that folder's name with its own configuration. */
static int same_run(const char *run_dir, json_t *config, char *err, size_t errlen)
{
    char path[PATH_MAX + 32], key[256];
    snprintf(path, sizeof path, "%s/run.json", run_dir);
    struct stat sb;
    if (lstat(path, &sb) != 0) {
        if (errno == ENOENT) return 0;   /* no record yet */
        snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
        return -1;
    }
    json_error_t je;
    json_t *rec = S_ISREG(sb.st_mode) ? json_load_file(path, 0, &je) : NULL;
    if (!rec) {
        snprintf(err, errlen, "%s: %s: cannot tell whose run this is", path,
                 S_ISREG(sb.st_mode) ? je.text : "not a regular file");
        return -1;
    }
    json_t *eff = json_object_get(json_object_get(rec, "config"), "effective");
    int rc = 0;
    if (!json_is_object(eff)) {
        snprintf(err, errlen, "%s: no config.effective: cannot tell whose run this is", path);
        rc = -1;
    } else if (mpx_train_state_same_config(eff, config, key, sizeof key)) {
        snprintf(err, errlen, "the checkpoint is not of the run in %s: its configuration differs from %s at %s", run_dir,
                 path, key);
        rc = -1;
    }
    json_decref(rec);
    return rc;
}

int mpx_train_state_precheck(const char *from, const char *run_dir, const mpx_session *s, char *err, size_t errlen)
{
    char path[PATH_MAX + 64], key[256], hex[65];
    json_t *st = open_state(from, path, sizeof path, err, errlen);
    if (!st) return -1;
    int rc = -1;
    int64_t v = 0, step = 0, total = 0, seed = 0;
    json_t *layout = json_object_get(st, "buffers"), *cfg = json_object_get(st, "config");
    const char *self = json_string_value(json_object_get(st, STATE_SELF_SUM));
    const char *cfg_sum = json_string_value(json_object_get(st, "config_sha256"));
    json_t *policy = mpx_ts_policy(s), *plugins = mpx_ts_plugins(s);
    if (!self || mpx_ts_json_sha256(st, hex) || strcmp(hex, self) != 0) {
        snprintf(err, errlen, "%s: does not match its own checksum (%s): edited or corrupt", path, STATE_SELF_SUM);
    } else if (!json_is_object(cfg) || !cfg_sum) {
        snprintf(err, errlen, "%s: incomplete (config, config_sha256)", path);
    } else if (mpx_train_state_same_config(s->set.config_json, cfg, key, sizeof key)) {
        snprintf(err, errlen, "%s: the checkpoint belongs to another configuration (it differs at %s)", path, key);
    } else if (same_run(run_dir, cfg, err, errlen)) {
        /* err says which */
    } else if (get_int(st, "step", &step) || get_int(st, "total_steps", &total) || get_int(st, "tick", &v) ||
               get_int(st, "seed", &seed) || get_int(st, "updates", &v) || get_int(st, "skipped", &v) ||
               get_int(st, "tokens_total", &v) || json_array_size(json_object_get(st, "data_position")) != 2 ||
               !json_is_object(json_object_get(st, "metrics")) || !json_is_array(layout)) {
        snprintf(err, errlen, "%s: incomplete (step, total_steps, tick, seed, updates, skipped, tokens_total, "
                 "data_position, metrics, buffers)", path);
    } else if (step < 1 || step >= total || (uint64_t)seed != s->seed) {
        /* (the loop writes one after a step and before the last: 1 <= step < total) */
        snprintf(err, errlen, "%s: step %lld of %lld (seed %lld): not a checkpoint of this run (seed %llu)", path,
                 (long long)step, (long long)total, (long long)seed, (unsigned long long)s->seed);
    } else if (first_difference(json_object_get(st, "policy"), policy, "policy", key, sizeof key)) {
        snprintf(err, errlen, "%s: the checkpoint was written under another precision policy (it differs at %s)", path, key);
    } else if (first_difference(json_object_get(st, "plugins"), plugins, "plugins", key, sizeof key)) {
        snprintf(err, errlen, "%s: the checkpoint was written by other plugins (they differ at %s)", path, key);
    } else {
        /* the stored configuration is the one its checksum was taken of */
        char *text = json_dumps(cfg, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENSURE_ASCII);
        uint8_t d[32];
        if (text) {
            mpx_sha256(text, strlen(text), d);
            mpx_sha256_hex(d, 32, hex);
        }
        free(text);
        /* state.bin: the buffers of its own table, back to back */
        uint64_t expect = 0;
        size_t i;
        for (i = 0; i < json_array_size(layout); i++) {
            json_t *e = json_array_get(layout, i);
            const char *dtype = json_string_value(json_object_get(e, "dtype"));
            int64_t numel = -1;
            mpx_dtype t;
            if (!dtype || mpx_dtype_parse(&s->fmts, dtype, &t) || get_int(e, "numel", &numel) || numel < 0 ||
                (uint64_t)numel > ((uint64_t)1 << 48))
                break;
            expect += (uint64_t)numel * mpx_dtype_size(t);
        }
        char bin[PATH_MAX + 64];
        snprintf(bin, sizeof bin, "%s/state.bin", from);
        struct stat sb;
        if (!text || strcmp(hex, cfg_sum) != 0)
            snprintf(err, errlen, "%s: config does not match config_sha256", path);
        else if (i < json_array_size(layout))
            snprintf(err, errlen, "%s: buffer %zu: no dtype this run knows, or no element count", path, i);
        else if (lstat(bin, &sb) != 0)
            snprintf(err, errlen, "cannot read %s: %s", bin, strerror(errno));
        else if (!S_ISREG(sb.st_mode))
            snprintf(err, errlen, "%s: not a regular file (a link?)", bin);
        else if ((uint64_t)sb.st_size != expect)
            snprintf(err, errlen, "%s: %lld bytes, its state.json says %llu (truncated?)", bin, (long long)sb.st_size,
                     (unsigned long long)expect);
        else if (!verify_files(path, from, json_object_get(st, "files"), 1, err, errlen) &&
                 !verify_files(path, from, json_object_get(st, "data_files"), 0, err, errlen))
            rc = 0;
    }
    json_decref(policy);
    json_decref(plugins);
    json_decref(st);
    return rc;
}

int mpx_train_state_load(const char *from, mpx_session *s, mpx_task *t, mpx_record *rec,
                         mpx_loss_scaler *ls, mpx_diagnostics *diag, mpx_train_progress *p,
                         json_t *metrics, char *err, size_t errlen)
{
    char path[PATH_MAX + 64], key[256];
    json_t *st = open_state(from, path, sizeof path, err, errlen);
    if (!st) return -1;
    int rc = -1;
    int64_t total = 0, tick = 0, seed = 0;
    json_t *pos = json_object_get(st, "data_position"), *m = json_object_get(st, "metrics");
    json_t *cfg = json_incref(s->set.config_json);
    if (mpx_train_state_same_config(cfg, json_object_get(st, "config"), key, sizeof key)) {
        snprintf(err, errlen, "%s: the checkpoint belongs to another configuration (it differs at %s)", path, key);
        goto out;
    }
    if (get_int(st, "step", &p->step) || get_int(st, "total_steps", &total) || get_int(st, "tick", &tick) ||
        get_int(st, "seed", &seed) || get_int(st, "updates", &p->updates) || get_int(st, "skipped", &p->skipped) ||
        get_int(st, "tokens_total", &p->tokens_total) || json_array_size(pos) != 2 || !json_is_object(m)) {
        snprintf(err, errlen, "%s: incomplete (step, total_steps, tick, seed, updates, skipped, tokens_total, "
                 "data_position, metrics)", path);
        goto out;
    }
    if (total != p->total || p->step < 1 || p->step >= total || (uint64_t)seed != s->seed) {
        snprintf(err, errlen, "%s: step %lld of %lld (seed %lld), but this run takes %lld steps (seed %llu)", path,
                 (long long)p->step, (long long)total, (long long)seed, (long long)p->total, (unsigned long long)s->seed);
        goto out;
    }
    if (load_scaler(json_object_get(st, "loss_scaler"), ls)) {
        snprintf(err, errlen, "%s: loss_scaler: incomplete or another preset than %s", path, ls->preset);
        goto out;
    }
    if (load_diag(json_object_get(st, "diagnostics"), diag)) {
        snprintf(err, errlen, "%s: diagnostics: incomplete", path);
        goto out;
    }
    if (s->prec.scaling == MPX_SCALING_DELAYED && mpx_scaling_restore(&s->scaling, json_object_get(st, "scaling"))) {
        snprintf(err, errlen, "%s: scaling: the delayed-scaling state is missing or malformed", path);
        goto out;
    }
    uint64_t dp[2] = { (uint64_t)json_integer_value(json_array_get(pos, 0)),
                       (uint64_t)json_integer_value(json_array_get(pos, 1)) };
    if (!t->seek) { snprintf(err, errlen, "task %s cannot resume its data order", t->name); goto out; }
    if (t->seek(t, s, dp, err, errlen)) goto out;
    snprintf(path, sizeof path, "%s/state.bin", from);
    if (read_buffers(s, path, json_object_get(st, "buffers"), err, errlen)) goto out;
    if (restore_rows(from, rec->dir, "metrics.csv", &rec->csv, err, errlen) ||
        restore_rows(from, rec->dir, "diagnostics.csv", &diag->csv, err, errlen))
        goto out;
    s->tick = (uint32_t)tick;
    p->first_loss = get_real(st, "first_loss");
    p->last_loss = get_real(st, "last_loss");
    p->elapsed = get_real(st, "elapsed_s");
    if (!isfinite(p->elapsed)) p->elapsed = 0;
    replace_array(p->losses, json_object_get(m, "losses"));
    replace_array(p->trace, json_object_get(m, "loss_scale_trace"));
    replace_array(p->overflows, json_object_get(m, "overflow_steps"));
    json_t *evals = json_object_get(m, "evals");
    if (json_array_size(evals)) json_object_set(metrics, "evals", evals);
    for (size_t i = 0; i < mpx_n_train_state_kept_metrics; i++) {
        json_t *v = json_object_get(m, mpx_train_state_kept_metrics[i]);
        if (v) json_object_set(metrics, mpx_train_state_kept_metrics[i], v);
    }
    json_t *resumed = json_object_get(rec->root, "resumed");
    if (!resumed) json_object_set_new(rec->root, "resumed", resumed = json_array());
    json_array_append_new(resumed, json_pack("{s:s, s:I}", "from", from, "step", (json_int_t)p->step));
    rc = 0;
out:
    json_decref(cfg);
    json_decref(st);
    return rc;
}
