/* Run records (DESIGN, Records): <dir>/run.json, rewritten atomically (temp file +
 * rename) at the start, at every logged step and at the end; <dir>/metrics.csv, one row
 * per step appended as the run goes. A run that dies on a catchable signal (the fault
 * hook raises SIGABRT) still leaves run.json saying "killed", written from a record
 * rendered in advance; one killed by SIGKILL leaves "running" with its last step, which
 * readers treat as unfinished. */
#ifndef MPX_RECORD_H
#define MPX_RECORD_H

#include <jansson.h>
#include <limits.h>
#include <stdio.h>

typedef struct mpx_record {
    char dir[PATH_MAX];
    char json_path[PATH_MAX + 16];
    json_t *root;            /* the record; callers add to root["metrics"] etc. */
    FILE *csv;
    const char *const *columns;
    size_t n_columns;
} mpx_record;

/* Create `dir` (and parents), start metrics.csv with `columns`, write run.json with
 * status "running", and arm the crash handler. */
int mpx_record_open(mpx_record *r, const char *dir, json_t *root, const char *const *columns,
                    size_t n_columns, char *err, size_t errlen);

/* A record kept in memory only, writing no file (rows, syncs and close do nothing on
 * disk): the ranks other than 0 of a multi-rank run. r->dir is still `dir`. */
void mpx_record_open_quiet(mpx_record *r, const char *dir, json_t *root);

/* Append one metrics row (values in column order; NaN written as empty). */
int mpx_record_row(mpx_record *r, const double *values);

/* Rewrite run.json atomically with the current root (status unchanged). */
int mpx_record_sync(mpx_record *r);

/* Set status ("finished", "failed") and error (NULL = none), write, disarm. A failure
 * for want of disk space also gets "error_kind": "disk_full" and "errno" ("ENOSPC" or
 * "EDQUOT") beside its error: not the run's fault, so mpx sweep runs it again. */
int mpx_record_close(mpx_record *r, const char *status, const char *error);

#define MPX_ERROR_KIND_DISK_FULL "disk_full"

/* "ENOSPC" or "EDQUOT" when the error message says a write failed for want of space
 * (every write error in mpx ends in strerror(errno), after the file), else NULL. */
const char *mpx_disk_full_errno(const char *error);

/* Write `j` to `path` atomically (temp file in the same folder + rename). */
int mpx_write_json_atomic(const char *path, json_t *j);
/* Tests: when set, mpx_write_json_atomic calls it with its temporary (written whole and
 * closed) and the path it is about to replace, before the rename (the sweep's fault hook
 * cuts the temporary and dies there: sweep_fault.c). NULL otherwise. */
extern void (*mpx_atomic_before_rename)(const char *tmp, const char *path);

/* mkdir -p */
int mpx_mkdirs(const char *path);

/* The steps final_loss_mean averages: the last MPX_TAIL_STEPS of the run (all of them
 * when it has fewer). */
#define MPX_TAIL_STEPS 200

/* The mean of the finite losses among the last MPX_TAIL_STEPS entries of `losses` (a
 * run.json's metrics.losses: one number per step, null where the loss was not finite):
 * the end-of-training loss a record reports as final_loss_mean, steadier than
 * final_loss, which is one step's loss (one batch of 3 windows moves it by a nat).
 * 0, or -1 when there is no finite loss among them (or `losses` is not an array). */
int mpx_tail_loss_mean(const json_t *losses, double *out);

/* ISO-8601 UTC time now. */
const char *mpx_now_iso(char *buf, size_t len);

#endif
