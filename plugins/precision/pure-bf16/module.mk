$(eval $(call add_plugin,precision,pure-bf16,plugins/precision/pure-bf16/pure_bf16.c,))
