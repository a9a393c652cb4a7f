/* Feature windows after Google BERT's run_squad.py. Each paragraph is tokenised once
 * (word by word, as run_squad.py tokenises each doc token), each question once; the
 * windows only record where they start, so the arrays are written on demand. */
#include "squad_features.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

typedef struct builder {
    mpx_squad_features *fs;
    char *err;
    size_t errlen;
    int32_t cap_features, cap_query, cap_skipped;
    mpx_bert_ids scratch;
} builder;

static int grow(void **p, int32_t *cap, int32_t need, size_t elem)
{
    if (need <= *cap) return 0;
    int32_t c = *cap ? *cap * 2 : 256;
    while (c < need) c *= 2;
    void *q = realloc(*p, elem * (size_t)c);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

static int oom(builder *B, const char *what)
{
    snprintf(B->err, B->errlen, "out of memory while building %s", what);
    return -1;
}

/* run_squad.py's is_whitespace: the doc-token separators. */
static int is_doc_space(int32_t cp)
{
    return cp == ' ' || cp == '\t' || cp == '\r' || cp == '\n' || cp == 0x202F;
}

static int split_words(builder *B, const char *ctx, mpx_squad_doc *d, int32_t p)
{
    size_t len = strlen(ctx), i = 0;
    int32_t cap = 16, cp_index = 0, prev_space = 1;
    d->word_byte = malloc(sizeof(int32_t) * (size_t)(cap + 1));
    d->word_bend = malloc(sizeof(int32_t) * (size_t)cap);
    d->word_cp = malloc(sizeof(int32_t) * (size_t)cap);
    if (!d->word_byte || !d->word_bend || !d->word_cp) return oom(B, "doc words");
    while (i < len) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)ctx + i, (utf8proc_ssize_t)(len - i), &cp);
        if (k < 0) {
            snprintf(B->err, B->errlen, "paragraph %d: invalid UTF-8 at byte %zu", (int)p, i);
            return -1;
        }
        if (is_doc_space(cp)) {
            prev_space = 1;
        } else {
            if (prev_space) {
                if (d->n_words + 1 >= cap) {
                    cap *= 2;
                    int32_t *a = realloc(d->word_byte, sizeof(int32_t) * (size_t)(cap + 1));
                    if (a) d->word_byte = a;
                    int32_t *b = realloc(d->word_bend, sizeof(int32_t) * (size_t)cap);
                    if (b) d->word_bend = b;
                    int32_t *c = realloc(d->word_cp, sizeof(int32_t) * (size_t)cap);
                    if (c) d->word_cp = c;
                    if (!a || !b || !c) return oom(B, "doc words");
                }
                d->word_byte[d->n_words] = (int32_t)i;
                d->word_cp[d->n_words++] = cp_index;
            }
            d->word_bend[d->n_words - 1] = (int32_t)(i + (size_t)k);
            prev_space = 0;
        }
        i += (size_t)k;
        cp_index++;
    }
    d->word_byte[d->n_words] = (int32_t)len;
    return 0;
}

static int build_doc(builder *B, int32_t p)
{
    mpx_squad_features *fs = B->fs;
    const char *ctx = fs->data->paragraphs[p].context;
    mpx_squad_doc *d = &fs->docs[p];
    if (split_words(B, ctx, d, p)) return -1;
    mpx_bert_ids ids = {0};
    int32_t cap_map = 0;
    d->orig_to_tok = malloc(sizeof(int32_t) * (size_t)(d->n_words + 1));
    if (!d->orig_to_tok) return oom(B, "doc tokens");
    for (int32_t w = 0; w < d->n_words; w++) {
        d->orig_to_tok[w] = ids.len;
        char e[128];
        if (mpx_bert_tokenize(fs->tok, ctx + d->word_byte[w], (size_t)(d->word_bend[w] - d->word_byte[w]), &ids, e,
                              sizeof e)) {
            snprintf(B->err, B->errlen, "paragraph %d, word %d: %s", (int)p, (int)w, e);
            mpx_bert_ids_free(&ids);
            return -1;
        }
        if (grow((void **)&d->tok_to_orig, &cap_map, ids.len, sizeof(int32_t))) {
            mpx_bert_ids_free(&ids);
            return oom(B, "doc tokens");
        }
        for (int32_t t = d->orig_to_tok[w]; t < ids.len; t++) d->tok_to_orig[t] = w;
    }
    d->tokens = ids.ids;
    d->n_tokens = ids.len;
    return 0;
}

static int build_query(builder *B, int32_t q)
{
    mpx_squad_features *fs = B->fs;
    const char *text = fs->data->questions[q].text;
    B->scratch.len = 0;
    char e[128];
    if (mpx_bert_tokenize(fs->tok, text, strlen(text), &B->scratch, e, sizeof e)) {
        snprintf(B->err, B->errlen, "question %s: %s", fs->data->questions[q].id, e);
        return -1;
    }
    int32_t n = B->scratch.len < fs->cfg.max_query_length ? B->scratch.len : fs->cfg.max_query_length;
    fs->n_truncated_queries += n < B->scratch.len;
    int32_t off = q ? fs->query_off[q - 1] + fs->query_len[q - 1] : 0;
    if (grow((void **)&fs->query_ids, &B->cap_query, off + n, sizeof(int32_t))) return oom(B, "queries");
    if (n > 0) /* an empty question has no ids, and query_ids may still be NULL */
        memcpy(fs->query_ids + off, B->scratch.ids, sizeof(int32_t) * (size_t)n);
    fs->query_off[q] = off;
    fs->query_len[q] = n;
    return 0;
}

/* run_squad.py's char_to_word_offset[c]: the word holding or preceding code point c. */
static int32_t word_of_cp(const mpx_squad_doc *d, int32_t c)
{
    int32_t lo = 0, hi = d->n_words; /* count of words starting at or before c */
    while (lo < hi) {
        int32_t mid = (lo + hi) / 2;
        if (d->word_cp[mid] <= c) lo = mid + 1;
        else hi = mid;
    }
    return lo - 1;
}

static int32_t count_cps(const char *s)
{
    int32_t n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

/* " ".join(s.split()) with Python's whitespace, into a malloc'd string. */
static char *py_split_join(const char *s)
{
    size_t len = strlen(s), o = 0, i = 0;
    char *out = malloc(len + 1);
    if (!out) return NULL;
    int in_word = 0;
    while (i < len) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(len - i), &cp);
        if (k < 0) k = 1, cp = 0xFFFD;
        if (mpx_py_is_space(cp)) {
            in_word = 0;
        } else {
            if (!in_word && o) out[o++] = ' ';
            memcpy(out + o, s + i, (size_t)k);
            o += (size_t)k;
            in_word = 1;
        }
        i += (size_t)k;
    }
    out[o] = '\0';
    return out;
}

static int contains(const char *hay, size_t hn, const char *needle)
{
    size_t nn = strlen(needle);
    if (nn == 0) return 1;
    for (size_t i = 0; i + nn <= hn; i++)
        if (hay[i] == needle[0] && memcmp(hay + i, needle, nn) == 0) return 1;
    return 0;
}

/* read_squad_examples' check: the answer words, joined by spaces, contain the answer
 * text with its whitespace collapsed. */
static int answer_found(const char *ctx, const mpx_squad_doc *d, int32_t ws, int32_t we, const char *answer)
{
    size_t cap = (size_t)(d->word_byte[we + 1] - d->word_byte[ws]) + 1, n = 0;
    char *actual = malloc(cap), *clean = py_split_join(answer);
    int found = -1;
    if (actual && clean) {
        for (int32_t w = ws; w <= we; w++) {
            if (w > ws) actual[n++] = ' ';
            memcpy(actual + n, ctx + d->word_byte[w], (size_t)(d->word_bend[w] - d->word_byte[w]));
            n += (size_t)(d->word_bend[w] - d->word_byte[w]);
        }
        found = contains(actual, n, clean);
    }
    free(actual);
    free(clean);
    return found;
}

const char *mpx_squad_skip_reason_name(mpx_squad_skip_reason r)
{
    static const char *const names[MPX_SQUAD_SKIP_COUNT] = { "no_answer", "answer_outside_context",
                                                             "answer_not_on_words", "answer_text_not_at_offset",
                                                             "context_without_tokens" };
    return (unsigned)r < MPX_SQUAD_SKIP_COUNT ? names[r] : "?";
}

static int skip_question(builder *B, int32_t q, mpx_squad_skip_reason why)
{
    mpx_squad_features *fs = B->fs;
    if (grow((void **)&fs->skipped, &B->cap_skipped, fs->n_skipped + 1, sizeof(int32_t))) return oom(B, "skip list");
    fs->skipped[fs->n_skipped++] = q;
    fs->skip_reasons[why]++;
    return 1;
}

/* _improve_answer_span: the first sub-span whose tokens equal the answer's tokens. */
static int improve_span(builder *B, const mpx_squad_doc *d, const char *answer, int32_t *ts, int32_t *te)
{
    B->scratch.len = 0;
    char e[128];
    if (mpx_bert_tokenize(B->fs->tok, answer, strlen(answer), &B->scratch, e, sizeof e)) return -1;
    int32_t n = B->scratch.len;
    for (int32_t s = *ts; s <= *te; s++)
        for (int32_t t = *te; t >= s; t--)
            if (t - s + 1 == n && memcmp(d->tokens + s, B->scratch.ids, sizeof(int32_t) * (size_t)n) == 0) {
                *ts = s;
                *te = t;
                return 0;
            }
    return 0;
}

/* Training labels in sub-token space; 1 = skip the question, -1 = error. */
static int answer_tokens(builder *B, int32_t q, int32_t *ts, int32_t *te)
{
    mpx_squad_features *fs = B->fs;
    const mpx_squad_question *Q = &fs->data->questions[q];
    const mpx_squad_doc *d = &fs->docs[Q->paragraph];
    const char *ctx = fs->data->paragraphs[Q->paragraph].context;
    if (Q->n_answers < 1) return skip_question(B, q, MPX_SQUAD_SKIP_NO_ANSWER);
    const mpx_squad_answer *a = &Q->answers[0];
    int32_t n_cp = count_cps(ctx), len = count_cps(a->text);
    /* in 64 bits: answer_start comes from the file (2147483647 + len would overflow) */
    int64_t first = a->answer_start, last = (int64_t)a->answer_start + len - 1;
    if (len == 0 || first < 0 || first >= n_cp || last >= n_cp) return skip_question(B, q, MPX_SQUAD_SKIP_OUTSIDE_CONTEXT);
    int32_t ws = word_of_cp(d, (int32_t)first), we = word_of_cp(d, (int32_t)last);
    if (ws < 0 || we < ws) return skip_question(B, q, MPX_SQUAD_SKIP_NOT_ON_WORDS);
    int found = answer_found(ctx, d, ws, we, a->text);
    if (found < 0) return oom(B, "answer check");
    if (!found) return skip_question(B, q, MPX_SQUAD_SKIP_TEXT_MISMATCH);
    if (d->n_tokens == 0) return skip_question(B, q, MPX_SQUAD_SKIP_NO_WINDOWS); /* run_squad.py: no window */
    *ts = d->orig_to_tok[ws];
    *te = we < d->n_words - 1 ? d->orig_to_tok[we + 1] - 1 : d->n_tokens - 1;
    if (improve_span(B, d, a->text, ts, te)) {
        snprintf(B->err, B->errlen, "question %s: cannot tokenize the answer", Q->id);
        return -1;
    }
    return 0;
}

static int add_windows(builder *B, int32_t q)
{
    mpx_squad_features *fs = B->fs;
    const mpx_squad_feature_config *c = &fs->cfg;
    const mpx_squad_doc *d = &fs->docs[fs->data->questions[q].paragraph];
    int32_t ts = -1, te = -1;
    fs->first_feature[q] = fs->n_features;
    fs->n_question_features[q] = 0;
    if (c->is_training) {
        int r = answer_tokens(B, q, &ts, &te);
        if (r) return r < 0 ? -1 : 0;
        fs->n_extra_answers += fs->data->questions[q].n_answers - 1; /* labels come from answers[0] */
    }
    if (d->n_tokens == 0) fs->n_windowless++;
    int32_t qlen = fs->query_len[q], max_doc = c->max_seq_length - qlen - 3;
    for (int32_t start = 0, k = 0; start < d->n_tokens; k++) {
        int32_t len = d->n_tokens - start < max_doc ? d->n_tokens - start : max_doc;
        if (grow((void **)&fs->features, &B->cap_features, fs->n_features + 1, sizeof *fs->features))
            return oom(B, "features");
        mpx_squad_feature *f = &fs->features[fs->n_features++];
        *f = (mpx_squad_feature){q, k, start, len, -1, -1};
        if (c->is_training) {
            int inside = ts >= start && te <= start + len - 1;
            f->start_position = inside ? ts - start + qlen + 2 : 0;
            f->end_position = inside ? te - start + qlen + 2 : 0;
        }
        fs->n_question_features[q]++;
        if (start + len == d->n_tokens) break;
        start += len < c->doc_stride ? len : c->doc_stride;
    }
    return 0;
}

static int check_config(const mpx_squad_feature_config *c, char *err, size_t errlen)
{
    if (c->doc_stride < 1 || c->max_query_length < 0 || c->max_seq_length - c->max_query_length - 3 < 1) {
        snprintf(err, errlen,
                 "feature config: need doc_stride >= 1 and max_seq_length >= max_query_length + 4 "
                 "(got max_seq_length %d, doc_stride %d, max_query_length %d)",
                 (int)c->max_seq_length, (int)c->doc_stride, (int)c->max_query_length);
        return -1;
    }
    return 0;
}

int mpx_squad_features_build(const mpx_squad_dataset *data, const mpx_bert_tokenizer *tok,
                             const mpx_squad_feature_config *cfg, mpx_squad_features **out, char *err, size_t errlen)
{
    *out = NULL;
    if (check_config(cfg, err, errlen)) return -1;
    mpx_squad_features *fs = calloc(1, sizeof *fs);
    builder B = {fs, err, errlen, 0, 0, 0, {0}};
    if (!fs) return oom(&B, "features");
    fs->cfg = *cfg;
    fs->data = data;
    fs->tok = tok;
    size_t nq = (size_t)data->n_questions + 1;
    fs->docs = calloc((size_t)data->n_paragraphs + 1, sizeof *fs->docs);
    fs->query_off = calloc(nq, sizeof(int32_t));
    fs->query_len = calloc(nq, sizeof(int32_t));
    fs->first_feature = calloc(nq, sizeof(int32_t));
    fs->n_question_features = calloc(nq, sizeof(int32_t));
    int rc = -1;
    if (!fs->docs || !fs->query_off || !fs->query_len || !fs->first_feature || !fs->n_question_features) {
        oom(&B, "features");
        goto done;
    }
    for (int32_t p = 0; p < data->n_paragraphs; p++)
        if (build_doc(&B, p)) goto done;
    for (int32_t q = 0; q < data->n_questions; q++)
        if (build_query(&B, q) || add_windows(&B, q)) goto done;
    rc = 0;
done:
    mpx_bert_ids_free(&B.scratch);
    if (rc) mpx_squad_features_free(fs);
    else *out = fs;
    return rc;
}

void mpx_squad_features_free(mpx_squad_features *fs)
{
    if (!fs) return;
    for (int32_t p = 0; fs->docs && p < fs->data->n_paragraphs; p++) {
        mpx_squad_doc *d = &fs->docs[p];
        free(d->word_byte);
        free(d->word_bend);
        free(d->word_cp);
        free(d->tokens);
        free(d->tok_to_orig);
        free(d->orig_to_tok);
    }
    free(fs->docs);
    free(fs->query_off);
    free(fs->query_len);
    free(fs->query_ids);
    free(fs->features);
    free(fs->first_feature);
    free(fs->n_question_features);
    free(fs->skipped);
    free(fs);
}

int32_t mpx_squad_feature_length(const mpx_squad_features *fs, int32_t f)
{
    return fs->query_len[fs->features[f].question] + fs->features[f].doc_len + 3;
}

int32_t mpx_squad_feature_fill(const mpx_squad_features *fs, int32_t f, int32_t seq_len, int32_t *input_ids,
                               int32_t *segment_ids, int32_t *input_mask)
{
    const mpx_squad_feature *F = &fs->features[f];
    const mpx_squad_doc *d = &fs->docs[fs->data->questions[F->question].paragraph];
    int32_t qlen = fs->query_len[F->question], n = qlen + F->doc_len + 3;
    if (seq_len < n) return -1;
    if (input_ids) {
        int32_t *o = input_ids;
        *o++ = mpx_bert_cls_id(fs->tok);
        if (qlen > 0) memcpy(o, fs->query_ids + fs->query_off[F->question], sizeof(int32_t) * (size_t)qlen);
        o += qlen;
        *o++ = mpx_bert_sep_id(fs->tok);
        memcpy(o, d->tokens + F->doc_start, sizeof(int32_t) * (size_t)F->doc_len);
        o += F->doc_len;
        *o++ = mpx_bert_sep_id(fs->tok);
        memset(o, 0, sizeof(int32_t) * (size_t)(seq_len - n)); /* run_squad.py pads with id 0 */
    }
    for (int32_t i = 0; i < seq_len; i++) {
        if (segment_ids) segment_ids[i] = i >= qlen + 2 && i < n;
        if (input_mask) input_mask[i] = i < n;
    }
    return n;
}

int32_t mpx_squad_feature_token_to_orig(const mpx_squad_features *fs, int32_t f, int32_t pos)
{
    const mpx_squad_feature *F = &fs->features[f];
    int32_t i = pos - (fs->query_len[F->question] + 2);
    if (i < 0 || i >= F->doc_len) return -1;
    return fs->docs[fs->data->questions[F->question].paragraph].tok_to_orig[F->doc_start + i];
}

int mpx_squad_feature_is_max_context(const mpx_squad_features *fs, int32_t f, int32_t pos)
{
    const mpx_squad_feature *F = &fs->features[f];
    int32_t i = pos - (fs->query_len[F->question] + 2);
    if (i < 0 || i >= F->doc_len) return -1;
    int32_t at = F->doc_start + i, first = fs->first_feature[F->question], best = -1;
    double best_score = 0;
    for (int32_t k = first; k < first + fs->n_question_features[F->question]; k++) {
        const mpx_squad_feature *S = &fs->features[k];
        int32_t end = S->doc_start + S->doc_len - 1;
        if (at < S->doc_start || at > end) continue;
        int32_t left = at - S->doc_start, right = end - at;
        double score = (double)(left < right ? left : right) + 0.01 * (double)S->doc_len;
        if (best < 0 || score > best_score) {
            best_score = score;
            best = k;
        }
    }
    return best == f;
}

int32_t mpx_squad_batch_max_length(const mpx_squad_features *fs, const int32_t *idx, int32_t n)
{
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t l = mpx_squad_feature_length(fs, idx[i]);
        if (l > m) m = l;
    }
    return m;
}
