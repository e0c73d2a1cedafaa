"""fosd._devcall: the fast path of a forward (with or without the put of its weight) and a backward
whose tensors all go as device tensors as they are: CUDA torch tensors of the wire's dtype (bf16),
contiguous, on one GPU, their memory known or found shareable (Plane._shareable), results allocated
with torch on that GPU and written there by fosd. A trainer's calls (Client._forward,
Client.backward, fosd.torch's layers) take it; it is Plane._device_call's layout without its
general bookkeeping: the fos_tensor, option and status structures (and ctypes.byref()s of them) are
made once per thread and Plane and refilled field by field at each call, nothing is formatted
unless the call failed.

Each function returns _HOST before anything is sent when any condition does not hold (a CPU or
numpy array, another dtype, a non-contiguous tensor, tensors on two GPUs, memory fosd cannot share,
device tensors off or not yet asked about, a result of unknown shape): the caller then makes the
call through Plane.call, the general layout, with the same bits. A call that was sent and failed
raises Plane._error's Error (so Plane.call_fast retries a refusal of device memory as Plane.call
does); a result whose shape is not the expected one fails DATA_LOSS as Plane._results says.

Invariants: the per-thread structures are used by one call at a time (a thread makes one call at a
time; a re-put hook that libfos runs inside a call takes Plane.call, not these); a context
structure is new for each forward that saves one (the Context keeps it).
"""

import sys
from ctypes import byref

from . import _lib

_HOST = object()  # "take the general layout" (fosd._plane's _HOST is this one)
_BF16 = _lib.DTYPE_BF16
_CUDA = _lib.MEM_CUDA
_torch_bf16 = None
# the tensor attribute saying "on a GPU" (bench_python_step --overhead makes CPU tensors stand in)
CUDA_ATTR = "is_cuda"


class _Bufs:
    """One thread's structures of one Plane: a forward's x, bias, y (and the fused put's w), a
    backward's dy, dx, dw, db, the option structs and a status, each with its byref()."""

    __slots__ = ("tx", "tb", "ty", "tw", "tdy", "tdx", "tdw", "tdb", "fo", "bo", "st",
                 "rx", "rb", "ry", "rw", "rdy", "rdx", "rdw", "rdb", "rfo", "rbo", "rst")

    def __init__(self):
        for f in ("tx", "tb", "ty", "tw", "tdy", "tdx", "tdw", "tdb"):
            t = _lib.Tensor()
            t.mem = _CUDA
            setattr(self, f, t)
            setattr(self, "r" + f[1:], byref(t))
        for t, nd in ((self.tx, 2), (self.tb, 1), (self.tw, 2), (self.tdy, 2)):
            t.dtype, t.ndim = _BF16, nd
        self.fo, self.bo, self.st = _lib.ForwardOpts(), _lib.BackwardOpts(), _lib.Status()
        self.rfo, self.rbo, self.rst = byref(self.fo), byref(self.bo), byref(self.st)


def _bufs(plane):
    b = plane._tls.__dict__.get("fast")
    if b is None:
        b = plane._tls.fast = _Bufs()
    return b


def _bf16():
    global _torch_bf16
    if _torch_bf16 is None:
        _torch_bf16 = sys.modules["torch"].bfloat16
    return _torch_bf16


def _shareable(plane, addr, nb):
    """Whether nb bytes at addr (nb > 0) can go to fosd as device memory (already exported: noted)."""
    if (addr, nb) in plane._shared:
        plane._tls.cached = True
        return True
    return plane._shareable(addr, nb)


def _input(plane, t, bf):
    """(address, bytes) of tensor t as a device tensor as it is, or None."""
    if not getattr(t, CUDA_ATTR) or t.dtype is not bf or not t.is_contiguous():
        return None
    nb = t.numel() * 2
    addr = t.data_ptr()
    if not nb or not _shareable(plane, addr, nb):
        return None
    return addr, nb


def _output(plane, empty, shape, dev, bf, t):
    """A new bf16 CUDA tensor of shape on dev, its fos_tensor t filled, or None. t's shape is the
    one asked for: a reply describes the result over it, and an asynchronous call (no reply before
    it returns) leaves it, so the caller's check of the shape holds either way."""
    y = empty(shape, dtype=bf, device=dev)
    nb = y.numel() * 2
    addr = y.data_ptr()
    if not nb or not _shareable(plane, addr, nb):
        return None
    t.dtype, t.data, t.size = _BF16, addr, nb
    t.ndim = len(shape)
    s = t.shape
    s[0] = shape[0]
    s[1] = shape[1] if len(shape) > 1 else 0
    return y


def _shape_error(j, t, want):
    st = _lib.Status()
    st.message = ("the reply's result %d has shape %s, expected %s" % (j, tuple(t.shape[:t.ndim]), want)).encode()
    return _lib.DATA_LOSS, st


def forward(plane, lib, h, bname, x, bias, n, version, override, row_scaled, ctx, scope, put=None):
    """[y] of fos_forward (fos_forward_put with put = (w, cfg): W put as version first) for a 2-D
    x and a known N, ctx (a fos_context, or None) saving the context; or _HOST (see the top)."""
    if plane.device is not True or n is None or not hasattr(x, "is_cuda"):
        return _HOST
    bf = _torch_bf16 or _bf16()
    plane._tls.cached = False
    xi = _input(plane, x, bf)
    if xi is None:
        return _HOST
    dev = x.device
    bi = None
    if bias is not None:
        if not hasattr(bias, "is_cuda") or bias.device != dev:
            return _HOST
        bi = _input(plane, bias, bf)
        if bi is None:
            return _HOST
    wi = None
    if put is not None:
        w = put[0]
        if not hasattr(w, "is_cuda") or w.dim() != 2 or w.device != dev:
            return _HOST
        wi = _input(plane, w, bf)
        if wi is None:
            return _HOST
    b = plane._tls.__dict__.get("fast") or _bufs(plane)
    m, k = x.shape
    ty = b.ty
    y = _output(plane, sys.modules["torch"].empty, (m, n), dev, bf, ty)
    if y is None:
        return _HOST
    plane._stream_order((dev,))
    t = b.tx
    t.data, t.size = xi
    s = t.shape
    s[0], s[1] = m, k
    if bi is not None:
        t = b.tb
        t.data, t.size = bi
        t.shape[0] = bias.shape[0]
    fo = b.fo
    fo.weight_version, fo.override, fo.row_scaled, fo.save_context, fo.four_over_six = \
        version, override, row_scaled, ctx is not None, scope
    rctx = byref(ctx) if ctx is not None else None
    if wi is None:
        rc = lib.fos_forward(h, bname, b.rx, b.rb if bi is not None else None, b.rfo, b.ry, rctx, b.rst)
    else:
        t = b.tw
        t.data, t.size = wi
        s = t.shape
        s[0], s[1] = w.shape
        rc = lib.fos_forward_put(h, bname, version, b.rw, byref(put[1]), b.rx, b.rb if bi is not None else None,
                                 b.rfo, b.ry, rctx, b.rst)
    st = b.st
    if not rc and (ty.ndim != 2 or ty.shape[0] != m or ty.shape[1] != n):
        rc, st = _shape_error(0, ty, (m, n))
    if rc:
        raise plane._error(rc, st, True)
    plane.device_sent += 2 + (bi is not None) + (wi is not None)
    return [y]


def backward(plane, lib, h, cs, dy, k, has_bias, need_dx, need_dw, keep):
    """[dx, dw, db] of fos_backward of context structure cs (no recompute) from a 2-D dy, or
    _HOST (see the top)."""
    if plane.device is not True or not hasattr(dy, "is_cuda"):
        return _HOST
    bf = _torch_bf16 or _bf16()
    plane._tls.cached = False
    di = _input(plane, dy, bf)
    if di is None:
        return _HOST
    b = plane._tls.__dict__.get("fast") or _bufs(plane)
    dev = dy.device
    m, n = dy.shape
    empty = sys.modules["torch"].empty
    dx = dw = db = None
    if need_dx and (dx := _output(plane, empty, (m, k), dev, bf, b.tdx)) is None:
        return _HOST
    if need_dw and (dw := _output(plane, empty, (n, k), dev, bf, b.tdw)) is None:
        return _HOST
    if has_bias and (db := _output(plane, empty, (n,), dev, bf, b.tdb)) is None:
        return _HOST
    plane._stream_order((dev,))
    t = b.tdy
    t.data, t.size = di
    s = t.shape
    s[0], s[1] = m, n
    b.bo.keep_context = keep
    rc = lib.fos_backward(h, byref(cs), b.rdy, b.rbo, b.rdx if need_dx else None, b.rdw if need_dw else None,
                          b.rdb if has_bias else None, b.rst)
    st = b.st
    out = [dx, dw, db]
    if not rc:
        for j, (r, t, r0, r1) in enumerate(((dx, b.tdx, m, k), (dw, b.tdw, n, k), (db, b.tdb, n, 0))):
            if r is None:
                continue
            nd = t.ndim
            if t.size == 0 and nd == 0:
                out[j] = None  # the reply has no such result
            elif nd != (2 if r1 else 1) or t.shape[0] != r0 or (r1 and t.shape[1] != r1):
                rc, st = _shape_error(j, t, (r0, r1) if r1 else (r0,))
                break
    if rc:
        raise plane._error(rc, st, True)
    plane.device_sent += 1 + (dx is not None) + (dw is not None) + (db is not None)
    return out

