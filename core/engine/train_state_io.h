/* Shared by the training state's save (train_state.c) and load (train_state_load.c):
 * the file's format tag, the state buffers a step depends on, and file helpers. Not
 * included elsewhere. */
#ifndef MPX_TRAIN_STATE_IO_H
#define MPX_TRAIN_STATE_IO_H

#include <stddef.h>
#include <sys/types.h>

#include <jansson.h>

#include "session_types.h"

#define STATE_FORMAT "mpx-train-state"
/* 2: state.json proves itself (state_sha256), its files (files: sha256 each), its
 * configuration (config_sha256), its data (data_files) and its policy and plugins */
#define STATE_VERSION 2
#define STATE_SELF_SUM "state_sha256"
#define CHUNK ((size_t)8 << 20) /* host staging for device buffers */

/* One buffer of the state: its name in state.json, where it lies, its length. */
typedef struct state_buf {
    const char *name;
    mpx_arg a;
    size_t numel;
} state_buf;

#define MAX_STATE_BUFS (3 + 2 * MPX_MAX_OPT_STATE)

/* The run.json metrics measured during training that a checkpoint keeps beside evals
 * (divergence.h), restored on resume. */
static const char *const mpx_train_state_kept_metrics[] = {
    "replica_divergence", "replica_divergence_trace", "grad_divergence", "grad_divergence_trace",
};
#define mpx_n_train_state_kept_metrics (sizeof mpx_train_state_kept_metrics / sizeof *mpx_train_state_kept_metrics)

/* The buffers the step depends on (weights, master, accumulator, optimizer state ...),
 * into out (MAX_STATE_BUFS); returns how many. */
size_t mpx_ts_buffers(const mpx_session *s, state_buf *out);
/* Whether this rank holds only a slice of b (stage >= 1 state, stage-3 weights). */
int mpx_ts_sliced(const mpx_session *s, const state_buf *b);
/* sha256 (hex) of state.json's object without its own STATE_SELF_SUM key, dumped compact
 * with sorted keys: what the save stores under that key and the resume recomputes.
 * Returns -1 when the object cannot be dumped. */
int mpx_ts_json_sha256(json_t *st, char hex[65]);
/* The policy and the plugins of a run, as its checkpoint keeps them (the plugins' names
 * and versions: their paths may differ on another machine). */
json_t *mpx_ts_policy(const mpx_session *s);
json_t *mpx_ts_plugins(const mpx_session *s);
int mpx_ts_pread_all(int fd, void *p, size_t n, off_t at);
/* Copies src to dst (fsync'd); optional: a missing src is not an error. */
int mpx_ts_copy_file(const char *src, const char *dst, int optional, char *err, size_t errlen);

#endif
