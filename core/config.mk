# Configuration subsystem: strict libconfig validation against the core's and the
# plugins' schemas, overrides, effective-config output. The top Makefile includes core/*.mk.
LIB_SRCS += core/src/config.c core/src/config_check.c core/src/config_write.c core/src/config_literals.c core/src/config_values.c \
            core/src/core_schema.c core/src/suggest.c
$(eval $(call add_test,test_config,tests/test_config.c))
