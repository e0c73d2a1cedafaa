# python.mk: the fosd Python package (client/python/fosd):
#   make test-python     its pytest suite (tests/python) against $(BUILD)'s fosd, fos and libfos.so;
#                        part of `make test` (TEST_EXTRA), its counts in the one closing line
#   make install-python  the package into $(PY_SITE) (run by `make install`), its libfos.so a relative
#                        link to the libfos.so.N installed into $(INSTALL_LIBDIR) (install-libfos)
# PYTHON: the interpreter (default Debian's /usr/bin/python3, which sees python3-pytest, -numpy
# and -torch from deploy/install-deps.sh).
PYTHON  ?= $(firstword $(wildcard /usr/bin/python3) python3)
PY_VER  := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
# PY_SITE: where Debian's python3 looks for PREFIX's packages (/usr/local/lib/python3.X/dist-packages,
# /usr/lib/python3/dist-packages), else PREFIX/lib/python3/dist-packages (then set PYTHONPATH).
PY_SITE ?= $(if $(filter /usr/local,$(PREFIX)),/usr/local/lib/python$(PY_VER)/dist-packages,$(PREFIX)/lib/python3/dist-packages)

TEST_EXTRA += test-python
.PHONY: test-python install-python
test-python: all
	@PYTHON=$(PYTHON) sh tests/python/run.sh $(BUILD)

install: install-python
install-python: all install-libfos
	@test -n "$(PY_VER)" || { echo "install-python: no $(PYTHON): the Python package is not installed"; exit 0; }; \
	install -d $(DESTDIR)$(PY_SITE)/fosd && \
	install -m 644 client/python/fosd/*.py $(DESTDIR)$(PY_SITE)/fosd/ && \
	ln -sfn "$$(realpath -m -s --relative-to=$(PY_SITE)/fosd $(INSTALL_LIBDIR))/$(LIBFOS_SONAME)" \
		$(DESTDIR)$(PY_SITE)/fosd/libfos.so && \
	echo "install-python: fosd -> $(DESTDIR)$(PY_SITE)/fosd"
