#!/usr/bin/env python3
"""bench_python_overhead.py: the fosd package's own Python per call on the device-tensor path, on
any host (no fosd, no GPU): libfos replaced by bench/libfos_stub.c (compiled with the host's cc,
loaded and declared as libfos.so is, every call answering at once), CPU tensors standing in for
CUDA ones. Rows: Client.put_weight, Client.forward (saving a context), Client.backward, a
fosd.torch.Linear's forward (weight unchanged, and after an in-place change: the put it carries),
backward, forward + backward, a whole step, beside baselines timed in the same run (a bare ctypes
call of the stub, torch.nn.Linear's own forward and backward on CPU tensors); the libfos calls a
step makes. Markdown rows for bench/BENCHMARKS.md (--json: also one JSON object); --profile N:
cProfile of N calls to stderr.
Usage (repository root): python3 bench/bench_python_overhead.py [--m M --n N --k K] [--rounds R]
    [--steps S] [--profile N] [--json]
(bench_python_step.py --overhead runs it too.)
"""

import argparse
import contextlib
import cProfile
import ctypes
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
T0 = time.monotonic()


def log(msg):
    print("[%6.1f s] %s" % (time.monotonic() - T0, msg), file=sys.stderr, flush=True)


def _stub_lib():
    """--overhead: bench/libfos_stub.c compiled with the host's cc and loaded as libfos (its calls
    declared as fosd._lib declares libfos's), or an error naming what failed."""
    from fosd import _lib
    out = os.path.join(tempfile.mkdtemp(prefix="fos-stub-"), "libfos_stub.so")
    cc = os.environ.get("CC", "cc")
    cmd = [cc, "-O2", "-shared", "-fPIC", "-I", os.path.join(REPO, "client", "libfos"), "-I", os.path.join(REPO, "proto"),
           os.path.join(HERE, "libfos_stub.c"), "-o", out]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise SystemExit("--overhead: cannot build the stub libfos (%s): %s" % (" ".join(cmd), r.stderr.strip()))
    lib = ctypes.CDLL(out)

    class Only:  # the stub's calls get libfos's declarations; the others stay absent
        def __getattr__(self, name):
            try:
                return getattr(lib, name)
            except AttributeError:
                return types.SimpleNamespace()
    _lib._declare(Only())
    lib.fos_stub_calls.restype = ctypes.c_ulonglong
    lib.fos_stub_calls.argtypes = [ctypes.c_int]
    return lib


def overhead(a):
    """--overhead: the package's Python per call on the device-tensor path, measured on this host
    without fosd or a GPU: libfos replaced by a stub that answers at once (bench/libfos_stub.c,
    called through ctypes as libfos is), CPU tensors standing in for CUDA ones (fosd._arrays.Arr
    marks them cuda; the current stream is a stand-in). Prints us per call of Client.put_weight,
    Client.forward (saving a context), Client.backward, a fosd.torch.Linear's forward and backward,
    and a whole step (forward with its put, backward, SGD), beside baselines timed in the same run:
    one bare ctypes call of the stub, and torch.nn.Linear's own forward and backward on small CPU
    tensors (the autograd and call overhead a layer pays without fosd)."""
    sys.path.insert(0, os.path.join(REPO, "client", "python"))
    import weakref as _wr
    import torch
    import fosd.torch as ft
    from fosd import _arrays, _conn, _lib, _plane, client as fclient
    stub = _stub_lib()
    init = _arrays.Arr.__init__

    def cuda_init(self, x, what):
        init(self, x, what)
        if self.torch:
            self.cuda = True
    _arrays.Arr.__init__ = cuda_init
    try:  # the fast path's "on a GPU" (a package without fosd._devcall: none to set)
        from fosd import _devcall
        _devcall.CUDA_ATTR = "is_cpu"
    except ImportError:
        pass
    stream = types.SimpleNamespace(synchronize=lambda: None, cuda_stream=1)
    torch.cuda.current_stream = lambda dev=None: stream
    torch.cuda.device = lambda dev: contextlib.nullcontext()
    c = fclient.Client.__new__(fclient.Client)
    c.url = "ipc:///stub"
    conn = _conn._Conn(stub, ctypes.c_void_p(1))
    conn.plane = _plane.Plane(stub, conn.handle, False, True)
    conn.plane.device = True
    conn.plane.mps_checked = True
    c._holder = [conn]
    c._weight_n, c._wmu, c._reput, c._put_pid = {}, threading.Lock(), None, {}
    c._opts = {}
    c._fin = _wr.finalize(c, lambda: None)
    M, N, K = a.m, a.n, a.k
    g = torch.Generator().manual_seed(0)
    x = torch.randn(M, K, generator=g).to(torch.bfloat16)
    dy = torch.randn(M, N, generator=g).to(torch.bfloat16)
    w = torch.randn(N, K, generator=g).to(torch.bfloat16)
    b = torch.randn(N, generator=g).to(torch.bfloat16)
    versions = iter(range(1, 1 << 40))
    ctxs = []
    layer = ft.Linear(K, N, dtype=torch.bfloat16, client=c)
    params = list(layer.parameters())
    xg = x.clone().requires_grad_(True)
    tiny = torch.nn.Linear(16, 16)
    tx = torch.randn(16, 16, requires_grad=True)
    tdy = torch.randn(16, 16)
    st = _lib.Status()
    h = conn.handle

    def bare():
        stub.fos_cuda_check(h, 4096, 4096, ctypes.byref(st))

    tys = []

    def torch_fwd():
        tys.append(tiny(tx))

    def torch_bwd():
        tys.pop().backward(tdy)

    def torch_fwd_bwd():
        tiny(tx).backward(tdy)

    def torch_clear():  # untimed: no graph kept, gradients assigned rather than accumulated
        tys.clear()
        for p in [tx] + list(tiny.parameters()):
            p.grad = None

    def torch_then_fwd():
        torch_clear()
        torch_fwd()

    def put():
        c.put_weight("w", w, version=next(versions))

    def fwd():
        ctxs.append(c.forward("w", x, bias=b, save_context=True)[1])

    def bwd():
        c.backward(ctxs.pop(), dy)

    ys = []

    def layer_fwd():
        ys.append(layer(xg))

    def layer_bwd():
        ys.pop().backward(dy)

    def layer_clear():  # untimed: no graph kept, gradients assigned rather than accumulated
        ys.clear()
        for p in [xg] + params:
            p.grad = None

    def layer_change():  # untimed: an SGD-like in-place change of the weight, nothing kept
        layer_clear()
        with torch.no_grad():
            params[0].add_(params[0], alpha=-1e-6)

    def layer_then_fwd():
        layer_clear()
        layer_fwd()

    def layer_fwd_bwd():
        layer(xg).backward(dy)

    def step():
        y = layer(x)
        y.backward(dy)
        with torch.no_grad():
            for p in params:
                p.add_(p.grad, alpha=-1e-6)
                p.grad = None

    def nothing_step():  # the same torch work without fosd: the SGD's two add_
        with torch.no_grad():
            for p in params:
                p.add_(p, alpha=-1e-6)
    put()
    n = max(a.steps, 2000)

    def median_us(fn, pairs, count):
        ts = []
        for _ in range(count):
            if pairs:
                pairs()
            t0 = time.perf_counter()
            fn()
            ts.append((time.perf_counter() - t0) * 1e6)
        return statistics.median(ts)
    layer_fwd_bwd()  # the first put
    step()
    calls0 = [stub.fos_stub_calls(i) for i in range(4)]
    for _ in range(4):
        step()
    per_step = [(stub.fos_stub_calls(i) - calls0[i]) / 4 for i in range(4)]
    if a.profile:  # where the package's time goes: cProfile of N forward + backward calls
        for what, fn, pairs in (("Client.forward + Client.backward", lambda: (fwd(), bwd()), None),
                                ("fosd.torch.Linear forward", layer_fwd, layer_clear),
                                ("fosd.torch.Linear backward", layer_bwd, layer_then_fwd)):
            pr = cProfile.Profile()
            for _ in range(a.profile):
                if pairs:
                    pairs()
                pr.enable()
                fn()
                pr.disable()
            s = io.StringIO()
            pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(25)
            log("cProfile of %d x %s:\n%s" % (a.profile, what, s.getvalue()))
    # (what, fn, untimed fn before each call, baseline row index): measured in interleaved rounds
    # (each round takes every row's median of n calls), so that every row sees the host's load of
    # the moment alike; a row's figure is its best round
    spec = [("baseline: one bare ctypes call (the stub's fos_cuda_check)", bare, None, None),
            ("baseline: torch.nn.Linear(16, 16) forward, CPU, autograd recording", torch_fwd, torch_clear, None),
            ("baseline: torch.nn.Linear(16, 16) backward (y.backward), CPU", torch_bwd, torch_then_fwd, None),
            ("baseline: torch.nn.Linear(16, 16) forward + backward, CPU", torch_fwd_bwd, torch_clear, None),
            ("Client.put_weight", put, None, 0),
            ("Client.forward (saving a context)", fwd, None, 0),
            ("Client.backward", bwd, fwd, 0),
            ("fosd.torch.Linear forward (weight unchanged)", layer_fwd, layer_clear, 1),
            ("fosd.torch.Linear forward after an in-place change of the weight (its put)", layer_fwd,
             layer_change, 1),
            ("fosd.torch.Linear backward (y.backward)", layer_bwd, layer_then_fwd, 2),
            ("fosd.torch.Linear forward + backward", layer_fwd_bwd, layer_clear, 3),
            ("fosd.torch.Linear step (put inside the forward, backward, SGD)", step, None, None),
            ("the step's two add_ of the SGD alone", nothing_step, None, None)]
    for what, fn, pairs, _ in spec:
        median_us(fn, pairs, 200)  # warm-up
    best = [float("inf")] * len(spec)
    for _ in range(a.rounds):
        for i, (what, fn, pairs, _) in enumerate(spec):
            best[i] = min(best[i], median_us(fn, pairs, n))
    rows = [(what, best[i], best[base] if base is not None else None) for i, (what, _, _, base) in enumerate(spec)]
    print("# the package's Python per call on the device-tensor path (libfos: bench/libfos_stub.c, CPU "
          "tensors as CUDA stand-ins), %dx%dx%d, best of %d interleaved rounds of medians of %d calls, torch %s, python %s" % (
              M, N, K, a.rounds, n, torch.__version__, sys.version.split()[0]))
    print("# libfos calls per step (put, forward, backward, forward with its put): %s" % per_step)
    print("| what | us | ratio to its baseline |")
    print("| --- | --- | --- |")
    for what, v, base in rows:
        print("| %s | %.1f | %s |" % (what, v, "%.2fx" % (v / base) if base else ""))
    if a.json:
        print(json.dumps({"overhead_us": {what: round(v, 2) for what, v, _ in rows}, "calls_per_step": per_step}))
    conn.handle = None  # closed: the layer's finalizer drops nothing through the stub
    layer = params = None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--m", type=int, default=256)
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--k", type=int, default=256)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--profile", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    overhead(ap.parse_args())


if __name__ == "__main__":
    main()
