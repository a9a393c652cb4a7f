/* Reading run records back (for mpx matrix, diff and plot): run.json, values by dotted
 * path, metrics.csv columns, the run folders of a sweep, a run's display name. */
#ifndef MPX_SWEEP_READ_H
#define MPX_SWEEP_READ_H

#include <jansson.h>
#include <stddef.h>

/* DIR/run.json (new reference), or NULL with err naming the file, line and problem. */
json_t *mpx_run_load(const char *dir, char *err, size_t errlen);

/* 1 when DIR/run.json exists. */
int mpx_is_run_dir(const char *dir);

/* The value at a dotted path ("memory.bytes_per_param") or NULL (borrowed). */
json_t *mpx_json_path(json_t *root, const char *dotted);

/* A configuration key of a run: config.effective, else the sweep cell's axis value
 * (a skipped cell whose configuration could not be loaded still has those). Borrowed. */
json_t *mpx_run_config_value(json_t *run, const char *key);

/* A metric: run.json "metrics"[name], else the dotted path in run.json. 0 when it is a
 * number (booleans count as 0/1). */
int mpx_run_metric(json_t *run, const char *name, double *out);

/* One column of DIR/metrics.csv with its step column; a torn last line is ignored and
 * empty fields are NaN. 0 on success (caller frees *steps and *vals); -1 with err when
 * the file or the column is missing. */
int mpx_run_column(const char *dir, const char *column, double **steps, double **vals, size_t *n,
                   char *err, size_t errlen);

/* The run folders directly under DIR (those holding run.json), sorted by name. */
int mpx_list_runs(const char *dir, char ***dirs, size_t *n, char *err, size_t errlen);
void mpx_free_list(char **list, size_t n);

/* Objects flattened into out as "a.b.c" -> value (arrays and scalars are leaves). */
void mpx_json_flatten(json_t *obj, const char *prefix, json_t *out);

/* What to call a run in tables and legends: its sweep cell name, else run.name, else the
 * folder's name (mpx_run_labels_distinct then tells repeated ones apart). */
const char *mpx_run_label(const char *dir, json_t *run, char *buf, size_t len);

/* Runs from several sweeps share cell names (two sweeps' "bf16-master_1"): each label
 * that is not unique among the n runs gets the folders above its run folder in front, one
 * more level at a time ("lp-grads/bf16-master_1", then "ranks8/lp-grads/..."), until none
 * repeats; where the path has no more, "label (dir)". `runs` is an array of n structs of
 * `stride` bytes, each with a char[cap] label at offset label_at and the run folder, a
 * char *, at offset dir_at (offsetof). -1 when out of memory (the labels unchanged). */
int mpx_run_labels_distinct(void *runs, size_t n, size_t stride, size_t label_at, size_t dir_at, size_t cap);

/* A value as short text: strings unquoted, numbers as %.6g. */
const char *mpx_json_text(json_t *v, char *buf, size_t len);

#endif
