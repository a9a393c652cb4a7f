/* Length-grouped batch order, as transformers' `group_by_length` (LengthGroupedSampler,
 * get_length_grouped_indices): the shuffled order is cut into megabatches of
 * mult x batch windows, mult = min(n / (4 batch), 50) (at least 1); each megabatch is
 * sorted by length, longest first (ties keep their shuffled order); then the first
 * window of the megabatch holding the longest window (the first such megabatch) swaps
 * places with the very first window, so the longest batch comes first. Batches taken
 * in that order hold windows of similar length, so dynamic padding pads little. */
#ifndef MPX_LENGTH_GROUP_H
#define MPX_LENGTH_GROUP_H

#include <stdint.h>

/* Reorders order[0..n) in place; length[w] is window w's length. Returns 0, or -1 when
 * out of memory (order unchanged). */
int mpx_group_by_length(int32_t *order, int32_t n, const int32_t *length, int32_t batch);

#endif
