# Shared test support: a stand-alone host for single-plugin unit tests.
TEST_SUPPORT := tests/support/test_host.c
