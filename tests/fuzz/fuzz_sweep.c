/* Sweep files: name, base, set and axes, as `mpx sweep` reads them. */
#include "../../core/sweep/sweep.h"
#include "fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file("sweep.cfg", data, size);
    mpx_sweep sw;
    char err[4096];
    if (mpx_sweep_load(&sw, path, err, sizeof err) == 0) mpx_sweep_free(&sw);
    return 0;
}
