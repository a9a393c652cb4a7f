/* The host table plugins call (mpx_core_host, host.c) and the session services the
 * engine's pieces share: counted allocation, plugin error text, tensor names, the 8-bit
 * GEMM-input counts and per-parameter GEMM dtypes. Serves the session and its pieces;
 * includes only session_types.h below it. */
#ifndef MPX_HOST_H
#define MPX_HOST_H

#include "session_types.h"

extern const mpx_host mpx_core_host;

/* Counted allocation outside any plugin (the core's own model-state buffers). */
void *mpx_session_alloc(mpx_session *s, mpx_role role, size_t bytes, const char *what);

/* Error text of the instance of `kind`, prefixed with its KIND/NAME. */
const char *mpx_session_error(mpx_session *s, mpx_kind kind, char *buf, size_t len);

/* Build s->param_gemm (ABI 1.3) once the model exists; 0 or -1 with err. */
/* Whether the selected backend runs the number formats (MPX_OPS_FORMATS; a backend built
 * before ABI 1.15 is taken to). */
int mpx_session_backend_formats(const mpx_session *s);
int mpx_session_param_gemm(mpx_session *s, char *err, size_t errlen);

/* A name for the tensor at `p` (a parameter's name, or the buffer holding it). */
void mpx_session_tensor_name(const mpx_session *s, const void *p, char *buf, size_t len);
/* Zero the 8-bit GEMM-input counts (mpx_session.gemm_in). */
void mpx_session_gemm_in_reset(mpx_session *s);

#endif
