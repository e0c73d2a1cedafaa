#!/usr/bin/env python3
"""bench_soak.py: fosd's resident memory over a long mixed load (issue 25 point 4).

Starts a cpu fosd on a private ipc:// socket, runs for --duration:
  * `fos load --op forward` at --concurrency (default 2) with small shapes, restarted until the
    end (each run registers and drops its own weight), and
  * a Python loop (the fosd package over libfos): puts a weight under a new version, forwards
    with contexts, backwards on some, releases the others, drops the old version;
samples fosd's VmRSS from /proc/PID/status every --every seconds, then watches --idle seconds
with no load, and prints the curve (seconds, MB, phase) and a summary: RSS at the end of warm-up
(--warmup), the largest after it, the growth after warm-up, and the RSS after the idle period.
Exits by itself; exit 1 when fosd or the load failed.

  nice python3 bench/bench_soak.py --build build --duration 1800 [--extra '--dedup-window 1s']
"""

import argparse
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def rss_mb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def python_loop(fosd, url, stop, counts, errors, dims):
    import numpy as np
    m, n, k = dims
    rng = np.random.default_rng(7)
    c = fosd.connect(url, timeout=60)
    version = 0
    name = "soak.w"
    try:
        while not stop.is_set():
            version += 1
            w = rng.standard_normal((n, k)).astype(np.float32)
            c.put_weight(name, w, version=version)
            ctxs = []
            for i in range(8):
                x = rng.standard_normal((m, k)).astype(np.float32)
                y, ctx = c.forward(name, x, save_context=True, version=version)
                ctxs.append(ctx)
            dy = rng.standard_normal((m, n)).astype(np.float32)
            for i, ctx in enumerate(ctxs):
                if i % 2 == 0:
                    c.backward(ctx, dy)
                else:
                    c.release(ctx)
            if version > 1:
                try:
                    c.drop_weight(name)
                except fosd.Error:
                    pass
            counts[0] += 1
    except Exception as e:  # noqa: BLE001 - reported as the run's failure
        errors.append("python loop: %r" % (e,))
    finally:
        c.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--duration", type=float, default=300, help="seconds of load")
    ap.add_argument("--warmup", type=float, default=120, help="seconds counted as warm-up")
    ap.add_argument("--idle", type=float, default=30, help="seconds watched after the load")
    ap.add_argument("--every", type=float, default=5, help="seconds between RSS samples")
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--m", type=int, default=32)
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--k", type=int, default=256)
    ap.add_argument("--extra", default="", help="more fosd arguments")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    sys.path.insert(0, os.path.join(REPO, "client", "python"))
    os.environ.setdefault("FOSD_LIBFOS", os.path.join(build, "libfos.so"))
    import fosd

    tmp = tempfile.mkdtemp(prefix="fosd-soak-")
    url = "ipc://%s/fosd.sock" % tmp
    log = open(os.path.join(tmp, "fosd.log"), "wb")
    argv = [os.path.join(build, "fosd"), "--backend", "cpu", "--threads", "2", "--listen", url,
            "--metrics-listen", "off"] + shlex.split(a.extra)
    srv = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    errors = []
    try:
        t0 = time.monotonic()
        while True:
            try:
                with fosd.connect(url, timeout=1.0, shm=False) as c:
                    c.health()
                break
            except fosd.Error:
                if srv.poll() is not None or time.monotonic() - t0 > 20:
                    raise SystemExit("fosd did not start: see %s/fosd.log" % tmp)
                time.sleep(0.05)
        stop = threading.Event()
        counts = [0]
        py = threading.Thread(target=python_loop, args=(fosd, url, stop, counts, errors, (a.m, a.n, a.k)))
        py.start()
        load_runs = [0]

        def fos_loop():
            while not stop.is_set():
                left = a.duration - (time.monotonic() - start)
                if left < 2:
                    break
                r = subprocess.run([os.path.join(build, "fos"), "--server", url, "load", "--op", "forward",
                                    "--m", str(a.m), "--n", str(a.n), "--k", str(a.k), "--concurrency",
                                    str(a.concurrency), "--duration", "%ds" % min(60, int(left)),
                                    "--no-progress", "--quiet"],
                                   capture_output=True, text=True)
                if r.returncode:
                    errors.append("fos load: exit %d: %s" % (r.returncode, r.stderr.strip()))
                    break
                load_runs[0] += 1

        start = time.monotonic()
        ld = threading.Thread(target=fos_loop)
        ld.start()
        curve = []
        print("# fosd %s" % " ".join(argv[1:]), flush=True)
        print("# seconds  rss_MB  phase", flush=True)
        while True:
            now = time.monotonic() - start
            phase = "load" if now < a.duration else "idle"
            if now >= a.duration and not stop.is_set():
                stop.set()
                py.join()
                ld.join()
            if srv.poll() is not None:
                errors.append("fosd exited %s" % srv.returncode)
                break
            r = rss_mb(srv.pid)
            curve.append((now, r, phase))
            print("%8.0f  %7.1f  %s" % (now, r, phase), flush=True)
            if now >= a.duration + a.idle or errors:
                break
            time.sleep(a.every)
        stop.set()
        py.join()
        ld.join()
        load_curve = [r for t, r, p in curve if p == "load"]
        warm = [r for t, r, p in curve if p == "load" and t <= a.warmup]
        after = [r for t, r, p in curve if p == "load" and t > a.warmup]
        print("# python loop iterations: %d, fos load runs: %d" % (counts[0], load_runs[0]))
        if warm and after:
            print("# rss at end of warm-up %.1f MB; after it: min %.1f max %.1f last %.1f MB (growth %.1f MB)"
                  % (warm[-1], min(after), max(after), after[-1], max(after) - warm[-1]))
        if load_curve:
            print("# peak under load %.1f MB; after %.0f s idle %.1f MB" % (max(load_curve), a.idle, curve[-1][1]))
    finally:
        if srv.poll() is None:
            srv.send_signal(signal.SIGTERM)
            try:
                srv.wait(30)
            except subprocess.TimeoutExpired:
                srv.kill()
                srv.wait()
        log.close()
        if errors:
            print("# errors: %s (log kept in %s)" % ("; ".join(errors), tmp))
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 1 if errors or srv.returncode else 0


if __name__ == "__main__":
    sys.exit(main())
