# python.mk: the fosd Python package (client/python/fosd):
#   make test-python     its pytest suite (tests/python) against $(BUILD)'s fosd, fos and libfos.so;
#                        part of `make test` (TEST_EXTRA), its counts in the one closing line
#   make venv            the test environment: $(VENV) (default .venv), a virtual environment of
#                        tests/python/requirements.txt (torch 2.x CPU use, numpy, pytest, all pinned),
#                        made once (its stamp $(VENV)/.fosd-installed, redone when the file changes)
#   make install-python  the package into $(PY_SITE) (run by `make install`), its libfos.so a relative
#                        link to the libfos.so.N installed into $(INSTALL_LIBDIR) (install-libfos)
# PYTHON: the interpreter of install-python (default Debian's /usr/bin/python3). The tests run
# under $(VENV)'s python, made first, unless PYTHON is given (`make test PYTHON=/usr/bin/python3`:
# Debian's python3-torch; on a GPU machine its own torch), which they then use as it is.
PY_TEST_VENV := $(if $(filter undefined,$(origin PYTHON)),1)
VENV    ?= .venv
PY_REQUIREMENTS := tests/python/requirements.txt
PYTHON  ?= $(firstword $(wildcard /usr/bin/python3) python3)
PY_VER  := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
# PY_SITE: where Debian's python3 looks for PREFIX's packages (/usr/local/lib/python3.X/dist-packages,
# /usr/lib/python3/dist-packages), else PREFIX/lib/python3/dist-packages (then set PYTHONPATH).
PY_SITE ?= $(if $(filter /usr/local,$(PREFIX)),/usr/local/lib/python$(PY_VER)/dist-packages,$(PREFIX)/lib/python3/dist-packages)

TEST_EXTRA += test-python
.PHONY: test-python install-python venv
test-python: all $(if $(PY_TEST_VENV),$(VENV)/.fosd-installed)
	@PYTHON=$(if $(PY_TEST_VENV),$(VENV)/bin/python,$(PYTHON)) sh tests/python/run.sh $(BUILD)

venv: $(VENV)/.fosd-installed
# from PyPI (about 2.4 GB, 3 to 5 minutes on 2 cores; 4 GB installed); a failure leaves no
# stamp, so the next make tries again
$(VENV)/.fosd-installed: $(PY_REQUIREMENTS)
	@echo "venv: $(VENV) from $(PY_REQUIREMENTS) (once; about 2.4 GB from PyPI)"
	@rm -f $@
	@$(firstword $(wildcard /usr/bin/python3) python3) -m venv $(VENV) || { echo "venv: cannot make $(VENV) \
(Debian: apt-get install python3-venv; deploy/install-deps.sh installs it)" >&2; exit 1; }
	@$(VENV)/bin/python -m pip install -q --disable-pip-version-check --no-deps -r $(PY_REQUIREMENTS) || { \
		echo "venv: pip could not install $(PY_REQUIREMENTS) into $(VENV) (no access to PyPI?);" \
			"make test PYTHON=/usr/bin/python3 runs the Python tests with Debian's python3-torch" >&2; exit 1; }
	@touch $@

install: install-python
install-python: all install-libfos
	@test -n "$(PY_VER)" || { echo "install-python: no $(PYTHON): the Python package is not installed"; exit 0; }; \
	install -d $(DESTDIR)$(PY_SITE)/fosd && \
	install -m 644 client/python/fosd/*.py client/python/fosd/py.typed $(DESTDIR)$(PY_SITE)/fosd/ && \
	ln -sfn "$$(realpath -m -s --relative-to=$(PY_SITE)/fosd $(INSTALL_LIBDIR))/$(LIBFOS_SONAME)" \
		$(DESTDIR)$(PY_SITE)/fosd/libfos.so && \
	echo "install-python: fosd -> $(DESTDIR)$(PY_SITE)/fosd"
