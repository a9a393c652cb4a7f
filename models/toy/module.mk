$(eval $(call add_plugin,model,toy,models/toy/toy.c,))
