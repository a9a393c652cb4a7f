$(eval $(call add_plugin,optimizer,sgd,plugins/optimizer/sgd/sgd.c plugins/optimizer/common/opt_common.c,))
