/* Benchmark support (not a test): where a training step's time goes, by op class.
 * bench_profile_install() swaps the session's op table (s->ops, which the model reads at
 * bind) and the optimizer's step for timing wrappers that call the originals; every
 * call is timed on the calling thread while profiling is on (the optimizer's step on
 * several update threads: the sum of their times, and the updates they hand over are
 * applied afterwards, under "apply_update outside the optimizer"). Ops the wrappers do not
 * know (slots appended later) keep their originals and land in "not in ops". */
#ifndef MPX_BENCH_PROFILE_H
#define MPX_BENCH_PROFILE_H

#include "../core/engine/session.h"

/* Call after mpx_session_start and before mpx_session_alloc_state (the model binds
 * there and keeps the table it is given). Returns 0. */
int bench_profile_install(mpx_session *s);
/* A backend whose ops return before their work is done (cuda: kernels queued on a
 * stream) is timed with fn (a device synchronisation) called before and after each timed
 * call, so each op's time is its own work and launch; NULL (the default) calls nothing. */
void bench_profile_set_sync(void (*fn)(void));
/* Start (1) or stop (0) accumulating; bench_profile_reset() zeroes the sums. */
void bench_profile_enable(int on);
void bench_profile_reset(void);
/* Prints the per-class table for `steps` profiled steps (or forwards: `what` names them,
 * "a step's") whose sum was `total_s`, each line indented by two spaces. */
void bench_profile_print(const char *what, int steps, double total_s);
/* Seconds spent in GEMM ops (linear and attention) and in the attention op since the last
 * reset. */
double bench_profile_gemm_s(void);

#endif
