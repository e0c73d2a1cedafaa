#!/usr/bin/env python3
"""bench_python_step.py: one training step of a linear layer (default 8192x4096x4096, bf16, on
the GPU) three ways, timed in the same run:

  * fosd.torch.Linear on CUDA tensors, fosd (cuda backend) on the same GPU: the weight put again
    after each SGD update, forward with a saved context, backward (dX, dW, db); also the forward +
    backward alone on an unchanged weight;
  * the same step through the backend in one process on device buffers (bench_linear_step, the C
    baseline: quantize W, forward, backward), the ratio the target is stated against;
  * torch.nn.Linear in bf16 (cuBLAS): forward, backward, SGD update.

The fosd rows come twice: CUDA tensors as device tensors (the default: fosd reads and writes them
in place) and through host memory (a client with device_tensors=False).
Wall clock per step, each ended by torch.cuda.synchronize(), median of --steps after --warmup.
Prints markdown rows (what, shape, ms, ratios) for bench/BENCHMARKS.md and, with --json, one JSON
object. Usage (from the repository root on the GPU host):
  python3 bench/bench_python_step.py [--build BUILD] [--server URL] [--m M --n N --k K]
      [--steps S] [--warmup W] [--no-bias] [--json]
--build names the folder with fosd, libfos.so and bench/bench_linear_step (default $FOS_BUILD or
build); without --server a cuda fosd from there is started on a private ipc socket.
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

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


def start_fosd(build, sock_dir):
    url = "ipc://%s/fosd.sock" % sock_dir
    log = open(os.path.join(sock_dir, "fosd.log"), "wb")
    p = subprocess.Popen([os.path.join(build, "fosd"), "--backend", "cuda", "--listen", url],
                         stdout=log, stderr=subprocess.STDOUT)
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
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    os.environ.setdefault("FOSD_LIBFOS", os.path.join(build, "libfos.so"))
    sys.path.insert(0, os.path.join(REPO, "client", "python"))
    import torch
    import fosd
    import fosd.torch as ft

    if not torch.cuda.is_available():
        raise SystemExit("bench_python_step: torch sees no CUDA GPU")
    dev = torch.device("cuda")
    sync = torch.cuda.synchronize
    M, N, K, bias = a.m, a.n, a.k, not a.no_bias
    shape = "%dx%dx%d" % (M, N, K)
    rows = {}

    proc, tmp = None, None
    if a.server:
        url = a.server
    else:
        tmp = tempfile.mkdtemp(prefix="fosd-bench-")
        proc, url = start_fosd(build, tmp)
    try:
        client = fosd.connect(url, timeout=120)
        host_client = fosd.connect(url, timeout=120, device_tensors=False)
        health = client.health()
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
        # in place), then through host memory (device_tensors=False), both in this run
        for c, how in ((client, "device tensors"), (host_client, "host memory")):
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

            log("fosd %s on %s; timing fosd.torch.Linear, CUDA tensors as %s" % (
                health["backend"], health["device"], how))
            rows["fosd.torch.Linear step (%s)" % how] = median_ms(fosd_step, a.steps, a.warmup, sync)
            fosd_fwd_bwd()  # puts the last update
            puts = layer.puts
            rows["fosd.torch.Linear fwd+bwd (%s)" % how] = median_ms(fosd_fwd_bwd, a.steps, a.warmup, sync)
            assert layer.puts == puts, "the weight was put again without a change"
            layer = params = None  # frees its fosd weight and GPU memory
        if not client.device_tensors_sent:
            log("no CUDA tensor went as a device tensor: %s" % client.device_off_reason)
        host_client.close()

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

    base = rows.get("in-process step (bench_linear_step)")
    base_fb = rows.get("in-process fwd+bwd (bench_linear_step)")
    tref = rows["torch.nn.Linear bf16 step"]
    print("# bench_python_step: %s, bias %s, fosd %s on %s, torch %s, python %s, %s UTC" % (
        shape, bias, health["backend"], health["device"], torch.__version__, sys.version.split()[0],
        time.strftime("%Y-%m-%d %H:%M", time.gmtime())))
    print("| what | shape | ms (median of %d) | / in-process | / torch bf16 |" % a.steps)
    print("| --- | --- | --- | --- | --- |")
    for name, ms in rows.items():
        b = base_fb if "fwd+bwd" in name else base
        print("| %s | %s | %.3f | %s | %.2fx |" % (name, shape, ms, "%.2fx" % (ms / b) if b else "n/a", ms / tref))
    if a.json:
        print(json.dumps({"shape": [M, N, K], "bias": bias, "fosd": health, "torch": torch.__version__,
                          "ms": rows}))


if __name__ == "__main__":
    main()
