$(eval $(call add_test,test_loader,tests/test_loader.c,))
$(eval $(call add_test,test_records,tests/test_records.c $(TEST_SHELL),))
$(eval $(call add_test,test_resume,tests/test_resume.c $(TEST_SHELL),))
$(eval $(call add_test,test_resume_refusals,tests/test_resume_refusals.c $(TEST_SHELL),))
$(eval $(call add_test,test_hostile_config,tests/test_hostile_config.c $(TEST_SHELL),))
$(eval $(call add_test,test_hostile_checkpoint,tests/test_hostile_checkpoint.c $(TEST_SHELL),))
$(eval $(call add_test,test_hostile_squad,tests/test_hostile_squad.c $(TEST_SHELL),))
$(eval $(call add_test,test_faults,tests/test_faults.c $(TEST_SHELL),))
$(eval $(call add_test,test_run_folder,tests/test_run_folder.c $(TEST_SHELL),))
$(eval $(call add_test,test_nonfinite,tests/test_nonfinite.c $(TEST_SHELL),))
$(eval $(call add_test,test_loss_scaler,tests/test_loss_scaler.c,))
$(eval $(call add_test,test_length_group,tests/test_length_group.c,))
$(eval $(call add_test,test_precision,tests/test_precision.c $(TEST_SUPPORT),))
$(eval $(call add_test,test_diagnostics,tests/test_diagnostics.c $(TEST_SUPPORT),))
$(eval $(call add_test,test_upstream,tests/test_upstream.c,))
$(BUILD)/tests/test_upstream: $(BUILD)/test-plugins/abi10_policy.so
# the whole-run test loads the worked-example policy from build/test-plugins
$(BUILD)/tests/test_diagnostics: $(BUILD)/test-plugins/fp16_noscale.so
$(eval $(call add_test,test_formats,tests/test_formats.c,))
$(eval $(call add_test,test_fp8_policies,tests/test_fp8_policies.c,))
$(BUILD)/tests/test_fp8_policies: $(BUILD)/test-plugins/abi10_bf16.so
$(eval $(call add_test,test_update_window,tests/test_update_window.c $(TEST_SHELL),))
$(eval $(call add_test,test_update_threads,tests/test_update_threads.c $(TEST_SHELL),))
# make device-study's script, in its smoke mode on the cpu backend
$(eval $(call add_test,test_device_study,tests/test_device_study.c $(TEST_SHELL),))
