/* From start/end logits to answer texts, as Google BERT's run_squad.py
 * write_predictions (v1.1): n-best start and end indexes per window, valid spans
 * (inside the doc part, max-context start, end >= start, at most max_answer_length
 * tokens), ranked across a question's windows by start + end logit, mapped back onto
 * the original context with get_final_text. */
#ifndef MPX_DATASETS_SQUAD_POSTPROCESS_H
#define MPX_DATASETS_SQUAD_POSTPROCESS_H

#include <stddef.h>
#include <stdint.h>

#include "squad_features.h"

typedef struct mpx_squad_postprocess_config {
    int32_t n_best_size;       /* 20 */
    int32_t max_answer_length; /* 30 */
} mpx_squad_postprocess_config;

typedef struct mpx_squad_nbest {
    char *text;
    double start_logit, end_logit, probability;
} mpx_squad_nbest;

typedef struct mpx_squad_predictions {
    int32_t n_questions;   /* = the dataset's questions, same order */
    char **text;           /* best answer per question */
    int32_t *n_nbest;
    mpx_squad_nbest **nbest;
} mpx_squad_predictions;

/* start_logits / end_logits: [n_features][row_len] (row_len >= every window's length;
 * positions past a window are ranked too, as the reference does, and then discarded:
 * with dynamic padding fill them with -INFINITY). */
int mpx_squad_postprocess(const mpx_squad_features *fs, const float *start_logits, const float *end_logits,
                          int32_t row_len, const mpx_squad_postprocess_config *cfg, mpx_squad_predictions **out,
                          char *err, size_t errlen);
void mpx_squad_predictions_free(mpx_squad_predictions *p);

/* predictions.json ({id: text}) and, when nbest_path is not NULL, the n-best file
 * ({id: [{text, probability, start_logit, end_logit}]}). */
int mpx_squad_predictions_write(const mpx_squad_predictions *p, const mpx_squad_dataset *data,
                                const char *pred_path, const char *nbest_path, char *err, size_t errlen);

/* run_squad.py get_final_text (do_lower_case): the part of orig_text that matches
 * pred_text after BERT's basic tokenisation, or orig_text when the alignment fails.
 * malloc'd; NULL when out of memory. */
char *mpx_squad_final_text(const char *pred_text, const char *orig_text);

#endif
