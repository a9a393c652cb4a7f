/* Weight-decay groups: which tensors train without weight decay. The model's parameter
 * table marks the default no-decay tensors (biases, LayerNorm weights); a non-empty
 * optimizer.no_decay list of name substrings replaces those defaults, as BingBertSquad's
 * no_decay = ['bias', 'LayerNorm.bias', 'LayerNorm.weight'] does: a tensor is no-decay
 * when any substring occurs in its name. */
#ifndef MPX_DECAY_H
#define MPX_DECAY_H

#include <stddef.h>

/* names[n], default_no_decay[n] (non-zero = no decay) -> no_decay[n].
 * substrings[n_sub]: n_sub == 0 keeps the defaults. matches (NULL or n_sub entries)
 * receives how many tensors each substring matched, so the caller can warn about a
 * substring that matches nothing. Returns the number of no-decay tensors, or -1 on a
 * NULL name or substring (also an empty substring, which would match everything). */
int mpx_decay_flags(const char *const *names, const int *default_no_decay, size_t n,
                    const char *const *substrings, size_t n_sub, int *no_decay,
                    size_t *matches);

#endif
