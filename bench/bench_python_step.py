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
Usage (from the repository root on the GPU host):
  python3 bench/bench_python_step.py [--build BUILD] [--server URL] [--m M --n N --k K]
      [--steps S] [--warmup W] [--no-bias] [--json] [--profile N] [--fosd-channel-spin-us US]
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
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


T0 = time.monotonic()


def log(msg):
    print("[%6.1f s] %s" % (time.monotonic() - T0, msg), file=sys.stderr, flush=True)


def median_ms(fn, steps, warmup, sync):
    for _ in range(warmup):
        fn()
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
    argv = [os.path.join(build, "fosd"), "--backend", backend, "--listen", url]
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


def busy_us(us):
    end = time.perf_counter() + us * 1e-6
    while time.perf_counter() < end:
        pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.environ.get("FOS_BUILD") or os.path.join(REPO, "build"))
    ap.add_argument("--server")
    ap.add_argument("--m", type=int, default=8192)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--k", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--no-bias", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--profile", type=int, default=0)
    ap.add_argument("--fosd-channel-spin-us", type=int)
    ap.add_argument("--cpu", action="store_true")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    os.environ.setdefault("FOSD_LIBFOS", os.path.join(build, "libfos.so"))
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
        for c, how in ((client, "device tensors"),
                       (socket_client, "device tensors, socket"), (host_client, "host memory")):
            layer = ft.Linear(K, N, bias=bias, client=c, device=dev)
            params = [p for p in layer.parameters()]

            def fosd_step():
                y = layer(x)
                y.backward(dy)
                sgd(params)

            def fosd_fwd_bwd():
                y = layer(x)
                y.backward(dy)
                for p in params:
                    p.grad = None

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
        lin = tparams = None
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
    # the same step in one process through the backend (C)
    cbench = os.path.join(build, "bench", "bench_linear_step")
    inproc = None
    if os.path.exists(cbench):
        args = [cbench, "--m", str(M), "--n", str(N), "--k", str(K), "--steps", str(a.steps),
                "--warmup", str(a.warmup)] + (["--bias"] if bias else [])
        r = subprocess.run(args, capture_output=True, text=True)
        try:
            inproc = json.loads(r.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            inproc = {"error": (r.stdout + r.stderr).strip()}
        if "error" in inproc:
            print("bench_linear_step: %s" % inproc["error"], file=sys.stderr)
            inproc = None
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
    if a.json:
        print(json.dumps({"shape": [M, N, K], "bias": bias, "fosd": health, "torch": torch.__version__,
                          "ms": rows}))


if __name__ == "__main__":
    main()
