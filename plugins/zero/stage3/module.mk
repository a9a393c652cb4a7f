$(eval $(call add_plugin,zero,stage3,plugins/zero/stage3/stage3.c,))
