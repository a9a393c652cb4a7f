#include "decay.h"

#include <string.h>

int mpx_decay_flags(const char *const *names, const int *default_no_decay, size_t n,
                    const char *const *substrings, size_t n_sub, int *no_decay,
                    size_t *matches)
{
    for (size_t j = 0; j < n_sub; j++) {
        if (!substrings[j] || !substrings[j][0]) return -1;
        if (matches) matches[j] = 0;
    }
    int count = 0;
    for (size_t i = 0; i < n; i++) {
        if (!names[i]) return -1;
        int nd = n_sub == 0 ? default_no_decay[i] != 0 : 0;
        for (size_t j = 0; j < n_sub; j++) {
            if (!strstr(names[i], substrings[j])) continue;
            nd = 1;
            if (matches) matches[j]++;
        }
        no_decay[i] = nd;
        count += nd;
    }
    return count;
}
