#include "record.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fsutil.h"
#include "notes.h"

/* ---- atomic JSON ------------------------------------------------------------------ */

void (*mpx_atomic_before_rename)(const char *tmp, const char *path);

int mpx_write_json_atomic(const char *path, json_t *j)
{
    char tmp[PATH_MAX + 32];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    int saved;
    /* a fresh file: a stale one (or a link planted there) is removed, never written through */
    unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0) return -1;
    errno = 0;   /* jansson sets none for a string that is not UTF-8 */
    int rc = json_dumpfd(j, fd, JSON_INDENT(2) | JSON_SORT_KEYS);
    saved = errno ? errno : EILSEQ;
    if (close(fd) != 0 && !rc) rc = -1, saved = errno;
    if (rc != 0) {
        unlink(tmp);
        errno = saved; /* the caller names the file and this errno (e.g. ENOSPC) */
        return -1;
    }
    if (mpx_atomic_before_rename) mpx_atomic_before_rename(tmp, path);
    if (rename(tmp, path) != 0) {
        saved = errno;
        unlink(tmp);
        errno = saved;
        return -1;
    }
    return 0;
}

int mpx_mkdirs(const char *path)
{
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return -1;
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0777) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(buf, 0777) != 0 && errno != EEXIST) return -1;
    return 0;
}

const char *mpx_now_iso(char *buf, size_t len)
{
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

int mpx_tail_loss_mean(const json_t *losses, double *out)
{
    size_t n = json_array_size(losses), from = n > MPX_TAIL_STEPS ? n - MPX_TAIL_STEPS : 0, used = 0;
    double sum = 0.0;
    for (size_t i = from; i < n; i++) {
        json_t *v = json_array_get(losses, i);
        if (!json_is_number(v) || !isfinite(json_number_value(v))) continue;
        sum += json_number_value(v);
        used++;
    }
    if (!used) return -1;
    *out = sum / (double)used;
    return 0;
}

/* ---- crash record ------------------------------------------------------------------
 * The "killed" record is rendered in advance as two halves around the signal number,
 * so the handler only calls async-signal-safe functions (open, write, rename). */

static struct {
    volatile sig_atomic_t armed;
    char path[PATH_MAX + 16];
    char tmp[PATH_MAX + 32];
    char *head, *tail;   /* ... "signal": <n>, ... */
    size_t head_len, tail_len;
} crash;

static const int fatal_signals[] = { SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTERM, SIGINT, SIGHUP };

static void crash_handler(int sig)
{
    if (crash.armed) {
        crash.armed = 0;
        int fd = open(crash.tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0666);
        if (fd >= 0) {
            char num[16];
            int n = 0, v = sig;
            char rev[16];
            do { rev[n++] = (char)('0' + v % 10); v /= 10; } while (v && n < 15);
            for (int i = 0; i < n; i++) num[i] = rev[n - 1 - i];
            /* a short write (full disk) must not replace the good record with a torn one */
            int whole = write(fd, crash.head, crash.head_len) == (ssize_t)crash.head_len &&
                        write(fd, num, (size_t)n) == (ssize_t)n &&
                        write(fd, crash.tail, crash.tail_len) == (ssize_t)crash.tail_len;
            if (close(fd) != 0) whole = 0;
            if (whole) rename(crash.tmp, crash.path);
            else unlink(crash.tmp);
        }
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Render the record as it would read if the process died now. */
static void render_crash(mpx_record *r)
{
    json_t *copy = json_deep_copy(r->root);
    if (!copy) return;
    char when[32];
    json_object_set_new(copy, "status", json_string("killed"));
    json_object_set_new(copy, "error", json_string("the process died on a signal during the run "
                                                   "(see \"signal\"; the step is in \"progress\")"));
    json_object_set_new(copy, "finished", json_string(mpx_now_iso(when, sizeof when)));
    json_object_set_new(copy, "signal", json_integer(-424242));
    char *text = json_dumps(copy, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(copy);
    if (!text) return;
    char *mark = strstr(text, "-424242");
    if (!mark) { free(text); return; }
    crash.armed = 0; /* not while the halves are swapped */
    free(crash.head);
    size_t head_len = (size_t)(mark - text);
    crash.tail = mark + strlen("-424242");
    crash.tail_len = strlen(crash.tail);
    crash.head = text;
    crash.head_len = head_len;
    crash.armed = 1;
}

static void arm_crash(mpx_record *r)
{
    snprintf(crash.path, sizeof crash.path, "%s", r->json_path);
    snprintf(crash.tmp, sizeof crash.tmp, "%s.crash", r->json_path);
    render_crash(r);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = crash_handler;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof fatal_signals / sizeof *fatal_signals; i++)
        sigaction(fatal_signals[i], &sa, NULL);
}

static void disarm_crash(void)
{
    crash.armed = 0;
    for (size_t i = 0; i < sizeof fatal_signals / sizeof *fatal_signals; i++)
        signal(fatal_signals[i], SIG_DFL);
    free(crash.head);
    crash.head = crash.tail = NULL;
}

/* ---- the record ------------------------------------------------------------------- */

/* The notes printed so far (notes.h), as "notes" (and "notes_dropped": how many more),
 * when there are any. */
static void keep_notes(mpx_record *r)
{
    size_t dropped = 0;
    json_t *notes = mpx_notes_copy(&dropped);
    if (notes) json_object_set_new(r->root, "notes", notes);
    if (dropped) json_object_set_new(r->root, "notes_dropped", json_integer((json_int_t)dropped));
}

int mpx_record_sync(mpx_record *r)
{
    char when[32];
    if (!r->json_path[0]) return 0; /* a rank other than 0: no files */
    json_object_set_new(r->root, "updated", json_string(mpx_now_iso(when, sizeof when)));
    keep_notes(r);
    if (mpx_write_json_atomic(r->json_path, r->root) != 0) return -1;
    if (crash.armed || crash.head) render_crash(r);
    return 0;
}

void mpx_record_open_quiet(mpx_record *r, const char *dir, json_t *root)
{
    memset(r, 0, sizeof *r);
    snprintf(r->dir, sizeof r->dir, "%s", dir);
    r->root = root;
    json_object_set_new(root, "status", json_string("running"));
}

int mpx_record_open(mpx_record *r, const char *dir, json_t *root, const char *const *columns,
                    size_t n_columns, char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    snprintf(r->dir, sizeof r->dir, "%s", dir);
    snprintf(r->json_path, sizeof r->json_path, "%s/run.json", dir);
    if (mpx_mkdirs(dir) != 0) {
        snprintf(err, errlen, "cannot create the run folder %s: %s", dir, strerror(errno));
        return -1;
    }
    char csv[PATH_MAX + 16];
    snprintf(csv, sizeof csv, "%s/metrics.csv", dir);
    r->csv = mpx_fopen_nofollow(csv, 0);
    if (!r->csv) {
        snprintf(err, errlen, "cannot write %s: %s", csv, strerror(errno));
        return -1;
    }
    r->columns = columns;
    r->n_columns = n_columns;
    for (size_t i = 0; i < n_columns; i++) fprintf(r->csv, "%s%s", i ? "," : "", columns[i]);
    fputc('\n', r->csv);
    fflush(r->csv);
    r->root = root;
    json_object_set_new(root, "status", json_string("running"));
    json_object_set_new(root, "error", json_null());
    if (mpx_record_sync(r) != 0) {
        snprintf(err, errlen, "cannot write %s: %s", r->json_path, strerror(errno));
        return -1;
    }
    arm_crash(r);
    return 0;
}

int mpx_record_row(mpx_record *r, const double *values)
{
    /* one buffered line, flushed whole: a crash tears at most the last line */
    char line[4096];
    size_t used = 0;
    if (!r->csv) return r->json_path[0] ? -1 : 0;
    for (size_t i = 0; i < r->n_columns && used < sizeof line - 40; i++) {
        if (i) line[used++] = ',';
        if (!isnan(values[i]))
            used += (size_t)snprintf(line + used, sizeof line - used, "%.9g", values[i]);
    }
    line[used++] = '\n';
    if (fwrite(line, 1, used, r->csv) != used || fflush(r->csv) != 0) return -1;
    return 0;
}

const char *mpx_disk_full_errno(const char *error)
{
    if (!error) return NULL;
    if (strstr(error, strerror(ENOSPC))) return "ENOSPC";
    if (strstr(error, strerror(EDQUOT))) return "EDQUOT";
    return NULL;
}

int mpx_record_close(mpx_record *r, const char *status, const char *error)
{
    char when[32];
    int rc = 0;
    disarm_crash();
    if (r->csv && fclose(r->csv) != 0) rc = -1;
    r->csv = NULL;
    json_object_set_new(r->root, "status", json_string(status));
    json_object_set_new(r->root, "error", error ? json_string(error) : json_null());
    /* a failure of the disk, not of the run: mpx sweep runs such a cell again */
    const char *disk = strcmp(status, "failed") ? NULL : mpx_disk_full_errno(error);
    json_object_del(r->root, "error_kind");
    json_object_del(r->root, "errno");
    if (disk) {
        json_object_set_new(r->root, "error_kind", json_string(MPX_ERROR_KIND_DISK_FULL));
        json_object_set_new(r->root, "errno", json_string(disk));
    }
    json_object_set_new(r->root, "finished", json_string(mpx_now_iso(when, sizeof when)));
    json_object_set_new(r->root, "updated", json_string(when));
    keep_notes(r);
    if (r->json_path[0] && mpx_write_json_atomic(r->json_path, r->root) != 0) rc = -1;
    return rc;
}
