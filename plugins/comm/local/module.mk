$(eval $(call add_plugin,comm,local,plugins/comm/local/local.c,))
