/* BERT uncased WordPiece tokenizer (see bert_tokenizer.h for the rules). The text is
 * walked once; each whitespace-separated piece is lowered, decomposed and split on
 * punctuation, and each word is looked up greedily in two hash tables (whole-word
 * entries and "##" continuations), so a lookup never builds a "##" string. */
#include "bert_tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#define MAX_WORD_CHARS 100 /* transformers' max_input_chars_per_word */

typedef struct table {
    int32_t *slots; /* id + 1, 0 = empty */
    uint32_t mask;
    int32_t max_len; /* longest key in bytes: longer substrings are not looked up */
} table;

struct mpx_bert_tokenizer {
    char *pool;
    int32_t n;
    char **str;
    int32_t *len;
    table plain, cont;
    int32_t cls, sep, unk, pad;
};

static uint32_t hash_bytes(const char *s, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

/* Key of entry id in a table: the whole token, or the token without its "##". */
static const char *key_of(const mpx_bert_tokenizer *t, const table *tb, int32_t id, int32_t *n)
{
    int skip = tb == &t->cont ? 2 : 0;
    *n = t->len[id] - skip;
    return t->str[id] + skip;
}

static int32_t table_find(const mpx_bert_tokenizer *t, const table *tb, const char *s, int32_t n)
{
    if (n > tb->max_len) return -1;
    for (uint32_t i = hash_bytes(s, (size_t)n) & tb->mask;; i = (i + 1) & tb->mask) {
        int32_t v = tb->slots[i];
        if (!v) return -1;
        int32_t kn;
        const char *k = key_of(t, tb, v - 1, &kn);
        if (kn == n && memcmp(k, s, (size_t)n) == 0) return v - 1;
    }
}

static void table_put(mpx_bert_tokenizer *t, table *tb, int32_t id)
{
    int32_t n;
    const char *s = key_of(t, tb, id, &n);
    if (n > tb->max_len) tb->max_len = n;
    for (uint32_t i = hash_bytes(s, (size_t)n) & tb->mask;; i = (i + 1) & tb->mask) {
        int32_t v = tb->slots[i];
        int32_t kn;
        if (v) {
            const char *k = key_of(t, tb, v - 1, &kn);
            if (kn != n || memcmp(k, s, (size_t)n) != 0) continue;
        }
        tb->slots[i] = id + 1; /* a repeated token keeps its last line, as a Python dict */
        return;
    }
}

static int read_file(const char *path, char **data, size_t *size, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open vocabulary: %s", path, strerror(errno));
        return -1;
    }
    size_t cap = 1 << 20, n = 0, r;
    char *buf = malloc(cap + 1);
    while (buf && (r = fread(buf + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) {
            char *nb = realloc(buf, 2 * cap + 1);
            if (!nb) { free(buf); buf = NULL; break; }
            buf = nb;
            cap *= 2;
        }
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf || bad) {
        free(buf);
        snprintf(err, errlen, "%s: %s while reading vocabulary", path, bad ? "read error" : "out of memory");
        return -1;
    }
    buf[n] = '\0';
    *data = buf;
    *size = n;
    return 0;
}

static int split_lines(mpx_bert_tokenizer *t, size_t size, const char *path, char *err, size_t errlen)
{
    int32_t n = 0;
    for (size_t i = 0; i < size; i++) n += t->pool[i] == '\n';
    if (size && t->pool[size - 1] != '\n') n++;
    t->str = malloc(sizeof *t->str * (size_t)(n ? n : 1));
    t->len = malloc(sizeof *t->len * (size_t)(n ? n : 1));
    if (!t->str || !t->len) {
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    char *p = t->pool, *end = t->pool + size;
    for (int32_t i = 0; i < n; i++) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl) nl = end;
        *nl = '\0'; /* transformers strips only "\n" from each line */
        t->str[i] = p;
        t->len[i] = (int32_t)(nl - p);
        p = nl + 1;
    }
    t->n = n;
    return 0;
}

static int find_special(mpx_bert_tokenizer *t, const char *name, int32_t *id, const char *path, char *err,
                        size_t errlen)
{
    *id = table_find(t, &t->plain, name, (int32_t)strlen(name));
    if (*id < 0) {
        /* transformers strips only "\n": with Windows line ends every token keeps a "\r" */
        int32_t crlf = 0;
        for (int32_t i = 0; i < t->n && !crlf; i++) crlf = t->len[i] > 0 && t->str[i][t->len[i] - 1] == '\r';
        snprintf(err, errlen, "%s: vocabulary has no %s token%s", path, name,
                 crlf ? " (its lines end in \\r\\n: the \\r stays part of every token, as transformers reads it; "
                        "convert the file to \\n line ends, e.g. with dos2unix)" : "");
        return -1;
    }
    return 0;
}

int mpx_bert_tokenizer_load(const char *path, mpx_bert_tokenizer **out, char *err, size_t errlen)
{
    *out = NULL;
    mpx_bert_tokenizer *t = calloc(1, sizeof *t);
    size_t size;
    if (!t) {
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    if (read_file(path, &t->pool, &size, err, errlen) || split_lines(t, size, path, err, errlen)) goto fail;
    if (t->n == 0) {
        snprintf(err, errlen, "%s: empty vocabulary", path);
        goto fail;
    }
    uint32_t cap = 1;
    while (cap < 2u * (uint32_t)t->n) cap <<= 1;
    t->plain.slots = calloc(cap, sizeof(int32_t));
    t->cont.slots = calloc(cap, sizeof(int32_t));
    if (!t->plain.slots || !t->cont.slots) {
        snprintf(err, errlen, "%s: out of memory", path);
        goto fail;
    }
    t->plain.mask = t->cont.mask = cap - 1;
    for (int32_t i = 0; i < t->n; i++) {
        table_put(t, &t->plain, i);
        if (t->len[i] > 2 && t->str[i][0] == '#' && t->str[i][1] == '#') table_put(t, &t->cont, i);
    }
    if (find_special(t, "[CLS]", &t->cls, path, err, errlen) || find_special(t, "[SEP]", &t->sep, path, err, errlen) ||
        find_special(t, "[UNK]", &t->unk, path, err, errlen) || find_special(t, "[PAD]", &t->pad, path, err, errlen))
        goto fail;
    *out = t;
    return 0;
fail:
    mpx_bert_tokenizer_free(t);
    return -1;
}

void mpx_bert_tokenizer_free(mpx_bert_tokenizer *t)
{
    if (!t) return;
    free(t->plain.slots);
    free(t->cont.slots);
    free(t->str);
    free(t->len);
    free(t->pool);
    free(t);
}

int32_t mpx_bert_vocab_size(const mpx_bert_tokenizer *t) { return t->n; }
int32_t mpx_bert_token_id(const mpx_bert_tokenizer *t, const char *s)
{
    return table_find(t, &t->plain, s, (int32_t)strlen(s));
}
const char *mpx_bert_token_str(const mpx_bert_tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n ? t->str[id] : NULL;
}
int32_t mpx_bert_cls_id(const mpx_bert_tokenizer *t) { return t->cls; }
int32_t mpx_bert_sep_id(const mpx_bert_tokenizer *t) { return t->sep; }
int32_t mpx_bert_unk_id(const mpx_bert_tokenizer *t) { return t->unk; }
int32_t mpx_bert_pad_id(const mpx_bert_tokenizer *t) { return t->pad; }

int mpx_bert_ids_push(mpx_bert_ids *v, int32_t id)
{
    if (v->len == v->cap) {
        int32_t cap = v->cap ? 2 * v->cap : 64;
        int32_t *p = realloc(v->ids, sizeof *p * (size_t)cap);
        if (!p) return -1;
        v->ids = p;
        v->cap = cap;
    }
    v->ids[v->len++] = id;
    return 0;
}

void mpx_bert_ids_free(mpx_bert_ids *v)
{
    free(v->ids);
    v->ids = NULL;
    v->len = v->cap = 0;
}

/* ------------------------------------------------------------ character classes */

int mpx_py_lower_cp(int32_t cp, int32_t out[2])
{
    if (cp < 128) {
        out[0] = cp >= 'A' && cp <= 'Z' ? cp + 32 : cp;
        return 1;
    }
    if (cp == 0x130) { /* SpecialCasing: the only unconditional multi-character lower case */
        out[0] = 'i';
        out[1] = 0x307;
        return 2;
    }
    out[0] = utf8proc_tolower(cp);
    return 1;
}

int mpx_py_is_space(int32_t cp)
{
    switch (cp) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x1C: case 0x1D: case 0x1E: case 0x1F:
    case 0x20: case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F:
    case 0x3000:
        return 1;
    default:
        return cp >= 0x2000 && cp <= 0x200A;
    }
}

int mpx_py_is_cased(int32_t cp)
{
    utf8proc_category_t c = utf8proc_category(cp);
    if (c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT) return 1;
    /* Other_Lowercase / Other_Uppercase (modifier letters, roman numerals, circled letters) */
    return cp == 0xAA || cp == 0xBA || (cp >= 0x2B0 && cp <= 0x2B8) || (cp >= 0x2C0 && cp <= 0x2C1) ||
           (cp >= 0x2E0 && cp <= 0x2E4) || cp == 0x345 || cp == 0x37A || (cp >= 0x1D2C && cp <= 0x1D6A) ||
           cp == 0x1D78 || (cp >= 0x1D9B && cp <= 0x1DBF) || cp == 0x2071 || cp == 0x207F ||
           (cp >= 0x2090 && cp <= 0x209C) || (cp >= 0x2160 && cp <= 0x217F) || (cp >= 0x24B6 && cp <= 0x24E9);
}

int mpx_py_is_case_ignorable(int32_t cp)
{
    switch (cp) { /* Word_Break MidLetter, MidNumLet, Single_Quote */
    case 0x27: case 0x2E: case 0x3A: case 0xB7: case 0x387: case 0x55F: case 0x5F4: case 0x2018:
    case 0x2019: case 0x2024: case 0x2027: case 0xFE13: case 0xFE52: case 0xFE55: case 0xFF07:
    case 0xFF0E: case 0xFF1A:
        return 1;
    default:
        break;
    }
    utf8proc_category_t c = utf8proc_category(cp);
    return c == UTF8PROC_CATEGORY_MN || c == UTF8PROC_CATEGORY_ME || c == UTF8PROC_CATEGORY_CF ||
           c == UTF8PROC_CATEGORY_LM || c == UTF8PROC_CATEGORY_SK;
}

/* BERT's _is_control: category C* except tab, newline, carriage return. */
static int is_control(int32_t cp)
{
    if (cp < 128) return (cp < 32 && cp != '\t' && cp != '\n' && cp != '\r') || cp == 127;
    utf8proc_category_t c = utf8proc_category(cp);
    return c == UTF8PROC_CATEGORY_CC || c == UTF8PROC_CATEGORY_CF || c == UTF8PROC_CATEGORY_CS ||
           c == UTF8PROC_CATEGORY_CO || c == UTF8PROC_CATEGORY_CN;
}

/* A piece boundary: BERT's _is_whitespace (space, tab, newline, CR, Zs), plus the line
 * and paragraph separators on which Python's str.split() also splits. */
static int is_space(int32_t cp)
{
    if (cp < 128) return cp == ' ' || cp == '\t' || cp == '\n' || cp == '\r';
    utf8proc_category_t c = utf8proc_category(cp);
    return c == UTF8PROC_CATEGORY_ZS || c == UTF8PROC_CATEGORY_ZL || c == UTF8PROC_CATEGORY_ZP;
}

static int is_cjk(int32_t cp)
{
    return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x20000 && cp <= 0x2A6DF) ||
           (cp >= 0x2A700 && cp <= 0x2B73F) || (cp >= 0x2B740 && cp <= 0x2B81F) ||
           (cp >= 0x2B820 && cp <= 0x2CEAF) || (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

static int is_punct(int32_t cp)
{
    if ((cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) || (cp >= 123 && cp <= 126))
        return 1;
    if (cp < 128) return 0;
    utf8proc_category_t c = utf8proc_category(cp);
    return c >= UTF8PROC_CATEGORY_PC && c <= UTF8PROC_CATEGORY_PO;
}

/* Python's Final_Sigma context for the capital sigma at w[i] of a word. */
static int final_sigma_at(const int32_t *w, int32_t n, int32_t i)
{
    int32_t j = i - 1;
    while (j >= 0 && mpx_py_is_case_ignorable(w[j])) j--;
    if (j < 0 || !mpx_py_is_cased(w[j])) return 0;
    for (j = i + 1; j < n && mpx_py_is_case_ignorable(w[j]); j++) {}
    return j == n || !mpx_py_is_cased(w[j]);
}

/* ------------------------------------------------------------ the pipeline */

typedef struct cpbuf {
    int32_t *v;
    int32_t n, cap;
} cpbuf;

static int cp_reserve(cpbuf *b, int32_t extra)
{
    if (b->n + extra <= b->cap) return 0;
    int32_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + extra) cap *= 2;
    int32_t *p = realloc(b->v, sizeof *p * (size_t)cap);
    if (!p) return -1;
    b->v = p;
    b->cap = cap;
    return 0;
}

typedef struct sink {
    const mpx_bert_tokenizer *tok; /* WordPiece into ids, or ... */
    mpx_bert_ids *ids;
    char *text; /* ... words into a space-separated string */
    size_t text_len, text_cap;
    int final_sigma;
    cpbuf piece, norm;
    char wbytes[4 * MAX_WORD_CHARS + 4];
    int32_t woff[MAX_WORD_CHARS + 1];
} sink;

static int wordpiece(sink *s, const int32_t *w, int32_t n)
{
    const mpx_bert_tokenizer *t = s->tok;
    if (n > MAX_WORD_CHARS) return mpx_bert_ids_push(s->ids, t->unk);
    int32_t nb = 0;
    for (int32_t i = 0; i < n; i++) {
        s->woff[i] = nb;
        nb += (int32_t)utf8proc_encode_char(w[i], (utf8proc_uint8_t *)s->wbytes + nb);
    }
    s->woff[n] = nb;
    int32_t mark = s->ids->len;
    for (int32_t start = 0; start < n;) {
        const table *tb = start ? &t->cont : &t->plain;
        int32_t end = n, id = -1;
        for (; end > start; end--) {
            id = table_find(t, tb, s->wbytes + s->woff[start], s->woff[end] - s->woff[start]);
            if (id >= 0) break;
        }
        if (id < 0) { /* no piece fits: the whole word is unknown */
            s->ids->len = mark;
            return mpx_bert_ids_push(s->ids, t->unk);
        }
        if (mpx_bert_ids_push(s->ids, id)) return -1;
        start = end;
    }
    return 0;
}

static int append_word(sink *s, const int32_t *w, int32_t n)
{
    if (s->text_len + 4 * (size_t)n + 2 > s->text_cap) {
        size_t cap = s->text_cap ? s->text_cap : 256;
        while (cap < s->text_len + 4 * (size_t)n + 2) cap *= 2;
        char *p = realloc(s->text, cap);
        if (!p) return -1;
        s->text = p;
        s->text_cap = cap;
    }
    if (s->text_len) s->text[s->text_len++] = ' ';
    for (int32_t i = 0; i < n; i++)
        s->text_len += (size_t)utf8proc_encode_char(w[i], (utf8proc_uint8_t *)s->text + s->text_len);
    s->text[s->text_len] = '\0';
    return 0;
}

static int emit_word(sink *s, const int32_t *w, int32_t n)
{
    if (n == 0) return 0;
    return s->tok ? wordpiece(s, w, n) : append_word(s, w, n);
}

/* Lower case, NFD, drop Mn, then split on punctuation: one whitespace piece. */
static int flush_piece(sink *s)
{
    cpbuf *p = &s->piece, *o = &s->norm;
    o->n = 0;
    for (int32_t i = 0; i < p->n; i++) {
        int32_t low[2], k;
        if (p->v[i] == 0x3A3 && s->final_sigma) {
            low[0] = final_sigma_at(p->v, p->n, i) ? 0x3C2 : 0x3C3;
            k = 1;
        } else {
            k = mpx_py_lower_cp(p->v[i], low);
        }
        for (int32_t j = 0; j < k; j++) {
            if (low[j] < 128) {
                if (cp_reserve(o, 1)) return -1;
                o->v[o->n++] = low[j];
                continue;
            }
            utf8proc_int32_t d[32];
            int last = 0;
            utf8proc_ssize_t nd = utf8proc_decompose_char(low[j], d, 32, UTF8PROC_DECOMPOSE, &last);
            if (nd < 0 || nd > 32 || cp_reserve(o, (int32_t)nd)) return -1;
            for (utf8proc_ssize_t q = 0; q < nd; q++)
                if (utf8proc_category(d[q]) != UTF8PROC_CATEGORY_MN) o->v[o->n++] = d[q];
        }
    }
    p->n = 0;
    int32_t start = 0;
    for (int32_t i = 0; i < o->n; i++) {
        if (!is_punct(o->v[i])) continue;
        if (emit_word(s, o->v + start, i - start) || emit_word(s, o->v + i, 1)) return -1;
        start = i + 1;
    }
    return emit_word(s, o->v + start, o->n - start);
}

static int run(sink *s, const char *text, size_t len, char *err, size_t errlen)
{
    const utf8proc_uint8_t *u = (const utf8proc_uint8_t *)text;
    size_t i = 0;
    while (i < len) {
        utf8proc_int32_t cp;
        if (u[i] < 128) {
            cp = u[i++];
        } else {
            utf8proc_ssize_t k = utf8proc_iterate(u + i, (utf8proc_ssize_t)(len - i), &cp);
            if (k < 0) {
                snprintf(err, errlen, "invalid UTF-8 at byte %zu", i);
                return -1;
            }
            i += (size_t)k;
        }
        if (cp == 0 || cp == 0xFFFD || is_control(cp)) continue;
        if (is_space(cp) || is_cjk(cp)) {
            if (s->piece.n && flush_piece(s)) goto oom;
            if (!is_cjk(cp)) continue;
        }
        if (cp_reserve(&s->piece, 1)) goto oom;
        s->piece.v[s->piece.n++] = cp;
        if (is_cjk(cp) && flush_piece(s)) goto oom;
    }
    if (s->piece.n && flush_piece(s)) goto oom;
    return 0;
oom:
    snprintf(err, errlen, "out of memory while tokenizing");
    return -1;
}

int mpx_bert_tokenize(const mpx_bert_tokenizer *tok, const char *text, size_t len, mpx_bert_ids *out, char *err,
                      size_t errlen)
{
    sink s = {.tok = tok, .ids = out};
    int rc = run(&s, text, len, err, errlen);
    free(s.piece.v);
    free(s.norm.v);
    return rc;
}

char *mpx_bert_basic_tokenize(const char *text, size_t len, int final_sigma)
{
    sink s = {.final_sigma = final_sigma};
    char err[64];
    int rc = run(&s, text, len, err, sizeof err);
    free(s.piece.v);
    free(s.norm.v);
    if (rc) {
        free(s.text);
        return NULL;
    }
    if (!s.text) s.text = calloc(1, 1);
    return s.text;
}
