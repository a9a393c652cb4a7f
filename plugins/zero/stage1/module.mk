$(eval $(call add_plugin,zero,stage1,plugins/zero/stage1/stage1.c,))
