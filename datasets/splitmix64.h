/* splitmix64 (Vigna): the small seeded generator behind seeded question samples
 * (squad_slice.c) and the paired bootstrap (core/analysis/paired.c); both are documented to
 * draw exactly this sequence so that a Python script can repeat them. */
#ifndef MPX_DATASETS_SPLITMIX64_H
#define MPX_DATASETS_SPLITMIX64_H

#include <stdint.h>

static inline uint64_t mpx_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#endif
