/* BERT uncased WordPiece tokenizer, matching transformers' slow
 * BertTokenizer(vocab_file, do_lower_case=True): clean text (drop NUL, U+FFFD and
 * category C* except tab/newline/CR; Zs and tab/newline/CR are spaces), spaces around
 * CJK ideographs, lower case per code point as Python str.lower() (U+0130 -> "i" U+0307),
 * NFD and drop Mn, split on punctuation (ASCII symbol ranges and Unicode P*), then
 * greedy longest-match-first WordPiece; a word over 100 code points becomes [UNK]. */
#ifndef MPX_DATASETS_BERT_TOKENIZER_H
#define MPX_DATASETS_BERT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

typedef struct mpx_bert_tokenizer mpx_bert_tokenizer;

/* A growable list of token ids (zero-initialise, free with mpx_bert_ids_free). */
typedef struct mpx_bert_ids {
    int32_t *ids;
    int32_t len, cap;
} mpx_bert_ids;

/* Loads any vocab.txt (one token per line, id = line number; [CLS], [SEP], [UNK] and
 * [PAD] must be present). 0 on success; otherwise err names the file and line. */
int mpx_bert_tokenizer_load(const char *vocab_path, mpx_bert_tokenizer **out, char *err, size_t errlen);
void mpx_bert_tokenizer_free(mpx_bert_tokenizer *tok);

int32_t mpx_bert_vocab_size(const mpx_bert_tokenizer *tok);
/* Id of a vocabulary entry, or -1. */
int32_t mpx_bert_token_id(const mpx_bert_tokenizer *tok, const char *token);
/* The vocabulary entry of an id (NULL when out of range). */
const char *mpx_bert_token_str(const mpx_bert_tokenizer *tok, int32_t id);
int32_t mpx_bert_cls_id(const mpx_bert_tokenizer *tok);
int32_t mpx_bert_sep_id(const mpx_bert_tokenizer *tok);
int32_t mpx_bert_unk_id(const mpx_bert_tokenizer *tok);
int32_t mpx_bert_pad_id(const mpx_bert_tokenizer *tok);

/* Appends the WordPiece ids of UTF-8 text[0..len) to out. -1 on invalid UTF-8 or
 * out of memory (err says which byte offset). Thread-safe for a shared tokenizer. */
int mpx_bert_tokenize(const mpx_bert_tokenizer *tok, const char *text, size_t len, mpx_bert_ids *out,
                      char *err, size_t errlen);

/* BERT's BasicTokenizer alone (no WordPiece): the words joined by single spaces, in a
 * malloc'd NUL-terminated string. With final_sigma set, capital sigma is lowered as
 * Python's str.lower() does on a whole word (to U+03C2 at a word end), as
 * transformers' BasicTokenizer.tokenize (used by get_final_text) does; without it,
 * per code point, as BertTokenizer.tokenize does. NULL on invalid UTF-8 / no memory. */
char *mpx_bert_basic_tokenize(const char *text, size_t len, int final_sigma);

int mpx_bert_ids_push(mpx_bert_ids *ids, int32_t id);
void mpx_bert_ids_free(mpx_bert_ids *ids);

/* Python str.lower() of one code point, except the context-dependent final sigma:
 * writes 1 or 2 code points to out and returns their count. */
int mpx_py_lower_cp(int32_t cp, int32_t out[2]);
/* Python's Cased and Case_Ignorable properties (for the Final_Sigma rule). */
int mpx_py_is_cased(int32_t cp);
int mpx_py_is_case_ignorable(int32_t cp);
/* Python str.isspace() / str.split() whitespace. */
int mpx_py_is_space(int32_t cp);

#endif
