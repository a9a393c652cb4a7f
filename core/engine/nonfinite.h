/* Stopping on NaN/inf where no loss scaler can handle it (precision.loss_scale "none":
 * fp32, bf16-master, pure-bf16), naming the step, the op and the tensor.
 *
 * The cost in a normal step is nothing new: the loop already counts the non-finite
 * values of the reduced gradient (the overflow check) and has the loss. Only when one of
 * them is non-finite does the "locate" pass run: the step's micro-batches are run again
 * (same data, same Philox ticks, so the same values) with every op's output checked, and
 * the first op whose output holds a NaN or inf is named — forward or backward, its index
 * in that pass, its output shape and dtype, the parameter it reads or whose gradient it
 * writes (or, for ops on activations only, the last parameter read before it), plus any
 * weights already non-finite before the step. What running the step advances (the
 * delayed-scaling use counts and amax slot, the 8-bit GEMM-input counts) is put back as
 * the step's first run left it, so the step counts once; the loop writes that step's
 * diagnostics row before the pass, and stops before the loss scaler, the optimizer and
 * the scaling update see the step.
 *
 * The checking wrappers go into the session's own copy of the backend's op table (which
 * the model binds to) only for the locate pass; slots they do not know keep the
 * backend's functions. They find their pass through one file-level pointer, set only
 * while a pass runs (the core runs one session per process, ops are called from the
 * loop's thread). */
#ifndef MPX_NONFINITE_H
#define MPX_NONFINITE_H

#include <jansson.h>
#include <stdint.h>

#include "session_types.h"

/* At session start: s->ops becomes the session's copy of the backend's table. */
int mpx_nonfinite_own_ops(mpx_session *s, char *err, size_t errlen);
void mpx_nonfinite_free_ops(mpx_session *s);

/* Begin a locate pass (the wrappers in, counting from forward op 0). */
int mpx_nonfinite_begin(mpx_session *s, char *err, size_t errlen);
/* The loop says where it is: before each micro-batch's forward (backward = 0) and before
 * its backward (1). Nothing when no pass runs. */
void mpx_nonfinite_phase(int backward);
/* End the pass (the backend's functions and the step's counts back) and write what it found into err
 * ("step N: non-finite in ...") and metrics.nonfinite; `loss` is the step's loss. */
void mpx_nonfinite_end(mpx_session *s, int64_t step, double loss, json_t *metrics, char *err, size_t errlen);

#endif
