/* SQuAD feature windows exactly as Google BERT's run_squad.py
 * (read_squad_examples + convert_examples_to_features). Windows are kept compact
 * (question, span start and length) and written out into caller buffers on demand,
 * so the whole train set fits in a few tens of MB. */
#ifndef MPX_DATASETS_SQUAD_FEATURES_H
#define MPX_DATASETS_SQUAD_FEATURES_H

#include <stddef.h>
#include <stdint.h>

#include "bert_tokenizer.h"
#include "squad_reader.h"

typedef struct mpx_squad_feature_config {
    int32_t max_seq_length;   /* 384 */
    int32_t doc_stride;       /* 128 */
    int32_t max_query_length; /* 64 */
    int is_training;          /* labels from answers[0]; unfindable answers skip the question */
} mpx_squad_feature_config;

typedef struct mpx_squad_feature {
    int32_t question;   /* index into the dataset's questions */
    int32_t span_index; /* window number within its question */
    int32_t doc_start;  /* first paragraph sub-token of the window */
    int32_t doc_len;    /* paragraph sub-tokens in the window */
    int32_t start_position, end_position; /* training labels (0/0 = [CLS]); -1 when not training */
} mpx_squad_feature;

/* One paragraph, tokenised once for all its questions. */
typedef struct mpx_squad_doc {
    int32_t n_words;     /* whitespace doc tokens (run_squad.py's doc_tokens) */
    int32_t *word_byte;  /* [n_words + 1]: byte offset of each word start in the context */
    int32_t *word_bend;  /* [n_words]: byte offset just past each word */
    int32_t *word_cp;    /* [n_words]: code-point offset of each word start */
    int32_t n_tokens;    /* WordPiece sub-tokens of the paragraph */
    int32_t *tokens;     /* [n_tokens] ids */
    int32_t *tok_to_orig;/* [n_tokens] word index */
    int32_t *orig_to_tok;/* [n_words] first sub-token of each word */
} mpx_squad_doc;

/* Why a training question is left out (run_squad.py drops the same ones, silently). */
typedef enum mpx_squad_skip_reason {
    MPX_SQUAD_SKIP_NO_ANSWER = 0,         /* no answer given */
    MPX_SQUAD_SKIP_OUTSIDE_CONTEXT = 1,   /* answer_start (or its end) past the context, empty answer */
    MPX_SQUAD_SKIP_NOT_ON_WORDS = 2,      /* the span does not fall on the context's words */
    MPX_SQUAD_SKIP_TEXT_MISMATCH = 3,     /* the context at answer_start does not read the answer */
    MPX_SQUAD_SKIP_NO_WINDOWS = 4,        /* the context gives no sub-tokens, so no window */
    MPX_SQUAD_SKIP_COUNT = 5,
} mpx_squad_skip_reason;

typedef struct mpx_squad_features {
    mpx_squad_feature_config cfg;
    const mpx_squad_dataset *data; /* borrowed: must outlive the features */
    const mpx_bert_tokenizer *tok; /* borrowed */
    mpx_squad_doc *docs;           /* [n_paragraphs] */
    int32_t *query_off, *query_len; /* [n_questions] into query_ids (truncated queries) */
    int32_t *query_ids;
    int32_t n_features;
    mpx_squad_feature *features;   /* grouped by question, in question order */
    int32_t *first_feature;        /* [n_questions] */
    int32_t *n_question_features;  /* [n_questions]; 0 = skipped or empty context */
    int32_t n_skipped;             /* training questions whose answer is not at its offset */
    int32_t *skipped;              /* [n_skipped] question indices */
    int32_t skip_reasons[MPX_SQUAD_SKIP_COUNT]; /* n_skipped by reason */
    /* What else the windows leave out, as run_squad.py does, silently there: */
    int32_t n_windowless;          /* evaluation questions with no window (scored 0: no prediction) */
    int32_t n_extra_answers;       /* training answers past answers[0] of the questions used */
    int32_t n_truncated_queries;   /* questions cut to max_query_length sub-tokens */
} mpx_squad_features;

/* The reason of each skipped training question, as the record names it. */
const char *mpx_squad_skip_reason_name(mpx_squad_skip_reason r);

/* Tokenises and windows every question of data. 0 on success; an answer that cannot be
 * found at its offset is not an error (counted in n_skipped, as run_squad.py skips it). */
int mpx_squad_features_build(const mpx_squad_dataset *data, const mpx_bert_tokenizer *tok,
                             const mpx_squad_feature_config *cfg, mpx_squad_features **out, char *err,
                             size_t errlen);
void mpx_squad_features_free(mpx_squad_features *fs);

/* Tokens in window f: [CLS] query [SEP] doc [SEP]. */
int32_t mpx_squad_feature_length(const mpx_squad_features *fs, int32_t f);
/* Writes input ids, segment ids and input mask of window f into arrays of seq_len
 * (>= its length), zero-padded. Any pointer may be NULL. Returns the window's length,
 * or -1 when seq_len is too short. */
int32_t mpx_squad_feature_fill(const mpx_squad_features *fs, int32_t f, int32_t seq_len, int32_t *input_ids,
                               int32_t *segment_ids, int32_t *input_mask);
/* run_squad.py's token_to_orig_map: the doc word of position pos, or -1 outside the doc part. */
int32_t mpx_squad_feature_token_to_orig(const mpx_squad_features *fs, int32_t f, int32_t pos);
/* token_is_max_context: 1 / 0 for doc positions, -1 outside the doc part. */
int mpx_squad_feature_is_max_context(const mpx_squad_features *fs, int32_t f, int32_t pos);
/* Dynamic padding: the longest window among features idx[0..n). */
int32_t mpx_squad_batch_max_length(const mpx_squad_features *fs, const int32_t *idx, int32_t n);

#endif
