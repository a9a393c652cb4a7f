/* Training-state checkpoints (train.checkpoint_every) and `mpx run --resume DIR`.
 *
 * <run>/train_state/ holds everything the next step depends on, so that a resumed run
 * equals an uninterrupted one bitwise:
 *   state.bin        the flat model-state buffers as stored (weights, master, Kahan
 *                    compensation, optimizer state), in their own dtypes, always whole:
 *                    with ranks, the slices a ZeRO stage partitions are all-gathered
 *                    for rank 0 to write, and each rank reads back its own slice
 *   state.json       format and version, the step to run next, the Philox tick, the
 *                    optimizer's update count, the loss-scaler state, the data order
 *                    position (epoch, cursor), the schedule position, the metrics so far
 *                    (losses, scale trace, overflow steps, evaluations, diagnostics sums)
 *                    and the layout of state.bin; and what the resume verifies: the
 *                    sha256 of every other file here, of the configuration, of the data
 *                    files the run read, the policy and the plugins' versions, and its
 *                    own sha256 (state_sha256, over the rest of it)
 *   config.cfg       the effective configuration (what `--resume DIR` alone runs)
 *   metrics.csv, diagnostics.csv   the record's rows up to the checkpoint
 * The folder is written as train_state.tmp, every file synced, then swapped in with two
 * renames (the previous one goes to train_state.old first, removed last), so a crash at
 * any moment leaves a whole checkpoint: train_state, or train_state.old between the
 * renames. Dropout, stochastic rounding and shuffling draw from Philox counters derived
 * from the step, so restoring the step restores the random streams. */
#ifndef MPX_TRAIN_STATE_H
#define MPX_TRAIN_STATE_H

#include <jansson.h>
#include <stdint.h>

#include "diagnostics.h"
#include "loss_scaler.h"
#include "../record/record.h"
#include "task.h"

/* Where the training loop stands: what a checkpoint saves beyond the buffers. */
typedef struct mpx_train_progress {
    int64_t step;            /* the next step to run */
    int64_t total;           /* steps the run takes */
    int64_t updates, skipped, tokens_total;
    double first_loss, last_loss, elapsed;
    json_t *trace, *losses, *overflows;  /* the loop's metric arrays (borrowed) */
} mpx_train_progress;

/* The folder of the checkpoint to resume from in run folder `dir` (train_state, or
 * train_state.old when a crash fell between the two renames), or -1 when there is none. */
int mpx_train_state_find(const char *dir, char *path, size_t len);

/* Remove the training state of run folder `dir` (a finished run needs none). */
void mpx_train_state_remove(const char *dir);

/* Write <rec->dir>/train_state atomically for the loop at `p`. */
int mpx_train_state_save(mpx_session *s, mpx_task *t, mpx_record *rec, const mpx_loss_scaler *ls,
                         const mpx_diagnostics *diag, const mpx_train_progress *p, json_t *metrics,
                         char *err, size_t errlen);

/* What can be checked of checkpoint folder `from` before anything of run folder
 * `run_dir` is touched (mpx run --resume calls it before the record is opened, so that a
 * refusal leaves every file as it was): state.json readable, of this format and
 * version, matching its own checksum; of this configuration (naming the first key that
 * differs, neutral keys aside) and of the run whose record is in run_dir (run.json's
 * configuration); of this seed, precision policy and plugins (names and versions); with
 * every field the load reads; state.bin exactly as long as its own buffer table says;
 * state.bin, metrics.csv, diagnostics.csv and config.cfg matching their sha256, and the
 * data files the run read matching theirs. The session's policy must be resolved
 * (mpx_session_precision). The load checks the rest (the buffers against this run's,
 * the step count against this run's data). */
int mpx_train_state_precheck(const char *from, const char *run_dir, const mpx_session *s, char *err, size_t errlen);

/* Restore the checkpoint folder `from` into a session, task, record and loop set up as
 * for a fresh run of the same configuration; refuses (naming the key, buffer or file) a
 * checkpoint that does not belong to this configuration. */
int mpx_train_state_load(const char *from, mpx_session *s, mpx_task *t, mpx_record *rec,
                         mpx_loss_scaler *ls, mpx_diagnostics *diag, mpx_train_progress *p,
                         json_t *metrics, char *err, size_t errlen);

/* Whether the effective configurations a and b (mpx_config_to_json) are the same run:
 * equal except for train.checkpoint_every, run.name, run.output_dir and the keys that
 * change no bit of the results (train.update_chunk, train.update_threads,
 * backend.<plugin>.threads). Returns 0, or -1 with the first differing key in `key`. */
int mpx_train_state_same_config(json_t *a, json_t *b, char *key, size_t len);

#endif
