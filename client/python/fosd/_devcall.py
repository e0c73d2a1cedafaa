"""fosd._devcall: the fast path of a forward (with or without the put of its weight) and a backward
whose tensors all go as device tensors as they are: CUDA torch tensors of the wire's dtype (bf16),
contiguous, on one GPU, their memory known or found shareable (Plane._shareable), results allocated
with torch on that GPU and written there by fosd. A trainer's calls (Client._forward,
Client.backward, fosd.torch's layers) take it; it is Plane._device_call's layout without its
general bookkeeping: the fos_tensor, option and status structures (and ctypes.byref()s of them) are
made once per thread and Plane and refilled field by field at each call (a backward's once per
shape, _BackPlan: only the data addresses set at each call), nothing is formatted unless the call
failed.

Each function returns _HOST before anything is sent when any condition does not hold (a CPU or
numpy array, another dtype, a non-contiguous tensor, tensors on two GPUs, memory fosd cannot share,
device tensors off or not yet asked about, a result of unknown shape): the caller then makes the
call through Plane.call, the general layout, with the same bits. A call that was sent and failed
raises Plane._error's Error (so Plane.call_fast retries a refusal of device memory as Plane.call
does); a result whose shape is not the expected one fails DATA_LOSS as Plane._results says.

Invariants: the per-thread structures are used by one call at a time (a thread makes one call at a
time; a re-put hook that libfos runs inside a call takes Plane.call, not these); a context
structure is new for each forward that saves one (the Context keeps it); a _BackPlan is used only
while its fields hold what it was made with (a call with any other outcome drops it).
"""

import sys
from ctypes import _CFuncPtr, byref, c_uint64, c_void_p, cast

from . import _lib

_HOST = object()  # "take the general layout" (fosd._plane's _HOST is this one)
_BF16 = _lib.DTYPE_BF16
_CUDA = _lib.MEM_CUDA
_torch_bf16 = None
_torch_empty = None
PLANS_MAX = 256  # backward shapes kept per thread and Plane (a model has a few per layer)
# the tensor attribute saying "on a GPU" (bench_python_step --overhead makes CPU tensors stand in)
CUDA_ATTR = "is_cuda"


class _Bufs:
    """One thread's structures of one Plane: a forward's x, bias, y (and the fused put's w), the
    option structs and a status, each with its byref(); the backward's _BackPlans by shape."""

    __slots__ = ("tx", "tb", "ty", "tw", "fo", "bo", "st",
                 "rx", "rb", "ry", "rw", "rfo", "rbo", "rst", "plans")

    def __init__(self):
        self.plans = {}
        for f in ("tx", "tb", "ty", "tw"):
            t = _lib.Tensor()
            t.mem = _CUDA
            setattr(self, f, t)
            setattr(self, "r" + f[1:], byref(t))
        for t, nd in ((self.tx, 2), (self.tb, 1), (self.tw, 2)):
            t.dtype, t.ndim = _BF16, nd
        self.fo, self.bo, self.st = _lib.ForwardOpts(), _lib.BackwardOpts(), _lib.Status()
        self.rfo, self.rbo, self.rst = byref(self.fo), byref(self.bo), byref(self.st)


_UNCHECKED = {}  # id of a libfos function declared by fosd._lib -> (it, it without argtypes)


def _unchecked(f):
    """f, a libfos function declared by fosd._lib, as a function pointer without argtypes (its
    restype kept): ctypes then converts each argument by its own type instead of checking it
    against the declared one, which costs about 1.4 us a call of 8 arguments. Its callers pass
    only what those conversions pass as the declared C types: byref()s of the declared
    structures, None (NULL), the c_void_p handle, bytes (a char *) and c_uint64 objects, never a
    bare int. Anything else (a stand-in libfos, a timing wrapper) comes back as it is."""
    e = _UNCHECKED.get(id(f))
    if e is not None and e[0] is f:
        return e[1]
    if not isinstance(f, _CFuncPtr) or f.argtypes is None:
        return f
    r = type(f)(cast(f, c_void_p).value)
    r.restype = f.restype
    _UNCHECKED[id(f)] = (f, r)  # f kept: its id stays its own
    return r


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


def _empty():
    global _torch_empty
    _torch_empty = sys.modules["torch"].empty
    return _torch_empty


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
    y = empty(*shape, dtype=bf, device=dev)
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
        rc = _unchecked(lib.fos_forward)(h, bname, b.rx, b.rb if bi is not None else None, b.rfo, b.ry, rctx, b.rst)
    else:
        t = b.tw
        t.data, t.size = wi
        s = t.shape
        s[0], s[1] = w.shape
        fp = lib.fos_forward_put
        f = _unchecked(fp)
        rc = f(h, bname, c_uint64(version) if f is not fp else version, b.rw, byref(put[1]), b.rx,
               b.rb if bi is not None else None, b.rfo, b.ry, rctx, b.rst)
    st = b.st
    if not rc and (ty.ndim != 2 or ty.shape[0] != m or ty.shape[1] != n):
        rc, st = _shape_error(0, ty, (m, n))
    if rc:
        raise plane._error(rc, st, True)
    plane.device_sent += 2 + (bi is not None) + (wi is not None)
    return [y]


class _BackPlan:
    """One backward shape's argument structures, keyed by (M, N, K, bias, need_dx, need_dw) in
    its thread's _Bufs: dY's fos_tensor and those of the results asked for, every field but the
    data address filled once, their byref()s (None for a result not asked for), and outs: per
    result asked for (index in [dx, dw, db], shape, bytes, fos_tensor, and the ndim, shape[0]
    and shape[1] its fos_tensor holds), the order of the call's outputs. A reply describes a
    result over its fos_tensor with the same fields as the plan's when the result has the
    expected shape (libfos checks the dtype, and the length against the shape), and an
    asynchronous call leaves them: so a call whose results all passed the shape check leaves the
    plan as it was made; any other outcome drops it."""

    __slots__ = ("tdy", "rdy", "rdx", "rdw", "rdb", "ndy", "outs")

    def __init__(self, m, n, k, has_bias, need_dx, need_dw):
        self.tdy = _tensor(2, (m, n), m * n * 2)
        self.rdy = byref(self.tdy)
        self.ndy = m * n * 2
        self.rdx = self.rdw = self.rdb = None
        outs = []
        for j, want, shape in ((0, need_dx, (m, k)), (1, need_dw, (n, k)), (2, has_bias, (n,))):
            if want:
                nd = len(shape)
                d1 = shape[1] if nd > 1 else 0
                nb = shape[0] * (d1 or 1) * 2
                t = _tensor(nd, shape, nb)
                setattr(self, ("rdx", "rdw", "rdb")[j], byref(t))
                outs.append((j, shape, nb, t, nd, shape[0], d1))
        self.outs = tuple(outs)


def _tensor(nd, shape, nb):
    t = _lib.Tensor()
    t.mem, t.dtype, t.ndim, t.size = _CUDA, _BF16, nd, nb
    t.shape[0] = shape[0]
    t.shape[1] = shape[1] if nd > 1 else 0
    return t


def backward(plane, lib, h, cs, dy, k, has_bias, need_dx, need_dw, keep):
    """[dx, dw, db] of fos_backward of context structure cs (no recompute) from a 2-D dy, or
    _HOST (see the top). The call's structures come from its shape's _BackPlan; the results are
    three torch.empty tensors (no storage shared: a gradient kept as .grad holds its own memory
    only)."""
    if plane.device is not True or not hasattr(dy, "is_cuda"):
        return _HOST
    bf = _torch_bf16 or _bf16()
    if not getattr(dy, CUDA_ATTR) or dy.dtype is not bf or not dy.is_contiguous():
        return _HOST
    m, n = dy.shape
    if not (m and n and k):
        return _HOST  # an empty tensor goes through the general layout
    b = plane._tls.__dict__.get("fast") or _bufs(plane)
    key = (m, n, k, has_bias, need_dx, need_dw)
    plans = b.plans
    p = plans.get(key)
    if p is None:
        if len(plans) >= PLANS_MAX:
            plans.clear()
        p = plans[key] = _BackPlan(m, n, k, has_bias, need_dx, need_dw)
    shared = plane._shared
    cached = False  # some memory was known shareable from a kept answer (Plane._error)
    addr = dy.data_ptr()
    if (addr, p.ndy) in shared:
        cached = True
    elif not plane._shareable(addr, p.ndy):
        return _HOST
    p.tdy.data = addr
    empty = _torch_empty or _empty()
    dev = dy.device
    out = [None, None, None]
    for j, shape, nb, t, _, _, _ in p.outs:
        r = out[j] = empty(*shape, dtype=bf, device=dev)  # sizes as arguments: parsed faster than a tuple
        a = r.data_ptr()
        if (a, nb) in shared:
            cached = True
        elif not plane._shareable(a, nb):
            return _HOST
        t.data = a
    plane._stream_order((dev,))
    b.bo.keep_context = keep
    rc = _unchecked(lib.fos_backward)(h, byref(cs), p.rdy, b.rbo, p.rdx, p.rdw, p.rdb, b.rst)
    if not rc:
        for _, _, _, t, nd, d0, d1 in p.outs:
            s = t.shape
            if t.ndim != nd or s[0] != d0 or s[1] != d1:
                break
        else:
            plane.device_sent += 1 + len(p.outs)
            return out
    plans.pop(key, None)  # its structures may hold what the reply wrote
    st = b.st
    if not rc:
        for j, shape, _, t, _, _, _ in p.outs:
            nd = t.ndim
            if t.size == 0 and nd == 0:
                out[j] = None  # the reply has no such result
            elif nd != len(shape) or t.shape[0] != shape[0] or (nd > 1 and t.shape[1] != shape[1]):
                rc, st = _shape_error(j, t, shape)
                break
    if rc:
        plane._tls.cached = cached
        raise plane._error(rc, st, True)
    plane.device_sent += 1 + sum(r is not None for r in out)
    return out
