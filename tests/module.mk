# Shared test support: a stand-alone host for single-plugin unit tests.
TEST_SUPPORT := tests/support/test_host.c
$(eval $(call add_test,test_loader,tests/test_loader.c,))
$(eval $(call add_test,test_records,tests/test_records.c,))
