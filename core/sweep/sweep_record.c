/* A sweep's records: reading a cell's state from its run.json, writing the record of a
 * cell that never ran (skipped / failed before start), and the sweep's index. */
#include "sweep.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "../record/record.h"

const char *mpx_rec_state_name(mpx_rec_state st)
{
    static const char *const names[] = { "none", "finished", "skipped", "failed", "killed",
                                         "running", "stale", "unreadable", "disk-full" };
    return (unsigned)st < sizeof names / sizeof *names ? names[st] : "?";
}

/* Is `pid` an mpx process that is still alive on this machine? */
static int mpx_alive(json_int_t pid, const char *host)
{
    char here[256] = "";
    if (pid <= 0) return 0;
    if (host && gethostname(here, sizeof here) == 0 && strcmp(here, host) != 0) return 1; /* cannot tell: assume alive */
    if (kill((pid_t)pid, 0) != 0 && errno != EPERM) return 0;
    char path[64], cmd[4096];
    snprintf(path, sizeof path, "/proc/%lld/cmdline", (long long)pid);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return 0;
    ssize_t n = read(fd, cmd, sizeof cmd - 1);
    close(fd);
    if (n <= 0) return 0;
    for (ssize_t i = 0; i < n; i++) if (!cmd[i]) cmd[i] = ' ';
    cmd[n] = 0;
    return strstr(cmd, "mpx") != NULL; /* a reused pid is not our run */
}

mpx_rec_state mpx_sweep_read_state(const char *dir, char *why, size_t len)
{
    char path[PATH_MAX + 16];
    why[0] = 0;
    snprintf(path, sizeof path, "%s/run.json", dir);
    if (access(path, F_OK) != 0) return MPX_REC_NONE;
    json_error_t e;
    json_t *j = json_load_file(path, 0, &e);
    if (!j) {
        snprintf(why, len, "%s:%d: %s", path, e.line, e.text);
        return MPX_REC_UNREADABLE;
    }
    const char *status = json_string_value(json_object_get(j, "status"));
    const char *reason = json_string_value(json_object_get(j, "reason"));
    const char *error = json_string_value(json_object_get(j, "error"));
    snprintf(why, len, "%s", reason ? reason : error ? error : "");
    mpx_rec_state st = MPX_REC_UNREADABLE;
    if (!status) snprintf(why, len, "%s: no \"status\"", path);
    else if (!strcmp(status, "finished")) st = MPX_REC_FINISHED;
    else if (!strcmp(status, "skipped")) st = MPX_REC_SKIPPED;
    else if (!strcmp(status, "failed")) {
        const char *kind = json_string_value(json_object_get(j, "error_kind"));
        st = kind && !strcmp(kind, MPX_ERROR_KIND_DISK_FULL) ? MPX_REC_DISK_FULL : MPX_REC_FAILED;
    }
    else if (!strcmp(status, "killed")) st = MPX_REC_KILLED;
    else if (!strcmp(status, "running")) {
        const char *host = json_string_value(json_object_get(json_object_get(j, "machine"), "hostname"));
        st = mpx_alive(json_integer_value(json_object_get(j, "pid")), host) ? MPX_REC_RUNNING : MPX_REC_STALE;
    } else snprintf(why, len, "%s: unknown status \"%s\"", path, status);
    json_decref(j);
    return st;
}

/* The last complete line of metrics.csv: step, loss, ..., elapsed_s (last column). */
static int last_row(const char *dir, long *step, double *loss, double *elapsed)
{
    char path[PATH_MAX + 16], buf[4096];
    snprintf(path, sizeof path, "%s/metrics.csv", dir);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    long off = 0;
    if (fseek(f, 0, SEEK_END) == 0) off = ftell(f);
    off = off > (long)sizeof buf - 1 ? off - (long)sizeof buf + 1 : 0;
    size_t n = fseek(f, off, SEEK_SET) == 0 ? fread(buf, 1, sizeof buf - 1, f) : 0;
    fclose(f);
    buf[n] = 0;
    char *end = strrchr(buf, '\n');
    if (!end) return -1;
    *end = 0;
    char *line = strrchr(buf, '\n');
    line = line ? line + 1 : buf;
    if (line[0] < '0' || line[0] > '9') return -1; /* the header */
    char *last = strrchr(line, ',');
    if (sscanf(line, "%ld,%lf", step, loss) != 2 || !last) return -1;
    *elapsed = strtod(last + 1, NULL);
    return 0;
}

int mpx_sweep_read_progress(const char *dir, mpx_cell_progress *p)
{
    if (p->total <= 0) {
        char path[PATH_MAX + 16];
        snprintf(path, sizeof path, "%s/run.json", dir);
        json_t *j = json_load_file(path, 0, NULL);
        p->total = (long)json_integer_value(json_object_get(json_object_get(j, "progress"), "total_steps"));
        json_decref(j);
    }
    long step;
    double loss, elapsed;
    if (last_row(dir, &step, &loss, &elapsed) != 0) return -1;
    p->step = step;
    p->loss = loss;
    p->elapsed_s = elapsed;
    return 0;
}

double mpx_cell_progress_eta(const mpx_cell_progress *p)
{
    if (p->total <= p->step + 1 || !(p->elapsed_s > 0)) return 0;
    return p->elapsed_s / (double)(p->step + 1) * (double)(p->total - p->step - 1);
}

/* "1 h 02 min", "43 min", "3 min 57 s", "12 s" */
static void duration(double s, char *out, size_t len)
{
    long t = s > 0 ? (long)(s + 0.5) : 0;
    if (t >= 3600) snprintf(out, len, "%ld h %02ld min", t / 3600, t / 60 % 60);
    else if (t >= 600) snprintf(out, len, "%ld min", (t + 30) / 60);
    else if (t >= 60) snprintf(out, len, "%ld min %ld s", t / 60, t % 60);
    else snprintf(out, len, "%ld s", t);
}

void mpx_sweep_progress_text(const char *dir, int running, char *out, size_t len)
{
    mpx_cell_progress p = { 0 };
    out[0] = 0;
    if (mpx_sweep_read_progress(dir, &p) != 0) return;
    char of[48] = "", in[32], left[32];
    if (p.total > 0) snprintf(of, sizeof of, " of %ld", p.total);
    if (!running) {
        snprintf(out, len, "stopped at step %ld%s", p.step + 1, of);
        return;
    }
    duration(p.elapsed_s, in, sizeof in);
    if (p.total > 0 && p.step + 1 >= p.total) {
        snprintf(out, len, "step %ld%s, loss %.4f, trained in %s; evaluating", p.step + 1, of, p.loss, in);
        return;
    }
    duration(mpx_cell_progress_eta(&p), left, sizeof left);
    if (p.total > 0)
        snprintf(out, len, "step %ld%s (%ld %%), loss %.4f, %s in, about %s of training left", p.step + 1, of,
                 100 * (p.step + 1) / p.total, p.loss, in, left);
    else
        snprintf(out, len, "step %ld, loss %.4f, %s in", p.step + 1, p.loss, in);
}

static json_t *cell_json(const mpx_sweep *sw, const mpx_sweep_cell *c)
{
    return json_pack("{s:s, s:s, s:s, s:O}", "sweep", sw->name, "name", c->name, "id", c->id, "axes", c->axes);
}

static json_t *strings(char *const *v, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(a, json_string(v[i]));
    return a;
}

int mpx_sweep_write_unrun(const mpx_sweep *sw, const mpx_sweep_cell *c, const char *status)
{
    char when[32], path[PATH_MAX + 16];
    if (mpx_mkdirs(c->dir) != 0) return -1;
    int skipped = !strcmp(status, "skipped");
    json_t *config = json_pack("{s:s, s:o}", "file", sw->base, "overrides", strings(c->overrides, c->n_overrides));
    if (c->effective) json_object_set(config, "effective", c->effective);
    json_t *j = json_pack("{s:i, s:s, s:s?, s:s?, s:o, s:o, s:s, s:s, s:o}", "schema_version", 1, "status", status,
                          "reason", skipped ? c->why : NULL, "error", skipped ? NULL : c->why,
                          "cell", cell_json(sw, c), "config", config, "finished", mpx_now_iso(when, sizeof when),
                          "updated", when, "metrics", json_object());
    if (!j) return -1;
    if (skipped) json_object_set_new(j, "error", json_null());
    snprintf(path, sizeof path, "%s/run.json", c->dir);
    int rc = mpx_write_json_atomic(path, j);
    json_decref(j);
    return rc;
}

static json_t *axes_json(const mpx_sweep *sw)
{
    json_t *axes = json_array();
    for (size_t i = 0; i < sw->n_axes; i++) {
        json_t *vals = json_array();
        for (size_t v = 0; v < sw->axes[i].n; v++) json_array_append(vals, sw->axes[i].value[v]);
        json_array_append_new(axes, json_pack("{s:s, s:o}", "key", sw->axes[i].key, "values", vals));
    }
    return axes;
}

int mpx_sweep_write_index(const mpx_sweep *sw, const char *sweep_dir, const mpx_sweep_cell *cells,
                          const char *const *states, const char *const *user_ov, size_t n_user)
{
    char when[32], path[PATH_MAX + 16];
    json_t *list = json_array(), *ov = json_array();
    for (size_t i = 0; i < n_user; i++) json_array_append_new(ov, json_string(user_ov[i]));
    for (size_t i = 0; i < sw->n_cells; i++) {
        const mpx_sweep_cell *c = &cells[i];
        const char *slash = strrchr(c->dir, '/');
        json_t *cj = json_pack("{s:s, s:s, s:s, s:s, s:O, s:s}", "name", c->name, "id", c->id,
                               "folder", slash ? slash + 1 : c->dir, "dir", c->dir, "axes", c->axes,
                               "state", states[i]);
        const char *why = !strcmp(states[i], "skipped") || !strcmp(states[i], "failed") ||
                          !strcmp(states[i], "disk-full") ? c->why : NULL;
        if (why && !why[0]) why = c->rec_why;
        if (cj && why && why[0]) json_object_set_new(cj, "reason", json_string(why));
        json_array_append_new(list, cj);
    }
    json_t *j = json_pack("{s:i, s:s, s:s, s:s, s:o, s:o, s:o, s:s}", "schema_version", 1, "name", sw->name,
                          "file", sw->file, "base", sw->base, "overrides", ov, "axes", axes_json(sw),
                          "cells", list, "updated", mpx_now_iso(when, sizeof when));
    if (!j || mpx_mkdirs(sweep_dir) != 0) {
        json_decref(j);
        return -1;
    }
    snprintf(path, sizeof path, "%s/sweep.json", sweep_dir);
    int rc = mpx_write_json_atomic(path, j);
    json_decref(j);
    return rc;
}

int mpx_sweep_mark_killed(const char *dir)
{
    char path[PATH_MAX + 16], when[32];
    snprintf(path, sizeof path, "%s/run.json", dir);
    json_t *j = json_load_file(path, 0, NULL);
    if (!j) return -1;
    json_object_set_new(j, "status", json_string("killed"));
    json_object_set_new(j, "error", json_string("the process died without writing its record (SIGKILL: the OOM "
                                                "killer or kill -9); found by the next mpx sweep"));
    json_object_set_new(j, "finished", json_string(mpx_now_iso(when, sizeof when)));
    int rc = mpx_write_json_atomic(path, j);
    json_decref(j);
    return rc;
}
