$(eval $(call add_plugin,zero,stage2,plugins/zero/stage2/stage2.c,))
