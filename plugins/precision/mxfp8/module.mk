$(eval $(call add_plugin,precision,mxfp8,plugins/precision/mxfp8/mxfp8.c,))
