/* Paired comparison of runs on the same questions: per-question scores
 * (question_scores.csv, written by every SQuAD evaluation) of group A and group B, each
 * group averaged over its runs (seeds) question by question, then the mean of B − A with
 * a percentile bootstrap interval over questions. The resampling is reproducible and
 * documented so that an independent script can repeat it exactly
 * (tests/fixtures/paired/make_paired_fixture.py):
 *   x <- splitmix64(state)  (state starts at the seed; Vigna's constants)
 *   index = (x * n) >> 64   (128-bit product)
 * n draws per resample, the resample means sorted, the interval's ends at
 * (1 ± level)/2 by linear interpolation between order statistics (numpy's default).
 *
 * The seed-and-question interval resamples the runs too (a two-level bootstrap: the seeds
 * a claim would generalize over, and the questions), from its own splitmix64 stream that
 * also starts at the seed: per resample n_a draws from group A's runs, then n_b from group
 * B's, then n from the questions, each index = (x * m) >> 64 with m the count drawn from;
 * the resample's value is the mean over the drawn questions of (the mean of the drawn B
 * runs' scores − the mean of the drawn A runs' scores) × 100. With one run on each side
 * it is not computed (NaN): there is no seed spread to resample. */
#ifndef MPX_PAIRED_H
#define MPX_PAIRED_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct mpx_paired_metric {
    double a, b;           /* group means, percent */
    double diff, lo, hi;   /* mean of B − A and its interval over questions, points */
    double lo_seeds, hi_seeds; /* its interval over seeds and questions (NaN: one run a side) */
} mpx_paired_metric;

typedef struct mpx_paired_result {
    size_t n_questions, n_a, n_b;  /* questions, runs in each group */
    mpx_paired_metric em, f1;
    /* seed-to-seed spread: the sample sd of the runs' own EM / F1 within each group (NaN
     * for a group of one run), the scale a paired difference should be read against */
    double sd_em_a, sd_em_b, sd_f1_a, sd_f1_b;
    /* "" when the runs that have a record (DIR/run.json) name each plugin they share at one
     * version; else the first plugin at two versions and two runs that have them: "backend
     * cpu 1.0.0 in DIR, 1.4.1 in DIR2". A version that changes a kernel's summation order
     * changes a 16-bit run's roundings as another seed would (docs/STUDY.md, "The build
     * alone"). */
    char build_note[1024];
} mpx_paired_result;

/* One run's DIR/question_scores.csv: question ids in file order, EM (0 or 1) and F1 (0..1). */
typedef struct mpx_question_scores {
    size_t n, cap;
    char **id;
    double *em, *f1;
} mpx_question_scores;

/* 0, or -1 with err naming the file and line. */
int mpx_question_scores_read(const char *dir, mpx_question_scores *s, char *err, size_t errlen);
void mpx_question_scores_free(mpx_question_scores *s);

/* The mean of v and the bootstrap interval of the mean at `level` (0.95). */
int mpx_bootstrap_mean(const double *v, size_t n, size_t resamples, uint64_t seed, double level,
                       double *mean, double *lo, double *hi);

/* The seed-and-question interval of the mean over questions of mean(B runs) − mean(A
 * runs), ×100: a[i] and b[j] are each run's n per-question scores. */
int mpx_bootstrap_runs(const double *const *a, size_t n_a, const double *const *b, size_t n_b, size_t n,
                       size_t resamples, uint64_t seed, double level, double *lo, double *hi);

/* a and b: run folders holding question_scores.csv, all on the same questions in the same
 * order (else an error naming the file and the first differing question). */
int mpx_paired_compare(const char *const *a, size_t n_a, const char *const *b, size_t n_b,
                       size_t resamples, uint64_t seed, mpx_paired_result *out, char *err, size_t errlen);

/* The sentence both commands print on stderr when r->build_note is set: "note: ..." */
void mpx_paired_print_build_note(const mpx_paired_result *r, const char *who, FILE *f);

/* With one run on one side and several on the other, the interval over seeds and
 * questions resamples only the larger side's runs: a "note: ..." on f that says so,
 * calling the sides a_name and b_name ("A" and "B"; "the base row", "this row"). */
void mpx_paired_print_seed_note(const mpx_paired_result *r, const char *who, const char *a_name, const char *b_name,
                                FILE *f);

/* The result as a Markdown table (cmd_paired.c; mpx matrix --paired uses it too). */
void mpx_paired_print_md(const mpx_paired_result *r, const char *a_label, const char *b_label, FILE *f);

#endif
