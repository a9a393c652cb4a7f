/* Shell helpers for the suites that run build/bin/mpx as a child process. Failures
 * assert (Criterion), naming the command or file. */
#ifndef MPX_TEST_SHELL_H
#define MPX_TEST_SHELL_H

#include <stddef.h>

/* A fresh folder /tmp/mpx-TAG-XXXXXX; the path lives until the test process exits
 * (do not free it). */
char *ts_tmpdir(const char *tag);

/* Runs the formatted command with /bin/sh; its stdout (whole, NUL-terminated) goes to
 * out when out is not NULL (truncated to len). Returns the exit code; a command killed
 * by a signal is a failed assertion. */
int ts_sh(char *out, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

void ts_write_file(const char *path, const char *text);

/* The whole file, NUL-terminated (malloc'd); its length in *n when n is not NULL. */
char *ts_slurp(const char *path, size_t *n);

/* Whether the files DIR/A/FILE and DIR/B/FILE hold the same bytes (each must exist). */
int ts_same_file(const char *dir, const char *a, const char *b, const char *file);

/* DIR/metrics.csv without its two timing columns (tokens/s, elapsed): what two runs
 * that should agree bitwise must share (malloc'd). */
char *ts_metrics_rows(const char *dir);

/* A JSON file (jansson; new reference), or a failed assertion naming file and line. */
struct json_t;
struct json_t *ts_load_json(const char *path);

/* The cell of a sweep index (sweep.json) whose "name" is NAME (borrowed), or a failed
 * assertion naming it. */
struct json_t *ts_sweep_cell(struct json_t *index, const char *name);

#endif
