"""The backward of fosd._devcall's device-tensor fast path: its per-shape argument structures
(_BackPlan) and its libfos calls without ctypes' argtypes check (_unchecked).

Without a GPU: a stand-in libfos (a Python object) answers fos_backward as libfos does (a reply
describes each result over its fos_tensor; asynchronous: left as the caller filled it), records
the fos_tensors it was handed and writes a known byte pattern into each result's memory; CPU
tensors stand in for CUDA ones (fosd._devcall.CUDA_ATTR). What is pinned: every call hands libfos
fos_tensors of its own shapes and byte counts whatever the shapes before it; a reply that left a
result not as expected (another shape, no such result, a failure) changes nothing for the calls
after it; the results are the tensors written, each with storage of its own; the unchecked libfos
call passes its arguments as the declared one does (libfos.so's own answers compared, and a
cpu fosd's bits of a forward with its put, a 64-bit version).
"""

import ctypes
import types

import pytest

import fosd
from fosd import _devcall, _lib, client as fclient
from conftest import standin_client

torch = pytest.importorskip("torch")


def _deref(r):
    return r._obj if hasattr(r, "_obj") else r.contents


def _pattern(call, j):
    """The byte the stand-in writes into result j of its call-th call."""
    return (16 * call + j + 1) % 251


def _fields(t):
    return (t.dtype, t.ndim, t.shape[0], t.shape[1], t.size, t.mem)


class BackLib:
    """fos_backward's stand-in. reply: what the next reply does to the results' fos_tensors
    (None: describes each as libfos does; ("shape", j, shape): result j described with shape;
    ("none", j): result j absent (size 0, ndim 0); ("fail", code, message, j): result j described
    with a wrong shape, then the call fails). async_on: no reply (the fos_tensors left)."""

    def __init__(self):
        self.seen = []  # per call: (dy fields, [result fields or None])
        self.reply = None
        self.async_on = False
        self.calls = 0

    def fos_cuda_check(self, h, addr, nbytes, st):
        return 0

    def fos_set_cuda_order(self, h, stream, flags, st):
        return 0

    def fos_sync(self, h, st):
        return 0

    def fos_backward(self, h, ctx, dy, bo, dx, dw, db, st):
        self.calls += 1
        outs = [_deref(t) if t is not None else None for t in (dx, dw, db)]
        self.seen.append((_fields(_deref(dy)), [_fields(t) if t is not None else None for t in outs]))
        c = _deref(ctx)
        reply, self.reply = self.reply, None
        for j, t in enumerate(outs):
            if t is None:
                continue
            ctypes.memset(t.data, _pattern(self.calls, j), t.size)  # this call's pattern, result j
            if self.async_on:
                continue
            shape = ((c.m, c.k), (c.n, c.k), (c.n,))[j]
            if reply and reply[0] == "shape" and reply[1] == j:
                shape = reply[2]
            if reply and reply[0] == "fail" and reply[3] == j:
                shape = (c.m + 1, c.k)
            if reply and reply[0] == "none" and reply[1] == j:
                t.ndim, t.size, t.shape[0], t.shape[1] = 0, 0, 0, 0
                continue
            t.ndim = len(shape)
            t.shape[0] = shape[0]
            t.shape[1] = shape[1] if len(shape) > 1 else 0
        if reply and reply[0] == "fail":
            _deref(st).message = reply[2].encode()
            return reply[1]
        c.id = 0
        return 0

    def fos_release(self, h, ctx, st):
        _deref(ctx).id = 0
        return 0


@pytest.fixture
def back(monkeypatch):
    """(client, BackLib) with device tensors on, CPU tensors standing in for CUDA ones."""
    lib = BackLib()
    c, conn, _ = standin_client(monkeypatch, lib, 5)
    yield c, lib
    conn.handle = None


def _ctx(c, m, n, k, bias):
    s = _lib.ContextStruct()
    s.id, s.m, s.n, s.k, s.has_bias = 7, m, n, k, int(bias)
    return fclient.Context(c, s)


def _dy(m, n):
    return torch.zeros(m, n, dtype=torch.bfloat16)


def _check(lib, results, m, n, k, want, call):
    """The call's fos_tensors (dy and the results asked for, each its own shape and bytes, mem
    CUDA, bf16) and results (the tensors written, the pattern of their call and index)."""
    dy_f, outs_f = lib.seen[-1]
    assert dy_f == (_lib.DTYPE_BF16, 2, m, n, m * n * 2, _lib.MEM_CUDA)
    shapes = ((m, k), (n, k), (n,))
    for j in range(3):
        r = results[j]
        if not want[j]:
            assert outs_f[j] is None and r is None
            continue
        sh = shapes[j]
        nb = sh[0] * (sh[1] if len(sh) > 1 else 1) * 2
        assert outs_f[j] == (_lib.DTYPE_BF16, len(sh), sh[0], sh[1] if len(sh) > 1 else 0, nb, _lib.MEM_CUDA)
        assert tuple(r.shape) == sh and r.dtype == torch.bfloat16 and r.is_contiguous()
        assert r._base is None and r.untyped_storage().nbytes() == nb  # storage of its own
        assert bytes(r.view(torch.uint8).flatten().tolist()) == bytes([_pattern(call, j)]) * nb


def test_each_shape_its_own_structures(back):
    c, lib = back
    calls = [(8, 16, 32, True, True, True), (4, 16, 32, True, True, True), (8, 24, 32, False, True, True),
             (8, 16, 32, True, False, True), (8, 16, 32, True, True, False), (8, 16, 32, True, True, True),
             (3, 5, 7, True, True, True)]
    for i, (m, n, k, bias, need_dx, need_dw) in enumerate(calls, 1):
        r = c.backward(_ctx(c, m, n, k, bias), _dy(m, n), need_dx=need_dx, need_dw=need_dw)
        _check(lib, r, m, n, k, (need_dx, need_dw, bias), i)
        ptrs = [t.untyped_storage().data_ptr() for t in r if t is not None]
        assert len(set(ptrs)) == len(ptrs)
    assert lib.calls == len(calls)
    assert c.device_tensors is True


def test_unexpected_reply_changes_nothing_after_it(back):
    c, lib = back
    m, n, k = 8, 16, 32
    c.backward(_ctx(c, m, n, k, True), _dy(m, n))
    # a result of another shape: DATA_LOSS naming it, as the general layout says
    lib.reply = ("shape", 1, (n, k + 1))
    with pytest.raises(fosd.Error) as e:
        c.backward(_ctx(c, m, n, k, True), _dy(m, n))
    assert e.value.code == "DATA_LOSS"
    assert e.value.message == "the reply's result 1 has shape (16, 33), expected (16, 32)"
    r = c.backward(_ctx(c, m, n, k, True), _dy(m, n))
    _check(lib, r, m, n, k, (True, True, True), 3)
    # no such result: None, then every result again
    lib.reply = ("none", 2)
    r = c.backward(_ctx(c, m, n, k, True), _dy(m, n))
    assert r[2] is None and r[0] is not None and r[1] is not None
    r = c.backward(_ctx(c, m, n, k, True), _dy(m, n))
    _check(lib, r, m, n, k, (True, True, True), 5)
    # a failure after the reply wrote over a result: raised as libfos said, the next call whole
    lib.reply = ("fail", _lib.INVALID_ARGUMENT, "dy has 9 rows, the context's forward had 8", 0)
    with pytest.raises(fosd.Error) as e:
        c.backward(_ctx(c, m, n, k, True), _dy(m, n))
    assert (e.value.code, e.value.message) == ("INVALID_ARGUMENT", "dy has 9 rows, the context's forward had 8")
    r = c.backward(_ctx(c, m, n, k, True), _dy(m, n))
    _check(lib, r, m, n, k, (True, True, True), 7)
    assert lib.calls == 7


def test_asynchronous_calls_leave_the_structures(back):
    c, lib = back
    lib.async_on = True  # no reply: the fos_tensors stay as the package filled them
    for i, (m, n, k) in enumerate([(8, 16, 32), (8, 16, 32), (2, 16, 32), (8, 16, 32)], 1):
        r = c.backward(_ctx(c, m, n, k, True), _dy(m, n))
        _check(lib, r, m, n, k, (True, True, True), i)


def test_backward_plans_bounded(back):
    c, lib = back
    for m in range(1, _devcall.PLANS_MAX + 3):
        r = c.backward(_ctx(c, m, 4, 8, False), _dy(m, 4))
        _check(lib, r, m, 4, 8, (True, True, False), m)
    plans = c._conn().plane._tls.fast.plans
    assert 0 < len(plans) <= _devcall.PLANS_MAX


def test_unchecked_call_passes_what_the_declared_one_does(client):
    """libfos.so's fos_backward through _unchecked answers as through its declaration: the
    handle (of a cpu fosd's client), context, dY and status pointers reach it (its checks of
    them, in order, and its messages)."""
    conn = client._conn()
    lib, h = conn.lib, conn.handle
    f = lib.fos_backward
    u = _devcall._unchecked(f)
    assert u is not f and u.argtypes is None and u.restype is f.restype
    assert _devcall._unchecked(f) is u  # made once
    stand_in = types.SimpleNamespace(fos_backward=lambda *a: 0).fos_backward
    assert _devcall._unchecked(stand_in) is stand_in
    ctx, bo = _lib.ContextStruct(), _lib.BackwardOpts()
    for dy_ndim, ctx_arg, want in ((2, False, "no context"), (1, True, "dy must be a 2-D tensor (M, N)"),
                                   (2, True, "the context was released or consumed")):
        answers = []
        for fn in (f, u):
            st = _lib.Status()
            dy = _lib.Tensor()
            dy.ndim, dy.dtype, dy.mem = dy_ndim, _lib.DTYPE_BF16, _lib.MEM_CUDA
            rc = fn(h, ctypes.byref(ctx) if ctx_arg else None, ctypes.byref(dy),
                    ctypes.byref(bo), None, None, None, ctypes.byref(st))
            answers.append((rc, st.message.decode()))
        assert answers[0] == answers[1] and want in answers[0][1], answers


def _host(arr):
    """A host fos_tensor over a C-contiguous uint16 (bf16 bits) numpy array."""
    t = _lib.Tensor()
    t.dtype, t.mem, t.ndim = _lib.DTYPE_BF16, _lib.MEM_HOST, arr.ndim
    for i, d in enumerate(arr.shape):
        t.shape[i] = d
    t.data, t.size = arr.ctypes.data, arr.nbytes
    return t


def _y_bits(y):
    """The bytes of a result libfos allocated (freed here)."""
    try:
        return ctypes.string_at(y.data, y.size)
    finally:
        _lib.libc_free(ctypes.c_void_p(y.data))


def test_unchecked_forwards_give_the_declared_ones_bits(client):
    """fos_forward_put and fos_forward through _unchecked, as the fast path calls them (the
    version a c_uint64), against a cpu fosd with host tensors: the version put is the 64-bit one
    asked for, and Y has the bits of the declared calls'."""
    import numpy as np
    conn = client._conn()
    lib, h = conn.lib, conn.handle
    g = np.random.default_rng(3)
    w = (g.standard_normal((16, 32)) * 0.1).astype(np.float32)
    x = g.standard_normal((8, 32)).astype(np.float32)
    wb = (w.view(np.uint32) >> 16).astype(np.uint16)  # bf16 bits, truncated: any bf16 values do
    xb = (x.view(np.uint32) >> 16).astype(np.uint16)
    tw, tx = _host(wb), _host(xb)
    ys = []
    for name, fp, ff, version in ((b"dc.checked", lib.fos_forward_put, lib.fos_forward, (1 << 40) + 5),
                                  (b"dc.unchecked", _devcall._unchecked(lib.fos_forward_put),
                                   _devcall._unchecked(lib.fos_forward), ctypes.c_uint64((1 << 40) + 5))):
        st, y = _lib.Status(), _lib.Tensor()
        assert fp(h, name, version, ctypes.byref(tw), None, ctypes.byref(tx), None, None, ctypes.byref(y), None,
                  ctypes.byref(st)) == 0, st.message
        ys.append(_y_bits(y))
        y2 = _lib.Tensor()
        assert ff(h, name, ctypes.byref(tx), None, None, ctypes.byref(y2), None, ctypes.byref(st)) == 0, st.message
        ys.append(_y_bits(y2))
    versions = {w.name: w.version for w in client.list_weights()}
    assert versions["dc.checked"] == versions["dc.unchecked"] == (1 << 40) + 5
    assert len(ys[0]) == 8 * 16 * 2 and ys[0] == ys[1] == ys[2] == ys[3]
    for name in ("dc.checked", "dc.unchecked"):
        client.drop_weight(name)
