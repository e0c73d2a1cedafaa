# test_layers.mk: the include graph against ARCHITECTURE.md's layer order (tests/test_layers.py:
# upward includes, server/ and client/ apart, the installed fos.h, each part's -I paths), part of
# `make test` (TEST_EXTRA) or alone; it builds nothing:
#   make test-layers
TEST_EXTRA += test-layers
.PHONY: test-layers
test-layers:
	@$(firstword $(wildcard /usr/bin/python3) python3) tests/test_layers.py
