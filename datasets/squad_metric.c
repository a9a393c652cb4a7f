/* Official SQuAD v1.1 metric, on code points so that Python's semantics (str.lower()
 * with its special cases, Unicode \b, str.split()) carry over exactly. */
#include "squad_metric.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "bert_tokenizer.h"
#include "codepoints.h"

/* str.lower() of the whole string: per code point, with the Final_Sigma context. */
static void py_lower(const mpx_cps *in, mpx_cps *out)
{
    out->n = 0;
    for (int32_t i = 0; i < in->n; i++) {
        int32_t cp = in->v[i], low[2];
        if (cp == 0x3A3) {
            int32_t j = i - 1;
            while (j >= 0 && mpx_py_is_case_ignorable(in->v[j])) j--;
            int fin = j >= 0 && mpx_py_is_cased(in->v[j]);
            if (fin) {
                for (j = i + 1; j < in->n && mpx_py_is_case_ignorable(in->v[j]); j++) {}
                fin = j == in->n || !mpx_py_is_cased(in->v[j]);
            }
            out->v[out->n++] = fin ? 0x3C2 : 0x3C3;
            continue;
        }
        int k = mpx_py_lower_cp(cp, low);
        for (int j = 0; j < k; j++) out->v[out->n++] = low[j];
    }
}

static int is_ascii_punct(int32_t cp)
{
    return cp < 128 && cp > 32 && cp != 127 && !((cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') ||
                                                (cp >= 'A' && cp <= 'Z'));
}

/* Python 3 re's \w for str patterns: str.isalnum() or '_'. */
static int is_word(int32_t cp)
{
    if (cp < 128) return cp == '_' || (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
    utf8proc_category_t c = utf8proc_category(cp);
    return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) || (c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO);
}

static int is_article(const int32_t *w, int32_t n)
{
    return (n == 1 && w[0] == 'a') || (n == 2 && w[0] == 'a' && w[1] == 'n') ||
           (n == 3 && w[0] == 't' && w[1] == 'h' && w[2] == 'e');
}

/* Normalised tokens: lower, drop punctuation, a/an/the words -> ' ', split. Tokens are
 * written as UTF-8 into one buffer, each NUL-terminated; returns the token count. */
static int32_t normalize_tokens(const char *s, char **buf, char ***toks)
{
    mpx_cps in = {0}, low = {0};
    *buf = NULL;
    *toks = NULL;
    if (mpx_cps_decode(s, &in) || !(low.v = malloc(sizeof(int32_t) * (size_t)(2 * in.n + 1)))) goto oom;
    py_lower(&in, &low);
    int32_t n = 0;
    for (int32_t i = 0; i < low.n; i++)
        if (!is_ascii_punct(low.v[i])) low.v[n++] = low.v[i];
    low.n = n;
    for (int32_t i = 0; i < low.n;) { /* \b(a|an|the)\b matches exactly a whole \w run */
        if (!is_word(low.v[i])) { i++; continue; }
        int32_t j = i;
        while (j < low.n && is_word(low.v[j])) j++;
        if (is_article(low.v + i, j - i)) {
            low.v[i] = ' ';
            memmove(low.v + i + 1, low.v + j, sizeof(int32_t) * (size_t)(low.n - j));
            low.n -= j - i - 1;
            j = i + 1;
        }
        i = j;
    }
    *buf = malloc(4 * (size_t)low.n + 1);
    *toks = malloc(sizeof(char *) * (size_t)(low.n + 1));
    if (!*buf || !*toks) goto oom;
    int32_t nt = 0;
    size_t o = 0;
    for (int32_t i = 0; i < low.n;) {
        if (mpx_py_is_space(low.v[i])) { i++; continue; }
        (*toks)[nt++] = *buf + o;
        for (; i < low.n && !mpx_py_is_space(low.v[i]); i++)
            o += (size_t)utf8proc_encode_char(low.v[i], (utf8proc_uint8_t *)*buf + o);
        (*buf)[o++] = '\0';
    }
    free(in.v);
    free(low.v);
    return nt;
oom:
    free(in.v);
    free(low.v);
    free(*buf);
    free(*toks);
    *buf = NULL;
    *toks = NULL;
    return -1;
}

char *mpx_squad_normalize_answer(const char *s)
{
    char *buf, **toks;
    int32_t n = normalize_tokens(s, &buf, &toks);
    if (n < 0) return NULL;
    size_t len = 1;
    for (int32_t i = 0; i < n; i++) len += strlen(toks[i]) + 1;
    char *out = malloc(len), *p = out;
    for (int32_t i = 0; out && i < n; i++) p += sprintf(p, i ? " %s" : "%s", toks[i]);
    if (out) *p = '\0';
    free(buf);
    free(toks);
    return out;
}

double mpx_squad_exact_match(const char *prediction, const char *ground_truth)
{
    char *a = mpx_squad_normalize_answer(prediction), *b = mpx_squad_normalize_answer(ground_truth);
    double r = a && b && strcmp(a, b) == 0 ? 1.0 : 0.0;
    free(a);
    free(b);
    return r;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

double mpx_squad_f1(const char *prediction, const char *ground_truth)
{
    char *pb, *gb, **pt, **gt;
    int32_t np = normalize_tokens(prediction, &pb, &pt), ng = normalize_tokens(ground_truth, &gb, &gt);
    double f1 = 0.0;
    if (np > 0 && ng > 0) { /* Counter & Counter: multiset intersection by a sorted merge */
        qsort(pt, (size_t)np, sizeof *pt, cmp_str);
        qsort(gt, (size_t)ng, sizeof *gt, cmp_str);
        int32_t same = 0;
        for (int32_t i = 0, j = 0; i < np && j < ng;) {
            int c = strcmp(pt[i], gt[j]);
            if (c == 0) same++, i++, j++;
            else if (c < 0) i++;
            else j++;
        }
        if (same > 0) {
            double precision = 1.0 * same / np, recall = 1.0 * same / ng;
            f1 = (2 * precision * recall) / (precision + recall);
        }
    }
    if (np >= 0) free(pb), free(pt);
    if (ng >= 0) free(gb), free(gt);
    return f1;
}

int mpx_squad_score_each(const mpx_squad_dataset *data, const char *const *predictions, double *em, double *f1,
                         char *err, size_t errlen)
{
    for (int32_t i = 0; i < data->n_questions; i++) {
        const mpx_squad_question *q = &data->questions[i];
        em[i] = f1[i] = NAN;
        if (!predictions[i]) continue;
        if (q->n_answers == 0) { /* max() of nothing: the official script fails here too */
            snprintf(err, errlen, "question %s has no ground-truth answers", q->id);
            return -1;
        }
        for (int32_t k = 0; k < q->n_answers; k++) {
            double e = mpx_squad_exact_match(predictions[i], q->answers[k].text);
            double f = mpx_squad_f1(predictions[i], q->answers[k].text);
            if (k == 0 || e > em[i]) em[i] = e;
            if (k == 0 || f > f1[i]) f1[i] = f;
        }
    }
    return 0;
}

int mpx_squad_evaluate(const mpx_squad_dataset *data, const char *const *predictions, mpx_squad_scores *out,
                       char *err, size_t errlen)
{
    size_t n = data->n_questions > 0 ? (size_t)data->n_questions : 1;
    double *em = malloc(n * sizeof *em), *f1 = malloc(n * sizeof *f1);
    if (!em || !f1) {
        free(em);
        free(f1);
        snprintf(err, errlen, "out of memory scoring %d questions", (int)data->n_questions);
        return -1;
    }
    int rc = mpx_squad_evaluate_each(data, predictions, out, em, f1, err, errlen);
    free(em);
    free(f1);
    return rc;
}

int mpx_squad_evaluate_each(const mpx_squad_dataset *data, const char *const *predictions, mpx_squad_scores *out,
                            double *em, double *f1, char *err, size_t errlen)
{
    if (mpx_squad_score_each(data, predictions, em, f1, err, errlen)) return -1;
    double em_sum = 0.0, f1_sum = 0.0;
    int32_t unanswered = 0;
    for (int32_t i = 0; i < data->n_questions; i++) {
        if (isnan(em[i])) { /* an unanswered question scores 0 */
            unanswered++;
            continue;
        }
        em_sum += em[i];
        f1_sum += f1[i];
    }
    out->n_questions = data->n_questions;
    out->n_unanswered = unanswered;
    out->exact_match = data->n_questions ? 100.0 * em_sum / data->n_questions : 0.0;
    out->f1 = data->n_questions ? 100.0 * f1_sum / data->n_questions : 0.0;
    return 0;
}

int mpx_squad_write_question_scores(const char *path, const mpx_squad_dataset *data, const double *em,
                                    const double *f1, int unanswered_as_zero, char *err, size_t errlen)
{
    char tmp[4200];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
        snprintf(err, errlen, "%.200s: path too long", path);
        return -1;
    }
    FILE *f = fopen(tmp, "w");
    if (!f) {
        snprintf(err, errlen, "%.2000s: %s", tmp, strerror(errno));
        return -1;
    }
    fputs("id,exact_match,f1\n", f);
    for (int32_t i = 0; i < data->n_questions; i++) {
        int answered = !isnan(em[i]);
        if (!answered && !unanswered_as_zero) continue;
        fprintf(f, "%s,%d,%.9g\n", data->questions[i].id, answered ? (int)em[i] : 0, answered ? f1[i] : 0.0);
    }
    int bad = ferror(f) != 0;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path)) {
        snprintf(err, errlen, "%.2000s: %s", bad ? tmp : path, strerror(errno));
        remove(tmp);
        return -1;
    }
    return 0;
}

int mpx_squad_read_predictions(const char *path, const mpx_squad_dataset *data, const char ***predictions,
                               void **predictions_json, char *err, size_t errlen)
{
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    *predictions = NULL;
    *predictions_json = NULL;
    if (!root) {
        snprintf(err, errlen, "%s:%d:%d: invalid JSON: %s", path, je.line, je.column, je.text);
        return -1;
    }
    if (!json_is_object(root)) {
        snprintf(err, errlen, "%s: expected a JSON object {question id: answer text}", path);
        json_decref(root);
        return -1;
    }
    const char **p = calloc((size_t)data->n_questions + 1, sizeof *p);
    if (!p) {
        snprintf(err, errlen, "%s: out of memory", path);
        json_decref(root);
        return -1;
    }
    for (int32_t i = 0; i < data->n_questions; i++) {
        json_t *v = json_object_get(root, data->questions[i].id);
        if (v && !json_is_string(v)) {
            snprintf(err, errlen, "%s: the prediction for question %s is not a string", path, data->questions[i].id);
            free(p);
            json_decref(root);
            return -1;
        }
        p[i] = v ? json_string_value(v) : NULL;
    }
    *predictions = p;
    *predictions_json = root;
    return 0;
}

void mpx_squad_predictions_json_free(const char **predictions, void *predictions_json)
{
    free((void *)predictions);
    json_decref(predictions_json);
}

void mpx_format_double_py(double x, char *buf, size_t len)
{
    if (isnan(x) || isinf(x)) {
        snprintf(buf, len, "%s", isnan(x) ? "NaN" : (x > 0 ? "Infinity" : "-Infinity"));
        return;
    }
    char e[40];
    int prec = 1;
    for (; prec <= 17; prec++) { /* shortest digits that read back to x */
        snprintf(e, sizeof e, "%.*e", prec - 1, x);
        if (strtod(e, NULL) == x) break;
    }
    char digits[24];
    int nd = 0, neg = e[0] == '-';
    const char *p = e + neg;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    int exp10 = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = '\0';
    if (exp10 < -4 || exp10 >= 16) { /* repr's scientific form: 1e-05, 1.5e+16 */
        snprintf(buf, len, "%s%c%s%s%se%c%02d", neg ? "-" : "", digits[0], nd > 1 ? "." : "", nd > 1 ? digits + 1 : "",
                 "", exp10 < 0 ? '-' : '+', abs(exp10));
        return;
    }
    char out[64];
    int o = 0;
    if (neg) out[o++] = '-';
    if (exp10 < 0) {
        o += sprintf(out + o, "0.");
        for (int i = 0; i < -exp10 - 1; i++) out[o++] = '0';
        memcpy(out + o, digits, (size_t)nd);
        o += nd;
    } else {
        for (int i = 0; i <= exp10; i++) out[o++] = i < nd ? digits[i] : '0';
        out[o++] = '.';
        if (nd > exp10 + 1) {
            memcpy(out + o, digits + exp10 + 1, (size_t)(nd - exp10 - 1));
            o += nd - exp10 - 1;
        } else {
            out[o++] = '0';
        }
    }
    out[o] = '\0';
    snprintf(buf, len, "%s", out);
}
