/* What precision did to a run, per parameter group (embedding, attention, ffn, norm,
 * head), on every logged step (train.diagnostics, every train.log_every steps):
 *   underflow  of the gradient elements whose fp32 value is non-zero, the fraction that
 *              rounds to ±0 in the grads' storage dtype (0 when grads are fp32; an
 *              8-bit format by its own subnormals, e.g. E5M2 below 2^-17);
 *   stalled    of the weights whose update was non-zero, the fraction whose stored value
 *              (in the weights' dtype) did not change;
 *   median |update| / |weight| over the elements with a non-zero weight (a sample of
 *              at most 65,536 per group);
 *   GEMM inputs in an 8-bit format (ABI 1.8, host->gemm_input_stats): of the non-zero
 *              elements of the inputs of the group's GEMMs — a GEMM belongs to the group
 *              of its weight operand, forward and backward, both operands counted — the
 *              fraction that saturated (scaled magnitude above the format's largest
 *              finite value) and the fraction flushed to ±0, and the smallest and largest
 *              per-tensor scale applied (the scale trace; empty for MX, whose scales are
 *              per block). GEMMs without a weight operand (attention's scores and
 *              context) make a row of their own, group "no_weight". Counted over every
 *              micro-batch of the diagnostic step; empty when the group had none.
 * For the fp32 value of a 16-bit gradient the model writes that step's gradients into an
 * fp32 buffer (model set_grads), which the host then rounds into the real grads once —
 * as the backward would have, except that micro-batch accumulation and repeated
 * embedding rows sum in fp32 on those steps. Rows go to <run>/diagnostics.csv. */
#ifndef MPX_DIAGNOSTICS_H
#define MPX_DIAGNOSTICS_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

#include "session_types.h"

/* Of n fp32 gradient values, how many are non-zero and how many of those round to ±0
 * in dtype t (none for fp32). */
void mpx_diag_underflow(const float *g, size_t n, mpx_dtype t, uint64_t *nonzero, uint64_t *underflow);

/* The same for a number format (ABI 1.2): rounding to nearest even in format f. */
void mpx_diag_underflow_fmt(const float *g, size_t n, const mpx_format *f, uint64_t *nonzero, uint64_t *underflow);

/* Of n elements whose update is non-zero, how many stored values (bit patterns of dtype t,
 * before and after the step) did not change. */
void mpx_diag_stalled(const void *before, const void *after, mpx_dtype t, const float *update, size_t n,
                      uint64_t *updated, uint64_t *stalled);

/* The median of n floats (reorders them); NaN when n = 0. */
double mpx_diag_median(float *v, size_t n);

typedef struct mpx_diag_group {
    uint64_t grad_nonzero, underflow, updated, stalled;
    float *ratios;
    size_t n_ratios;
    double sum_underflow, sum_stalled, sum_ratio; /* over diagnostic steps, for the summary */
    int64_t n_steps_u, n_steps_s, n_steps_r;
} mpx_diag_group;

#define MPX_DIAG_NO_WEIGHT "no_weight"

typedef struct mpx_diag_gemm {
    double sum_saturated, sum_flushed; /* over diagnostic steps, for the summary */
    int64_t n_steps;
} mpx_diag_gemm;

typedef struct mpx_diagnostics {
    int enabled;
    int64_t every;
    int active;              /* this step is a diagnostic step */
    int shadowing;           /* the model writes fp32 grads into `shadow` this step */
    FILE *csv;
    mpx_arg shadow;          /* fp32 grads (scratch), when grads are 16-bit */
    void *wprev;             /* the weights before the update (scratch): whole, or one update window */
    size_t wprev_at;         /* the weights' element wprev[0] holds */
    float *h_a, *h_b, *h_c;  /* host chunks */
    uint8_t *group_of;       /* per parameter */
    mpx_diag_group g[MPX_GROUP_COUNT];
    mpx_diag_gemm gemm[MPX_GROUP_COUNT + 1]; /* + the GEMMs without a weight operand */
    double seconds;          /* time spent on diagnostics */
} mpx_diagnostics;

int mpx_diag_open(mpx_diagnostics *d, mpx_session *s, const char *dir, char *err, size_t errlen);
/* Decide whether `step` is a diagnostic step; if so, and grads are 16-bit, point the
 * model's gradients at the fp32 shadow. */
int mpx_diag_begin_step(mpx_diagnostics *d, mpx_session *s, int64_t step, int64_t total);
/* After micro-batch `micro` (of n_micro): count underflow and round the shadow into the
 * grads — every micro-batch when the policy has a wider accumulator, else after the last. */
int mpx_diag_after_backward(mpx_diagnostics *d, mpx_session *s, int64_t micro, int64_t n_micro);
/* Before the update: the fp32 grads' non-zero counts and (whole-shard step) a copy of
 * the weights. */
int mpx_diag_before_update(mpx_diagnostics *d, mpx_session *s);
/* The windowed step, before window [base, base + len) of the slice is updated: a copy of
 * its weights (one window's buffer). */
int mpx_diag_before_window(mpx_diagnostics *d, mpx_session *s, size_t base, size_t len);
/* Stalls and update ratios of elements [from, from + len) of piece pc (a shard piece),
 * whose update values are update[0 .. len): after the update of a window (the
 * windowed step) or of the whole shard. Nothing when the step is not a diagnostic one. */
int mpx_diag_piece_updates(mpx_diagnostics *d, mpx_session *s, const mpx_piece *pc, size_t from, size_t len,
                           const float *update);
/* After the update (or the skip): count stalls and ratios (whole-shard step), write the
 * step's rows. */
int mpx_diag_end_step(mpx_diagnostics *d, mpx_session *s, int64_t step, int updated);
/* Means over the diagnostic steps, per group, into `metrics`. */
void mpx_diag_summary(mpx_diagnostics *d, json_t *metrics);
void mpx_diag_close(mpx_diagnostics *d, mpx_session *s);

#endif
