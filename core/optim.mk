# Optimizer support in the core: learning-rate schedules, gradient clipping, weight-decay
# groups; and the suites of the optimizer plugins and of these files.
LIB_SRCS += core/src/schedule.c core/src/clip.c core/src/decay.c

$(eval $(call add_test,test_optimizers,tests/test_optimizers.c $(TEST_SUPPORT),))
$(eval $(call add_test,test_schedule,tests/test_schedule.c,))
$(eval $(call add_test,test_clip,tests/test_clip.c,))
# The optimizer suite loads the plugins it tests.
$(BUILD)/tests/test_optimizers: $(foreach o,sgd adam adamw lamb,$(BUILD)/plugins/optimizer-$(o).so)
