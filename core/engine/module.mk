# core/engine: the session, the host table, the training step and what serves it
# (README.md here); with it the suites of the optimizer plugins and of the core's
# optimizer support (schedules, clipping, weight-decay groups).
LIB_SRCS += $(wildcard core/engine/*.c)
$(eval $(call add_test,test_optimizers,tests/test_optimizers.c $(TEST_SUPPORT),))
$(eval $(call add_test,test_schedule,tests/test_schedule.c,))
$(eval $(call add_test,test_clip,tests/test_clip.c,))
# The optimizer suite loads the plugins it tests.
$(BUILD)/tests/test_optimizers: $(foreach o,sgd adam adamw lamb,$(BUILD)/plugins/optimizer-$(o).so)
