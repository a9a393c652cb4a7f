/* "Did you mean": the nearest candidate to a misspelled name, by edit distance. */
#ifndef MPX_SUGGEST_H
#define MPX_SUGGEST_H

#include <stddef.h>

/* Optimal-string-alignment distance (Damerau-Levenshtein where a transposed pair counts
 * as one edit and no substring is edited twice), ASCII case-insensitive. */
size_t mpx_edit_distance(const char *a, const char *b);

/* Collects candidates one by one and keeps the nearest close enough to `word`: within
 * 2 edits, or within a third of the word's length for long words. Ties keep the first
 * offered, so offer candidates in the order a reader would expect. */
typedef struct mpx_suggester {
    const char *word;
    const char *best;
    size_t best_dist;
} mpx_suggester;

void mpx_suggest_init(mpx_suggester *s, const char *word);
void mpx_suggest_offer(mpx_suggester *s, const char *candidate);
const char *mpx_suggest_best(const mpx_suggester *s); /* NULL when none is close */

#endif
