/* Test-harness memory that lives as long as the test process: helpers that hand out
 * buffers (folders, paths, reference arrays) keep them here and they are freed at exit,
 * so that LeakSanitizer (the sanitizer suite, tests/sanitize.sh) reports only leaks in
 * the code under test. Header-only: each suite keeps its own list. */
#ifndef MPX_TEST_KEEP_H
#define MPX_TEST_KEEP_H

#include <stdlib.h>

static void **ts_kept_;
static size_t ts_n_kept_, ts_cap_kept_;

static void ts_free_kept_(void)
{
    while (ts_n_kept_) free(ts_kept_[--ts_n_kept_]);
    free(ts_kept_);
    ts_kept_ = NULL;
    ts_cap_kept_ = 0;
}

/* Returns p, to be freed at exit (p may be NULL). */
static inline void *ts_keep(void *p)
{
    if (!p) return p;
    if (ts_n_kept_ == ts_cap_kept_) {
        size_t cap = ts_cap_kept_ ? 2 * ts_cap_kept_ : 64;
        void **k = realloc(ts_kept_, cap * sizeof *k);
        if (!k) return p; /* then it leaks: nothing worse */
        if (!ts_kept_) atexit(ts_free_kept_);
        ts_kept_ = k;
        ts_cap_kept_ = cap;
    }
    ts_kept_[ts_n_kept_++] = p;
    return p;
}

#endif
