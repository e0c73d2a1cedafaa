# test_make.mk: the Makefile's own test (tests/test_make.sh: parallel by default, `make install`
# into a private PREFIX staying inside it), part of `make test` (TEST_EXTRA) or alone:
#   make test-make
TEST_EXTRA += test-make
.PHONY: test-make
test-make: all
	@CUDA=$(CUDA) SAN="$(SAN)" sh tests/test_make.sh $(BUILD)
