#!/usr/bin/env python3
"""bench_train.py: a small transformer language model trained on real text, torch's own bf16
nn.Linear against fosd.torch, one trainer and several at once, timed in the same run.

The model is a byte-level GPT (token and position embeddings, --layers blocks of pre-norm causal
self-attention and a 4x MLP, a final norm and an output head), all parameters bf16, AdamW. In the
fosd rows every nn.Linear inside the blocks goes through fosd.torch.convert (the embeddings, the
norms and the output head stay torch's, as torchao's recipes leave the output layer alone); both
rows start from the same seed, so their loss curves compare step by step.

The corpus is real English text that ships with every Debian and Ubuntu machine: the license texts
under /usr/share/common-licenses (about 260 KB), or the files and folders given with --corpus.
Batches are drawn from it with a fixed seed.

Rows: one trainer (bf16, fosd), then --trainers N processes at once (bf16, fosd), each process
timing its own steps (wall clock, each step ended by torch.cuda.synchronize(); median of --steps
after --warmup; the N processes start their timed steps together). fosd is a cuda fosd from
--build on a private ipc socket; --mps starts a private MPS control daemon first (its pipe and
log folders in the run's temporary folder), so fosd and every trainer share the GPU through MPS,
as README "Sharing a GPU with trainers" recommends, and stops it at the end. Prints markdown rows
for bench/BENCHMARKS.md (median step ms, ratio to bf16's row of the same kind), the CPU time each
group used per trainer step (each trainer's own, fosd's, and the cores busy machine-wide), fosd's
requests per trainer step with their mean latency and run time (its Stats), and the loss curve
(every --loss-every steps); --json FILE writes every number.

Usage (repository root, GPU host):
  python3 bench/bench_train.py [--build BUILD] [--mps] [--trainers N] [--steps S] [--warmup W]
      [--layers L] [--width D] [--heads H] [--ctx T] [--batch B] [--corpus PATH ...] [--json FILE]
--cpu runs a tiny model on CPU tensors with a cpu fosd: a check of this script where there is no
GPU; its times are not the GPU's.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from bench_python_step import _op_window, log, start_fosd  # noqa: E402

DEFAULT_CORPUS = "/usr/share/common-licenses"


def read_corpus(paths):
    files = []
    for p in paths:
        if os.path.isdir(p):
            for root, _dirs, names in sorted(os.walk(p)):
                files += [os.path.join(root, n) for n in sorted(names)]
        else:
            files.append(p)
    data = b""
    for f in files:
        if os.path.isfile(f) and not os.path.islink(f):
            with open(f, "rb") as fh:
                data += fh.read()
    return data


def build_model(torch, a):
    nn = torch.nn
    F = torch.nn.functional

    def attention(q, k, v):
        if hasattr(F, "scaled_dot_product_attention"):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        t = q.shape[2]
        mask = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
        w = (q @ k.transpose(-2, -1)) * (q.shape[-1] ** -0.5)
        return torch.softmax(w.masked_fill(~mask, float("-inf")).float(), dim=-1).to(q.dtype) @ v

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(a.width)
            self.qkv = nn.Linear(a.width, 3 * a.width)
            self.proj = nn.Linear(a.width, a.width)
            self.ln2 = nn.LayerNorm(a.width)
            self.fc = nn.Linear(a.width, 4 * a.width)
            self.out = nn.Linear(4 * a.width, a.width)

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
            q, k, v = (z.view(b, t, a.heads, d // a.heads).transpose(1, 2) for z in (q, k, v))
            y = attention(q, k, v)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
            return x + self.out(F.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(256, a.width)
            self.pos = nn.Embedding(a.ctx, a.width)
            self.blocks = nn.Sequential(*[Block() for _ in range(a.layers)])
            self.ln = nn.LayerNorm(a.width)
            self.head = nn.Linear(a.width, 256, bias=False)

        def forward(self, idx):
            pos = torch.arange(idx.shape[1], device=idx.device)
            return self.head(self.ln(self.blocks(self.tok(idx) + self.pos(pos))))

    return GPT()


def worker(a):
    """One trainer: prints 'ready' after its warm-up, waits for a line on stdin, times --steps steps,
    prints one JSON line."""
    import torch

    dev = torch.device("cpu" if a.cpu else "cuda")
    sync = (lambda: None) if a.cpu else torch.cuda.synchronize
    data = torch.frombuffer(bytearray(read_corpus(a.corpus)), dtype=torch.uint8).long()
    torch.manual_seed(1234)
    model = build_model(torch, a).to(device=dev, dtype=torch.bfloat16)
    client = None
    if a.mode == "fosd":
        import fosd
        import fosd.torch as ft

        client = fosd.connect(a.url)
        for blk in model.blocks:
            ft.convert(blk, client=client)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(99 + a.seed)
    n_rows = a.batch * a.ctx

    def batch():
        starts = torch.randint(0, data.numel() - a.ctx - 1, (a.batch,), generator=gen)
        idx = torch.stack([data[s:s + a.ctx + 1] for s in starts.tolist()]).to(dev)
        return idx[:, :-1], idx[:, 1:]

    def step():
        x, y = batch()
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits.float().view(n_rows, 256), y.reshape(n_rows))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    losses = []
    for _ in range(a.warmup):
        losses.append(float(step().detach()))
    sync()
    print("ready", flush=True)
    sys.stdin.readline()
    times = []
    cpu0 = time.process_time()
    for _ in range(a.steps):
        t0 = time.perf_counter()
        loss = step()
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
        losses.append(float(loss.detach()))
    cpu_ms = (time.process_time() - cpu0) * 1e3 / a.steps
    if client is not None:
        client.close()
    print(json.dumps({"median_ms": statistics.median(times), "cpu_ms": cpu_ms, "losses": losses}), flush=True)


def proc_cpu_s(pid):
    """CPU seconds (user + system, every thread) process pid has used; None where /proc has none."""
    try:
        with open("/proc/%d/stat" % pid) as fh:
            f = fh.read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def machine_busy_s():
    """CPU seconds every core of this machine has spent not idle; None without /proc/stat."""
    try:
        with open("/proc/stat") as fh:
            v = [int(x) for x in fh.readline().split()[1:]]
        return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def fosd_stats(url):
    """fosd's Stats, through a connection of this process (no CUDA here)."""
    import fosd

    with fosd.connect(url, timeout=10.0, shm=False) as c:
        return c.stats()


def ops_window(s0, s1, steps):
    """Per op between two Stats: requests per trainer step and fosd's mean latency (receipt to
    reply) and run time in us; the timed steps' ops and a few around them (warm-up's last, close,
    this process's own Stats)."""
    out = {}
    for op in s1.get("ops", {}):
        lat_ms, run_ms, n = _op_window(s0, s1, op)
        if n > 0:
            out[op] = {"per_step": n / steps, "lat_us": lat_ms * 1e3, "run_us": run_ms * 1e3}
    return out


def run_trainers(a, mode, n, url, env, fosd_pid=None):
    """n trainer processes of one mode, their timed steps started together; their results (each
    with the CPU time it used per step) and, over the timed steps, the CPU time per trainer step of
    fosd (fosd_pid) and of the whole machine."""
    argv = [sys.executable, os.path.abspath(__file__), "--worker", "--mode", mode]
    for k in ("layers", "width", "heads", "ctx", "batch", "steps", "warmup"):
        argv += ["--" + k, str(getattr(a, k))]
    argv += ["--lr", repr(a.lr), "--corpus"] + a.corpus + (["--cpu"] if a.cpu else [])
    if url:
        argv += ["--url", url]
    procs = [subprocess.Popen(argv + ["--seed", str(i)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              env=env, text=True) for i in range(n)]
    for p in procs:
        line = p.stdout.readline()
        if line.strip() != "ready":
            for q in procs:
                q.kill()
            raise SystemExit("a %s trainer failed before its timed steps (%r)" % (mode, line))
    st0 = fosd_stats(url) if fosd_pid else None
    f0, m0, t0 = proc_cpu_s(fosd_pid) if fosd_pid else None, machine_busy_s(), time.monotonic()
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    out = []
    for p in procs:
        res, _ = p.communicate()
        if p.returncode:
            raise SystemExit("a %s trainer exited with %d" % (mode, p.returncode))
        out.append(json.loads(res.strip().splitlines()[-1]))
    f1, m1, wall = proc_cpu_s(fosd_pid) if fosd_pid else None, machine_busy_s(), time.monotonic() - t0
    per = 1e3 / (n * a.steps)
    cpu = {"machine_cores_busy": (m1 - m0) / wall if m0 is not None and m1 is not None else None}
    if f0 is not None and f1 is not None:
        cpu["fosd_ms_per_step"] = (f1 - f0) * per
    if st0 is not None:
        cpu["fosd_ops"] = ops_window(st0, fosd_stats(url), n * a.steps)
    return {"trainers": out, "cpu": cpu}


def start_mps(tmp, env):
    env["CUDA_MPS_PIPE_DIRECTORY"] = os.path.join(tmp, "mps-pipe")
    env["CUDA_MPS_LOG_DIRECTORY"] = os.path.join(tmp, "mps-log")
    for d in ("mps-pipe", "mps-log"):
        os.makedirs(os.path.join(tmp, d))
    subprocess.run(["nvidia-cuda-mps-control", "-d"], env=env, check=True)
    os.environ.update({k: env[k] for k in ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY")})


def stop_mps(env):
    subprocess.run(["nvidia-cuda-mps-control"], input=b"quit\n", env=env, check=False)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.environ.get("FOS_BUILD", os.path.join(REPO, "build")))
    ap.add_argument("--mps", action="store_true")
    ap.add_argument("--cpu", action="store_true")
    ap.add_argument("--trainers", type=int, default=4)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--loss-every", type=int, default=10)
    ap.add_argument("--corpus", nargs="+", default=[DEFAULT_CORPUS])
    ap.add_argument("--json")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--mode", choices=("bf16", "fosd"), help=argparse.SUPPRESS)
    ap.add_argument("--url", help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.cpu and "--layers" not in sys.argv:
        a.layers, a.width, a.heads, a.ctx, a.batch, a.steps, a.warmup = 1, 64, 2, 32, 4, 6, 2
    if a.worker:
        return worker(a)
    n_bytes = len(read_corpus(a.corpus))
    if n_bytes < 4 * a.ctx:
        raise SystemExit("the corpus %s has %d bytes: give text files or folders with --corpus" % (a.corpus, n_bytes))
    build = os.path.abspath(a.build)
    env = dict(os.environ)
    env["FOS_BUILD"] = build
    env["PYTHONPATH"] = os.path.join(REPO, "client", "python") + os.pathsep + env.get("PYTHONPATH", "")
    sys.path.insert(0, os.path.join(REPO, "client", "python"))
    os.environ["FOS_BUILD"] = build
    results = {"corpus_bytes": n_bytes, "args": {k: v for k, v in vars(a).items() if k != "worker"}}
    with tempfile.TemporaryDirectory(prefix="bench_train.") as tmp:
        if a.mps:
            start_mps(tmp, env)
        fosd_proc = None
        try:
            fosd_proc, url = start_fosd(build, tmp, backend="cpu" if a.cpu else "cuda")
            for n in sorted({1, a.trainers}):
                for mode in ("bf16", "fosd"):
                    log("%d %s trainer(s)" % (n, mode))
                    r = run_trainers(a, mode, n, url if mode == "fosd" else None, env,
                                     fosd_proc.pid if mode == "fosd" else None)
                    results["%s_x%d" % (mode, n)], results["%s_x%d_cpu" % (mode, n)] = r["trainers"], r["cpu"]
        finally:
            if fosd_proc is not None:
                fosd_proc.terminate()
                fosd_proc.wait()
            if a.mps:
                stop_mps(env)
    shape = "%d blocks, width %d, %d x %d tokens, %s" % (a.layers, a.width, a.batch, a.ctx, "MPS" if a.mps else "no MPS")
    print("| trainers | torch bf16 step ms | fosd.torch step ms | ratio | model |")
    print("|---|---|---|---|---|")
    for n in sorted({1, a.trainers}):
        b = [r["median_ms"] for r in results["bf16_x%d" % n]]
        f = [r["median_ms"] for r in results["fosd_x%d" % n]]
        print("| %d | %s | %s | %.2fx | %s |" % (n, " / ".join("%.2f" % t for t in b), " / ".join("%.2f" % t for t in f),
                                                statistics.median(f) / statistics.median(b), shape))
    print()
    print("CPU per trainer step, over the timed steps (the trainers' own, fosd's; cores busy machine-wide):")
    print()
    print("| trainers | bf16 trainer CPU ms | fosd.torch trainer CPU ms | fosd CPU ms | cores busy bf16 / fosd |")
    print("|---|---|---|---|---|")
    for n in sorted({1, a.trainers}):
        cb = [r.get("cpu_ms", 0) for r in results["bf16_x%d" % n]]
        cf = [r.get("cpu_ms", 0) for r in results["fosd_x%d" % n]]
        fo = results["fosd_x%d_cpu" % n].get("fosd_ms_per_step")
        busy = [results["%s_x%d_cpu" % (m, n)]["machine_cores_busy"] for m in ("bf16", "fosd")]
        print("| %d | %s | %s | %s | %s |" % (n, " / ".join("%.2f" % t for t in cb), " / ".join("%.2f" % t for t in cf),
                                           "-" if fo is None else "%.2f" % fo,
                                           " / ".join("-" if b is None else "%.1f" % b for b in busy)))
    print()
    print("fosd's requests per trainer step, mean latency (receipt to reply) and run time:")
    print()
    print("| trainers | op | per step | latency us | run us |")
    print("|---|---|---|---|---|")
    for n in sorted({1, a.trainers}):
        for op, r in sorted(results["fosd_x%d_cpu" % n].get("fosd_ops", {}).items()):
            print("| %d | %s | %.1f | %.1f | %.1f |" % (n, op, r["per_step"], r["lat_us"], r["run_us"]))
    print()
    print("| step | bf16 loss | fosd.torch loss |")
    print("|---|---|---|")
    lb, lf = results["bf16_x1"][0]["losses"], results["fosd_x1"][0]["losses"]
    for i in list(range(0, len(lb), a.loss_every)) + [len(lb) - 1]:
        print("| %d | %.4f | %.4f |" % (i, lb[i], lf[i]))
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(results, fh, indent=1)


if __name__ == "__main__":
    sys.exit(main())
