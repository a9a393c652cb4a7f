/* ABI 1.4 appended `flags` and `fused_update` to mpx_ops. A backend built for ABI 1.0
 * (build/test-plugins/backend-cpu-abi10.so: the cpu backend declaring 1.0 and the 1.0
 * op table) must still load and run, and the optimizers must take their host loops
 * with it: the toy run's metrics are bitwise those of the 1.4 cpu backend. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/shell.h"

Test(abi_minor, a_1_0_backend_runs_as_the_1_1_one)
{
    char *tmp = ts_tmpdir("abi10"), out[4096];
    const char *be[2] = { "cpu", "cpu-abi10" };
    char *r[2];
    for (int i = 0; i < 2; i++) {
        int rc = ts_sh(out, sizeof out,
                       "build/bin/mpx run configs/toy.cfg --plugin-dir build/test-plugins -s train.max_steps=20 "
                       "-s 'backend.plugin=\"%s\"' -s 'optimizer.plugin=\"adam\"' --out %s/%d 2>&1", be[i], tmp, i);
        cr_assert_eq(rc, 0, "backend %s: %s", be[i], out);
        char dir[600];
        snprintf(dir, sizeof dir, "%s/%d", tmp, i);
        r[i] = ts_metrics_rows(dir);
    }
    cr_expect_str_eq(r[1], r[0], "the ABI 1.0 backend's run differs from the 1.4 one");
    cr_assert_eq(ts_sh(out, sizeof out, "build/bin/mpx plugins --plugin-dir build/test-plugins 2>&1"), 0);
    cr_expect(strstr(out, "cpu-abi10") != NULL, "mpx plugins lists it: %s", out);
    free(r[0]);
    free(r[1]);
    ts_sh(NULL, 0, "rm -rf %s", tmp);
}
