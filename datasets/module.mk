# datasets/: the SQuAD v1.1 pipeline (reader, BERT tokenizer, feature windows,
# post-processing, official metric) and `make data`.
SQUAD_SRCS := datasets/sha256.c datasets/codepoints.c datasets/squad_reader.c datasets/squad_slice.c datasets/bert_tokenizer.c \
              datasets/squad_features.c datasets/squad_postprocess.c datasets/squad_metric.c \
              datasets/squad_eval_cli.c
LIB_SRCS += $(SQUAD_SRCS)

SQUAD_TEST_LIBS := -lz
$(eval $(call add_test,test_squad_reader,tests/test_squad_reader.c,$(SQUAD_TEST_LIBS)))
$(eval $(call add_test,test_squad_tokenizer,tests/test_squad_tokenizer.c tests/test_squad_common.c,$(SQUAD_TEST_LIBS)))
$(eval $(call add_test,test_squad_features,tests/test_squad_features.c tests/test_squad_common.c,$(SQUAD_TEST_LIBS)))
$(eval $(call add_test,test_squad_postprocess,tests/test_squad_postprocess.c tests/test_squad_common.c,$(SQUAD_TEST_LIBS)))
$(eval $(call add_test,test_squad_metric,tests/test_squad_metric.c,$(SQUAD_TEST_LIBS)))

# A standalone `squad-eval DATA.json PREDICTIONS.json` (same code as `mpx squad-eval`).
SQUAD_EVAL := $(BUILD)/datasets/squad-eval
all: $(SQUAD_EVAL)
$(SQUAD_EVAL): $(BUILD)/obj/datasets/squad_eval_tool.o $(BUILD)/lib/libmpx.a
	@mkdir -p $(@D)
	$(CC) -o $@ $< $(BUILD)/lib/libmpx.a $(PKG_LIBS) -ldl -lm -lpthread

# Benchmark: tokenise + window the whole train set (and the HF fast tokenizer if present).
BENCHES += $(BUILD)/bench/bench_squad
$(BUILD)/bench/bench_squad: $(BUILD)/obj/tests/bench_squad.o $(BUILD)/lib/libmpx.a
	@mkdir -p $(@D)
	$(CC) -o $@ $< $(BUILD)/lib/libmpx.a $(PKG_LIBS) -ldl -lm -lpthread

# `make data`: SQuAD v1.1 dev + train and the bert-base-uncased vocabulary into
# datasets/data/ (git-ignored), from ../shared/data when present, sha256-checked.
data:
	@bash datasets/fetch_data.sh
