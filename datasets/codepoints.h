/* UTF-8 text as an array of code points (invalid bytes become U+FFFD), for the metric's
 * normalisation and post-processing's character alignment. */
#ifndef MPX_DATASETS_CODEPOINTS_H
#define MPX_DATASETS_CODEPOINTS_H

#include <stdint.h>

typedef struct mpx_cps {
    int32_t *v;   /* malloc'd */
    int32_t n;
} mpx_cps;

/* 0, or -1 when out of memory. */
int mpx_cps_decode(const char *s, mpx_cps *out);

#endif
