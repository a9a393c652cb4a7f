/* vocab.txt, then the tokenizer over a fixed text with that vocabulary. */
#include "../../datasets/bert_tokenizer.h"
#include "fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file("vocab.txt", data, size);
    mpx_bert_tokenizer *tok = NULL;
    char err[4096];
    if (mpx_bert_tokenizer_load(path, &tok, err, sizeof err) != 0) return 0;
    mpx_bert_tokenizer_free(tok);
    return 0;
}
