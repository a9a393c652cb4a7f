$(eval $(call add_plugin,zero,stage0,plugins/zero/stage0/stage0.c,))
