#!/usr/bin/env python3
"""bench_python_step.py: one training step of a linear layer (default 8192x4096x4096, bf16, on
the GPU) three ways, timed in the same run:

  * fosd.torch.Linear on CUDA tensors, fosd (cuda backend) on the same GPU: the weight put again
    after each SGD update, forward with a saved context, backward (dX, dW, db); also the forward +
    backward alone on an unchanged weight;
  * the same step through the backend in one process on device buffers (bench_linear_step, the C
    baseline: quantize W, forward, backward), the ratio the target is stated against;
  * torch.nn.Linear in bf16 (cuBLAS): forward, backward, SGD update.

The fosd rows come three ways: CUDA tensors as device tensors through the client's request
channel (the defaults of fosd.connect on ipc://: a client of a GPU fosd polls up to
fosd.client.DEVICE_SPIN_US for each reply), over the socket (channel=False), and through host
memory (device_tensors=False). Where the time goes is shown by more rows of the forward +
backward on an unchanged weight: Client.forward + Client.backward called directly (the package
without fosd.torch and autograd); libfos's fos_forward + fos_backward called through ctypes on
device buffers allocated once (no package at all): the floor of a Python client; the same with
what the package adds per call besides Python (results from torch.empty, fos_cuda_check of every
tensor, the current stream synchronized); the same with 150 us of busy CPU before each call (the
time of Python between calls; the row subtracts it), which shows what fosd's side of the channel
costs when its polling for the next request has ended (fosd's --channel-spin-us; this script's
--fosd-channel-spin-us); the same with a small kernel of this process run (and finished) before
each call (its time alone subtracted), which shows what the GPU's switching between this process
and fosd costs (an SGD update runs between fosd's calls in a step); and Client.put_weight of a device W alone, against the in-process
quantization of W (put_ms).
Wall clock per step, each ended by torch.cuda.synchronize(), median of --steps after --warmup.
Prints markdown rows (what, shape, ms, ratios) for bench/BENCHMARKS.md and, with --json, one JSON
object; --profile N prints cProfile's top functions (by own and by cumulative time) of N layer
steps and of N Client forward + backward calls to stderr.
--phases adds, after the rows, where a fosd.torch.Linear step's time goes: (1) the step, the
layer's forward + backward, Client.forward + backward, libfos through ctypes, Client.put_weight and
torch.nn.Linear timed in interleaved rounds (each round runs each once, after a warm-up of at least
2 s, so the GPU's clocks weigh on all alike); (2) one table of the step's phases: put, forward,
backward (each Client call's wall time, of it the libfos call's, the rest being the package's
Python), the optimizer (the SGD, launched and waited for), autograd and fosd.torch outside the
Client calls; a second pass with CUDA events on the current stream around each phase (events are
work of this process on the GPU, so that pass's step is slower); fosd's own latency and run time
of each op from its Stats; pieces a call pays timed alone (an idle stream's synchronize,
torch.empty, fos_cuda_check, which is what libfos does for each device tensor of a call); whether
autograd kept fosd's dW as the weight's grad or copied it; also Client.forward + backward with the
backward on a second thread, as autograd runs a CUDA layer's backward; (3) with --phases-profile N
(default 3; 0: off), this process's own GPU work and CUDA runtime calls in N steps (torch.profiler).
--overhead runs bench/bench_python_overhead.py instead (no fosd, no GPU: the package's own Python
per call on the device-tensor path, libfos stubbed; default shape 256x256x256).
Usage (from the repository root on the GPU host):
  python3 bench/bench_python_step.py [--build BUILD] [--server URL] [--m M --n N --k K]
      [--steps S] [--warmup W] [--no-bias] [--json] [--profile N] [--fosd-channel-spin-us US]
      [--phases [--phases-profile N]] [--target-rounds R] [--target-warm-s S] [--overhead]
The issue's target (the fosd.torch.Linear step against the in-process step) is also measured
alternately, after the rows: --target-rounds rounds (default 3; 0: off), each running the
fosd.torch.Linear step (device tensors) and then the in-process step, each after at least
--target-warm-s seconds (default 2.0) of its own untimed steps, since the rows above are timed one
after another after a few warm-up steps (the first ones while the GPU's clocks are still rising
from idle, the in-process step last); the median of the rounds' ratios is the target's figure.
--build names the folder with fosd, libfos.so and bench/bench_linear_step (default $FOS_BUILD or
build); without --server a cuda fosd from there is started on a private ipc socket (with
--channel-spin-us US when --fosd-channel-spin-us is given). --cpu runs every row on CPU tensors
with a cpu fosd (small shapes: a check of this script where there is no GPU; its times are not
the GPU's).
"""

import argparse
import cProfile
import ctypes
import io
import json
import os
import pstats
import queue
import shutil
import signal
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


def median_ms(fn, steps, warmup, sync, warm_s=0.0):
    """Median wall ms of steps calls of fn, each synchronized, after warmup calls (and, with warm_s,
    after at least that many seconds of calls)."""
    until = time.monotonic() + warm_s
    n = 0
    while n < warmup or time.monotonic() < until:
        fn()
        sync()
        n += 1
    sync()
    ts = []
    for _ in range(steps):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def start_fosd(build, sock_dir, chan_spin_us=None, backend="cuda"):
    url = "ipc://%s/fosd.sock" % sock_dir
    log = open(os.path.join(sock_dir, "fosd.log"), "wb")
    argv = [os.path.join(build, "fosd"), "--backend", backend, "--listen", url, "--metrics-listen", "off"]
    if chan_spin_us is not None:
        argv += ["--channel-spin-us", str(chan_spin_us)]
    p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    import fosd
    t0 = time.monotonic()
    while True:
        if p.poll() is not None:
            raise SystemExit("fosd exited at start:\n" + open(log.name, errors="replace").read())
        try:
            with fosd.connect(url, timeout=1.0, shm=False) as c:
                c.health()
            return p, url
        except fosd.Error:
            if time.monotonic() - t0 > 60:
                p.kill()
                raise SystemExit("fosd did not answer within 60 s")
            time.sleep(0.05)


def profile(what, fn, n, sync, function=None):
    """cProfile's top functions (own and cumulative time) of n calls of fn, to stderr; with
    function (an autograd.Function), also of its backward, which autograd runs on its own thread
    for CUDA tensors, out of the sight of a profiler of this thread before Python 3.12 (from 3.12
    on cProfile sees every thread, and a second profiler cannot be enabled: function is ignored)."""
    if sys.version_info >= (3, 12):
        function = None
    pr, bpr = cProfile.Profile(), cProfile.Profile()
    orig = function.backward if function is not None else None
    if function is not None:
        function.backward = staticmethod(lambda ctx, *g: bpr.runcall(orig, ctx, *g))
    try:
        pr.enable()
        for _ in range(n):
            fn()
        sync()
        pr.disable()
    finally:
        if function is not None:
            function.backward = staticmethod(orig)
    for p, whose in ((pr, what), (bpr, "%s: %s.backward (autograd's thread)" % (what, getattr(function, "__name__", "")))):
        if p is bpr and function is None:
            continue
        out = io.StringIO()
        pstats.Stats(p, stream=out).sort_stats("tottime").print_stats(25)
        pstats.Stats(p, stream=out).sort_stats("cumulative").print_stats(25)
        log("cProfile of %d %s, by own time and by cumulative time (the libfos calls are the fn "
            "functions of fosd/client.py):\n%s" % (n, whose, out.getvalue()))


def _pct(xs):
    return statistics.median(xs) if xs else float("nan")


def _op_window(s0, s1, op):
    """fosd's mean latency and run time (ms) of op's requests between two Stats, and their count."""
    o0, o1 = s0["ops"].get(op, {}), s1["ops"].get(op, {})
    out = []
    for k in ("lat", "run"):
        c0, c1 = o0.get(k + "_count", 0), o1.get(k + "_count", 0)
        if c1 <= c0:
            out.append(float("nan"))
            continue
        tot = o1.get(k + "_mean_us", 0.0) * c1 - o0.get(k + "_mean_us", 0.0) * c0
        out.append(tot / (c1 - c0) / 1e3)
    return out[0], out[1], o1.get("requests", 0) - o0.get("requests", 0)


def interleaved(a, torch, ft, client, x, dy, dev, sync, sgd, bias):
    """--phases, first part: the step and its parts timed in rounds, each round running every
    variant once (each ended by a synchronize), so that the GPU's clocks and the host's load weigh
    on all of them alike; the GPU is warmed up by the first rounds. Returns table lines."""
    from fosd import _lib
    M, K = x.shape
    N = dy.shape[1]
    cpu = dev.type == "cpu"
    mem = _lib.MEM_HOST if cpu else _lib.MEM_CUDA
    g = torch.Generator(device=dev).manual_seed(1)
    layer_s = ft.Linear(K, N, dtype=torch.bfloat16, bias=bias, client=client, device=dev)
    layer_f = ft.Linear(K, N, dtype=torch.bfloat16, bias=bias, client=client, device=dev)
    ps, pf = list(layer_s.parameters()), list(layer_f.parameters())
    w = (torch.randn(N, K, device=dev, generator=g) * 0.02).to(torch.bfloat16)
    b = torch.randn(N, device=dev, generator=g).to(torch.bfloat16) if bias else None
    client.put_weight("bench.phase.w", w)
    lib, h = client._lib, client._h()
    P = ctypes.byref

    def dev_tensor(t):
        d = _lib.Tensor()
        d.dtype, d.ndim, d.mem = _lib.DTYPE_BF16, t.dim(), mem
        for i, n_ in enumerate(t.shape):
            d.shape[i] = n_
        d.data, d.size = t.data_ptr(), t.numel() * 2
        return d
    bufs = [torch.empty(s, device=dev, dtype=torch.bfloat16) for s in ((M, N), (M, K), (N, K), (N,))]
    tx, tdy, tb = dev_tensor(x), dev_tensor(dy), dev_tensor(b) if bias else None
    ty, tdx, tdw, tdb = (dev_tensor(t) for t in bufs)
    fo = _lib.ForwardOpts(0, 0, 0, 1)
    st = _lib.Status()
    lin = torch.nn.Linear(K, N, bias=bias, device=dev, dtype=torch.bfloat16)
    tps = list(lin.parameters())
    versions = iter(range(2, 1 << 40))

    def linear_step():
        y = layer_s(x)
        y.backward(dy)
        sgd(ps)

    def linear_fwd_bwd():
        y = layer_f(x)
        y.backward(dy)
        for p in pf:
            p.grad = None

    def client_fwd_bwd():
        y, ctx = client.forward("bench.phase.w", x, bias=b, save_context=True)
        client.backward(ctx, dy)

    def client_put():
        client.put_weight("bench.phase.w", w, version=next(versions))

    def ctypes_fwd_bwd():
        ctx = _lib.ContextStruct()
        rc = lib.fos_forward(h, b"bench.phase.w", P(tx), P(tb) if bias else None, P(fo), P(ty), P(ctx), P(st))
        if not rc:
            rc = lib.fos_backward(h, P(ctx), P(tdy), None, P(tdx), P(tdw), P(tdb) if bias else None, P(st))
        if rc:
            raise SystemExit("libfos through ctypes: %s" % st.message.decode())

    def ctypes_fwd_bwd_new_outputs():  # results in tensors from torch.empty, as the package's
        news = [torch.empty(s, device=dev, dtype=torch.bfloat16) for s in ((M, N), (M, K), (N, K), (N,))]
        y_, dx_, dw_, db_ = (dev_tensor(t) for t in news)  # news keeps their memory until the calls return
        ctx = _lib.ContextStruct()
        rc = lib.fos_forward(h, b"bench.phase.w", P(tx), P(tb) if bias else None, P(fo), P(y_), P(ctx), P(st))
        if not rc:
            rc = lib.fos_backward(h, P(ctx), P(tdy), None, P(dx_), P(dw_), P(db_) if bias else None, P(st))
        if rc:
            raise SystemExit("libfos through ctypes: %s" % st.message.decode())

    stream_sync = (lambda: None) if cpu else (lambda: torch.cuda.current_stream(dev).synchronize())

    def ctypes_fwd_bwd_synced():  # the current stream synchronized before each call, as the package does
        ctx = _lib.ContextStruct()
        stream_sync()
        rc = lib.fos_forward(h, b"bench.phase.w", P(tx), P(tb) if bias else None, P(fo), P(ty), P(ctx), P(st))
        if not rc:
            stream_sync()
            rc = lib.fos_backward(h, P(ctx), P(tdy), None, P(tdx), P(tdw), P(tdb) if bias else None, P(st))
        if rc:
            raise SystemExit("libfos through ctypes: %s" % st.message.decode())

    def torch_step():
        y = lin(x)
        y.backward(dy)
        sgd(tps)

    variants = [("fosd.torch.Linear step", linear_step),
                ("fosd.torch.Linear fwd+bwd (weight unchanged)", linear_fwd_bwd),
                ("Client.forward+backward", client_fwd_bwd),
                ("libfos fwd+bwd via ctypes (device buffers)", ctypes_fwd_bwd),
                ("libfos fwd+bwd via ctypes, results in new tensors (torch.empty) each call", ctypes_fwd_bwd_new_outputs),
                ("libfos fwd+bwd via ctypes, the current stream synchronized before each call", ctypes_fwd_bwd_synced),
                ("Client.put_weight (a new version)", client_put),
                ("torch.nn.Linear bf16 step", torch_step)]
    client_put()  # the last version put stays cached: the forwards below ask for whichever is
    rounds = max(a.steps, 20)
    times = {name: [] for name, _ in variants}
    t_end = time.monotonic() + (0.5 if cpu else 2.0)  # warm-up: at least this long, at least a.warmup rounds
    r = 0
    while r < a.warmup or time.monotonic() < t_end:
        for _, fn in variants:
            fn()
        sync()
        r += 1
    for _ in range(rounds):
        for name, fn in variants:
            sync()
            t0 = time.perf_counter()
            fn()
            sync()
            times[name].append((time.perf_counter() - t0) * 1e3)
    client.drop_weight("bench.phase.w")
    out = ["", "# interleaved: %d rounds, each running every variant once (%s x %s x %s), after %d warm-up "
           "rounds; median ms" % (rounds, M, N, K, r),
           "| variant | ms | / libfos fwd+bwd via ctypes |", "| --- | --- | --- |"]
    ref = statistics.median(times["libfos fwd+bwd via ctypes (device buffers)"])
    for name, _ in variants:
        v = statistics.median(times[name])
        out.append("| %s | %.3f | %.2fx |" % (name, v, v / ref))
    return out


def phases(a, torch, ft, client, x, dy, dev, sync, sgd, bias):
    """--phases: one fosd.torch.Linear step (device tensors) broken into its phases; prints one
    table (see the module comment) and the trainer's own CUDA work of a step (torch.profiler)."""
    M, K = x.shape
    N = dy.shape[1]
    cpu = dev.type == "cpu"
    out = interleaved(a, torch, ft, client, x, dy, dev, sync, sgd, bias)
    pc = time.perf_counter
    layer = ft.Linear(K, N, dtype=torch.bfloat16, bias=bias, client=client, device=dev)
    params = list(layer.parameters())
    state = {"lib": 0.0, "events": None}
    cur = {}
    conn = client._conn()
    real_lib = conn.lib

    class TimedLib:  # the libfos calls of a put, forward and backward timed, the rest passed on
        TIMED = ("fos_put_weight", "fos_put_weight_on", "fos_forward", "fos_forward_put", "fos_backward")

        def __getattr__(self, name):
            f = getattr(real_lib, name)
            if name in self.TIMED:
                def timed(*args, _call=f):
                    t0 = pc()
                    try:
                        return _call(*args)
                    finally:
                        state["lib"] += pc() - t0
                f = timed
            setattr(self, name, f)
            return f

    def wrap(name, method):
        def w(*args, **kw):
            lib0 = state["lib"]
            evs = state["events"]
            if evs is not None:
                e0 = torch.cuda.Event(enable_timing=True)
                e0.record()
            t0 = pc()
            try:
                return method(*args, **kw)
            finally:
                t = pc() - t0
                if evs is not None:
                    e1 = torch.cuda.Event(enable_timing=True)
                    e1.record()
                    evs.append((name, e0, e1))
                c = cur.setdefault(name, [0.0, 0.0, 0])
                c[0] += t
                c[1] += state["lib"] - lib0
                c[2] += 1
        return w

    names = (("put", "_put"), ("forward", "_forward"), ("backward", "backward"))
    conn.lib = TimedLib()
    for ph, meth in names:
        setattr(client, meth, wrap(ph, getattr(client, meth)))
    grads_stolen = []

    def one_step(events):
        cur.clear()
        state["events"] = [] if events else None
        t0 = pc()
        y = layer(x)
        t1 = pc()
        y.backward(dy)
        t2 = pc()
        if events:
            o0 = torch.cuda.Event(enable_timing=True)
            o0.record()
        sgd(params)
        if events:
            o1 = torch.cuda.Event(enable_timing=True)
            o1.record()
            state["events"].append(("optimizer", o0, o1))
        sync()
        t3 = pc()
        r = {"step": t3 - t0, "optimizer": t3 - t2, "layer_call": t1 - t0, "backward_call": t2 - t1}
        for ph, _ in names:
            c = cur.get(ph, [0.0, 0.0, 0])
            r[ph], r[ph + ".lib"], r[ph + ".n"] = c[0], c[1], c[2]
        r["outside"] = r["layer_call"] + r["backward_call"] - r["put"] - r["forward"] - r["backward"]
        if events:
            ev = {}
            for ph, e0, e1 in state["events"]:
                ev[ph] = ev.get(ph, 0.0) + e0.elapsed_time(e1) / 1e3
            r["events"] = ev
        return r

    try:
        for _ in range(a.warmup):
            one_step(False)
        # whether autograd kept fosd's dW as the weight's grad (no copy) or copied it
        dptr = {}
        orig_bwd = client.backward

        def bwd_seen(*args, **kw):
            res = orig_bwd(*args, **kw)
            dptr["dw"], dptr["db"] = res[1].data_ptr(), res[2].data_ptr() if res[2] is not None else None
            return res
        client.backward = bwd_seen
        y = layer(x)
        y.backward(dy)
        grads_stolen = [params[0].grad.data_ptr() == dptr["dw"]] + \
            ([params[1].grad.data_ptr() == dptr["db"]] if bias else [])
        y = None
        sgd(params)
        client.backward = orig_bwd
        sync()
        s0 = client.stats()
        wall = [one_step(False) for _ in range(a.steps)]
        s1 = client.stats()
        evp = [one_step(True) for _ in range(a.steps)] if not cpu else []
    finally:
        state["events"] = None
        conn.lib = real_lib
        for _, meth in names:
            client.__dict__.pop(meth, None)

    fosd_ms = {ph: _op_window(s0, s1, op) for ph, op in
               (("put", "put_weight"), ("forward", "forward"), ("backward", "backward"))}

    def med(key, rows=wall):
        return _pct([r[key] * 1e3 for r in rows])

    def ev(ph):
        return _pct([r["events"].get(ph, 0.0) * 1e3 for r in evp]) if evp else float("nan")

    def f(v):
        return "n/a" if v != v else "%.3f" % v

    out.append("")
    out.append("# phases of one fosd.torch.Linear step (device tensors), %dx%dx%d, median of %d steps; "
          "wall: perf_counter around each Client call (the libfos call timed inside it); CUDA-event: "
          "a second pass with events on the current stream around each phase (step %s ms there); fosd: "
          "its Stats over the wall pass (mean latency, of it running the op)" % (
              M, N, K, a.steps, f(med("step", evp)) if evp else "n/a"))
    out.append("| phase | calls/step | wall ms | in libfos ms | Python ms (wall - libfos) | CUDA-event ms | "
          "fosd latency ms | fosd run ms |")
    out.append("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for ph, what in (("put", "put (Client._put of W, after the update; none when it goes inside the forward)"),
                     ("forward", "forward (Client._forward, saving a context; with the put of W)"),
                     ("backward", "backward (Client.backward: dX, dW, db)")):
        lat, run, n = fosd_ms[ph]
        out.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
            what, "%g" % _pct([r[ph + ".n"] for r in wall]), f(med(ph)), f(med(ph + ".lib")),
            f(_pct([(r[ph] - r[ph + ".lib"]) * 1e3 for r in wall])), f(ev(ph)), f(lat), f(run)))
    out.append("| optimizer (SGD of W and b, launch + wait) | 1 | %s | | | %s | | |" % (f(med("optimizer")), f(ev("optimizer"))))
    out.append("| fosd.torch + autograd outside the Client calls | | %s | | %s | | | |" % (f(med("outside")), f(med("outside"))))
    out.append("| step | | %s | %s | | | | |" % (f(med("step")), f(_pct([
        (r["put.lib"] + r["forward.lib"] + r["backward.lib"]) * 1e3 for r in wall]))))

    # pieces each call pays besides libfos, timed alone (us)
    pieces = []
    if not cpu:
        st = torch.cuda.current_stream(dev)
        pieces.append(("torch.cuda.current_stream(dev).synchronize(), stream idle",
                       lambda: torch.cuda.current_stream(dev).synchronize()))
        pieces.append(("the same on a kept Stream object", st.synchronize))
    pieces.append(("torch.empty((M, N), bf16) on the device", lambda: torch.empty((M, N), dtype=torch.bfloat16, device=dev)))
    lib, h = client._lib, client._h()
    from fosd import _lib
    from fosd._arrays import Arr
    stt = _lib.Status()
    if not cpu:
        pieces.append(("fos_cuda_check of x (libfos resolves each device tensor of a call this way: "
                       "cuPointerGetAttributes, the cache of exported allocations)",
                       lambda: lib.fos_cuda_check(h, x.data_ptr(), x.numel() * 2, ctypes.byref(stt))))
    pieces.append(("fosd._arrays.Arr of x", lambda: Arr(x, "x")))
    for what, fn in pieces:
        for _ in range(50):
            fn()
        ts = []
        for _ in range(max(a.steps, 200)):
            t0 = pc()
            fn()
            ts.append((pc() - t0) * 1e6)
        out.append("| piece: %s | | %.1f us | | | | | |" % (what, statistics.median(ts)))
    out.append("| autograd kept fosd's dW%s as the grad (no copy) | | %s | | | | | |" % (
        " and db" if bias else "", "yes" if all(grads_stolen) else "NO (a copy each step: %s)" % grads_stolen))

    if a.phases_profile and not cpu:
        try:
            from torch.profiler import ProfilerActivity, profile as tprofile
            n = a.phases_profile
            with tprofile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for _ in range(n):
                    one_step(False)
                sync()
            gpu, api = {}, {}
            for e in prof.events():
                dt = str(getattr(e, "device_type", ""))
                name = e.name
                if dt.endswith("CUDA"):
                    c = gpu.setdefault(name, [0, 0.0])
                    c[0] += 1
                    c[1] += e.time_range.elapsed_us()
                elif name.startswith("cuda") or name.startswith("cu"):
                    api[name] = api.get(name, 0) + 1
            out.append("")
            out.append("# this process's own CUDA work in %d steps (torch.profiler): kernels, copies and sets it ran, "
                  "and the CUDA runtime calls it made (libfos's driver calls are not traced)" % n)
            out.append("| GPU activity of the trainer | per step | us per step |")
            out.append("| --- | --- | --- |")
            for name, (c, us) in sorted(gpu.items(), key=lambda kv: -kv[1][1]):
                out.append("| %s | %.1f | %.1f |" % (name[:90], c / n, us / n))
            out.append("| runtime call | per step | |")
            for name, c in sorted(api.items(), key=lambda kv: -kv[1]):
                out.append("| %s | %.1f | |" % (name, c / n))
        except Exception as e:  # no CUPTI, or a profiler of another version
            log("torch.profiler pass skipped: %s" % e)
    layer = params = None
    return out


def in_process(build, M, N, K, bias, steps, warmup, warmup_ms=0):
    """The same step in one process through the backend (C): bench_linear_step's JSON, or None."""
    cbench = os.path.join(build, "bench", "bench_linear_step")
    if not os.path.exists(cbench):
        return None
    args = [cbench, "--m", str(M), "--n", str(N), "--k", str(K), "--steps", str(steps),
            "--warmup", str(warmup), "--warmup-ms", str(int(warmup_ms))] + (["--bias"] if bias else [])
    r = subprocess.run(args, capture_output=True, text=True)
    try:
        out = json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        out = {"error": (r.stdout + r.stderr).strip()}
    if "error" in out:
        print("bench_linear_step: %s" % out["error"], file=sys.stderr)
        return None
    return out


def target_rounds(a, ft, client, build, xg, dy, dev, sync, sgd, bias):
    """The issue's target row measured fairly: the fosd.torch.Linear step (device tensors) and the
    in-process step alternately, a.target_rounds times, each after at least a.target_warm_s seconds
    of its own steps (so the GPU's clocks and first uses weigh on both alike). Lines to print."""
    import torch
    M, K = xg.shape
    N = dy.shape[1]
    layer = ft.Linear(K, N, dtype=torch.bfloat16, bias=bias, client=client, device=dev)
    params = list(layer.parameters())

    def fosd_step():
        y = layer(xg)
        y.backward(dy)
        sgd(params)
        xg.grad = None

    got = []
    for r in range(a.target_rounds):
        log("target round %d: fosd.torch.Linear step, then the in-process step" % (r + 1))
        f = median_ms(fosd_step, a.steps, a.warmup, sync, a.target_warm_s)
        ip = in_process(build, M, N, K, bias, a.steps, a.warmup, a.target_warm_s * 1000)
        if ip is None:
            return []
        got.append((f, ip["step_ms"]))
    lines = ["", "# target: fosd.torch.Linear step (device tensors) against the in-process step, %dx%dx%d, "
             "alternately, each the median of %d steps after at least %.1f s of its own steps" % (
                 M, N, K, a.steps, a.target_warm_s),
             "| round | fosd.torch.Linear step ms | in-process step ms | ratio |", "| --- | --- | --- | --- |"]
    for i, (f, ip) in enumerate(got):
        lines.append("| %d | %.3f | %.3f | %.2fx |" % (i + 1, f, ip, f / ip))
    ratios = sorted(f / ip for f, ip in got)
    lines.append("| median ratio | | | **%.2fx** |" % statistics.median(ratios))
    return lines


def busy_us(us):
    end = time.perf_counter() + us * 1e-6
    while time.perf_counter() < end:
        pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.environ.get("FOS_BUILD") or os.path.join(REPO, "build"))
    ap.add_argument("--server")
    ap.add_argument("--m", type=int)
    ap.add_argument("--n", type=int)
    ap.add_argument("--k", type=int)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--no-bias", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--profile", type=int, default=0)
    ap.add_argument("--fosd-channel-spin-us", type=int)
    ap.add_argument("--cpu", action="store_true")
    ap.add_argument("--phases", action="store_true")
    ap.add_argument("--phases-profile", type=int, default=3)
    ap.add_argument("--overhead", action="store_true")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--target-rounds", type=int, default=3)
    ap.add_argument("--target-warm-s", type=float, default=2.0)
    a = ap.parse_args()
    for f, dflt in (("m", 8192), ("n", 4096), ("k", 4096)):  # --overhead: 256 (CPU stand-ins)
        if getattr(a, f) is None:
            setattr(a, f, 256 if a.overhead else dflt)
    build = os.path.abspath(a.build)
    os.environ.setdefault("FOSD_LIBFOS", os.path.join(build, "libfos.so"))
    if a.overhead:
        sys.path.insert(0, HERE)
        from bench_python_overhead import overhead
        return overhead(a)
    sys.path.insert(0, os.path.join(REPO, "client", "python"))
    import torch
    import fosd
    import fosd.torch as ft
    from fosd import _lib

    if a.cpu:
        dev = torch.device("cpu")

        def sync():
            pass

        def stream(d):
            return types.SimpleNamespace(synchronize=sync)
        mem = _lib.MEM_HOST
    else:
        if not torch.cuda.is_available():
            raise SystemExit("bench_python_step: torch sees no CUDA GPU")
        dev = torch.device("cuda")
        sync = torch.cuda.synchronize
        stream = torch.cuda.current_stream
        mem = _lib.MEM_CUDA
    M, N, K, bias = a.m, a.n, a.k, not a.no_bias
    shape = "%dx%dx%d" % (M, N, K)
    rows = {}

    proc, tmp = None, None
    if a.server:
        url = a.server
    else:
        tmp = tempfile.mkdtemp(prefix="fosd-bench-")
        proc, url = start_fosd(build, tmp, a.fosd_channel_spin_us, "cpu" if a.cpu else "cuda")
    try:
        client = fosd.connect(url, timeout=120)
        socket_client = fosd.connect(url, timeout=120, channel=False)
        host_client = fosd.connect(url, timeout=120, device_tensors=False)
        health = client.health()
        if not client.channel:
            log("no request channel: %s" % client.channel_off_reason)
        g = torch.Generator(device=dev).manual_seed(0)
        x = torch.randn(M, K, device=dev, generator=g).to(torch.bfloat16)
        dy = torch.randn(M, N, device=dev, generator=g).to(torch.bfloat16)
        lr = 1e-6

        def sgd(params):
            with torch.no_grad():
                for p in params:
                    p.add_(p.grad, alpha=-lr)
                    p.grad = None

        # fosd.torch.Linear on the GPU: CUDA tensors as device tensors (fosd reads and writes them
        # in place) through the request channel and over the socket, then through host memory
        # (device_tensors=False), all in this run
        # X requires a gradient here, so the layer computes dX, dW and db as the in-process step
        # does (its grad is dropped each step: no accumulation kernel); the "dX not needed" row
        # below is the layer of a first layer, which fosd skips dX for (as torch.nn.Linear does)
        xg = x.detach().requires_grad_(True)
        for c, how in ((client, "device tensors"),
                       (socket_client, "device tensors, socket"), (host_client, "host memory"),
                       (client, "device tensors, dX not needed")):
            layer = ft.Linear(K, N, dtype=torch.bfloat16, bias=bias, client=c, device=dev)
            params = [p for p in layer.parameters()]
            xin = x if how.endswith("not needed") else xg

            def fosd_step():
                y = layer(xin)
                y.backward(dy)
                sgd(params)
                xg.grad = None

            def fosd_fwd_bwd():
                y = layer(xin)
                y.backward(dy)
                for p in params:
                    p.grad = None
                xg.grad = None

            log("fosd %s on %s; timing fosd.torch.Linear, CUDA tensors as %s (channel: %s)" % (
                health["backend"], health["device"], how, "yes" if c.channel else c.channel_off_reason))
            st0 = c.stats()
            checks0 = c._plane.device_checks
            rows["fosd.torch.Linear step (%s)" % how] = median_ms(fosd_step, a.steps, a.warmup, sync)
            fosd_fwd_bwd()  # puts the last update
            puts = layer.puts
            rows["fosd.torch.Linear fwd+bwd (%s)" % how] = median_ms(fosd_fwd_bwd, a.steps, a.warmup, sync)
            assert layer.puts == puts, "the weight was put again without a change"
            st1 = c.stats()
            log("  fosd: %d device tensors, %d of them staged (copied: not aligned), %d channel requests, "
                "%d device mappings now (%d MiB); the client asked fos_cuda_check %d times" % (
                    tuple(st1.get(k, 0) - st0.get(k, 0) for k in ("device_tensors", "device_staged", "channel_requests"))
                    + (st1.get("device_mappings", 0), st1.get("device_mapped_bytes", 0) >> 20,
                       c._plane.device_checks - checks0)))
            if a.profile and c is client:
                profile("fosd.torch.Linear steps (device tensors)", fosd_step, a.profile, sync,
                        None if a.cpu else ft._LinearFn)
            layer = params = None  # frees its fosd weight and GPU memory
        phase_lines, target_lines = [], []
        if a.phases:
            log("timing the phases of a fosd.torch.Linear step (device tensors)")
            phase_lines = phases(a, torch, ft, client, x, dy, dev, sync, sgd, bias)
        if not client.device_tensors_sent:
            log("no CUDA tensor went as a device tensor: %s" % client.device_off_reason)
        host_client.close()
        socket_client.close()

        # the same forward + backward without fosd.torch: Client calls, then bare libfos calls
        w = (torch.randn(N, K, device=dev, generator=g) * 0.02).to(torch.bfloat16)
        b = torch.randn(N, device=dev, generator=g).to(torch.bfloat16) if bias else None
        client.put_weight("bench.py.w", w)

        def client_fwd_bwd():
            y, ctx = client.forward("bench.py.w", x, bias=b, save_context=True)
            client.backward(ctx, dy)

        log("timing Client.forward + Client.backward (device tensors)")
        rows["Client.forward+backward (device tensors)"] = median_ms(client_fwd_bwd, a.steps, a.warmup, sync)
        if a.profile:
            profile("Client.forward + Client.backward (device tensors)", client_fwd_bwd, a.profile, sync)
        if a.phases:
            # autograd runs a CUDA layer's backward on a thread of its own: the same calls with the
            # backward handed to a second thread (the handoff's own time, measured alone, subtracted)
            jobs, done = queue.Queue(), queue.Queue()

            def worker():
                for job in iter(jobs.get, None):
                    try:
                        done.put(job())
                    except BaseException as e:  # handed back to the caller
                        done.put(e)
            th = threading.Thread(target=worker, daemon=True)
            th.start()

            def on_worker(job):
                jobs.put(job)
                r = done.get()
                if isinstance(r, BaseException):
                    raise r
                return r

            def client_fwd_bwd_thread():
                y, ctx = client.forward("bench.py.w", x, bias=b, save_context=True)
                on_worker(lambda: client.backward(ctx, dy))

            log("timing Client.forward + Client.backward with the backward on a second thread")
            handoff = median_ms(lambda: on_worker(lambda: None), max(a.steps, 100), a.warmup, sync)
            rows["Client.forward+backward (device tensors, backward on a second thread, handoff subtracted)"] = \
                median_ms(client_fwd_bwd_thread, a.steps, a.warmup, sync) - handoff
            jobs.put(None)
            th.join()
        versions = iter(range(2, 1 << 30))

        def client_put():
            client.put_weight("bench.py.w", w, version=next(versions))

        log("timing Client.put_weight (device W, a new version each time)")
        rows["Client.put_weight (device W)"] = median_ms(client_put, a.steps, a.warmup, sync)
        lib, h = client._lib, client._h()

        def dev_tensor(t):
            d = _lib.Tensor()
            d.dtype, d.ndim, d.mem = _lib.DTYPE_BF16, t.dim(), mem
            for i, n_ in enumerate(t.shape):
                d.shape[i] = n_
            d.data, d.size = t.data_ptr(), t.numel() * 2
            return d

        bufs = [torch.empty(M, N, device=dev, dtype=torch.bfloat16), torch.empty(M, K, device=dev, dtype=torch.bfloat16),
                torch.empty(N, K, device=dev, dtype=torch.bfloat16)] + \
            ([torch.empty(N, device=dev, dtype=torch.bfloat16)] if bias else [])
        tx, tdy, tb = dev_tensor(x), dev_tensor(dy), dev_tensor(b) if bias else None
        ty, tdx, tdw = (dev_tensor(t) for t in bufs[:3])
        tdb = dev_tensor(bufs[3]) if bias else None
        fo = _lib.ForwardOpts(0, 0, 0, 1)
        st = _lib.Status()
        P = ctypes.byref

        def libfos_fwd_bwd():
            ctx = _lib.ContextStruct()
            rc = lib.fos_forward(h, b"bench.py.w", P(tx), P(tb) if bias else None, P(fo), P(ty), P(ctx), P(st))
            if not rc:
                rc = lib.fos_backward(h, P(ctx), P(tdy), None, P(tdx), P(tdw), P(tdb) if bias else None, P(st))
            if rc:
                raise SystemExit("libfos through ctypes: %s" % st.message.decode())

        log("timing fos_forward + fos_backward through ctypes (device buffers allocated once)")
        rows["libfos fwd+bwd via ctypes (device buffers)"] = median_ms(libfos_fwd_bwd, a.steps, a.warmup, sync)

        # what the package adds per call besides its Python: results from torch.empty, every tensor
        # checked with fos_cuda_check, the current stream synchronized
        def checked(t, nbytes):
            if not a.cpu and lib.fos_cuda_check(h, t.data, nbytes, P(st)):
                raise SystemExit("fos_cuda_check: %s" % st.message.decode())

        def libfos_fwd_bwd_as_package():
            y_ = torch.empty(M, N, device=dev, dtype=torch.bfloat16)
            ty_ = dev_tensor(y_)
            for t in (tx, tb, ty_) if bias else (tx, ty_):
                checked(t, t.size)
            stream(dev).synchronize()
            ctx = _lib.ContextStruct()
            rc = lib.fos_forward(h, b"bench.py.w", P(tx), P(tb) if bias else None, P(fo), P(ty_), P(ctx), P(st))
            if rc:
                raise SystemExit("libfos through ctypes: %s" % st.message.decode())
            outs = [torch.empty(M, K, device=dev, dtype=torch.bfloat16), torch.empty(N, K, device=dev, dtype=torch.bfloat16)] + \
                ([torch.empty(N, device=dev, dtype=torch.bfloat16)] if bias else [])
            touts = [dev_tensor(t) for t in outs] + ([] if bias else [None])
            for t in [tdy] + touts[:3 if bias else 2]:
                checked(t, t.size)
            stream(dev).synchronize()
            rc = lib.fos_backward(h, P(ctx), P(tdy), None, P(touts[0]), P(touts[1]),
                                  P(touts[2]) if bias else None, P(st))
            if rc:
                raise SystemExit("libfos through ctypes: %s" % st.message.decode())

        log("timing fos_forward + fos_backward through ctypes with torch.empty results, fos_cuda_check, "
            "stream synchronize")
        rows["libfos fwd+bwd via ctypes (+ torch.empty results, fos_cuda_check of each tensor, stream sync, every call)"] = median_ms(
            libfos_fwd_bwd_as_package, a.steps, a.warmup, sync)

        gap_us = 150

        def libfos_fwd_bwd_gaps():
            busy_us(gap_us)
            ctx = _lib.ContextStruct()
            rc = lib.fos_forward(h, b"bench.py.w", P(tx), P(tb) if bias else None, P(fo), P(ty), P(ctx), P(st))
            busy_us(gap_us)
            if not rc:
                rc = lib.fos_backward(h, P(ctx), P(tdy), None, P(tdx), P(tdw), P(tdb) if bias else None, P(st))
            if rc:
                raise SystemExit("libfos through ctypes: %s" % st.message.decode())

        log("timing fos_forward + fos_backward through ctypes, %d us of busy CPU before each" % gap_us)
        rows["libfos fwd+bwd via ctypes (device buffers, %d us busy before each call, subtracted)" % gap_us] = \
            median_ms(libfos_fwd_bwd_gaps, a.steps, a.warmup, sync) - 2 * gap_us / 1000

        # this process's own GPU work between fosd's (an SGD update does that in a step): one
        # small kernel, finished, before each call; its time alone is subtracted
        tiny = torch.zeros(4096, device=dev)

        def tiny_kernel():
            tiny.add_(1)
            stream(dev).synchronize()

        def libfos_fwd_bwd_kernels():
            tiny_kernel()
            ctx = _lib.ContextStruct()
            rc = lib.fos_forward(h, b"bench.py.w", P(tx), P(tb) if bias else None, P(fo), P(ty), P(ctx), P(st))
            tiny_kernel()
            if not rc:
                rc = lib.fos_backward(h, P(ctx), P(tdy), None, P(tdx), P(tdw), P(tdb) if bias else None, P(st))
            if rc:
                raise SystemExit("libfos through ctypes: %s" % st.message.decode())

        log("timing fos_forward + fos_backward through ctypes, a small kernel of this process before each")
        kernel_ms = median_ms(tiny_kernel, a.steps, a.warmup, sync)
        rows["libfos fwd+bwd via ctypes (device buffers, a small kernel of this process before each call, "
             "subtracted)"] = median_ms(libfos_fwd_bwd_kernels, a.steps, a.warmup, sync) - 2 * kernel_ms
        client.drop_weight("bench.py.w")
        bufs = w = b = None

        log("timing torch.nn.Linear")
        # torch.nn.Linear in bf16
        lin = torch.nn.Linear(K, N, bias=bias, device=dev, dtype=torch.bfloat16)
        tparams = [p for p in lin.parameters()]

        def torch_step():
            y = lin(x)
            y.backward(dy)
            sgd(tparams)

        rows["torch.nn.Linear bf16 step"] = median_ms(torch_step, a.steps, a.warmup, sync)

        def torch_step_dx():
            y = lin(xg)
            y.backward(dy)
            sgd(tparams)
            xg.grad = None

        rows["torch.nn.Linear bf16 step, dX too"] = median_ms(torch_step_dx, a.steps, a.warmup, sync)
        lin = tparams = None
        if a.target_rounds > 0 and not a.cpu:
            target_lines = target_rounds(a, ft, client, build, xg, dy, dev, sync, sgd, bias)
        client.close()
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
            shutil.rmtree(tmp, ignore_errors=True)

    log("timing the in-process step")
    inproc = in_process(build, M, N, K, bias, a.steps, a.warmup)
    log("done")
    if inproc:
        rows["in-process step (bench_linear_step)"] = inproc["step_ms"]
        rows["in-process fwd+bwd (bench_linear_step)"] = inproc["fwd_bwd_ms"]
        rows["in-process put (bench_linear_step)"] = inproc["put_ms"]

    base = rows.get("in-process step (bench_linear_step)")
    base_fb = rows.get("in-process fwd+bwd (bench_linear_step)")
    base_put = rows.get("in-process put (bench_linear_step)")
    tref = rows["torch.nn.Linear bf16 step"]
    print("# bench_python_step: %s, bias %s, fosd %s on %s, torch %s, python %s, %s UTC" % (
        shape, bias, health["backend"], health["device"], torch.__version__, sys.version.split()[0],
        time.strftime("%Y-%m-%d %H:%M", time.gmtime())))
    print("| what | shape | ms (median of %d) | / in-process | / torch bf16 |" % a.steps)
    print("| --- | --- | --- | --- | --- |")
    for name, ms in rows.items():
        b = base_fb if "fwd+bwd" in name or "forward+backward" in name else base_put if "put" in name else base
        print("| %s | %s | %.3f | %s | %.2fx |" % (name, shape, ms, "%.2fx" % (ms / b) if b else "n/a", ms / tref))
    for line in phase_lines:
        print(line)
    for line in target_lines:
        print(line)
    if a.json:
        print(json.dumps({"shape": [M, N, K], "bias": bias, "fosd": health, "torch": torch.__version__,
                          "ms": rows, "target": target_lines}))


if __name__ == "__main__":
    main()
