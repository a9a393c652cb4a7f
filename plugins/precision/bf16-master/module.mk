$(eval $(call add_plugin,precision,bf16-master,plugins/precision/bf16-master/bf16_master.c,))
