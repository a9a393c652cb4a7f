/* The config reader: libconfig text through mpx's own scan (wrapped integers), the core
 * schema's checks and the value checks, as `mpx check` reads a file. */
#include "../../core/config/config.h"
#include "../../core/config/core_schema.h"
#include "fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file("in.cfg", data, size);
    mpx_config *c = NULL;
    char err[4096];
    if (mpx_config_load(&c, path, NULL, 0, mpx_core_groups, mpx_n_core_groups, NULL, err, sizeof err) == 0) {
        json_decref(mpx_config_to_json(c));
        mpx_config_free(c);
    }
    return 0;
}
