$(eval $(call add_plugin,precision,fp8-delayed,plugins/precision/fp8-delayed/fp8_delayed.c,))
