"""fork after fosd.connect (issue 25, point 2). Each case runs a script in a fresh interpreter
(so that a child's sys.exit runs the interpreter's exit handlers, as in a real program): the
parent connects (request channel and shared-memory regions on), puts a weight, saves a context,
then forks. A child that uses its inherited client gets a connection of its own (the same Y bits),
puts and drops a weight of its own and closes the client; a child that only exits (sys.exit, with
fosd.torch layers and saved contexts of the parent alive) exits 0; a multiprocessing child
(the fork start method, as a DataLoader worker) answers through a queue. After each, the parent
still has its channel, its weights (the torch layer's too: a child never drops its parent's) and
its context, and its calls give the bits they gave before the fork."""

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO

SCRIPT = r'''
import json, os, sys
import numpy as np
import torch
import fosd
import fosd.torch as ft

url, mode = sys.argv[1], sys.argv[2]
rng = np.random.default_rng(5)
w = (rng.standard_normal((128, 128)) * 0.05).astype(np.float32)
x = rng.standard_normal((128, 128)).astype(np.float32)
dy = rng.standard_normal((128, 128)).astype(np.float32)
c = fosd.connect(url, timeout=20)
c.put_weight("fk.w", w)
y0 = c.forward("fk.w", x)
_, ctx = c.forward("fk.w", x, save_context=True)
torch.manual_seed(1)
layer = ft.Linear(128, 128, client=c)
xt = torch.randn(128, 128).to(torch.bfloat16)
loss = layer(xt).float().pow(2).mean()  # its context is saved on fosd
out = {"channel_before": c.channel}

if mode == "mp":
    import multiprocessing as mp

    def work(q):
        y = c.forward("fk.w", x)
        c.put_weight("fk.mp", w * 2)
        y2 = c.forward("fk.mp", x)
        c.drop_weight("fk.mp")
        q.put((bool(np.array_equal(y, y0)), y2.shape))

    q = mp.get_context("fork").Queue()
    p = mp.get_context("fork").Process(target=work, args=(q,))
    p.start()
    same, shape = q.get(timeout=60)
    p.join(60)
    out.update(child_exit=p.exitcode, child_same=same, child_shape=list(shape))
else:
    pid = os.fork()
    if pid == 0:
        if mode == "use":
            try:
                same = np.array_equal(c.forward("fk.w", x), y0)
                c.put_weight("fk.child", w * 3)
                c.forward("fk.child", x)
                c.drop_weight("fk.child")
                try:
                    c.drop_weight("fk.w")  # the parent's: refused
                    refused = False
                except fosd.Error as e:
                    refused = e.code == "FAILED_PRECONDITION"
                c.close()
                sys.exit(0 if same and refused else 3)
            except fosd.Error as e:
                print("child:", e, file=sys.stderr)
                sys.exit(4)
        sys.exit(0)  # "exit": the exit handlers run with the parent's client, layer, contexts alive
    _, status = os.waitpid(pid, 0)
    out["child_exit"] = os.waitstatus_to_exitcode(status)

out["parent_same"] = bool(np.array_equal(c.forward("fk.w", x), y0))
out["channel_after"] = c.channel
out["weights"] = sorted(i.name for i in c.list_weights())
out["layer_weight_kept"] = layer.name in out["weights"]
out["context_kept"] = ctx.saved
dx, dw, db = c.backward(ctx, dy)
out["backward_ok"] = dx.shape == (128, 128)
loss.backward()  # the layer's context, saved before the fork
out["layer_backward_ok"] = layer.weight.grad is not None
out["reput_count"] = c.reput_count
c.close()
print(json.dumps(out))
'''


def run(server, mode):
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "client", "python"))
    p = subprocess.run([sys.executable, "-c", SCRIPT, server.url, mode], capture_output=True, text=True,
                       timeout=120, env=env)
    assert p.returncode == 0, "exit %d\n%s\n%s" % (p.returncode, p.stdout, p.stderr)
    return json.loads(p.stdout.strip().splitlines()[-1])


def check_parent(out):
    assert out["channel_before"] and out["channel_after"], out
    assert out["parent_same"], out
    assert "fk.w" in out["weights"] and out["layer_weight_kept"], out
    assert out["context_kept"] and out["backward_ok"] and out["layer_backward_ok"], out
    assert out["reput_count"] == 0, out  # nothing had to be put again: the child took nothing away


@pytest.mark.parametrize("mode", ["use", "exit", "mp"])
def test_fork(start_fosd, mode):
    s = start_fosd()
    out = run(s, mode)
    assert out["child_exit"] == 0, out
    if mode == "mp":
        assert out["child_same"] and out["child_shape"] == [128, 128], out
    check_parent(out)
    assert "fk.child" not in out["weights"] and "fk.mp" not in out["weights"], out
