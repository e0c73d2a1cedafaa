#!/usr/bin/env python3
"""test_layers.py: the include graph of proto/, kernels/, formats/, server/ and client/ against the
layer order written in ARCHITECTURE.md (its fenced block marked `layers`), the habit of Python's
import-linter applied to C.

    python3 tests/test_layers.py [--no-exceptions]      (make test-layers; part of `make test`)

The block lists the layers lowest first, one a line, `name: pattern...`. A pattern is a folder
(`server/ops/`) or a glob over paths (`server/core/util.*`); a file belongs to the layer of its
longest matching pattern, and every scanned file must match one. Checked:
  * upward: a file includes a header of a higher layer (file, line, header, both layers);
  * apart:  a server/ file includes a client/ header, or a client/ file a server/ header;
  * fos.h:  the installed client/libfos/fos.h includes only system headers and the headers
            installed beside it (the Makefile's FOS_HEADERS), which themselves include only system
            headers;
  * -I:     the compiler's -I paths of one object per folder (`make -n`) reach no higher layer and,
            for server/, no client/ folder.
A quoted include resolves like the compiler: the including file's folder first, then every scanned
folder (the widest -I the tree has had). `*.pb-c.h` is generated from proto/ and belongs there.
Upward includes the tree still has are listed in the block `layers-debt` (`file -> header`), each
a known debt: one not found any more fails too (remove it from the list), so the list only shrinks.
--no-exceptions ignores that list (how the check was seen to fail on the tree before).
Counts: with FOS_TALLY=FILE one line "PASSED FAILED SKIPPED [names]" is appended (exit 0), else
"N passed, N failed, N skipped" (exit 1 on a failure).
"""
import fnmatch
import os
import re
import subprocess
import sys
import tempfile

ROOTS = ["proto", "kernels", "formats", "server", "client/libfos", "client/cli"]
EXTS = (".c", ".h", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def fenced(text, tag):
    m = re.search(r"^```" + tag + r"\n(.*?)^```", text, re.S | re.M)
    if not m:
        sys.exit("test_layers: ARCHITECTURE.md has no ```%s block" % tag)
    return [l.split("#")[0].strip() for l in m.group(1).splitlines() if l.split("#")[0].strip()]


def read_layers(text):
    layers = []
    for line in fenced(text, "layers"):
        name, _, pats = line.partition(":")
        layers.append((name.strip(), pats.split()))
    return layers


def layer_of(path, layers):
    best = None
    for rank, (name, pats) in enumerate(layers):
        for p in pats:
            hit = path.startswith(p) if p.endswith("/") else fnmatch.fnmatchcase(path, p)
            if hit and (best is None or len(p) > best[2]):
                best = (rank, name, len(p))
    return best


def scan():
    files = []
    for r in ROOTS:
        for d, _, fs in os.walk(r):
            files += [os.path.join(d, f) for f in sorted(fs) if f.endswith(EXTS)]
    return sorted(files)


def resolve(inc, src, files, dirs):
    for d in [os.path.dirname(src)] + dirs:
        p = os.path.normpath(os.path.join(d, inc))
        if p in files:
            return p
    if inc.endswith(".pb-c.h"):
        return "proto/" + os.path.basename(inc)
    return None


def includes(path):
    with open(path, errors="replace") as f:
        for n, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if m:
                yield n, m.group(1)


def make_includes(obj_src):
    """The -I paths make gives the object of obj_src (make -n, nothing built)."""
    with tempfile.TemporaryDirectory() as t:
        obj = os.path.join(t, "b", "obj", obj_src[:-2] + ".o")
        r = subprocess.run(["make", "-n", "--no-print-directory", "CUDA=0",
                            "BUILD=" + os.path.join(t, "b"), obj],
                           capture_output=True, text=True, env=dict(os.environ, MAKEFLAGS="", MAKELEVEL=""))
        cmd = [l for l in r.stdout.splitlines() if (" -c " in l and obj_src in l)]
        if not cmd:
            return None, r.stdout + r.stderr
        return [a[2:] for a in cmd[-1].split() if a.startswith("-I")], None


def root(path):
    return max((r for r in ROOTS if path == r or path.startswith(r + "/")), key=len, default=None)


def main():
    strict = "--no-exceptions" in sys.argv
    text = open("ARCHITECTURE.md").read()
    layers = read_layers(text)
    debt = set() if strict else {tuple(x.replace(" ", "").split("->")) for x in fenced(text, "layers-debt")}
    files = scan()
    fileset = set(files)
    dirs = sorted({os.path.dirname(f) for f in files})
    fails = []
    seen_debt = set()

    for f in files:
        lf = layer_of(f, layers)
        if lf is None:
            fails.append("layer: %s matches no pattern of ARCHITECTURE.md's layers block" % f)
            continue
        for n, inc in includes(f):
            t = resolve(inc, f, fileset, dirs)
            if t is None:
                fails.append("resolve: %s:%d includes \"%s\", found in no scanned folder" % (f, n, inc))
                continue
            if (f.startswith("server/") and t.startswith("client/")) or \
               (f.startswith("client/") and t.startswith("server/")):
                fails.append("apart: %s:%d includes %s: server/ and client/ never include each other"
                             % (f, n, t))
                continue
            lt = layer_of(t, layers)
            if lt is None or lt[0] <= lf[0]:
                continue
            if (f, t) in debt:
                seen_debt.add((f, t))
                continue
            fails.append("upward: %s:%d includes %s: layer %s (%d) includes layer %s (%d)"
                         % (f, n, t, lf[1], lf[0], lt[1], lt[0]))
    for f, t in sorted(debt - seen_debt):
        fails.append("debt: '%s -> %s' is listed in layers-debt but no longer upward: remove it" % (f, t))

    # fos.h: system headers and the headers installed beside it, themselves system-only
    mk = open("Makefile").read()
    m = re.search(r"^FOS_HEADERS\s*=\s*(.*)$", mk, re.M)
    installed = set(m.group(1).split()) if m else set()
    for h in ["client/libfos/fos.h"] + sorted(installed - {"client/libfos/fos.h"}):
        if not os.path.exists(h):
            fails.append("fos.h: %s in FOS_HEADERS does not exist" % h)
            continue
        for n, inc in includes(h):
            t = resolve(inc, h, fileset, dirs)
            if h == "client/libfos/fos.h" and t in installed:
                continue
            fails.append("fos.h: installed %s:%d includes \"%s\" (%s), not installed beside it: fos.h "
                         "includes only system headers and FOS_HEADERS, which include only system headers"
                         % (h, n, inc, t))

    # the Makefile's -I paths: one object per folder
    for d in dirs:
        srcs = [f for f in files if os.path.dirname(f) == d and f.endswith(".c")]
        if not srcs or d.startswith("client/cli/cuda") or d.startswith("client/libfos/so"):
            continue
        incs, err = make_includes(srcs[0])
        if incs is None:
            fails.append("-I: make -n printed no compile line for %s:\n%s" % (srcs[0], err[-600:]))
            continue
        lf = layer_of(srcs[0], layers)
        for i in incs:
            i = os.path.normpath(i)
            if root(i) is None:
                continue  # the build's generated folder
            top = max((layer_of(f, layers) for f in files if os.path.dirname(f) == i),
                      key=lambda x: x[0], default=None)
            if d.startswith("server/") and i.startswith("client/"):
                fails.append("-I: %s is compiled with -I%s: server/ never sees client/" % (srcs[0], i))
            elif d.startswith("client/") and i.startswith("server/"):
                fails.append("-I: %s is compiled with -I%s: client/ never sees server/" % (srcs[0], i))
            elif root(d) != root(i) and top is not None and lf is not None and top[0] > lf[0]:
                fails.append("-I: %s (layer %s) is compiled with -I%s, whose headers reach layer %s"
                             % (srcs[0], lf[1], i, top[1]))

    for x in fails:
        print("[  FAILED  ] layers: " + x)
    passed = 0 if fails else 1
    print("== test_layers: %d files, %d layers, %d known debts, %d failures"
          % (len(files), len(layers), len(debt), len(fails)))
    if os.environ.get("FOS_TALLY"):
        with open(os.environ["FOS_TALLY"], "a") as t:
            t.write("%d %d 0%s\n" % (passed, len(fails), " layers" if fails else ""))
        return 0
    print("%d passed, %d failed, 0 skipped" % (passed, len(fails)))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
