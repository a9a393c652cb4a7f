$(eval $(call add_plugin,optimizer,adam,plugins/optimizer/adam/adam.c plugins/optimizer/common/adam_rule.c plugins/optimizer/common/anyprecision.c plugins/optimizer/common/opt_common.c,))
