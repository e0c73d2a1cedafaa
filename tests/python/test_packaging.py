"""test_packaging.py: the fosd package as a newcomer installs it (issue 30 item 3): `pip install
./client/python` into a fresh target (offline: --no-deps --no-build-isolation, with the
interpreter's setuptools), its metadata declaring numpy (and torch as the extra "torch"), and the
installed copy, run from outside the checkout, importing and answering `python3 -m fosd health`
against a real fosd with libfos found the ways an installed package finds it: the runtime library
libfos.so.1 on the loader's path (what `make install` provides; no libfos.so development link), or
$FOSD_LIBFOS. Without either, the error names both ways."""

import glob
import os
import shutil
import subprocess
import sys

import pytest

from conftest import REPO, build_dir


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    pytest.importorskip("setuptools")
    target = str(tmp_path_factory.mktemp("site"))
    work = str(tmp_path_factory.mktemp("src"))
    src = os.path.join(work, "python")  # a copy: pip must not leave build files in the checkout
    shutil.copytree(os.path.join(REPO, "client", "python"), src,
                    ignore=shutil.ignore_patterns("__pycache__", "*.so", "build", "*.egg-info"))
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
                        "--no-index", "--target", target, src],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode and "No module named pip" in r.stdout:
        pytest.skip("%s has no pip" % sys.executable)
    assert r.returncode == 0, r.stdout
    return target


def run_health(target, url, env_extra, cwd):
    env = {k: v for k, v in os.environ.items()
           if k not in ("FOSD_LIBFOS", "FOS_BUILD", "PYTHONPATH", "LD_LIBRARY_PATH")}
    env.update(env_extra)
    env["PYTHONPATH"] = target
    return subprocess.run([sys.executable, "-m", "fosd", "health", "--server", url], cwd=cwd, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)


def test_metadata_declares_dependencies(installed):
    meta = glob.glob(os.path.join(installed, "fosd-*.dist-info", "METADATA"))
    assert len(meta) == 1
    with open(meta[0]) as f:
        text = f.read()
    assert "Requires-Dist: numpy" in text
    assert "Provides-Extra: torch" in text
    assert any(line.startswith("Requires-Dist: torch") and "extra == " in line and "torch" in line.split("extra")[1]
               for line in text.splitlines())
    assert os.path.isfile(os.path.join(installed, "fosd", "__main__.py"))
    assert not os.path.exists(os.path.join(installed, "fosd", "libfos.so"))  # nothing built was shipped


def test_installed_finds_runtime_library(installed, server, tmp_path):
    lib = tmp_path / "lib"
    lib.mkdir()
    shutil.copy(os.path.join(build_dir(), "libfos.so.1"), str(lib / "libfos.so.1"))  # as make install leaves it
    r = run_health(installed, server.url, {"LD_LIBRARY_PATH": str(lib)}, str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("fosd %s: cpu on " % server.health["version"]), r.stdout


def test_installed_with_fosd_libfos(installed, server, tmp_path):
    r = run_health(installed, server.url, {"FOSD_LIBFOS": os.path.join(build_dir(), "libfos.so")}, str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "fosd %s: cpu on " % server.health["version"] in r.stdout


def test_installed_without_library_says_how(installed, server, tmp_path):
    r = run_health(installed, server.url, {}, str(tmp_path))
    assert r.returncode == 1
    assert "libfos.so.1 (" in r.stderr  # the runtime library was looked for
    assert "FOSD_LIBFOS" in r.stderr and "make install" in r.stderr, r.stderr
