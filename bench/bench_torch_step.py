#!/usr/bin/env python3
"""bench_torch_step.py: torch.nn.Linear's own bf16 training step at one shape (forward, backward with
a given dY, SGD update), the baseline beside bench_linear_step's in-process step at the same shape.
Wall clock per step, each step synchronized, median of STEPS after 3 warm-ups; needs a GPU.
  python3 bench/bench_torch_step.py M N K STEPS"""
import statistics
import sys
import time

import torch


def main():
    m, n, k, steps = (int(v) for v in sys.argv[1:5])
    torch.manual_seed(0)
    lin = torch.nn.Linear(k, n, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    opt = torch.optim.SGD(lin.parameters(), lr=1e-4)
    ts = []
    for _ in range(steps + 3):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        lin(x).backward(dy)
        opt.step()
        opt.zero_grad(set_to_none=True)
        x.grad = None
        torch.cuda.synchronize()
        ts.append((time.perf_counter() - t0) * 1e3)
    print("torch bf16 step %dx%dx%d: %.4f ms" % (m, n, k, statistics.median(ts[3:])))


if __name__ == "__main__":
    main()
