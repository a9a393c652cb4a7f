/* The optimizer's update on several threads (train.update_threads), bitwise the same as
 * on one.
 *
 * An optimizer that declares MPX_OPT_CONCURRENT (ABI 1.9, mpx/optimizer.h) computes each
 * element's update from that element alone, so the host may hand one step's pieces to
 * several threads at once. The pieces of a call (one update window, or the whole shard)
 * are cut into groups of about equal element count, contiguous in piece order; a piece
 * cut in two keeps its tensor, site and weight decay, and its second part's offset,
 * len and tensor_offset say where it lies (stochastic rounding draws what the whole
 * tensor draws). Each group is one `step` call with its own copy of the optimizer's
 * env, so error texts never mix; the first failing group's (in piece order) is
 * reported. apply_update is not called from the threads (the backend's ops are not
 * reentrant): the threads only record which piece was handed over with which update,
 * and the calling thread applies them afterwards in piece order, through the backend's
 * own threads. A piece's parameter is read only by that piece's update, before it is
 * applied, so applying after the step gives the same values. Where the host grants
 * MPX_STEP_ADD_IN_PLACE (mpx_opt_step_flags below), adam and adamw add their updates into
 * the param on those threads themselves, and nothing is left to apply.
 *
 * Not used (one thread, the step as before) when the optimizer does not declare it
 * (lamb, optimizers older than ABI 1.9), for optimizer state in fp16 or a format (its
 * per-tensor scale needs the whole piece), on a backend whose memory is not host
 * memory, or with one thread. */
#ifndef MPX_OPT_THREADS_H
#define MPX_OPT_THREADS_H

#include <stddef.h>

#include "mpx/optimizer.h"
#include "session_types.h"

typedef struct mpx_opt_threads mpx_opt_threads;
typedef struct mpx_opt_defer mpx_opt_defer;

/* The threads train.update_threads asks for: its value, or for 0 the backend's
 * (backend.<plugin>.threads when set above 0), else the cores this process may run on. */
int mpx_update_threads_wanted(const mpx_session *s);

/* Whether the session's optimizer may run on several threads (see above). */
int mpx_opt_concurrent(const mpx_session *s);

/* The pool and buffers for the session's optimizer, or *out = NULL when it runs on one
 * thread. 0, or -1 with err. */
int mpx_opt_threads_create(mpx_session *s, mpx_opt_threads **out, char *err, size_t errlen);
void mpx_opt_threads_free(mpx_opt_threads *t);

/* The threads the update runs on (1 for NULL). */
int mpx_opt_threads_count(const mpx_opt_threads *t);

/* Cuts pieces[0 .. n) (`total` elements in all, in piece order) into `groups` groups:
 * group g is elements [g * total / groups, (g + 1) * total / groups) of that order, its
 * pieces out[first[g] .. first[g] + count[g]). out needs n + groups - 1 entries.
 * Returns the number of pieces written. */
size_t mpx_split_pieces(const mpx_piece *pieces, size_t n, size_t total, size_t groups, mpx_piece *out,
                        size_t *first, size_t *count);

/* The MPX_STEP_* flags for a step of the session's optimizer (ABI 1.12):
 * MPX_STEP_ADD_IN_PLACE where apply_update would add the update into an fp32 param with
 * nearest rounding (the master; fp32 weights under `nearest`), on host memory or through
 * a fused_update that adds in place (MPX_OPS_FUSED_ADD_IN_PLACE, ABI 1.18), and
 * nothing reads the update afterwards (diag_active: a diagnostics step, which does). */
uint32_t mpx_opt_step_flags(const mpx_session *s, int diag_active);

/* The optimizer's step st over pieces indexed from `base` of this rank's slice (the
 * update window's start; 0 for the whole shard): on the session's threads when it has
 * them, else one call as before. 0, or -1 with the optimizer's prefixed message in err. */
int mpx_opt_run(mpx_session *s, const mpx_opt_step *st, size_t base, char *err, size_t errlen);

/* host->apply_update from a thread of mpx_opt_run: records the piece and its update. */
int mpx_opt_defer_apply(mpx_opt_defer *d, mpx_env *env, const mpx_piece *piece, const float *update);

#endif
