/* Answer post-processing after run_squad.py write_predictions / get_final_text. */
#include "squad_postprocess.h"
#include "codepoints.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

typedef struct prelim {
    int32_t feature, start, end, order;
    double start_logit, end_logit;
} prelim;

/* Indexes of the n largest logits, largest first, ties by lower index (Python's stable
 * sorted(..., reverse=True)). */
static int32_t best_indexes(const float *logits, int32_t row_len, int32_t n, int32_t *out)
{
    int32_t k = 0;
    for (int32_t i = 0; i < row_len; i++) {
        if (k == n && !(logits[i] > logits[out[k - 1]])) continue;
        int32_t j = k < n ? k++ : k - 1;
        while (j > 0 && logits[i] > logits[out[j - 1]]) {
            out[j] = out[j - 1];
            j--;
        }
        out[j] = i;
    }
    return k;
}

static int cmp_prelim(const void *a, const void *b)
{
    const prelim *x = a, *y = b;
    double sx = x->start_logit + x->end_logit, sy = y->start_logit + y->end_logit;
    if (sx != sy) return sx < sy ? 1 : -1;
    return (x->order > y->order) - (x->order < y->order);
}

/* ------------------------------------------------------------ code-point strings */
static char *encode(const int32_t *v, int32_t n)
{
    char *s = malloc(4 * (size_t)n + 1);
    if (!s) return NULL;
    size_t o = 0;
    for (int32_t i = 0; i < n; i++) o += (size_t)utf8proc_encode_char(v[i], (utf8proc_uint8_t *)s + o);
    s[o] = '\0';
    return s;
}

static int32_t find_cps(const mpx_cps *hay, const mpx_cps *needle)
{
    for (int32_t i = 0; i + needle->n <= hay->n; i++)
        if (memcmp(hay->v + i, needle->v, sizeof(int32_t) * (size_t)needle->n) == 0) return i;
    return -1;
}

/* _strip_spaces: the text without ' ', and the map from its indexes to the original. */
static int32_t strip_spaces(const mpx_cps *t, int32_t *ns_to_s)
{
    int32_t n = 0;
    for (int32_t i = 0; i < t->n; i++)
        if (t->v[i] != ' ') ns_to_s[n++] = i;
    return n;
}

static int32_t ns_index(const mpx_cps *t, const int32_t *ns_to_s, int32_t n_ns, int32_t s)
{
    if (s < 0 || s >= t->n || t->v[s] == ' ') return -1;
    int32_t lo = 0, hi = n_ns - 1; /* ns_to_s is increasing */
    while (lo <= hi) {
        int32_t mid = (lo + hi) / 2;
        if (ns_to_s[mid] == s) return mid;
        if (ns_to_s[mid] < s) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

static char *align(const mpx_cps *pred, const mpx_cps *orig, const mpx_cps *tok, int32_t *orig_map, int32_t *tok_map)
{
    int32_t start = find_cps(tok, pred);
    if (start < 0) return NULL;
    int32_t end = start + pred->n - 1;
    int32_t n_orig = strip_spaces(orig, orig_map), n_tok = strip_spaces(tok, tok_map);
    if (n_orig != n_tok) return NULL;
    int32_t ns_start = ns_index(tok, tok_map, n_tok, start), ns_end = ns_index(tok, tok_map, n_tok, end);
    if (ns_start < 0 || ns_end < 0) return NULL;
    int32_t os = orig_map[ns_start], oe = orig_map[ns_end];
    return encode(orig->v + os, oe - os + 1 > 0 ? oe - os + 1 : 0);
}

char *mpx_squad_final_text(const char *pred_text, const char *orig_text)
{
    /* transformers' BasicTokenizer.tokenize lowers whole words: Python's Final_Sigma applies */
    char *tok_text = mpx_bert_basic_tokenize(orig_text, strlen(orig_text), 1);
    mpx_cps pred = {0}, orig = {0}, tok = {0};
    char *out = NULL;
    int32_t *m1 = NULL, *m2 = NULL;
    if (!tok_text || mpx_cps_decode(pred_text, &pred) || mpx_cps_decode(orig_text, &orig) || mpx_cps_decode(tok_text, &tok)) goto done;
    m1 = malloc(sizeof(int32_t) * (size_t)(orig.n + 1));
    m2 = malloc(sizeof(int32_t) * (size_t)(tok.n + 1));
    if (!m1 || !m2) goto done;
    out = align(&pred, &orig, &tok, m1, m2);
    if (!out) out = strdup(orig_text);
done:
    free(tok_text);
    free(pred.v);
    free(orig.v);
    free(tok.v);
    free(m1);
    free(m2);
    return out;
}

/* ------------------------------------------------------------ texts of a span */

/* Python's s.replace(pat, ""), in place; returns the new length. */
static size_t remove_all(char *s, size_t n, const char *pat)
{
    size_t m = strlen(pat), o = 0;
    for (size_t i = 0; i < n;) {
        if (i + m <= n && memcmp(s + i, pat, m) == 0) i += m;
        else s[o++] = s[i++];
    }
    s[o] = '\0';
    return o;
}

/* " ".join(tokens), replace(" ##", ""), replace("##", ""), then collapse whitespace. */
static char *wordpiece_text(const mpx_squad_features *fs, int32_t f, int32_t s, int32_t e)
{
    const mpx_squad_feature *F = &fs->features[f];
    const mpx_squad_doc *d = &fs->docs[fs->data->questions[F->question].paragraph];
    int32_t base = F->doc_start - (fs->query_len[F->question] + 2);
    size_t cap = 1;
    for (int32_t i = s; i <= e; i++) cap += strlen(mpx_bert_token_str(fs->tok, d->tokens[base + i])) + 1;
    char *joined = malloc(cap), *out = malloc(cap);
    if (!joined || !out) {
        free(joined);
        free(out);
        return NULL;
    }
    size_t n = 0;
    for (int32_t i = s; i <= e; i++) {
        const char *t = mpx_bert_token_str(fs->tok, d->tokens[base + i]);
        if (i > s) joined[n++] = ' ';
        memcpy(joined + n, t, strlen(t));
        n += strlen(t);
    }
    joined[n] = '\0';
    n = remove_all(joined, n, " ##");
    n = remove_all(joined, n, "##");
    memcpy(out, joined, n + 1);
    free(joined);
    /* strip + " ".join(split()): tokens hold no whitespace but ' ' separators */
    size_t r = 0, w = 0;
    while (out[r] == ' ') r++;
    for (; out[r]; r++) {
        if (out[r] == ' ' && (out[r + 1] == ' ' || out[r + 1] == '\0')) continue;
        out[w++] = out[r];
    }
    out[w] = '\0';
    return out;
}

static char *original_text(const mpx_squad_features *fs, int32_t f, int32_t s, int32_t e)
{
    const mpx_squad_feature *F = &fs->features[f];
    const mpx_squad_question *Q = &fs->data->questions[F->question];
    const mpx_squad_doc *d = &fs->docs[Q->paragraph];
    const char *ctx = fs->data->paragraphs[Q->paragraph].context;
    int32_t ws = mpx_squad_feature_token_to_orig(fs, f, s), we = mpx_squad_feature_token_to_orig(fs, f, e);
    char *out = malloc((size_t)(d->word_byte[we + 1] - d->word_byte[ws]) + 1);
    if (!out) return NULL;
    size_t n = 0;
    for (int32_t w = ws; w <= we; w++) {
        if (w > ws) out[n++] = ' ';
        memcpy(out + n, ctx + d->word_byte[w], (size_t)(d->word_bend[w] - d->word_byte[w]));
        n += (size_t)(d->word_bend[w] - d->word_byte[w]);
    }
    out[n] = '\0';
    return out;
}

/* ------------------------------------------------------------ per question */

typedef struct scratch {
    prelim *p;
    int32_t n, cap;
    int32_t *si, *ei;
} scratch;

static int collect(const mpx_squad_features *fs, int32_t q, const float *sl, const float *el, int32_t row_len,
                   const mpx_squad_postprocess_config *cfg, scratch *S)
{
    S->n = 0;
    int32_t first = fs->first_feature[q];
    for (int32_t f = first; f < first + fs->n_question_features[q]; f++) {
        const float *s_row = sl + (size_t)f * (size_t)row_len, *e_row = el + (size_t)f * (size_t)row_len;
        int32_t ns = best_indexes(s_row, row_len, cfg->n_best_size, S->si);
        int32_t ne = best_indexes(e_row, row_len, cfg->n_best_size, S->ei);
        for (int32_t a = 0; a < ns; a++)
            for (int32_t b = 0; b < ne; b++) {
                int32_t s = S->si[a], e = S->ei[b];
                if (mpx_squad_feature_token_to_orig(fs, f, s) < 0 || mpx_squad_feature_token_to_orig(fs, f, e) < 0)
                    continue;
                if (mpx_squad_feature_is_max_context(fs, f, s) != 1 || e < s || e - s + 1 > cfg->max_answer_length)
                    continue;
                if (S->n == S->cap) {
                    int32_t cap = S->cap ? 2 * S->cap : 1024;
                    prelim *p = realloc(S->p, sizeof *p * (size_t)cap);
                    if (!p) return -1;
                    S->p = p;
                    S->cap = cap;
                }
                S->p[S->n] = (prelim){f, s, e, S->n, s_row[s], e_row[e]};
                S->n++;
            }
    }
    if (S->n > 1) qsort(S->p, (size_t)S->n, sizeof *S->p, cmp_prelim); /* S->p is NULL before any */
    return 0;
}

static int add_entry(mpx_squad_nbest *nb, int32_t *n, char *text, double s, double e)
{
    if (!text) return -1;
    nb[*n] = (mpx_squad_nbest){text, s, e, 0.0};
    (*n)++;
    return 0;
}

static int build_nbest(const mpx_squad_features *fs, const scratch *S, const mpx_squad_postprocess_config *cfg,
                       mpx_squad_nbest *nb, int32_t *n)
{
    *n = 0;
    for (int32_t i = 0; i < S->n && *n < cfg->n_best_size; i++) {
        const prelim *P = &S->p[i];
        char *tok_text = wordpiece_text(fs, P->feature, P->start, P->end);
        char *orig = original_text(fs, P->feature, P->start, P->end);
        char *final = tok_text && orig ? mpx_squad_final_text(tok_text, orig) : NULL;
        free(tok_text);
        free(orig);
        if (!final) return -1;
        int seen = 0;
        for (int32_t k = 0; k < *n && !seen; k++) seen = strcmp(nb[k].text, final) == 0;
        if (seen) {
            free(final);
            continue;
        }
        if (add_entry(nb, n, final, P->start_logit, P->end_logit)) return -1;
    }
    if (*n == 0 && add_entry(nb, n, strdup("empty"), 0.0, 0.0)) return -1; /* the reference's nonce answer */
    double mx = -INFINITY, sum = 0.0;
    for (int32_t k = 0; k < *n; k++) {
        double v = nb[k].start_logit + nb[k].end_logit;
        if (k == 0 || v > mx) mx = v;
    }
    for (int32_t k = 0; k < *n; k++) sum += (nb[k].probability = exp(nb[k].start_logit + nb[k].end_logit - mx));
    for (int32_t k = 0; k < *n; k++) nb[k].probability /= sum;
    return 0;
}

int mpx_squad_postprocess(const mpx_squad_features *fs, const float *start_logits, const float *end_logits,
                          int32_t row_len, const mpx_squad_postprocess_config *cfg, mpx_squad_predictions **out,
                          char *err, size_t errlen)
{
    *out = NULL;
    int32_t nq = fs->data->n_questions;
    for (int32_t f = 0; f < fs->n_features; f++)
        if (mpx_squad_feature_length(fs, f) > row_len) {
            snprintf(err, errlen, "logits rows of %d positions, but window %d of question %s has %d tokens",
                     (int)row_len, (int)f, fs->data->questions[fs->features[f].question].id,
                     (int)mpx_squad_feature_length(fs, f));
            return -1;
        }
    if (cfg->n_best_size < 1 || cfg->max_answer_length < 1) {
        snprintf(err, errlen, "post-processing: n_best_size and max_answer_length must be >= 1");
        return -1;
    }
    mpx_squad_predictions *P = calloc(1, sizeof *P);
    scratch S = {0};
    int rc = -1;
    if (!P) goto done;
    P->n_questions = nq;
    P->text = calloc((size_t)nq + 1, sizeof *P->text);
    P->n_nbest = calloc((size_t)nq + 1, sizeof *P->n_nbest);
    P->nbest = calloc((size_t)nq + 1, sizeof *P->nbest);
    S.si = malloc(sizeof(int32_t) * (size_t)cfg->n_best_size);
    S.ei = malloc(sizeof(int32_t) * (size_t)cfg->n_best_size);
    if (!P->text || !P->n_nbest || !P->nbest || !S.si || !S.ei) goto done;
    for (int32_t q = 0; q < nq; q++) {
        P->nbest[q] = calloc((size_t)cfg->n_best_size, sizeof **P->nbest);
        if (!P->nbest[q] || collect(fs, q, start_logits, end_logits, row_len, cfg, &S) ||
            build_nbest(fs, &S, cfg, P->nbest[q], &P->n_nbest[q]))
            goto done;
        P->text[q] = P->nbest[q][0].text;
    }
    rc = 0;
done:
    free(S.p);
    free(S.si);
    free(S.ei);
    if (rc) {
        snprintf(err, errlen, "out of memory in answer post-processing");
        mpx_squad_predictions_free(P);
    } else {
        *out = P;
    }
    return rc;
}

void mpx_squad_predictions_free(mpx_squad_predictions *P)
{
    if (!P) return;
    for (int32_t q = 0; P->nbest && q < P->n_questions; q++) {
        for (int32_t k = 0; P->nbest[q] && k < P->n_nbest[q]; k++) free(P->nbest[q][k].text);
        free(P->nbest[q]);
    }
    free(P->nbest);
    free(P->n_nbest);
    free(P->text); /* entries alias nbest[q][0].text */
    free(P);
}

static int dump(json_t *root, const char *path, char *err, size_t errlen)
{
    if (!root) {
        snprintf(err, errlen, "%s: out of memory building JSON", path);
        return -1;
    }
    int rc = json_dump_file(root, path, JSON_INDENT(4) | JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII);
    json_decref(root);
    if (rc) snprintf(err, errlen, "%s: cannot write", path);
    return rc ? -1 : 0;
}

int mpx_squad_predictions_write(const mpx_squad_predictions *P, const mpx_squad_dataset *data, const char *pred_path,
                                const char *nbest_path, char *err, size_t errlen)
{
    json_t *preds = json_object();
    for (int32_t q = 0; preds && q < P->n_questions; q++)
        if (json_object_set_new(preds, data->questions[q].id, json_string(P->text[q]))) {
            json_decref(preds);
            preds = NULL;
        }
    if (dump(preds, pred_path, err, errlen)) return -1;
    if (!nbest_path) return 0;
    json_t *all = json_object();
    for (int32_t q = 0; all && q < P->n_questions; q++) {
        json_t *arr = json_array();
        for (int32_t k = 0; arr && k < P->n_nbest[q]; k++) {
            const mpx_squad_nbest *e = &P->nbest[q][k];
            json_t *o = json_pack("{s:s, s:f, s:f, s:f}", "text", e->text, "probability", e->probability,
                                  "start_logit", e->start_logit, "end_logit", e->end_logit);
            if (!o || json_array_append_new(arr, o)) {
                json_decref(arr);
                arr = NULL;
            }
        }
        if (!arr || json_object_set_new(all, data->questions[q].id, arr)) {
            json_decref(all);
            all = NULL;
        }
    }
    return dump(all, nbest_path, err, errlen);
}
