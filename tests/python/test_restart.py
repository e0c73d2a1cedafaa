"""A fosd restart in the middle of training (issue 25, point 1). A model converted with
fosd.torch.convert trains through a private fosd that is killed (SIGKILL) and started again on the
same socket between a forward and its backward (twice) and drained (SIGTERM) and started again
between two steps: the loop goes on, and every step's loss, gradients and weights are the bits of
the same loop run against a fosd that was never restarted. With the request channel (the ipc://
default) and over the socket alone. A Client's put_weight'ed numpy weight and a recompute from X
survive a restart the same way, also with 8 threads calling at once; a torch weight changed in
place since its put is not put again as that version. A fosd stopped for good gives UNAVAILABLE
within the client's timeout (a generous bound, not a benchmark)."""

import subprocess
import time

import numpy as np
import pytest
import torch

import fosd
import fosd.torch as ft
from conftest import bits


def restart(s, sig="kill"):
    """Kills s's fosd and starts it again on the same socket (its argv)."""
    s.kill() if sig == "kill" else s.stop()
    with open(s.log, "ab") as logf:
        s.proc = subprocess.Popen(s.argv, stdout=logf, stderr=subprocess.STDOUT)
    t0 = time.monotonic()
    while True:
        assert s.proc.poll() is None, s.log_text()
        try:
            with fosd.connect(s.url, timeout=1.0, shm=False) as c:
                c.health()
            return
        except fosd.Error:
            assert time.monotonic() - t0 < 20, s.log_text()
            time.sleep(0.02)


def model_and_data():
    torch.manual_seed(11)
    model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 128))
    x = torch.randn(128, 128).to(torch.bfloat16)
    target = torch.randn(128, 128)
    return model, x, target


def train(client, steps, on_event=None):
    """SGD steps of the model through client; on_event(step, where) runs at "between" (after the
    forward, before its backward) and "after" (after the optimizer step). Returns every step's
    loss, gradients and weights as bits."""
    model, x, target = model_and_data()
    model = ft.convert(model, client=client)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    record = []
    for step in range(steps):
        opt.zero_grad()
        loss = (model(x).float() - target).pow(2).mean()
        if on_event:
            on_event(step, "between")
        loss.backward()
        opt.step()
        record.append([bits(loss)] + [bits(p.grad) for p in model.parameters()] +
                      [bits(p) for p in model.parameters()])
        if on_event:
            on_event(step, "after")
    return record


@pytest.mark.parametrize("channel", [None, False], ids=["channel", "socket"])
def test_training_survives_restarts(start_fosd, channel):
    ref_srv = start_fosd()
    with fosd.connect(ref_srv.url, timeout=20, channel=channel) as c:
        reference = train(c, 5)
    s = start_fosd()
    restarts = []

    def on_event(step, where):
        if (step, where) in ((1, "between"), (2, "after"), (3, "between")):
            restart(s, "kill" if step != 2 else "term")
            restarts.append((step, where))

    with fosd.connect(s.url, timeout=20, channel=channel) as c:
        got = train(c, 5, on_event)
        assert restarts == [(1, "between"), (2, "after"), (3, "between")]
        assert c.reput_count >= 2  # the weights of the forward whose context was lost, put again
        # the channel is reopened on the new connection by a call that succeeds, at most one try a
        # second (fos.h "request channel")
        t0 = time.monotonic()
        while channel is None and not c.channel and time.monotonic() - t0 < 5:
            c.health()
            time.sleep(0.1)
        assert c.channel == (channel is None)
    assert len(got) == len(reference)
    for step, (a, b) in enumerate(zip(got, reference)):
        for i, (u, v) in enumerate(zip(a, b)):
            assert np.array_equal(u, v), "step %d, value %d differs from the uninterrupted run" % (step, i)


@pytest.mark.parametrize("channel", [None, False], ids=["channel", "socket"])
def test_client_weight_and_recompute_survive_restart(start_fosd, channel):
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((128, 128)) * 0.05).astype(np.float32)
    x = rng.standard_normal((128, 128)).astype(np.float32)
    dy = rng.standard_normal((128, 128)).astype(np.float32)
    s = start_fosd()
    with fosd.connect(s.url, timeout=20, channel=channel) as c:
        c.put_weight("rs.w", w, version=5)
        y0, ctx = c.forward("rs.w", x, save_context=True)
        g0 = c.backward(ctx, dy)
        y1, ctx = c.forward("rs.w", x, save_context=True)
        restart(s)
        # the context died with fosd: recomputed from X against version 5, put again from w
        g1 = c.backward(ctx, dy, x=x)
        assert ctx.recomputed == 1
        for a, b in zip(g0[:2], g1[:2]):
            assert np.array_equal(a, b)
        restart(s)
        assert np.array_equal(c.forward("rs.w", x), y0)
        assert np.array_equal(c.forward("rs.w", x, version=5), y0)
        assert {i.name: i.version for i in c.list_weights()}["rs.w"] == 5
        # a dropped weight is not put again
        c.drop_weight("rs.w")
        restart(s)
        with pytest.raises(fosd.Error) as ei:
            c.forward("rs.w", x)
        assert ei.value.code == "NOT_FOUND"


def test_changed_tensor_is_not_put_again_as_its_old_version(start_fosd):
    """A torch weight changed in place since its put is not the bits of that version: not re-put."""
    s = start_fosd()
    w = torch.randn(128, 128).to(torch.bfloat16)
    x = torch.randn(128, 128).to(torch.bfloat16)
    with fosd.connect(s.url, timeout=20) as c:
        c.put_weight("rs.t", w, version=1)
        c.forward("rs.t", x)
        w.mul_(2)
        restart(s)
        with pytest.raises(fosd.Error) as ei:
            c.forward("rs.t", x, version=1)
        assert ei.value.code == "NOT_FOUND"


@pytest.mark.parametrize("channel", [None, False], ids=["channel", "socket"])
def test_fosd_gone_unavailable_within_timeout(start_fosd, channel):
    timeout = 2.0
    s = start_fosd()
    c = fosd.connect(s.url, timeout=timeout, channel=channel)
    model, x, target = model_and_data()
    model = ft.convert(model, client=c)
    (model(x).float() - target).pow(2).mean().backward()
    s.kill()
    t0 = time.monotonic()
    with pytest.raises(fosd.Error) as ei:
        (model(x).float() - target).pow(2).mean().backward()
    took = time.monotonic() - t0
    assert ei.value.code == "UNAVAILABLE", ei.value
    assert took < timeout + 1.5, "UNAVAILABLE after %.1f s with a %.1f s timeout" % (took, timeout)
    t0 = time.monotonic()
    c.close()
    assert time.monotonic() - t0 < 1.0


def test_threads_after_restart(start_fosd):
    """8 threads' forwards of one lost weight after a restart: each is answered with Y's bits (the
    weight put again once; the others' puts of that version find it there)."""
    import threading
    rng = np.random.default_rng(4)
    w = (rng.standard_normal((256, 256)) * 0.05).astype(np.float32)
    x = rng.standard_normal((128, 256)).astype(np.float32)
    s = start_fosd()
    with fosd.connect(s.url, timeout=20) as c:
        c.put_weight("rs.mt", w, version=3)
        y0 = c.forward("rs.mt", x)
        restart(s)
        got, errors = [], []

        def run():
            try:
                got.append(np.array_equal(c.forward("rs.mt", x), y0))
            except fosd.Error as e:
                errors.append(e)

        threads = [threading.Thread(target=run) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors and got == [True] * 8, (errors, got)
        assert {i.name: i.version for i in c.list_weights()}["rs.mt"] == 3
