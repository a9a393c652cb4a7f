# ABI compatibility across minor versions: an ABI 1.0 backend under this core; a backend
# without the number formats (ABI 1.15).
$(eval $(call add_test,test_abi_minor,tests/test_abi_minor.c $(TEST_SHELL),))
$(BUILD)/tests/test_abi_minor: $(BUILD)/test-plugins/backend-cpu-abi10.so $(BUILD)/test-plugins/backend-cpu-noformats.so \
        $(BUILD)/test-plugins/param_fp8.so
