/* `mpx squad-eval DATA.json PREDICTIONS.json [--per-question OUT.csv]`: the official v1.1
 * evaluation; optionally each answered question's EM and F1, for paired comparisons. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "squad_metric.h"
#include "squad_reader.h"

/* prog: argv[0], which `mpx squad-eval` sets to "mpx squad-eval" */
static void usage(FILE *f, const char *prog)
{
    if (!prog) prog = "squad-eval";
    fprintf(f, "usage: %s DATA.json PREDICTIONS.json [--per-question OUT.csv]\n"
               "  the official SQuAD v1.1 evaluation: prints {\"exact_match\": .., \"f1\": ..}\n"
               "  --per-question: write id,exact_match,f1 for every answered question\n"
               "  exit 0, 1 on an error (a file unreadable or malformed), 2 on a wrong command line\n", prog);
}

int mpx_squad_eval_main(int argc, char **argv)
{
    const char *per_question = NULL;
    for (int i = 1; i < argc; i++)
        if ((!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) && strcmp(argv[i - 1], "--per-question")) {
            usage(stdout, argc > 0 ? argv[0] : NULL);
            return 0;
        }
    if (argc == 5 && !strcmp(argv[3], "--per-question")) per_question = argv[4];
    if (argc != 3 && !per_question) {
        usage(stderr, argc > 0 ? argv[0] : NULL);
        return 2;
    }
    char err[512];
    mpx_squad_dataset data;
    if (mpx_squad_load(argv[1], &data, err, sizeof err)) {
        fprintf(stderr, "squad-eval: %s\n", err);
        return 1;
    }
    if (data.version[0] && !(data.version[0] == '1' && data.version[1] == '.' && data.version[2] == '1' &&
                             data.version[3] == '\0'))
        fprintf(stderr, "Evaluation expects v-1.1, but got dataset with v-%s\n", data.version);
    const char **preds;
    void *json;
    if (mpx_squad_read_predictions(argv[2], &data, &preds, &json, err, sizeof err)) {
        fprintf(stderr, "squad-eval: %s\n", err);
        mpx_squad_free(&data);
        return 1;
    }
    mpx_squad_scores s;
    size_t n = data.n_questions > 0 ? (size_t)data.n_questions : 1;
    double *em = malloc(n * sizeof *em), *f1 = malloc(n * sizeof *f1);
    int rc = em && f1 ? mpx_squad_evaluate_each(&data, preds, &s, em, f1, err, sizeof err) : -1;
    if (!em || !f1) snprintf(err, sizeof err, "out of memory");
    if (!rc && per_question && mpx_squad_write_question_scores(per_question, &data, em, f1, 0, err, sizeof err)) {
        fprintf(stderr, "squad-eval: --per-question %s\n", err);
        rc = -2;
    }
    free(em);
    free(f1);
    if (rc == -1) {
        fprintf(stderr, "squad-eval: %s: %s\n", argv[1], err);
    } else if (rc == 0) {
        char em[48], f1[48];
        mpx_format_double_py(s.exact_match, em, sizeof em);
        mpx_format_double_py(s.f1, f1, sizeof f1);
        printf("{\"exact_match\": %s, \"f1\": %s}\n", em, f1);
        fflush(stdout);
        fprintf(stderr, "unanswered: %d of %d questions (scored 0)\n", (int)s.n_unanswered, (int)s.n_questions);
    }
    mpx_squad_predictions_json_free(preds, json);
    mpx_squad_free(&data);
    return rc ? 1 : 0;
}
