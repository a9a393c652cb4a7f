/* SQuAD v1.1 reader: the JSON tree is walked once and copied into flat arrays so that
 * the rest of the pipeline never touches jansson. */
#include "squad_reader.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define EXPECTED "expected a SQuAD v1.1 JSON object {\"version\": ..., \"data\": [articles]}"

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

static const char *get_string(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

typedef struct loader {
    const char *path;
    mpx_squad_dataset *d;
    char *err;
    size_t errlen;
    int32_t cap_a, cap_p, cap_q;
} loader;

static int oom(loader *L)
{
    snprintf(L->err, L->errlen, "%s: out of memory", L->path);
    return -1;
}

static int grow(void **p, int32_t *cap, int32_t need, size_t elem)
{
    if (need <= *cap) return 0;
    int32_t c = *cap ? *cap * 2 : 64;
    while (c < need) c *= 2;
    void *q = realloc(*p, elem * (size_t)c);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

static int read_answers(loader *L, json_t *qa, mpx_squad_question *q)
{
    json_t *arr = json_object_get(qa, "answers");
    if (!json_is_array(arr)) {
        snprintf(L->err, L->errlen, "%s: question %s: \"answers\" is missing or not an array", L->path, q->id);
        return -1;
    }
    size_t n = json_array_size(arr);
    q->answers = calloc(n ? n : 1, sizeof *q->answers);
    if (!q->answers) return oom(L);
    for (size_t i = 0; i < n; i++) {
        json_t *a = json_array_get(arr, i), *st = json_object_get(a, "answer_start");
        const char *text = get_string(a, "text");
        if (!json_is_object(a) || !text) {
            snprintf(L->err, L->errlen, "%s: question %s: answers[%zu] has no \"text\" string", L->path, q->id, i);
            return -1;
        }
        if (!json_is_integer(st) || json_integer_value(st) < 0 || json_integer_value(st) > INT32_MAX) {
            snprintf(L->err, L->errlen,
                     "%s: question %s: answers[%zu].\"answer_start\" is missing or not a non-negative integer",
                     L->path, q->id, i);
            return -1;
        }
        q->answers[i].text = dup_str(text);
        q->answers[i].answer_start = (int32_t)json_integer_value(st);
        q->n_answers = (int32_t)i + 1;
        if (!q->answers[i].text) return oom(L);
    }
    return 0;
}

static int read_question(loader *L, json_t *qa, int32_t a, int32_t p, size_t k)
{
    mpx_squad_dataset *d = L->d;
    const char *id = get_string(qa, "id"), *text = get_string(qa, "question");
    if (!json_is_object(qa) || !id) {
        snprintf(L->err, L->errlen, "%s: article %d, paragraph %d, question %zu: missing \"id\" string", L->path,
                 (int)a, (int)p, k);
        return -1;
    }
    if (!text) {
        snprintf(L->err, L->errlen, "%s: question %s: \"question\" is missing or not a string", L->path, id);
        return -1;
    }
    if (grow((void **)&d->questions, &L->cap_q, d->n_questions + 1, sizeof *d->questions)) return oom(L);
    mpx_squad_question *q = &d->questions[d->n_questions++];
    memset(q, 0, sizeof *q);
    q->id = dup_str(id);
    q->text = dup_str(text);
    q->paragraph = d->n_paragraphs - 1;
    if (!q->id || !q->text) return oom(L);
    return read_answers(L, qa, q);
}

static int read_paragraph(loader *L, json_t *par, int32_t a, int32_t p)
{
    mpx_squad_dataset *d = L->d;
    const char *context = get_string(par, "context");
    json_t *qas = json_object_get(par, "qas");
    if (!json_is_object(par) || !context) {
        snprintf(L->err, L->errlen, "%s: article %d, paragraph %d: missing \"context\" string", L->path, (int)a,
                 (int)p);
        return -1;
    }
    if (!json_is_array(qas)) {
        snprintf(L->err, L->errlen, "%s: article %d, paragraph %d: \"qas\" is missing or not an array", L->path,
                 (int)a, (int)p);
        return -1;
    }
    if (grow((void **)&d->paragraphs, &L->cap_p, d->n_paragraphs + 1, sizeof *d->paragraphs)) return oom(L);
    mpx_squad_paragraph *P = &d->paragraphs[d->n_paragraphs++];
    P->article = a;
    P->context = dup_str(context);
    if (!P->context) return oom(L);
    for (size_t k = 0; k < json_array_size(qas); k++)
        if (read_question(L, json_array_get(qas, k), a, p, k)) return -1;
    return 0;
}

static int read_article(loader *L, json_t *art, int32_t a)
{
    mpx_squad_dataset *d = L->d;
    json_t *pars = json_object_get(art, "paragraphs"), *title = json_object_get(art, "title");
    if (!json_is_object(art) || !json_is_array(pars)) {
        snprintf(L->err, L->errlen, "%s: article %d: \"paragraphs\" is missing or not an array", L->path, (int)a);
        return -1;
    }
    if (title && !json_is_string(title)) {
        snprintf(L->err, L->errlen, "%s: article %d: \"title\" is not a string", L->path, (int)a);
        return -1;
    }
    if (grow((void **)&d->titles, &L->cap_a, d->n_articles + 1, sizeof *d->titles)) return oom(L);
    d->titles[d->n_articles] = dup_str(title ? json_string_value(title) : "");
    if (!d->titles[d->n_articles++]) return oom(L);
    for (size_t p = 0; p < json_array_size(pars); p++)
        if (read_paragraph(L, json_array_get(pars, p), a, (int32_t)p)) return -1;
    return 0;
}

static int check_file(const char *path, char *err, size_t errlen)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    if (st.st_size == 0) {
        snprintf(err, errlen, "%s: empty file; %s", path, EXPECTED);
        return -1;
    }
    return 0;
}

int mpx_squad_load(const char *path, mpx_squad_dataset *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (check_file(path, err, errlen)) return -1;
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) {
        snprintf(err, errlen, "%s:%d:%d: invalid JSON: %s", path, je.line, je.column, je.text);
        return -1;
    }
    json_t *data = json_object_get(root, "data"), *version = json_object_get(root, "version");
    int rc = -1;
    if (!json_is_object(root) || !json_is_array(data)) {
        snprintf(err, errlen, "%s: no \"data\" array at the top level; %s", path, EXPECTED);
        goto done;
    }
    out->version = dup_str(json_is_string(version) ? json_string_value(version) : "");
    loader L = {path, out, err, errlen, 0, 0, 0};
    if (!out->version) {
        oom(&L);
        goto done;
    }
    for (size_t a = 0; a < json_array_size(data); a++)
        if (read_article(&L, json_array_get(data, a), (int32_t)a)) goto done;
    if (out->n_questions == 0) {
        snprintf(err, errlen, "%s: no questions in \"data\"; %s", path, EXPECTED);
        goto done;
    }
    rc = 0;
done:
    json_decref(root);
    if (rc) mpx_squad_free(out);
    return rc;
}

void mpx_squad_free(mpx_squad_dataset *d)
{
    for (int32_t i = 0; i < d->n_questions; i++) {
        mpx_squad_question *q = &d->questions[i];
        for (int32_t k = 0; k < q->n_answers; k++) free(q->answers[k].text);
        free(q->answers);
        free(q->id);
        free(q->text);
    }
    for (int32_t i = 0; i < d->n_paragraphs; i++) free(d->paragraphs[i].context);
    for (int32_t i = 0; i < d->n_articles; i++) free(d->titles[i]);
    free(d->questions);
    free(d->paragraphs);
    free(d->titles);
    free(d->version);
    memset(d, 0, sizeof *d);
}

int32_t mpx_squad_find_question(const mpx_squad_dataset *d, const char *id)
{
    for (int32_t i = 0; i < d->n_questions; i++)
        if (strcmp(d->questions[i].id, id) == 0) return i;
    return -1;
}
