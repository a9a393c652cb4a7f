$(eval $(call add_plugin,precision,fp32,plugins/precision/fp32/fp32.c,))
