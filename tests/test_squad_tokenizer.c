/* The C BERT tokenizer against transformers' slow BertTokenizer (4.46.3): every dev
 * question and context (hash fixture), plus hand-written edge cases whose ids were
 * printed by that tokenizer (see the comment of each). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../datasets/bert_tokenizer.h"
#include "../datasets/squad_reader.h"
#include "test_squad_common.h"

static mpx_bert_tokenizer *tok;

static void setup(void)
{
    char err[256];
    cr_assert_eq(mpx_bert_tokenizer_load(SQUAD_VOCAB, &tok, err, sizeof err), 0, "%s (run `make data`)", err);
}

static void teardown(void) { mpx_bert_tokenizer_free(tok); }

/* Literal with its length: some cases hold a NUL byte. */
#define CHECK_IDS(lit, want, n) check_ids(lit, sizeof(lit) - 1, want, n)

static void check_ids(const char *text, size_t len, const int32_t *want, int32_t n)
{
    mpx_bert_ids ids = {0};
    char err[128];
    cr_assert_eq(mpx_bert_tokenize(tok, text, len, &ids, err, sizeof err), 0, "%s", err);
    cr_assert_eq(ids.len, n, "'%s': %d ids, want %d", text, ids.len, n);
    for (int32_t i = 0; i < n; i++) cr_assert_eq(ids.ids[i], want[i], "'%s' id %d: %d want %d", text, i, ids.ids[i], want[i]);
    mpx_bert_ids_free(&ids);
}

TestSuite(squad_tokenizer, .init = setup, .fini = teardown, .timeout = 60);

Test(squad_tokenizer, vocab_basics)
{
    cr_assert_eq(mpx_bert_vocab_size(tok), 30522);
    cr_assert_eq(mpx_bert_cls_id(tok), 101);
    cr_assert_eq(mpx_bert_sep_id(tok), 102);
    cr_assert_eq(mpx_bert_unk_id(tok), 100);
    cr_assert_eq(mpx_bert_pad_id(tok), 0);
    cr_assert_str_eq(mpx_bert_token_str(tok, 2003), "is");
    cr_assert_eq(mpx_bert_token_id(tok, "##ing"), 2075);
    char err[256];
    mpx_bert_tokenizer *t;
    cr_assert_neq(mpx_bert_tokenizer_load("tests/fixtures/squad/no-such-vocab.txt", &t, err, sizeof err), 0);
    cr_assert(strstr(err, "no-such-vocab.txt"), "%s", err);
}

#include "fixtures/squad/tokenizer_cases.inc"

Test(squad_tokenizer, every_dev_question_and_context)
{
    char err[256];
    mpx_squad_dataset d;
    cr_assert_eq(mpx_squad_load(SQUAD_DEV, &d, err, sizeof err), 0, "%s", err);
    int n;
    char **lines = squad_fixture_lines(SQUAD_FIXTURES "tokens_dev.txt.gz", &n);
    cr_assert(lines && n == d.n_paragraphs + d.n_questions, "fixture lines %d", n);
    int q = 0, ok_q = 0, ok_c = 0, bad = 0;
    mpx_bert_ids ids = {0};
    for (int i = 0; i < n; i++) {
        char kind, key[64], hex[17], got[17];
        int len;
        cr_assert_eq(sscanf(lines[i], "%c %63s %d %16s", &kind, key, &len, hex), 4);
        const char *text;
        if (kind == 'c') {
            text = d.paragraphs[atoi(key)].context;
        } else {
            cr_assert_str_eq(d.questions[q].id, key);
            text = d.questions[q++].text;
        }
        ids.len = 0;
        cr_assert_eq(mpx_bert_tokenize(tok, text, strlen(text), &ids, err, sizeof err), 0, "%s", err);
        squad_hash_ints(ids.ids, (size_t)ids.len, got);
        if (ids.len == len && strcmp(got, hex) == 0) {
            kind == 'c' ? ok_c++ : ok_q++;
        } else if (bad++ < 5) {
            fprintf(stderr, "token mismatch: %s %s (%d ids, want %d)\n", kind == 'c' ? "context" : "question", key, ids.len, len);
        }
    }
    fprintf(stderr, "tokens: %d/%d questions, %d/%d contexts match transformers\n", ok_q, d.n_questions, ok_c,
            d.n_paragraphs);
    cr_assert_eq(ok_q, 10570);
    cr_assert_eq(ok_c, 2067);
    mpx_bert_ids_free(&ids);
    squad_fixture_free(lines, n);
    mpx_squad_free(&d);
}
