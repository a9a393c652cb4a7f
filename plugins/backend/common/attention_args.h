/* What every backend checks first in its attention op (ABI 1.11, mpx_attention in
 * mpx/ops.h; cpu_attention.c, cuda_attention.c): the struct's size, the shape, p, and
 * the list of buffers with the element count each must hold. Each backend then checks
 * the buffers with its own rules (dtypes it stores, NULL pointers). Header-only: the
 * backends are separate plugins. */
#ifndef MPX_BACKEND_ATTENTION_ARGS_H
#define MPX_BACKEND_ATTENTION_ARGS_H

#include <stdio.h>

#include "mpx/mpx.h"

typedef struct attention_buf {
    const char *name;
    mpx_arg a;
    size_t n;        /* elements it must hold (0: only its dtype is checked) */
    int optional;    /* a NULL pointer is allowed */
} attention_buf;

#define ATTENTION_BUFS 12

/* 0 with the buffers in `out` (their number in *n_out), or -1 with the reason in why. */
static inline int attention_args(const mpx_attention *a, int bwd, attention_buf out[ATTENTION_BUFS], int *n_out,
                                 char *why, size_t why_len)
{
    if (!a) return snprintf(why, why_len, "no arguments"), -1;
    if (a->size < sizeof *a)
        return snprintf(why, why_len, "mpx_attention of %u bytes, this backend reads %zu", (unsigned)a->size,
                        sizeof *a), -1;
    if (a->batch < 0 || a->heads < 1 || a->seq < 0 || a->head_dim < 1 || a->ld < a->heads * a->head_dim)
        return snprintf(why, why_len, "bad shape batch=%d heads=%d seq=%d head_dim=%d ld=%d", a->batch, a->heads,
                        a->seq, a->head_dim, a->ld), -1;
    if (!(a->p >= 0.0f && a->p <= 1.0f)) return snprintf(why, why_len, "p = %g is outside [0, 1]", (double)a->p), -1;
    if (a->mask.p && a->mask.t != MPX_F32) return snprintf(why, why_len, "the mask must be fp32"), -1;
    const size_t rows = (size_t)a->batch * (size_t)a->seq, S = (size_t)a->seq;
    const size_t span = rows ? (rows - 1) * (size_t)a->ld + (size_t)a->heads * (size_t)a->head_dim : 0;
    const size_t n_probs = (size_t)a->batch * (size_t)a->heads * S * S;
    int n = 0;
    out[n++] = (attention_buf){ "q", a->q, span, 0 };
    out[n++] = (attention_buf){ "k", a->k, span, 0 };
    out[n++] = (attention_buf){ "v", a->v, span, 0 };
    out[n++] = (attention_buf){ "mask", a->mask, rows, 1 };
    if (bwd) {
        out[n++] = (attention_buf){ "probs", a->probs, n_probs, 0 };
        out[n++] = (attention_buf){ "dctx", a->dctx, span, 0 };
        out[n++] = (attention_buf){ "dq", a->dq, span, 0 };
        out[n++] = (attention_buf){ "dk", a->dk, span, 0 };
        out[n++] = (attention_buf){ "dv", a->dv, span, 0 };
    } else {
        out[n++] = (attention_buf){ "ctx", a->ctx, span, 0 };
        out[n++] = (attention_buf){ "probs", a->probs, n_probs, 1 };
    }
    /* the intermediates' dtypes: no buffer, only the dtype checked */
    out[n++] = (attention_buf){ "probs dtype", mpx_a(NULL, a->probs.t), 0, 0 };
    out[n++] = (attention_buf){ "scores dtype", mpx_a(NULL, a->scores_t), 0, 0 };
    out[n++] = (attention_buf){ "ds dtype", mpx_a(NULL, a->ds_t), 0, 0 };
    *n_out = n;
    return 0;
}

#endif
