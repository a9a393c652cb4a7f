$(eval $(call add_plugin,precision,amp,plugins/precision/amp/amp.c,))
