/* Per-tensor scaling recipes for GEMM inputs in 8-bit formats (ABI 1.2, host->tensor_scale):
 * delayed (Transformer Engine's DelayedScaling: a window of earlier steps' amaxes) and
 * current (this tensor's amax now). Scales and amax histories are run state: run.json
 * records them (metrics.scaling); a checkpoint that keeps run state should save
 * mpx_scaling_state_json and restore it with mpx_scaling_state_load. */
#ifndef MPX_SCALING_H
#define MPX_SCALING_H

#include <jansson.h>
#include <stddef.h>

#include "mpx/mpx.h"

/* TE's amax_and_scale_update for one tensor: rolls `hist` (len entries; hist[0] is the
 * slot the current step fills) and returns the new scale: (fmt_max * 2^-margin) / amax,
 * with amax the window's max or hist[0] (most_recent); the old scale when that amax is 0
 * or not finite. */
float mpx_delayed_update(float *hist, int len, mpx_amax_algo algo, float fmt_max, int margin, float old_scale);

/* Current scaling: (fmt_max * 2^-margin) / amax; 1 when amax is 0 or not finite. */
float mpx_current_scale(float amax, float fmt_max, int margin);

typedef struct mpx_scale_entry {
    mpx_dtype t;
    const void *key;
    char name[80];
    float scale, fmt_max;
    float *hist;        /* amax_history_len entries */
    int64_t uses;
} mpx_scale_entry;

/* A restored entry waiting for its tensor: keys are addresses, which a new process does
 * not share, so a checkpoint names entries and the first use of that name adopts it. */
typedef struct mpx_scale_pending {
    mpx_dtype t;
    char name[80];
    float scale;
    float *hist;
    int64_t uses;
} mpx_scale_pending;

typedef struct mpx_scaling_state {
    mpx_scaling recipe;
    int len;
    mpx_amax_algo algo;
    int margin;
    mpx_scale_entry *e;
    size_t n, cap;
    int64_t steps;
    json_t *trace;      /* [step, min scale, max scale] per format, every step */
    mpx_scale_pending *pending;
    size_t n_pending;
} mpx_scaling_state;

void mpx_scaling_init(mpx_scaling_state *st, const mpx_precision_desc *d);
void mpx_scaling_free(mpx_scaling_state *st);

/* The scale for `key` in format `f` (dtype t) given its amax now; `name` labels a new
 * entry. Returns 0, or -1 out of memory. */
int mpx_scaling_get(mpx_scaling_state *st, mpx_dtype t, const mpx_format *f, const void *key,
                    const char *name, float amax, float *scale);

/* After each optimizer step (taken or skipped): delayed histories roll, scales update. */
void mpx_scaling_end_step(mpx_scaling_state *st);

/* What running a step advances (each tensor's use count and the amax slot the step
 * fills), saved before a step's forward and backward are run a second time and put back
 * after, so that the step counts once (nonfinite.c's locate pass). Save returns -1 out of
 * memory; restore also drops the entries made since and frees the mark. */
typedef struct mpx_scaling_mark {
    size_t n;
    int64_t *uses;
    float *amax;
} mpx_scaling_mark;
int mpx_scaling_mark_save(const mpx_scaling_state *st, mpx_scaling_mark *m);
void mpx_scaling_mark_restore(mpx_scaling_state *st, mpx_scaling_mark *m);

/* The recipe, every tensor's scale and amax history, and the per-step trace. */
struct mpx_format_table;
json_t *mpx_scaling_state_json(const mpx_scaling_state *st, const struct mpx_format_table *fmts);

/* The exact state (every float as its bit pattern) for a training-state checkpoint, and
 * its restoration into a state set up for the same configuration; -1 if malformed. */
json_t *mpx_scaling_checkpoint(const mpx_scaling_state *st);
int mpx_scaling_restore(mpx_scaling_state *st, json_t *j);

#endif
