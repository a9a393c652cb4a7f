$(eval $(call add_plugin,optimizer,lamb,plugins/optimizer/lamb/lamb.c plugins/optimizer/common/opt_common.c,))
