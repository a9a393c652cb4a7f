/* A checkpoint's config.json, as the bert-qa model reads it. */
#include <string.h>

#include "../../models/bert/bert.h"
#include "../support/test_host.h"
#include "fuzz_input.h"

static mpx_env *env;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!env && !(env = th_env(NULL, NULL, NULL))) abort();
    const char *path = fuzz_file("config.json", data, size);
    bert_config c;
    memset(&c, 0, sizeof c);
    bert_config_read(env, path, &c);
    bert_config_free(&c);
    th_clear(env);
    return 0;
}
