#include "plugin_names.h"

#include <string.h>

#include "../config/suggest.h"

static const char *const known[MPX_KIND_COUNT][12] = {
    /* fp16-noscale: the worked example of docs/PRECISION-POLICIES.md, built into
     * build/test-plugins and installed only with --plugin-dir */
    [MPX_KIND_PRECISION] = { "fp32", "amp", "fp16-scaled", "bf16-master", "pure-bf16", "fp8-delayed", "mxfp8",
                             "fp16-noscale", NULL },
    [MPX_KIND_OPTIMIZER] = { "adam", "adamw", "sgd", "lamb", NULL },
    [MPX_KIND_ZERO] = { "stage0", "stage1", "stage2", "stage3", NULL },
    [MPX_KIND_MODEL] = { "bert-qa", "toy", NULL },
    [MPX_KIND_BACKEND] = { "cpu", "cuda", NULL },
    [MPX_KIND_COMM] = { "local", "mpi", "nccl", NULL },
};

int mpx_plugin_name_known(mpx_kind kind, const char *name)
{
    if ((unsigned)kind >= MPX_KIND_COUNT || !name) return 0;
    for (size_t i = 0; known[kind][i]; i++)
        if (!strcmp(known[kind][i], name)) return 1;
    return 0;
}

const char *mpx_plugin_name_suggest(const mpx_registry *reg, mpx_kind kind, const char *name)
{
    if ((unsigned)kind >= MPX_KIND_COUNT || !name) return NULL;
    mpx_suggester sg;
    mpx_suggest_init(&sg, name);
    for (size_t i = 0; i < mpx_registry_count(reg, kind); i++) mpx_suggest_offer(&sg, mpx_registry_get(reg, kind, i)->desc.name);
    for (size_t i = 0; known[kind][i]; i++) mpx_suggest_offer(&sg, known[kind][i]);
    return mpx_suggest_best(&sg);
}
