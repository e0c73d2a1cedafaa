# fuzz.mk: the request fuzz target (tests/fuzz_request.c, body tests/support_fuzz.c): everything
# fosd does with received bytes before a backend call.
#   make fuzz          build it with clang, libFuzzer, ASan and UBSan, and run it $(FUZZ_SECONDS) s
#                      (60) from tests/fuzz_corpus; new inputs go to $(FUZZ_DIR)/corpus, crashes
#                      to $(FUZZ_DIR)/crash-* (exit status 1)
#   make fuzz-merge    add the inputs of $(FUZZ_DIR)/corpus that reach new code to tests/fuzz_corpus
#   make fuzz-corpus   write the seed inputs (tests/fuzz_corpus_gen.c) into tests/fuzz_corpus
# `make test` does not need clang: tests/test_fuzz_replay.c replays the corpus and runs a short
# mutation smoke with the normal compiler (and under the sanitizers in test-san).
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_DIR      = $(BUILD)/fuzz
FUZZ_SANFLAGS = -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZ_CFLAGS   = -O1 -g -std=c11 -fms-extensions -Wno-microsoft-anon-tag -D_GNU_SOURCE -pthread -ffp-contract=off $(filter-out -I$(BUILD)/gen,$(INCLUDES)) -Itests \
                -I$(BUILD)/gen -Wno-unused-command-line-argument $(FUZZ_SANFLAGS)
FUZZ_LIB_SRC  = $(KERNEL_C) $(SERVER_C) $(LIBFOS_C) $(filter-out proto/nng_fix.c,$(WIRE_C)) tests/support_fuzz.c $(PROTO_C)
FUZZ_LIB_OBJ  = $(patsubst %.c,$(FUZZ_DIR)/obj/%.o,$(FUZZ_LIB_SRC))

.PHONY: fuzz fuzz-merge fuzz-corpus fuzz-check-cc
fuzz-check-cc:
	@command -v $(FUZZ_CC) >/dev/null 2>&1 || { echo "make fuzz needs clang with libFuzzer (apt-get install clang)"; exit 1; }

$(FUZZ_DIR)/obj/%.o: %.c $(PROTO_C) | fuzz-check-cc
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(FUZZ_DIR)/libfuzzfos.a: $(FUZZ_LIB_OBJ)
	@rm -f $@; ar rcs $@ $^

$(FUZZ_DIR)/fuzz_request: $(FUZZ_DIR)/obj/tests/fuzz_request.o $(FUZZ_DIR)/libfuzzfos.a
	$(FUZZ_CC) $(FUZZ_SANFLAGS) -fsanitize=fuzzer -o $@ $^ $(STATIC_LIBS) -pthread $(SYS_LIBS)

fuzz: $(FUZZ_DIR)/fuzz_request
	@mkdir -p $(FUZZ_DIR)/corpus
	cd $(FUZZ_DIR) && ./fuzz_request -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -timeout=10 \
		-rss_limit_mb=4096 -print_final_stats=1 corpus $(abspath tests/fuzz_corpus)

fuzz-merge: $(FUZZ_DIR)/fuzz_request
	$(FUZZ_DIR)/fuzz_request -merge=1 tests/fuzz_corpus $(FUZZ_DIR)/corpus

$(BUILD)/tests/fuzz_corpus_gen: $(BUILD)/obj/tests/fuzz_corpus_gen.o $(ALL_LIBS)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $< $(ALL_LIBS) $(LINK)
$(BUILD)/obj/tests/fuzz_corpus_gen.o: $(PROTO_C)

fuzz-corpus: $(BUILD)/tests/fuzz_corpus_gen
	@mkdir -p tests/fuzz_corpus
	$(BUILD)/tests/fuzz_corpus_gen tests/fuzz_corpus
