# The optimizers' element loops: -O3 and no errno from sqrtf, so the compiler vectorises
# them (IEEE sqrt and division are exact either way: results do not change).
$(BUILD)/obj/plugins/optimizer/%.o: EXTRA_CFLAGS += -O3 -fno-math-errno
