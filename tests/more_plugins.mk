# Test-only plugins of the sweep and diagnostics tests (build/test-plugins/).
$(eval $(call add_test_plugin,incompat_precision,tests/plugins/incompat_precision.c,))
# The worked example of docs/PRECISION-POLICIES.md (diagnostics test).
$(eval $(call add_test_plugin,fp16_noscale,tests/plugins/fp16_noscale.c,))
# An ABI 1.0 policy with stale bytes where 1.1 put `upstream` (test_upstream).
$(eval $(call add_test_plugin,abi10_policy,tests/plugins/abi10_policy.c,))
# An ABI 1.0 precision plugin (1.0 vtable and descriptor sizes): still loads and runs.
$(eval $(call add_test_plugin,abi10_bf16,tests/plugins/abi10_bf16.c,))
