$(eval $(call add_plugin,precision,fp16-scaled,plugins/precision/fp16-scaled/fp16_scaled.c,))
