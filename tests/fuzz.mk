# make fuzz: clang's libFuzzer targets under ASan + UBSan (tests/fuzz/), each run for
# FUZZ_RUNS executions from its committed seed corpus (tests/fuzz/corpus/NAME/); a crash
# stops the target and leaves crash-* under build/fuzz/. Not part of make test.
FUZZ_CC      ?= clang-14
FUZZ_RUNS    ?= 1000000
FUZZ_TARGETS := config sweep squad predictions vocab safetensors bert_config train_state records
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZ_CFLAGS  := $(CSTD) -Wall -Wextra -Wno-unused-parameter -g -O1 $(FUZZ_SAN) -Icore/include $(PKG_CFLAGS)
FUZZ_SRCS    := $(LIB_SRCS) tests/support/test_host.c models/bert/safetensors.c models/bert/bert_config.c
FUZZ_OBJS    := $(patsubst %.c,$(BUILD)/fuzz/obj/%.o,$(FUZZ_SRCS))

# The objects are built only as prerequisites of the pattern rule below, which makes them
# intermediate to make: without this it deletes them after each link and every make fuzz
# compiles everything again.
.SECONDARY: $(FUZZ_OBJS)

$(BUILD)/fuzz/obj/%.o: %.c
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -MMD -MP -fsanitize=fuzzer-no-link -c $< -o $@

# header dependencies, as the main build has them: a struct that grows in a header must
# recompile every object that uses it
-include $(FUZZ_OBJS:.o=.d)

$(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz_input.h $(FUZZ_OBJS)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< $(FUZZ_OBJS) $(PKG_LIBS) -ldl -lm -lpthread

.PHONY: fuzz fuzz-build
fuzz-build: $(patsubst %,$(BUILD)/fuzz/fuzz_%,$(FUZZ_TARGETS))

fuzz: fuzz-build
	@FUZZ_RUNS=$(FUZZ_RUNS) bash tests/fuzz/run-fuzz.sh $(BUILD)/fuzz $(FUZZ_TARGETS)
