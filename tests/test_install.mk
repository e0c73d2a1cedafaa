# test_install.mk: the packaging test (tests/test_install.sh: libfos.so's SONAME, NEEDED and
# exports, `make install` into DESTDIRs, a client linked through pkg-config and the Python package
# run from the install against its fosd), as part of `make test` (TEST_EXTRA) or alone:
#   make test-install
TEST_EXTRA += test-install
.PHONY: test-install
test-install: all
	@PYTHON=$(PYTHON) sh tests/test_install.sh $(BUILD)
