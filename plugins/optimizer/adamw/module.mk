$(eval $(call add_plugin,optimizer,adamw,plugins/optimizer/adamw/adamw.c plugins/optimizer/common/adam_rule.c plugins/optimizer/common/anyprecision.c plugins/optimizer/common/opt_common.c,))
