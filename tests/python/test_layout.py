"""The ctypes structs of fosd._lib match client/libfos/fos.h: a C program compiled here prints sizeof and
every field's offsetof for each struct, and they must equal the ctypes ones (a field moved in
fos.h fails this test until fosd._lib follows; fos_stats_info may grow at its end within the slack
fosd._lib leaves). Also: libfos.so is found as documented."""

import ctypes
import os
import shutil
import subprocess

import pytest

from conftest import REPO, build_dir
from fosd import _lib


def test_struct_layouts(tmp_path):
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler")
    lines = ['#include <stddef.h>', '#include <stdio.h>', '#include "fos.h"', "int main(void) {"]
    want = {}
    for py, (cname, cls) in _lib.LAYOUTS.items():
        lines.append('printf("%s sizeof %%zu\\n", sizeof(%s));' % (py, cname))
        want["%s sizeof" % py] = ctypes.sizeof(cls)
        for f, _ in cls._fields_:
            lines.append('printf("%s %s %%zu\\n", offsetof(%s, %s));' % (py, f, cname, f))
            want["%s %s" % (py, f)] = getattr(cls, f).offset
    lines += ["return 0;", "}"]
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines) + "\n")
    exe = tmp_path / "layout"
    inc = ["-I", os.path.join(REPO, "client", "libfos"), "-I", os.path.join(REPO, "proto")]  # fos.h includes fos_version.h
    subprocess.run([cc, "-std=c11"] + inc + [str(src), "-o", str(exe)], check=True)
    got = {}
    for line in subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.splitlines():
        key, _, val = line.rpartition(" ")
        got[key] = int(val)
    # fos_stats_info may grow at its end (fields this package does not read yet): fosd._lib
    # receives it into a buffer with slack, which must cover the growth
    grown = got.pop("StatsInfo sizeof") - want.pop("StatsInfo sizeof")
    assert 0 <= grown <= ctypes.sizeof(_lib.StatsBuffer) - ctypes.sizeof(_lib.StatsInfo)
    assert got == want


def test_library_search_order(monkeypatch):
    assert os.path.isfile(os.path.join(build_dir(), "libfos.so"))
    monkeypatch.setenv("FOSD_LIBFOS", "/somewhere/libfos.so")
    monkeypatch.setenv("FOS_BUILD", "build-x")
    c = _lib.candidates()
    pkg = os.path.join(REPO, "client", "python", "fosd")
    assert c == ["/somewhere/libfos.so", os.path.join(pkg, "libfos.so"), os.path.join(REPO, "build-x", "libfos.so"),
                 os.path.join(REPO, "build", "libfos.so"), "libfos.so.1", "libfos.so"]


def test_soversion_matches_header():
    with open(os.path.join(REPO, "proto", "fos_version.h")) as f:
        assert "#define FOS_SOVERSION %d\n" % _lib.SOVERSION in f.read()


def test_version_matches_libfos():
    import fosd
    assert _lib.load().fos_version().decode() == fosd.__version__
