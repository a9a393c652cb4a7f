/* A safetensors file, header and body: every extent checked, every tensor read. */
#include "../../models/bert/safetensors.h"
#include "../support/test_host.h"
#include "fuzz_input.h"

static mpx_env *env;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!env && !(env = th_env(NULL, NULL, NULL))) abort();
    const char *path = fuzz_file("model.safetensors", data, size);
    st_file sf;
    if (st_open(env, path, &sf) != 0) { th_clear(env); return 0; }
    for (size_t i = 0; i < sf.n; i++) {
        uint64_t n = st_numel(&sf.t[i]);
        float *dst = n <= (1u << 20) ? malloc(n * 4 + 8) : NULL;
        if (dst) st_read_f32(env, &sf, &sf.t[i], dst);
        free(dst);
    }
    st_close(&sf);
    th_clear(env);
    return 0;
}
