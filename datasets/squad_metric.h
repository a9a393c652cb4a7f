/* The official SQuAD v1.1 metric (evaluate-v1.1.py): normalise (Python str.lower(),
 * drop ASCII string.punctuation, remove the words a/an/the with Python 3 Unicode word
 * boundaries, split on whitespace), exact match and token F1, each the maximum over the
 * ground truths, averaged x100 over ALL questions; an unanswered question scores 0. */
#ifndef MPX_DATASETS_SQUAD_METRIC_H
#define MPX_DATASETS_SQUAD_METRIC_H

#include <stddef.h>
#include <stdint.h>

#include "squad_reader.h"

typedef struct mpx_squad_scores {
    double exact_match, f1; /* percentages */
    int32_t n_questions, n_unanswered;
} mpx_squad_scores;

/* normalize_answer(s) as a malloc'd UTF-8 string (NULL when out of memory). */
char *mpx_squad_normalize_answer(const char *s);
/* Per question, against one ground truth: 1.0/0.0 and the token F1. */
double mpx_squad_exact_match(const char *prediction, const char *ground_truth);
double mpx_squad_f1(const char *prediction, const char *ground_truth);

/* predictions[i] answers data->questions[i]; NULL = unanswered. */
int mpx_squad_evaluate(const mpx_squad_dataset *data, const char *const *predictions, mpx_squad_scores *out,
                       char *err, size_t errlen);
/* Per question: the best exact match (0 or 1) and token F1 (0..1) over its ground truths;
 * NaN where predictions[i] is NULL. em and f1 hold data->n_questions values. */
int mpx_squad_score_each(const mpx_squad_dataset *data, const char *const *predictions, double *em, double *f1,
                         char *err, size_t errlen);
/* mpx_squad_evaluate that also keeps the per-question scores (as mpx_squad_score_each). */
int mpx_squad_evaluate_each(const mpx_squad_dataset *data, const char *const *predictions, mpx_squad_scores *out,
                            double *em, double *f1, char *err, size_t errlen);
/* question_scores.csv: "id,exact_match,f1" per question (EM 0/1, F1 0..1), for paired
 * comparisons of runs on the same questions. Unanswered questions are written as 0 when
 * unanswered_as_zero, else left out. Written to PATH.tmp, then renamed. */
int mpx_squad_write_question_scores(const char *path, const mpx_squad_dataset *data, const double *em,
                                    const double *f1, int unanswered_as_zero, char *err, size_t errlen);
/* Reads a predictions file ({id: text}) into per-question pointers (NULL where the id is
 * absent; strings owned by *predictions_json, free it with mpx_squad_predictions_json_free). */
int mpx_squad_read_predictions(const char *path, const mpx_squad_dataset *data, const char ***predictions,
                               void **predictions_json, char *err, size_t errlen);
void mpx_squad_predictions_json_free(const char **predictions, void *predictions_json);

/* Python repr() of a double (shortest round-trip digits, "100.0" style). */
void mpx_format_double_py(double x, char *buf, size_t len);

/* `mpx squad-eval DATA.json PREDICTIONS.json` (argv[0] is the command name): prints
 * {"exact_match": ..., "f1": ...} to stdout, the unanswered count to stderr. Exit
 * status 0 = scored, 1 = unreadable or malformed data / predictions, 2 = usage. */
int mpx_squad_eval_main(int argc, char **argv);

#endif
