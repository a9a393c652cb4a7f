/* Length-grouped batch order (see length_group.h). */
#include "length_group.h"

#include <stdlib.h>

typedef struct keyed { int32_t len, pos, window; } keyed;

/* longest first; equal lengths in their shuffled order (Python's sorted is stable) */
static int by_length_desc(const void *a, const void *b)
{
    const keyed *x = a, *y = b;
    if (x->len != y->len) return x->len < y->len ? 1 : -1;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

int mpx_group_by_length(int32_t *order, int32_t n, const int32_t *length, int32_t batch)
{
    if (n <= 1 || batch < 1) return 0;
    int64_t mult = (int64_t)n / (4 * (int64_t)batch);
    if (mult > 50) mult = 50;
    if (mult < 1) mult = 1;
    int64_t mega = mult * batch;
    keyed *k = malloc((size_t)n * sizeof *k);
    if (!k) return -1;
    for (int32_t i = 0; i < n; i++) k[i] = (keyed){ length[order[i]], i, order[i] };
    int64_t best = 0;   /* start of the first megabatch with the longest window */
    for (int64_t s = 0; s < n; s += mega) {
        int64_t len = n - s < mega ? n - s : mega;
        qsort(k + s, (size_t)len, sizeof *k, by_length_desc);
        if (k[s].len > k[best].len) best = s;
    }
    keyed t = k[0];
    k[0] = k[best];
    k[best] = t;
    for (int32_t i = 0; i < n; i++) order[i] = k[i].window;
    free(k);
    return 0;
}
