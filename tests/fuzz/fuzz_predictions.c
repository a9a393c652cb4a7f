/* predictions.json for `mpx squad-eval`, against a small fixed dev set, then the metric. */
#include "../../datasets/squad_metric.h"
#include "../../datasets/squad_reader.h"
#include "fuzz_input.h"

static const char dev[] =
    "{\"version\": \"1.1\", \"data\": [{\"title\": \"t\", \"paragraphs\": [{\"context\": \"tok5 tok6 tok7 tok8\", "
    "\"qas\": [{\"id\": \"q0\", \"question\": \"tok9\", \"answers\": [{\"text\": \"tok7\", \"answer_start\": 10}]},"
    "{\"id\": \"q1\", \"question\": \"tok9\", \"answers\": [{\"text\": \"tok5 tok6\", \"answer_start\": 0}]}]}]}]}";

static mpx_squad_dataset data;
static int loaded;

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t size)
{
    char err[4096];
    if (!loaded) {
        const char *p = fuzz_file("dev.json", (const uint8_t *)dev, sizeof dev - 1);
        if (mpx_squad_load(p, &data, err, sizeof err)) abort();
        loaded = 1;
    }
    const char *path = fuzz_file("pred.json", in, size);
    const char **pred = NULL;
    void *keep = NULL;
    if (mpx_squad_read_predictions(path, &data, &pred, &keep, err, sizeof err) != 0) return 0;
    mpx_squad_scores sc;
    mpx_squad_evaluate(&data, (const char *const *)pred, &sc, err, sizeof err);
    mpx_squad_predictions_json_free(pred, keep);
    return 0;
}
