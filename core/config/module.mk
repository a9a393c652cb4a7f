# core/config: reading, checking and writing configurations against the core's and the
# plugins' schemas, overrides, suggestions (README.md here).
LIB_SRCS += $(wildcard core/config/*.c)
$(eval $(call add_test,test_config,tests/test_config.c))
