/* SQuAD JSON (train and dev), then the training features over it with a small vocabulary:
 * the reader's checks and the answer arithmetic (answer_start, spans). */
#include "../../datasets/squad_features.h"
#include "../../datasets/squad_reader.h"
#include "fuzz_input.h"

static mpx_bert_tokenizer *tok;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[4096];
    if (!tok && mpx_bert_tokenizer_load("tests/fixtures/bert/tiny/vocab.txt", &tok, err, sizeof err)) abort();
    const char *path = fuzz_file("squad.json", data, size);
    mpx_squad_dataset d;
    if (mpx_squad_load(path, &d, err, sizeof err) != 0) return 0;
    for (int training = 0; training < 2; training++) {
        mpx_squad_feature_config fc = { 64, 16, 16, training };
        mpx_squad_features *fs = NULL;
        if (mpx_squad_features_build(&d, tok, &fc, &fs, err, sizeof err) == 0) mpx_squad_features_free(fs);
    }
    mpx_squad_free(&d);
    return 0;
}
