# Test-only plugins of the sweep and diagnostics tests (build/test-plugins/).
$(eval $(call add_test_plugin,incompat_precision,tests/plugins/incompat_precision.c,))
# The worked example of docs/PRECISION-POLICIES.md (diagnostics test).
$(eval $(call add_test_plugin,fp16_noscale,tests/plugins/fp16_noscale.c,))
# A policy naming a loss-scale preset that does not exist (test_loss_scaler).
$(eval $(call add_test_plugin,bad_preset,tests/plugins/bad_preset.c,))
# An ABI 1.0 policy with stale bytes where 1.1 put `upstream` (test_upstream).
$(eval $(call add_test_plugin,abi10_policy,tests/plugins/abi10_policy.c,))
# An ABI 1.0 precision plugin (1.0 vtable and descriptor sizes): still loads and runs.
$(eval $(call add_test_plugin,abi10_bf16,tests/plugins/abi10_bf16.c,))
# A concurrent optimizer that fails on one parameter (test_update_threads), and the same
# code claiming ABI 1.8, whose MPX_OPT_CONCURRENT bit the host must not read.
$(eval $(call add_test_plugin,opt_refuse,tests/plugins/opt_refuse.c,))
TEST_PLUGINS += $(BUILD)/test-plugins/opt_refuse18.so
$(BUILD)/obj/tests/abi18/opt_refuse.o: tests/plugins/opt_refuse.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(PLUGIN_CFLAGS) $(PKG_CFLAGS) -DOPT_REFUSE_AS_ABI_1_8 -c $< -o $@
$(BUILD)/test-plugins/opt_refuse18.so: $(BUILD)/obj/tests/abi18/opt_refuse.o core/plugin.map
	@mkdir -p $(@D)
	$(CC) $(PLUGIN_LDFLAGS) -o $@ $(filter %.o,$^) -lm
$(BUILD)/tests/test_update_threads: $(BUILD)/test-plugins/opt_refuse.so $(BUILD)/test-plugins/opt_refuse18.so
# A policy whose per-parameter hook puts one layer's GEMMs in fp8 (test_abi_minor: a
# backend without MPX_OPS_FORMATS refuses it by parameter).
$(eval $(call add_test_plugin,param_fp8,tests/plugins/param_fp8.c,))
