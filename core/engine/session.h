/* A session: one configuration, its loaded plugins and their instances, the host table
 * they call, and the counted model-state memory. `mpx check`, `mpx run` and `mpx eval`
 * each build one. This header is the session's lifecycle, the top of the engine's
 * set-up: session.c creates and owns the state (session_types.h) and calls the pieces
 * that serve it; none of them includes this header. */
#ifndef MPX_SESSION_H
#define MPX_SESSION_H

#include "host.h"
#include "session_types.h"

/* Scan plugin folders (cli_dirs first) — every command starts here. */
int mpx_session_open(mpx_session *s, const char *const *cli_dirs, size_t n_cli);

/* Load and validate the configuration against the core schema and the plugins found. */
int mpx_session_configure(mpx_session *s, const char *path, const char *const *overrides,
                          size_t n_overrides, char *err, size_t errlen);

/* Forget the configuration (and the selected plugins) but keep the scanned registry, so
 * that another configuration can be checked (mpx sweep's planner, mpx plugins --compat). */
void mpx_session_unconfigure(mpx_session *s);

/* Check the selected plugins exist and may be combined (declared incompatibilities, check
 * callbacks, and a policy's number formats against a backend without them). Returns 0,
 * or non-zero with every reason in err. */
int mpx_session_check_compat(mpx_session *s, char *err, size_t errlen);

/* The effective precision descriptor: the policy's defaults, then the core's keys. */
int mpx_session_precision(mpx_session *s, char *err, size_t errlen);
/* Non-zero, with the reason in err, when the policy's descriptor (s->prec) puts a number
 * format in any dtype and the backend runs none. mpx_session_check_compat calls it. */
int mpx_session_format_refused(mpx_session *s, char *err, size_t errlen);

/* Instantiate backend, precision (+ core overrides), comm, zero, model, optimizer. */
int mpx_session_start(mpx_session *s, char *err, size_t errlen);
/* Only its first part: the backend (`mpx plugins backend/NAME` describes it). */
int mpx_session_start_backend(mpx_session *s, char *err, size_t errlen);

/* The parameter layout and the memory plan (memory_plan.h), nothing allocated: refuses
 * sizes that overflow and a plan over run.max_memory or the machine's memory. */
int mpx_session_plan(mpx_session *s, char *err, size_t errlen);
/* The same for mpx eval: the plan counts what evaluation allocates (the weights and the
 * staging of the initial weights, memory_plan.h), against the same limit. */
int mpx_session_plan_eval(mpx_session *s, char *err, size_t errlen);

/* Allocate the flat model state and fill the weights from the model (checkpoint or
 * random init); max_batch/max_seq size the model's activations. */
int mpx_session_alloc_state(mpx_session *s, int max_batch, int max_seq, char *err, size_t errlen);
/* The same for evaluation only (mpx eval): the weights alone — no grads, master copy or
 * optimizer state — and the model bound forward-only (mpx_model_bind.grads.p NULL). */
int mpx_session_alloc_eval_state(mpx_session *s, int max_batch, int max_seq, char *err, size_t errlen);

/* The model's bound on the values of its int32 input `name` (mpx_model_vtable.input_limit,
 * ABI 1.14): 0 when no model is created yet, it has no such hook, or no bound. */
int64_t mpx_session_input_limit(const mpx_session *s, const char *name);

void mpx_session_close(mpx_session *s);

#endif
