/* The model-state memory a run will allocate, by role, computed from the parameter
 * count and the precision descriptor before anything is allocated, and refused when it
 * exceeds run.max_memory (or, when that is 0, the machine's physical memory). Counted
 * allocations remain the record's figures; the plan only guards against sizes from a
 * file that no machine could hold. Activations (the model's scratch) are not planned. */
#ifndef MPX_MEMORY_PLAN_H
#define MPX_MEMORY_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "session_types.h"

typedef struct mpx_memory_plan {
    uint64_t bytes[MPX_ROLE_COUNT];
    uint64_t host_staging;  /* the initial fp32 weights on the host */
    uint64_t total, limit;
    int overflow;           /* a product or sum did not fit 64 bits */
    int eval;               /* the forward-only plan of mpx eval */
} mpx_memory_plan;

/* The plan for s->numel parameters with n_state optimizer buffers. */
void mpx_memory_plan_make(const mpx_session *s, int n_state, mpx_memory_plan *p);

/* The plan of mpx eval: the weights and the staging of the initial weights alone (no
 * grads, master or optimizer state), against the same limit. */
void mpx_memory_plan_make_eval(const mpx_session *s, mpx_memory_plan *p);

/* 0, or -1 with the plan in err when it exceeds the limit. */
int mpx_memory_plan_check(const mpx_session *s, int n_state, char *err, size_t errlen);
int mpx_memory_plan_check_eval(const mpx_session *s, char *err, size_t errlen);

/* The plan as one line ("weights 90.4 MB, grads ..."). */
void mpx_memory_plan_text(const mpx_memory_plan *p, char *buf, size_t len);

#endif
