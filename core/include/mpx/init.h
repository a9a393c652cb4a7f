/* Seeded random initialisation of a parameter tensor from its mpx_param_info, shared by
 * models: normal(0, init_std) by Box-Muller over the Philox stream of the tensor's site
 * (tick 0), element i using the two draws 2i and 2i+1; or zeros / ones. */
#ifndef MPX_INIT_H
#define MPX_INIT_H

#include <math.h>

#include "mpx/model.h"
#include "mpx/numerics.h"

static inline void mpx_init_param(const mpx_param_info *p, float *dst, uint64_t seed)
{
    size_t n = 1;
    for (int d = 0; d < p->ndim; d++) n *= (size_t)p->shape[d];
    for (size_t i = 0; i < n; i++) {
        if (p->init == MPX_INIT_ZEROS) { dst[i] = 0; continue; }
        if (p->init == MPX_INIT_ONES) { dst[i] = 1; continue; }
        mpx_philox_out b = mpx_philox_block(seed, p->site, 0, i / 2);
        uint32_t x0 = b.v[(i & 1) * 2], x1 = b.v[(i & 1) * 2 + 1];
        double u1 = ((double)(x0 >> 8) + 1.0) * 0x1p-24; /* (0, 1]: log is finite */
        double u2 = (double)(x1 >> 8) * 0x1p-24;
        dst[i] = (float)(p->init_std * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
    }
}

#endif
