$(eval $(call add_test,test_loader,tests/test_loader.c,))
$(eval $(call add_test,test_records,tests/test_records.c,))
$(eval $(call add_test,test_loss_scaler,tests/test_loss_scaler.c,))
$(eval $(call add_test,test_precision,tests/test_precision.c $(TEST_SUPPORT),))
