# sanitize.mk: the whole CPU suite again under AddressSanitizer + UndefinedBehaviorSanitizer, as
# part of `make test` (TEST_EXTRA) or alone:
#   make test-san        build everything into $(SAN_BUILD) with $(SAN_FLAGS) and run every suite
# Any sanitizer report aborts the program that made it (-fno-sanitize-recover=all; leaks are
# reported when a program exits; tests/lsan.supp names the one nng-internal leak suppressed), so a
# test binary or a fosd it started fails. Under ASan the
# soak runs 20 s, and the test that limits fosd's address space is skipped.
SAN_BUILD ?= $(BUILD)-san
SAN_FLAGS ?= -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
SAN_ENV    = ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:detect_stack_use_after_return=0:strict_string_checks=1 \
             LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0 \
             UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

TEST_EXTRA += test-san
.PHONY: test-san
test-san:
	@$(MAKE) --no-print-directory BUILD=$(SAN_BUILD) SAN="$(SAN_FLAGS)" CUDA=0 tests
	@$(SAN_ENV) sh tests/run-tests.sh $(SAN_BUILD) $(patsubst $(BUILD)/%,$(SAN_BUILD)/%,$(TESTS))
