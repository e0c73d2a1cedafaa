"""Device tensors through the fosd package (client/python/fosd/_plane.py, fos.h "device tensors").

Without a GPU (CI): fosd._lib's fos_tensor carries `mem`; a cpu fosd reports no GPU, so CUDA
tensors would take the host path (device_tensors False, saying why), fos_cuda_check refuses, a
release of memory never sent is False, and a hand-made device tensor is refused by libfos
(no CUDA driver, or not device memory) before anything reaches fosd, which keeps serving.
With torch on a GPU and a cuda fosd on it: CUDA tensors go in place (device_tensors_sent grows)
and every op gives the same bits as CPU tensors and as the host path (device_tensors=False),
non-contiguous and float32 inputs included; results are CUDA tensors on the input's device.
"""

import ctypes

import numpy as np
import pytest

import fosd
from fosd import _lib
from conftest import BACKEND, bits, cuda_torch

cpu_only = pytest.mark.skipif(BACKEND != "cpu", reason="the session's fosd is not a cpu fosd")


@cpu_only
def test_cpu_fosd_reports_no_gpu(client):
    plane = client._plane
    assert client.device_tensors is None  # no CUDA tensor seen yet
    assert plane._device_on() is False
    assert client.device_tensors is False
    assert "no GPU" in client.device_off_reason
    st = _lib.Status()
    buf = ctypes.create_string_buffer(64)
    rc = client._lib.fos_cuda_check(client._h(), ctypes.addressof(buf), 64, ctypes.byref(st))
    assert rc == _lib.FAILED_PRECONDITION, st.message
    assert client.release_device_memory(ctypes.addressof(buf)) is False


def test_hand_made_device_tensor_refused(client):
    """A fos_tensor with mem = FOS_MEM_CUDA naming host memory: libfos refuses it (no driver here,
    or not device memory where there is one) and sends nothing; fosd keeps serving."""
    lib = client._lib
    h = client._h()
    w = np.zeros((128, 128), dtype=np.uint16)
    x = np.zeros((128, 128), dtype=np.uint16)
    client.put_weight("dev.refused", w)
    before = client.stats()["ops"]["forward"]["requests"]
    t = _lib.Tensor()
    t.dtype, t.ndim = _lib.DTYPE_BF16, 2
    t.shape[0], t.shape[1] = 128, 128
    t.data, t.size, t.mem = x.ctypes.data, x.nbytes, _lib.MEM_CUDA
    y = _lib.Tensor()
    st = _lib.Status()
    rc = lib.fos_forward(h, b"dev.refused", ctypes.byref(t), None, None, ctypes.byref(y), None, ctypes.byref(st))
    msg = st.message.decode()
    assert rc in (_lib.FAILED_PRECONDITION, _lib.INVALID_ARGUMENT), msg
    assert "tensor x" in msg and ("no CUDA driver" in msg or "not CUDA device memory" in msg), msg
    assert client.stats()["ops"]["forward"]["requests"] == before
    assert client.forward("dev.refused", x).shape == (128, 128)
    client.drop_weight("dev.refused")


def test_device_refusal_falls_back_to_host(monkeypatch):
    """fosd refusing a device tensor's memory (it cannot open the CUDA IPC handle) makes the Plane
    send the call again through host memory and turn device tensors off; any other failure is
    raised as it is, once. A stand-in libfos call and device tensor: no GPU needed."""
    torch = pytest.importorskip("torch")
    import types
    from fosd._arrays import Arr
    from fosd._plane import Plane
    monkeypatch.setattr(torch.cuda, "current_stream",
                        lambda dev=None: types.SimpleNamespace(synchronize=lambda: None))
    p = Plane(None, None, False)
    p.device = True
    monkeypatch.setattr(p, "_shareable", lambda addr, nbytes: True)
    a = Arr(torch.ones(4, 16, dtype=torch.bfloat16), "x")
    a.cuda = True  # as if it were on the GPU
    seen = []

    def fn_with(code, message):
        def fn(ins, outs):
            seen.append(ins[0]._obj.mem)
            st = _lib.Status()
            if ins[0]._obj.mem == _lib.MEM_CUDA:
                st.message = message.encode()
                return code, st
            assert bytes((ctypes.c_uint8 * 2).from_address(ins[0]._obj.data)) == b"\x80\x3f"  # bf16 1.0
            return _lib.OK, st
        return fn

    with pytest.raises(fosd.Error) as e:
        p.call([(a, _lib.DTYPE_BF16)], [], fn_with(_lib.FAILED_PRECONDITION, "the weight was replaced"))
    assert "replaced" in e.value.message and seen == [_lib.MEM_CUDA] and p.device is True
    seen.clear()
    assert p.call([(a, _lib.DTYPE_BF16)], [], fn_with(
        13, "tensor x: cannot open the CUDA IPC memory handle (is it from a live process on this GPU?): "
            "invalid device context")) == []
    assert seen == [_lib.MEM_CUDA, _lib.MEM_HOST]
    assert p.device is False and "CUDA IPC" in p.device_off_reason
    assert p.device_sent == 0


def test_device_tensor_of_a_non_contiguous_input(monkeypatch):
    """A non-contiguous tensor goes as its one contiguous copy: the fos_tensor names that copy's
    bytes in the logical (row-major) order with the array's shape, and the copy lives until the
    libfos call has returned. CPU tensors stand in for CUDA ones (no GPU needed)."""
    torch = pytest.importorskip("torch")
    import gc
    import types
    from fosd._arrays import Arr
    from fosd._plane import Plane
    monkeypatch.setattr(torch.cuda, "current_stream",
                        lambda dev=None: types.SimpleNamespace(synchronize=lambda: None))
    p = Plane(None, None, False)
    p.device = True
    monkeypatch.setattr(p, "_shareable", lambda addr, nbytes: True)
    g = torch.Generator().manual_seed(5)
    x = torch.randn(48, 32, generator=g).to(torch.bfloat16)
    xt = x.t().contiguous().t()  # x's values, column-major
    assert not xt.is_contiguous() and torch.equal(xt, x)
    a = Arr(xt, "x")
    a.cuda = True
    t, keep = p.device_tensor(a, _lib.DTYPE_BF16)
    assert (t.mem, t.ndim, t.shape[0], t.shape[1], t.size) == (_lib.MEM_CUDA, 2, 48, 32, 48 * 32 * 2)
    assert t.data == keep.data_ptr() and keep.is_contiguous()
    want = x.contiguous().view(torch.int16).numpy().tobytes()
    assert bytes((ctypes.c_uint8 * t.size).from_address(t.data)) == want
    del t, keep
    seen = []

    def fn(ins, outs):
        gc.collect()  # the copy is kept by the call, not by this function's frame
        tt = ins[0]._obj
        seen.append((tt.mem, tuple(tt.shape), bytes((ctypes.c_uint8 * tt.size).from_address(tt.data))))
        return _lib.OK, _lib.Status()

    assert p.call([(a, _lib.DTYPE_BF16)], [], fn) == []
    assert seen == [(_lib.MEM_CUDA, (48, 32), want)]
    assert p.device_sent == 1


class _CheckLib:
    """A stand-in libfos for Plane: fos_cuda_check says yes and counts the times it was asked."""

    def __init__(self):
        self.checks = []

    def fos_cuda_check(self, handle, addr, nbytes, st):
        self.checks.append((addr, nbytes))
        return _lib.OK


def test_device_checks_kept_per_allocation(monkeypatch):
    """fos_cuda_check is asked once per (address, bytes): a second call with the same tensor asks
    nothing; a call refused for its device memory after a kept answer forgets the answers, asks
    again and is made again in place (device tensors stay on); refused again, it takes the host
    path once and device tensors go off. CPU tensors stand in for CUDA ones (no GPU needed)."""
    torch = pytest.importorskip("torch")
    import types
    from fosd._arrays import Arr
    from fosd._plane import Plane
    monkeypatch.setattr(torch.cuda, "current_stream",
                        lambda dev=None: types.SimpleNamespace(synchronize=lambda: None))
    lib = _CheckLib()
    p = Plane(lib, None, False)
    p.device = True
    x = torch.ones(8, 16, dtype=torch.bfloat16)
    a = Arr(x, "x")
    a.cuda = True
    key = (x.data_ptr(), x.numel() * 2)
    seen = []

    def fn_refusing(times):
        left = [times]

        def fn(ins, outs):
            t = ins[0]._obj
            seen.append(t.mem)
            st = _lib.Status()
            if t.mem == _lib.MEM_CUDA and left[0] > 0:
                left[0] -= 1
                st.message = b"tensor x: cannot open the CUDA IPC memory handle: invalid argument"
                return 13, st
            return _lib.OK, st
        return fn

    assert p.call([(a, _lib.DTYPE_BF16)], [], fn_refusing(0)) == []
    assert p.call([(a, _lib.DTYPE_BF16)], [], fn_refusing(0)) == []
    assert lib.checks == [key] and p.device_checks == 1 and seen == [_lib.MEM_CUDA] * 2
    seen.clear()
    assert p.call([(a, _lib.DTYPE_BF16)], [], fn_refusing(1)) == []  # a kept answer, refused: asked anew
    assert lib.checks == [key, key] and seen == [_lib.MEM_CUDA, _lib.MEM_CUDA]
    assert p.device is True and p.device_sent == 3
    seen.clear()
    assert p.call([(a, _lib.DTYPE_BF16)], [], fn_refusing(2)) == []  # refused with a fresh answer too
    assert seen == [_lib.MEM_CUDA, _lib.MEM_CUDA, _lib.MEM_HOST] and lib.checks == [key] * 3
    assert p.device is False and "CUDA IPC" in p.device_off_reason
    p.device = True
    seen.clear()
    with pytest.raises(fosd.Error):  # a fresh answer refused: straight to the host path, which fails too
        p.forget_checks()
        p.call([(a, _lib.DTYPE_BF16)], [], lambda ins, outs: (seen.append(ins[0]._obj.mem) or 13,
                                                              _plane_status("CUDA IPC handle refused")))
    assert seen == [_lib.MEM_CUDA, _lib.MEM_HOST]


def test_device_call_in_place_and_mixed(monkeypatch):
    """A call whose inputs and results all go as device tensors as they are: each fos_tensor names
    the input tensor's own memory, or a new tensor of the result's shape and dtype (its bytes
    available), mem CUDA; the results are those tensors; the current stream of their GPU is
    synchronized once; fos_cuda_check is asked once per (address, bytes). With one input that
    cannot (float32 for a bf16 field, converted on the host), that one goes through host memory
    and the rest in place, with the kept answers (asked nothing again). CPU tensors stand in for
    CUDA ones (no GPU needed)."""
    torch = pytest.importorskip("torch")
    import types
    from fosd._arrays import Arr, Out
    from fosd._plane import Plane
    syncs = []
    monkeypatch.setattr(torch.cuda, "current_stream",
                        lambda dev=None: types.SimpleNamespace(synchronize=lambda: syncs.append(dev)))
    lib = _CheckLib()
    p = Plane(lib, None, False)
    p.device = True
    x = torch.ones(8, 16, dtype=torch.bfloat16)
    bias = torch.full((4,), 2.0)  # float32
    ax, ab = Arr(x, "x"), Arr(bias, "bias")
    ax.cuda = ab.cuda = True
    seen, host = [], []

    def fn(ins, outs):
        seen.append([(t._obj.mem, t._obj.dtype, tuple(t._obj.shape), t._obj.data, t._obj.size)
                     if t is not None else None for t in ins])
        host.extend(bytes((ctypes.c_uint8 * t._obj.size).from_address(t._obj.data))
                    for t in ins if t is not None and t._obj.mem == _lib.MEM_HOST)
        y = outs[0]._obj
        seen.append((y.mem, y.data, y.size))
        y.ndim, y.shape[0], y.shape[1] = 2, 8, 4
        return _lib.OK, _lib.Status()

    (y,) = p.call([(ax, _lib.DTYPE_BF16), (None, _lib.DTYPE_BF16)], [Out((8, 4), _lib.DTYPE_BF16, ax)], fn)
    assert seen[0] == [(_lib.MEM_CUDA, _lib.DTYPE_BF16, (8, 16), x.data_ptr(), 8 * 16 * 2), None]
    assert seen[1] == (_lib.MEM_CUDA, y.data_ptr(), 8 * 4 * 2)
    assert y.shape == (8, 4) and y.dtype == torch.bfloat16 and len(syncs) == 1
    assert lib.checks == [(x.data_ptr(), 256), (y.data_ptr(), 64)] and p.device_sent == 2
    seen.clear()
    lib.checks.clear()
    with pytest.raises(fosd.Error) as e:  # the reply's result has another shape: DATA_LOSS
        p.call([(ax, _lib.DTYPE_BF16)], [Out((8, 5), _lib.DTYPE_BF16, ax)], fn)
    assert e.value.code == "DATA_LOSS" and "expected (8, 5)" in e.value.message
    seen.clear()
    y2 = p.call([(ax, _lib.DTYPE_BF16), (ab, _lib.DTYPE_BF16)], [Out((8, 4), _lib.DTYPE_BF16, ax)], fn)[0]
    (mx, _, _, dx, _), (mb, db, shb, _, nb) = seen[0]
    assert (mx, dx) == (_lib.MEM_CUDA, x.data_ptr()) and (mb, db, shb, nb) == (_lib.MEM_HOST, _lib.DTYPE_BF16, (4, 0), 8)
    assert host == [b"\x00\x40" * 4]  # bf16 2.0, converted on the host
    assert seen[1][0] == _lib.MEM_CUDA and y2.shape == (8, 4)
    assert (x.data_ptr(), 256) not in lib.checks  # the kept answer


def _plane_status(msg):
    st = _lib.Status()
    st.message = msg.encode()
    return st


def test_client_of_a_gpu_fosd_polls_for_replies(server, monkeypatch):
    """A client of a fosd that reports a GPU (a stand-in: fos_server_gpu_uuid says yes) with device
    tensors on polls for its replies for DEVICE_SPIN_US and asks its channel for as much; explicit
    values, $FOS_SPIN_US, device_tensors=False and a cpu fosd keep libfos's defaults."""
    from fosd import client as fclient
    real = _lib.load()
    calls = []

    class Lib:
        def __init__(self, gpu):
            self.gpu = gpu

        def __getattr__(self, name):
            return getattr(real, name)

        def fos_server_gpu_uuid(self, h, uuid, st):
            return _lib.OK if self.gpu else real.fos_server_gpu_uuid(h, uuid, st)

        def fos_set_spin(self, h, us):
            calls.append(("spin", us))
            real.fos_set_spin(h, us)

        def fos_channel_open(self, h, nbytes, us, st):
            calls.append(("channel", us))
            return real.fos_channel_open(h, nbytes, us, st)

    def connect(gpu, **kw):
        calls.clear()
        monkeypatch.setattr(_lib, "load", lambda: Lib(gpu))
        with fosd.connect(server.url, **kw) as c:
            assert c.channel is True, c.channel_off_reason
            assert c.linear(np.ones((16, 16), dtype=np.float32), np.ones((16, 16), dtype=np.float32))["y"].shape == (16, 16)
        return list(calls)

    monkeypatch.delenv("FOS_SPIN_US", raising=False)
    d = fclient.DEVICE_SPIN_US
    assert d >= 1000
    assert connect(True) == [("spin", d), ("channel", d)]
    assert connect(True, spin_us=0, channel_spin_us=50) == [("spin", 0), ("channel", 50)]
    assert connect(True, device_tensors=False) == [("channel", 0)]
    assert connect(False) == [("channel", 0)]
    monkeypatch.setenv("FOS_SPIN_US", "10")
    assert connect(True) == [("channel", d)]
    monkeypatch.delenv("FOS_SPIN_US")
    monkeypatch.setattr(_lib, "load", lambda: Lib(True))
    with pytest.raises(fosd.Error) as e:
        fosd.connect(server.url, spin_us=-1)
    assert e.value.code == "INVALID_ARGUMENT" and "spin_us" in e.value.message


def test_quantize_amax_in_per_tensor_and_row_scaled(client):
    """The host-memory counterpart of the GPU test's amax checks: quantize given the amax quantize
    returned (one value; one a row with row_scaled) gives the same codes, scales and amax; an amax
    of the other kind is refused INVALID_ARGUMENT naming amax, and the client keeps working."""
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(22)
    x = torch.randn(64, 128, generator=g).to(torch.bfloat16)
    quantized = {rs: client.quantize(x, row_scaled=rs) for rs in (False, True)}
    assert quantized[False][2].shape == (1,) and quantized[True][2].shape == (64,)
    for rs, q in quantized.items():
        again = client.quantize(x, amax=q[2], row_scaled=rs)
        for a, b, k in zip(again, q, ("codes", "scales", "amax")):
            assert np.array_equal(bits(a), bits(b)), "%s%s" % (k, " (row-scaled)" if rs else "")
        with pytest.raises(fosd.Error) as e:
            client.quantize(x, amax=quantized[not rs][2], row_scaled=rs)
        assert e.value.code == "INVALID_ARGUMENT" and "amax" in e.value.message, e.value.message
    assert client.quantize(x)[0].shape == (64, 64)


def test_channel_by_default(server):
    """An ipc:// client with shared memory opens a request channel at connect; channel=False, and a
    client without shared memory, do not; a call whose results must come inline (shm=False here, a
    reply past the channel's area) closes the channel and still gives the right result."""
    with fosd.connect(server.url) as c:
        assert c.channel is True and c.channel_off_reason is None, c.channel_off_reason
        before = c.stats()["channel_requests"]
        c.health()
        assert c.stats()["channel_requests"] >= before + 2
    with pytest.raises(fosd.Error) as e:
        fosd.connect(server.url, channel_spin_us=2000000)
    assert e.value.code == "INVALID_ARGUMENT" and "spin" in e.value.message, e.value.message
    with fosd.connect(server.url, channel_spin_us=200) as c:
        assert c.channel is True
    with fosd.connect(server.url, channel=False) as c:
        assert c.channel is False and "channel=False" in c.channel_off_reason
    with fosd.connect(server.url, shm=False) as c:
        assert c.channel is False and "no shared memory" in c.channel_off_reason
    with fosd.connect(server.url, shm=False, channel=True) as c:
        assert c.channel is True
        small = np.ones((16, 16), dtype=np.float32)
        assert c.linear(small, small)["y"].shape == (16, 16)
        assert c.channel is True  # 512 bytes of Y fit
        g = np.random.default_rng(3)
        x = g.standard_normal((1024, 32)).astype(np.float32)
        w = g.standard_normal((1024, 32)).astype(np.float32)
        y = c.linear(x, w)["y"]  # 2 MiB of Y inline: past the channel's reply area
        assert c.channel is False and "reply area" in c.channel_off_reason
        with fosd.connect(server.url) as r:  # through a region, with a channel
            assert r.channel is True
            assert np.array_equal(r.linear(x, w)["y"].view(np.uint32), y.view(np.uint32))
            assert r.channel is True


# ---- on a GPU ---------------------------------------------------------------------------------


def _same(a, b, what):
    assert a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape), what
    assert np.array_equal(bits(a), bits(b)), what


@pytest.mark.parametrize("shm", [True, False], ids=["shm", "inline"])
def test_cuda_tensors_in_place_same_bits(cuda_server, shm):
    torch = cuda_torch()
    g = torch.Generator().manual_seed(21)
    M, N, K = 256, 256, 512
    x = torch.randn(M, K, generator=g).to(torch.bfloat16)
    w = (torch.randn(N, K, generator=g) * 0.05).to(torch.bfloat16)
    b = torch.randn(N, generator=g).to(torch.bfloat16)
    dy = (torch.randn(M, N, generator=g) * 0.1).to(torch.bfloat16)
    dev = torch.device("cuda")
    with fosd.connect(cuda_server.url, shm=shm, timeout=120) as c, \
            fosd.connect(cuda_server.url, shm=shm, timeout=120, device_tensors=False) as h:
        cpu = c.linear(x, w, dy=dy, bias=b)
        sent0 = c.device_tensors_sent
        gpu = c.linear(x.to(dev), w.to(dev), dy=dy.to(dev), bias=b.to(dev))
        assert c.device_tensors is True, c.device_off_reason
        assert c.device_tensors_sent >= sent0 + 8  # 4 inputs, 4 results in place
        host = h.linear(x.to(dev), w.to(dev), dy=dy.to(dev), bias=b.to(dev))
        assert h.device_tensors is False and h.device_tensors_sent == 0
        for k in cpu:
            assert gpu[k].device.type == "cuda", k
            _same(gpu[k], cpu[k], "linear " + k)
            _same(host[k], cpu[k], "linear (host path) " + k)
        # the same device inputs again: their fos_cuda_check answers are kept (only results in
        # blocks not seen before are asked about), and the bits are the same
        ins = dict(x=x.to(dev), w=w.to(dev), dy=dy.to(dev), bias=b.to(dev))
        c.linear(**ins)
        checks = c._plane.device_checks
        again = c.linear(**ins)
        assert c._plane.device_checks - checks <= 4, c._plane.device_checks - checks
        for k in cpu:
            _same(again[k], cpu[k], "linear again " + k)
        # a non-contiguous CUDA input (one contiguous copy on the GPU), a float32 one (host path)
        xt = x.t().contiguous().to(dev).t()
        assert not xt.is_contiguous()
        _same(c.linear(xt, w.to(dev), bias=b.to(dev))["y"], cpu["y"], "non-contiguous x")
        _same(c.linear(xt, w.to(dev))["y"], c.linear(x, w)["y"], "non-contiguous x, no bias")
        _same(c.linear(x.float().to(dev), w.to(dev), bias=b.to(dev))["y"], c.linear(x, w, bias=b)["y"], "float32 x")
        wname = "dev.w.%s" % ("shm" if shm else "inline")  # the cuda fosd is shared by both runs
        c.put_weight(wname, w.to(dev))
        try:
            y1, c1 = c.forward(wname, x, bias=b, save_context=True)
            y2, c2 = c.forward(wname, x.to(dev), bias=b.to(dev), save_context=True)
            _same(y2, y1, "forward y")
            for r1, r2, k in zip(c.backward(c1, dy), c.backward(c2, dy.to(dev)), ("dx", "dw", "db")):
                assert r2.device.type == "cuda"
                _same(r2, r1, "backward " + k)
        finally:
            c.drop_weight(wname)
        quantized = {}
        for rs in (False, True):
            q1 = quantized[rs] = c.quantize(x, row_scaled=rs)
            q2 = c.quantize(x.to(dev), row_scaled=rs)
            for a, bb, k in zip(q2, q1, ("codes", "scales", "amax")):
                assert a.device.type == "cuda"
                _same(a, bb, "quantize %s%s" % (k, " row-scaled" if rs else ""))
            for dt in ("bf16", "float32"):
                _same(c.dequantize(*q2, row_scaled=rs, dtype=dt), c.dequantize(*q1, row_scaled=rs, dtype=dt),
                      "dequantize " + dt)
        # an amax given: one value, and one a row with row_scaled (what quantize gave for each)
        for rs, q1 in quantized.items():
            q3 = c.quantize(x.to(dev), amax=q1[2].to(dev), row_scaled=rs)
            for a, bb, k in zip(q3, c.quantize(x, amax=q1[2], row_scaled=rs), ("codes", "scales", "amax")):
                _same(a, bb, "quantize with amax in%s: %s" % (" (row-scaled)" if rs else "", k))
            _same(q3[0], q1[0], "quantize with its own amax in%s" % (" (row-scaled)" if rs else ""))
        st = c.stats()
        assert st["device_tensors"] >= c.device_tensors_sent
        assert st["device_mappings"] >= 1
        # y's allocation was sent (written in place): released once, then unknown
        assert c.release_device_memory(gpu["y"]) is True
        assert c.release_device_memory(gpu["y"]) is False


def test_cuda_calls_stream_ordered(cuda_server):
    """A call whose CUDA tensors are on one GPU is ordered on the calling thread's current stream
    (fos_set_cuda_order with FOS_CUDA_ORDER_OUTPUTS): it may return before fosd's work ends, and
    what runs on that stream next sees its results. Results read in stream order are the CPU
    path's bits, also when each input is freed right after its call and its memory taken by the
    next tensors, on the default stream and on a side stream, and for a backward run by autograd
    on its own thread."""
    torch = cuda_torch()
    dev = torch.device("cuda")
    g = torch.Generator().manual_seed(23)
    M, N, K = 512, 256, 512
    x = torch.randn(M, K, generator=g).to(torch.bfloat16)
    w = (torch.randn(N, K, generator=g) * 0.05).to(torch.bfloat16)
    dy = (torch.randn(M, N, generator=g) * 0.1).to(torch.bfloat16)
    name = "dev.ordered"
    with fosd.connect(cuda_server.url, timeout=120) as c:
        c.put_weight(name, w.to(dev))
        try:
            ref = c.forward(name, x)
            ys = []
            for i in range(8):
                xd = x.to(dev)
                ys.append(c.forward(name, xd))
                del xd  # its block goes back to the caching allocator at once
                junk = torch.full((M, K), float(i + 1), dtype=torch.bfloat16, device=dev)
                del junk
            plane = c._plane
            assert plane.stream_order, plane.stream_order_off_reason
            assert plane._tls.order is not None
            for i, y in enumerate(ys):
                _same(y, ref, "forward %d, input freed after the call" % i)
            side = torch.cuda.Stream()
            with torch.cuda.stream(side):
                ys = c.forward(name, x.to(dev))
            torch.cuda.current_stream().wait_stream(side)
            _same(ys, ref, "forward on a side stream")
            y1, c1 = c.forward(name, x, save_context=True)
            r1 = c.backward(c1, dy)
            y2, c2 = c.forward(name, x.to(dev), save_context=True)
            r2 = c.backward(c2, dy.to(dev))
            _same(y2, y1, "forward with a context")
            for a, b, k in zip(r2, r1, ("dx", "dw", "db")):
                if b is not None:
                    _same(a, b, "backward " + k)
        finally:
            c.drop_weight(name)
        import fosd.torch as ft
        layer = ft.Linear(K, N, dtype=torch.bfloat16, bias=False, client=c, device=dev)
        ref_layer = ft.Linear(K, N, dtype=torch.bfloat16, bias=False, client=c)
        with torch.no_grad():
            ref_layer.weight.copy_(layer.weight.cpu())
        xg = x.to(dev).requires_grad_()
        layer(xg).backward(dy.to(dev))  # the backward on autograd's device thread
        xc = x.clone().requires_grad_()
        ref_layer(xc).backward(dy)
        _same(xg.grad, xc.grad, "fosd.torch dX")
        _same(layer.weight.grad, ref_layer.weight.grad, "fosd.torch dW")
