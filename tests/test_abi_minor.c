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

/* ABI 1.7 appended set_weight_gather to the model vtable. A model built for ABI 1.0
 * (build/test-plugins/model-toy-abi10.so: the toy declaring 1.0 and the 1.0 vtable) must
 * still load and train as the toy does, and zero/stage3, which cannot give it whole
 * weights, must refuse it by name in mpx check and mpx run instead of crashing. */
Test(abi_minor, a_1_0_model_trains_and_stage3_refuses_it)
{
    char *tmp = ts_tmpdir("abi10-model"), out[4096];
    const char *model[2] = { "toy", "toy-abi10" };
    char *r[2];
    for (int i = 0; i < 2; i++) {
        int rc = ts_sh(out, sizeof out,
                       "build/bin/mpx run configs/toy.cfg --plugin-dir build/test-plugins -s train.max_steps=10 "
                       "-s 'model.plugin=\"%s\"' --out %s/%d 2>&1", model[i], tmp, i);
        cr_assert_eq(rc, 0, "model %s: %s", model[i], out);
        char dir[600];
        snprintf(dir, sizeof dir, "%s/%d", tmp, i);
        r[i] = ts_metrics_rows(dir);
    }
    cr_expect_str_eq(r[1], r[0], "the ABI 1.0 toy's run differs from the toy's");
    free(r[0]);
    free(r[1]);
    static const char *const cmd[2] = { "check configs/toy.cfg", "run configs/toy.cfg --out %s/z3" };
    for (int i = 0; i < 2; i++) {
        char line[1024];
        snprintf(line, sizeof line, "build/bin/mpx %s --plugin-dir build/test-plugins -s 'model.plugin=\"toy-abi10\"' "
                 "-s 'zero.plugin=\"stage3\"' 2>&1", cmd[i]);
        int rc = ts_sh(out, sizeof out, line, tmp);
        cr_expect_neq(rc, 0, "mpx %s accepted an ABI 1.0 model under zero/stage3: %s", cmd[i], out);
        cr_expect(strstr(out, "model/toy-abi10 cannot run under zero/stage3") && strstr(out, "set_weight_gather"),
                  "mpx %s: %s", cmd[i], out);
    }
    cr_assert_eq(ts_sh(out, sizeof out, "build/bin/mpx check configs/toy.cfg -s 'zero.plugin=\"stage3\"' 2>&1"), 0,
                 "the toy itself is refused: %s", out);
    ts_sh(NULL, 0, "rm -rf %s", tmp);
}
