"""Asynchronous calls and the device-tensor fast path of the fosd package (fosd._devcall,
fosd._plane's stream order with FOS_CUDA_ORDER_ASYNC, fosd.AsyncError, Client.synchronize).

Without a GPU: a stand-in libfos (a Python object answering the package's ctypes calls) and CPU
tensors standing in for CUDA ones (fosd._devcall.CUDA_ATTR) show the call sequence: the stream
order set once per stream with FOS_CUDA_ORDER_ASYNC when libfos has fos_sync (without it, or when
the driver refuses it, with INPUTS | OUTPUTS only, saying why), on the calling thread's current
stream; results allocated by the package and handed to libfos as device outputs; an earlier
asynchronous call's failure, reported by the next call or by synchronize, raised as
fosd.AsyncError naming the op and request id, never retried (no re-put, no recompute, no host
path); a fosd.torch step makes one libfos call per layer forward (the put inside it) and one per
backward.
With torch on a GPU and a cuda fosd: a fosd.torch step with asynchronous calls gives the bits of
one without (async_calls=False), and a failed asynchronous forward surfaces at synchronize or the
next call with its name.
"""


import numpy as np
import pytest

import fosd
from fosd import _lib
from conftest import bits, standin_client

torch = pytest.importorskip("torch")

ASYNC_FAIL = "asynchronous Forward of weight 'w' (request 17) failed: weight 'w' version 9 is not cached"


def _deref(r):
    return r._obj if hasattr(r, "_obj") else r.contents


class FakeLib:
    """Answers the package's libfos calls at once, recording them; fail: (call name, code,
    message) for the next such call. As libfos does, a call made while the thread's order has
    FOS_CUDA_ORDER_ASYNC returns before any reply: it leaves the outputs' fos_tensors as the
    caller filled them (no shapes written) and fills a saved context from the call alone."""

    def __init__(self, with_sync=True, async_refused=False):
        self.calls = []
        self.fail = None
        self.async_refused = async_refused
        self.async_on = False
        if with_sync:
            self.fos_sync = self._sync

    def _status(self, st, name):
        if self.fail and self.fail[0] == name:
            _, code, msg = self.fail
            self.fail = None
            _deref(st).message = msg.encode()
            return code
        return 0

    def fos_cuda_check(self, h, addr, nbytes, st):
        return 0

    def fos_set_cuda_order(self, h, stream, flags, st):
        self.calls.append(("order", stream, flags))
        if flags & _lib.CUDA_ORDER_ASYNC and self.async_refused:
            _deref(st).message = b"the driver has no cuStreamWaitValue32"
            return _lib.FAILED_PRECONDITION
        self.async_on = bool(flags & _lib.CUDA_ORDER_ASYNC)
        return 0

    def _sync(self, h, st):
        self.calls.append(("sync",))
        return self._status(st, "sync")

    def fos_put_weight(self, h, name, version, w, cfg, info, st):
        self.calls.append(("put", name, version))
        return self._status(st, "put")

    def fos_forward(self, h, name, x, bias, fo, y, ctx, st, what="forward"):
        xt, yt = _deref(x), _deref(y)
        self.calls.append((what, name, yt.data, yt.mem))
        rc = self._status(st, what)
        if rc:
            return rc
        m, k = xt.shape[0], xt.shape[1]
        n = yt.size // (2 * m)
        if not self.async_on:  # the reply's description of Y
            yt.ndim, yt.shape[0], yt.shape[1] = 2, m, n
        if ctx is not None:
            c = _deref(ctx)
            c.id, c.m, c.n, c.k, c.has_bias = 5, m, n, k, 1 if bias else 0
        return 0

    def fos_forward_put(self, h, name, version, w, cfg, x, bias, fo, y, ctx, st):
        return self.fos_forward(h, name, x, bias, fo, y, ctx, st, "put-in-forward")

    def fos_backward(self, h, ctx, dy, bo, dx, dw, db, st):
        self.calls.append(("backward", _deref(bo).recompute_x is not None if bo else False))
        rc = self._status(st, "backward")
        if rc:
            return rc
        c = _deref(ctx)
        for t, shape in ((dx, (c.m, c.k)), (dw, (c.n, c.k)), (db, (c.n,))):
            if t is not None and not self.async_on:  # the reply's description of each result
                t = _deref(t)
                t.ndim = len(shape)
                for i, d in enumerate(shape):
                    t.shape[i] = d
        c.id = 0
        return 0

    def fos_release(self, h, ctx, st):
        _deref(ctx).id = 0
        return 0

    def fos_drop_weight(self, h, name, st):
        return 0


@pytest.fixture
def fake(monkeypatch):
    """(client, lib, stream stand-in) over a FakeLib, CPU tensors standing in for CUDA ones."""
    def make(**kw):
        lib = FakeLib(**kw)
        c, conn, stream = standin_client(monkeypatch, lib, 77)
        made.append(conn)
        return c, lib, stream
    made = []
    yield make
    for conn in made:
        conn.handle = None  # nothing reaches the fake after the test


def _bf16(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(torch.bfloat16)


def test_async_order_set_once_per_stream(fake):
    c, lib, stream = fake()
    x, b = _bf16(8, 32), _bf16(16)
    c._weight_n["w"] = 16
    y = c.forward("w", x, bias=b)
    c.forward("w", x, bias=b)
    orders = [k for k in lib.calls if k[0] == "order"]
    want = _lib.CUDA_ORDER_INPUTS | _lib.CUDA_ORDER_OUTPUTS | _lib.CUDA_ORDER_ASYNC
    assert orders == [("order", 77, want)]  # once for the stream, its flags asynchronous
    assert c.async_calls and c.async_off_reason is None
    # Y: allocated by the package, handed to libfos as a device output, returned
    assert tuple(y.shape) == (8, 16) and y.dtype == torch.bfloat16
    # another current stream: the order is set again, on it
    stream.cuda_stream = 78
    c.forward("w", x)
    assert [k for k in lib.calls if k[0] == "order"][-1] == ("order", 78, want)


def test_result_is_the_device_output_sent(fake):
    c, lib, _ = fake()
    c._weight_n["w"] = 16
    y = c.forward("w", _bf16(8, 32))
    name, addr, mem = lib.calls[-1][1:]
    assert (name, mem) == (b"w", _lib.MEM_CUDA)
    assert addr == y.data_ptr()  # fosd wrote into the tensor the call returned


def test_no_async_without_fos_sync_or_when_refused(fake):
    c, lib, _ = fake(with_sync=False)
    c._weight_n["w"] = 16
    c.forward("w", _bf16(8, 32))
    assert [k[2] for k in lib.calls if k[0] == "order"] == [_lib.CUDA_ORDER_INPUTS | _lib.CUDA_ORDER_OUTPUTS]
    assert not c.async_calls and "fos_sync" in c.async_off_reason
    c.synchronize()  # nothing to wait for
    c2, lib2, _ = fake(async_refused=True)
    c2._weight_n["w"] = 16
    c2.forward("w", _bf16(8, 32))
    flags = [k[2] for k in lib2.calls if k[0] == "order"]
    assert flags == [7, 3], flags
    assert not c2.async_calls and "cuStreamWaitValue32" in c2.async_off_reason


def test_async_failure_raised_with_its_name_never_retried(fake):
    c, lib, _ = fake()
    c._weight_n["w"] = 16
    x = _bf16(8, 32)
    lib.fail = ("forward", _lib.NOT_FOUND, ASYNC_FAIL)
    with pytest.raises(fosd.AsyncError) as ei:
        c.forward("w", x)
    e = ei.value
    assert (e.op, e.request_id, e.code) == ("Forward", 17, "NOT_FOUND")
    assert "request 17" in str(e)
    assert [k[0] for k in lib.calls if k[0] != "order"] == ["forward"]  # not sent again by any path
    assert c.device_tensors is True  # not taken for a refusal of this call's device memory
    # a refusal-like message of an earlier call: still not this call's, not retried on the host path
    lib.fail = ("forward", _lib.FAILED_PRECONDITION,
                "asynchronous Backward of context 9 (request 18) failed: cannot open the CUDA IPC handle")
    n0 = len(lib.calls)
    with pytest.raises(fosd.AsyncError) as ei:
        c.forward("w", x)
    assert ei.value.op == "Backward" and ei.value.request_id == 18
    assert len([k for k in lib.calls[n0:] if k[0] == "forward"]) == 1
    # synchronize raises what fos_sync reports
    lib.fail = ("sync", _lib.NOT_FOUND, ASYNC_FAIL)
    with pytest.raises(fosd.AsyncError):
        c.synchronize()
    c.synchronize()  # reported once


def test_layer_step_one_call_per_layer_and_async_not_found_not_reput(fake):
    import fosd.torch as ft
    c, lib, _ = fake()
    layer = ft.Linear(32, 16, dtype=torch.bfloat16, client=c)
    x, dy = _bf16(8, 32, seed=1), _bf16(8, 16, seed=2)
    opt = torch.optim.SGD(layer.parameters(), lr=0.1)
    for step in range(3):
        n0 = len(lib.calls)
        layer(x).backward(dy)
        opt.step()
        opt.zero_grad()
        calls = [k[0] for k in lib.calls[n0:] if k[0] != "order"]
        assert calls == ["put-in-forward", "backward"], calls  # one call per layer forward
    assert layer.puts == 3 and layer.weight_version == 3
    # an earlier asynchronous call's NOT_FOUND is raised, not answered by a re-put and a retry
    lib.fail = ("put-in-forward", _lib.NOT_FOUND, ASYNC_FAIL)  # the weight changed: fused
    n0 = len(lib.calls)
    with pytest.raises(fosd.AsyncError):
        layer(x)
    calls = [k[0] for k in lib.calls[n0:] if k[0] != "order"]
    assert "put" not in calls and len(calls) == 1, calls
    layer._slot._fin.detach()


def _steps(url, async_calls, steps=3):
    import fosd.torch as ft
    dev = torch.device("cuda")
    torch.manual_seed(31)
    with fosd.connect(url, timeout=120, async_calls=async_calls) as c:
        model = torch.nn.Sequential(ft.Linear(256, 512, dtype=torch.bfloat16, client=c, device=dev),
                                    torch.nn.ReLU(),
                                    ft.Linear(512, 256, dtype=torch.bfloat16, client=c, device=dev))
        g = torch.Generator().manual_seed(32)
        x = torch.randn(384, 256, generator=g).to(torch.bfloat16).to(dev)
        yt = torch.randn(384, 256, generator=g).to(torch.bfloat16).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        losses = []
        for _ in range(steps):
            opt.zero_grad()
            loss = (model(x).float() - yt.float()).pow(2).mean()
            loss.backward()
            opt.step()
            losses.append(bits(loss.detach().to(torch.bfloat16)).tobytes())
        fosd.synchronize(c)
        torch.cuda.synchronize()
        made = c.async_calls_made
        out = losses, [bits(p) for p in model.parameters()], made, c.async_calls, c.async_off_reason
        del model
        return out


def test_cuda_async_steps_same_bits(cuda_server):
    la, wa, made, on, why = _steps(cuda_server.url, True)
    ls, ws, made_sync, _, _ = _steps(cuda_server.url, False)
    assert made_sync == 0
    if on:
        assert made > 0, "no call went asynchronously"
    else:
        pytest.skip("no asynchronous calls here: %s" % why)
    assert la == ls
    for a, b in zip(wa, ws):
        np.testing.assert_array_equal(a, b)


def test_cuda_async_failure_surfaces_with_its_name(cuda_server):
    dev = torch.device("cuda")
    with fosd.connect(cuda_server.url, timeout=120) as c:
        w = torch.randn(256, 256).to(torch.bfloat16).to(dev)
        c.put_weight("async.fail", w, version=1)
        x = torch.randn(64, 256).to(torch.bfloat16).to(dev)
        c.forward("async.fail", x)
        if not c.async_calls:
            pytest.skip("no asynchronous calls here: %s" % c.async_off_reason)
        made = c.async_calls_made
        with pytest.raises(fosd.Error) as ei:
            c.forward("async.fail", x, version=2)  # not cached: fails on fosd's side
            c.synchronize()
        e = ei.value
        if c.async_calls_made > made:  # it went asynchronously: reported later, with its name
            assert isinstance(e, fosd.AsyncError) and e.op == "Forward" and e.request_id > 0, e
        c.synchronize()  # reported once
        torch.cuda.synchronize()
        c.drop_weight("async.fail")
