/* The cuda suites' bitwise checks, checked on the CPU: test_cuda_ops run with the cpu
 * backend on its cuda side (MPX_TEST_DEVICE_SO, the harness self-check) passes its checks
 * of add, the embedding backward and the two fused ops, and run with a cpu backend whose
 * four ops are one ulp off in one element (build/test-plugins/backend-cpu-faulty.so,
 * -DMPX_CPU_FAULTY) fails each of them, naming what differs. So those checks, which the
 * device runs against the cuda kernels, do compare what they claim to, down to one ulp.
 * No device needed. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "support/shell.h"

/* The suite runs as a child of this one: BXFI_MAP, which criterion gives its own workers,
 * is dropped, or the child would take itself for one of them. */
static const struct { const char *filter, *says; } CHECKS[] = {
    { "cuda_elementwise/one_dtype_aligned_and_not", "add (" },
    { "cuda_misc/embeddings_with_repeated_ids", "embedding_bwd (" },
    { "cuda_rows/softmax_dropout_fused_is_the_two_ops_bit_for_bit", "fused probabilities vs softmax_fwd differs" },
    { "cuda_rows/dropout_add_layernorm_fused_is_the_three_ops_bit_for_bit", "dropout_add_layernorm_fwd mix" },
};

Test(cuda_harness, the_bitwise_checks_pass_the_cpu_backend_and_fail_a_one_ulp_fault, .timeout = 300)
{
    cr_assert(access("build/tests/test_cuda_ops", X_OK) == 0 && access("build/test-plugins/backend-cpu-faulty.so", R_OK) == 0,
              "build/tests/test_cuda_ops and build/test-plugins/backend-cpu-faulty.so are built by make test");
    static char out[1 << 16];
    for (size_t i = 0; i < sizeof CHECKS / sizeof CHECKS[0]; i++) {
        int rc = ts_sh(out, sizeof out,
                       "env -u BXFI_MAP MPX_TEST_DEVICE_SO=build/plugins/backend-cpu.so build/tests/test_cuda_ops --filter '%s' 2>&1",
                       CHECKS[i].filter);
        cr_expect_eq(rc, 0, "%s with the cpu backend on both sides: exit %d\n%s", CHECKS[i].filter, rc, out);
        rc = ts_sh(out, sizeof out,
                   "env -u BXFI_MAP MPX_TEST_DEVICE_SO=build/test-plugins/backend-cpu-faulty.so build/tests/test_cuda_ops --filter '%s' 2>&1",
                   CHECKS[i].filter);
        cr_expect_neq(rc, 0, "%s passed a backend one ulp off", CHECKS[i].filter);
        cr_expect(strstr(out, CHECKS[i].says) != NULL, "%s: the failure does not say \"%s\":\n%s", CHECKS[i].filter,
                  CHECKS[i].says, out);
    }
}
