# Test-only plugins for the loader tests: built to build/test-plugins/, never build/plugins/.
$(foreach p,bad_major newer_minor shadow_v1 shadow_v2 dup_a dup_b,$(eval $(call add_test_plugin,$(p),tests/plugins/$(p).c,)))
TEST_PLUGINS += $(BUILD)/test-plugins/no_entry.so
$(BUILD)/test-plugins/no_entry.so: $(BUILD)/obj/tests/plugins/no_entry.o
	@mkdir -p $(@D)
	$(CC) -shared -o $@ $<
