/* `mpx squad-eval DATA.json PREDICTIONS.json`: the official v1.1 evaluation. */
#include <stdio.h>

#include "squad_metric.h"
#include "squad_reader.h"

int mpx_squad_eval_main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s DATA.json PREDICTIONS.json\n", argc > 0 ? argv[0] : "squad-eval");
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
    int rc = mpx_squad_evaluate(&data, preds, &s, err, sizeof err);
    if (rc) {
        fprintf(stderr, "squad-eval: %s: %s\n", argv[1], err);
    } else {
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
