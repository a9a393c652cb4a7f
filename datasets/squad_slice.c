/* Question slices of a SQuAD set: the first N, or a seeded sample (config keys that
 * train or evaluate on part of the data). */
#include "squad_reader.h"
#include "splitmix64.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

int mpx_squad_sample_indices(int32_t n_total, int32_t n, uint64_t seed, int32_t *idx, char *err, size_t errlen)
{
    if (n < 0 || n > n_total) {
        snprintf(err, errlen, "slice of %d questions asked from a set of %d", (int)n, (int)n_total);
        return -1;
    }
    int32_t *perm = malloc(sizeof *perm * (size_t)(n_total ? n_total : 1));
    if (!perm) {
        snprintf(err, errlen, "out of memory for a sample of %d questions", (int)n);
        return -1;
    }
    for (int32_t i = 0; i < n_total; i++) perm[i] = i;
    uint64_t state = seed;
    for (int32_t j = 0; j < n; j++) {
        int32_t k = j + (int32_t)(mpx_splitmix64(&state) % (uint64_t)(n_total - j));
        int32_t t = perm[j];
        perm[j] = perm[k];
        perm[k] = t;
    }
    memcpy(idx, perm, sizeof *idx * (size_t)n);
    free(perm);
    qsort(idx, (size_t)n, sizeof *idx, cmp_i32);
    return 0;
}

static int copy_question(const mpx_squad_question *s, mpx_squad_question *d, int32_t paragraph)
{
    d->id = dup_str(s->id);
    d->text = dup_str(s->text);
    d->paragraph = paragraph;
    d->answers = calloc(s->n_answers ? (size_t)s->n_answers : 1, sizeof *d->answers);
    if (!d->id || !d->text || !d->answers) return -1;
    for (int32_t k = 0; k < s->n_answers; k++) {
        d->answers[k].answer_start = s->answers[k].answer_start;
        d->answers[k].text = dup_str(s->answers[k].text);
        d->n_answers = k + 1;
        if (!d->answers[k].text) return -1;
    }
    return 0;
}

/* Maps of old paragraph / article index to new, -1 for unused. */
static int copy_paragraphs(const mpx_squad_dataset *src, const int32_t *idx, int32_t n, mpx_squad_dataset *dst,
                           int32_t *pmap, int32_t *amap)
{
    for (int32_t i = 0; i < src->n_paragraphs; i++) pmap[i] = -1;
    for (int32_t i = 0; i < src->n_articles; i++) amap[i] = -1;
    for (int32_t i = 0; i < n; i++) pmap[src->questions[idx[i]].paragraph] = 0;
    for (int32_t p = 0; p < src->n_paragraphs; p++) {
        if (pmap[p] < 0) continue;
        int32_t a = src->paragraphs[p].article;
        if (amap[a] < 0) {
            amap[a] = dst->n_articles;
            if (!(dst->titles[dst->n_articles++] = dup_str(src->titles[a]))) return -1;
        }
        pmap[p] = dst->n_paragraphs;
        dst->paragraphs[dst->n_paragraphs].article = amap[a];
        if (!(dst->paragraphs[dst->n_paragraphs++].context = dup_str(src->paragraphs[p].context))) return -1;
    }
    return 0;
}

int mpx_squad_subset(const mpx_squad_dataset *src, const int32_t *idx, int32_t n, mpx_squad_dataset *dst, char *err,
                     size_t errlen)
{
    memset(dst, 0, sizeof *dst);
    for (int32_t i = 0; i < n; i++)
        if (idx[i] < 0 || idx[i] >= src->n_questions) {
            snprintf(err, errlen, "question index %d outside the set of %d", (int)idx[i], (int)src->n_questions);
            return -1;
        }
    int32_t *pmap = malloc(sizeof *pmap * (size_t)(src->n_paragraphs + 1));
    int32_t *amap = malloc(sizeof *amap * (size_t)(src->n_articles + 1));
    dst->version = dup_str(src->version ? src->version : "");
    dst->titles = calloc((size_t)src->n_articles + 1, sizeof *dst->titles);
    dst->paragraphs = calloc((size_t)src->n_paragraphs + 1, sizeof *dst->paragraphs);
    dst->questions = calloc((size_t)n + 1, sizeof *dst->questions);
    int rc = -1;
    if (!pmap || !amap || !dst->version || !dst->titles || !dst->paragraphs || !dst->questions ||
        copy_paragraphs(src, idx, n, dst, pmap, amap))
        goto done;
    for (int32_t i = 0; i < n; i++) {
        const mpx_squad_question *s = &src->questions[idx[i]];
        dst->n_questions = i + 1;
        if (copy_question(s, &dst->questions[i], pmap[s->paragraph])) goto done;
    }
    rc = 0;
done:
    free(pmap);
    free(amap);
    if (rc) {
        snprintf(err, errlen, "out of memory while slicing %d questions", (int)n);
        mpx_squad_free(dst);
    }
    return rc;
}

int mpx_squad_slice_first(const mpx_squad_dataset *src, int32_t n, mpx_squad_dataset *dst, char *err,
                          size_t errlen)
{
    if (n < 0 || n > src->n_questions) {
        snprintf(err, errlen, "slice of the first %d questions asked from a set of %d", (int)n,
                 (int)src->n_questions);
        return -1;
    }
    int32_t *idx = malloc(sizeof *idx * (size_t)(n ? n : 1));
    if (!idx) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (int32_t i = 0; i < n; i++) idx[i] = i;
    int rc = mpx_squad_subset(src, idx, n, dst, err, errlen);
    free(idx);
    return rc;
}

int mpx_squad_slice_sample(const mpx_squad_dataset *src, int32_t n, uint64_t seed, mpx_squad_dataset *dst,
                           char *err, size_t errlen)
{
    int32_t *idx = malloc(sizeof *idx * (size_t)(n > 0 ? n : 1));
    if (!idx) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int rc = mpx_squad_sample_indices(src->n_questions, n, seed, idx, err, errlen) ||
             mpx_squad_subset(src, idx, n, dst, err, errlen);
    free(idx);
    return rc ? -1 : 0;
}
