/* Did-you-mean suggestions for config keys and plugin names. */
#include "suggest.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* Names are short (config keys, plugin names): a fixed table avoids allocation, and
 * anything longer is compared on its first MAX_NAME characters. */
#define MAX_NAME 64

static size_t min3(size_t a, size_t b, size_t c)
{
    size_t m = a < b ? a : b;
    return m < c ? m : c;
}

size_t mpx_edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > MAX_NAME) la = MAX_NAME;
    if (lb > MAX_NAME) lb = MAX_NAME;
    static const size_t W = MAX_NAME + 1;
    size_t d[(MAX_NAME + 1) * (MAX_NAME + 1)];
    for (size_t i = 0; i <= la; i++) d[i * W] = i;
    for (size_t j = 0; j <= lb; j++) d[j] = j;
    for (size_t i = 1; i <= la; i++) {
        for (size_t j = 1; j <= lb; j++) {
            int ca = tolower((unsigned char)a[i - 1]), cb = tolower((unsigned char)b[j - 1]);
            size_t cost = ca != cb;
            size_t v = min3(d[(i - 1) * W + j] + 1, d[i * W + j - 1] + 1,
                            d[(i - 1) * W + j - 1] + cost);
            if (i > 1 && j > 1 && ca == tolower((unsigned char)b[j - 2]) &&
                tolower((unsigned char)a[i - 2]) == cb && d[(i - 2) * W + j - 2] + 1 < v)
                v = d[(i - 2) * W + j - 2] + 1;
            d[i * W + j] = v;
        }
    }
    return d[la * W + lb];
}

void mpx_suggest_init(mpx_suggester *s, const char *word)
{
    s->word = word;
    s->best = NULL;
    s->best_dist = (size_t)-1;
}

void mpx_suggest_offer(mpx_suggester *s, const char *candidate)
{
    if (!candidate || !s->word) return;
    size_t len = strlen(s->word);
    size_t limit = len / 3 > 2 ? len / 3 : 2;
    size_t dist = mpx_edit_distance(s->word, candidate);
    /* A distance as long as the word itself means nothing was kept: "ab" -> "cd". */
    if (dist > limit || dist >= len || dist >= s->best_dist) return;
    s->best = candidate;
    s->best_dist = dist;
}

const char *mpx_suggest_best(const mpx_suggester *s)
{
    return s->best;
}
