# Test-only plugins for the sweep tests (build/test-plugins/incompat_*.so).
$(eval $(call add_test_plugin,incompat_precision,tests/plugins/incompat_precision.c,))
