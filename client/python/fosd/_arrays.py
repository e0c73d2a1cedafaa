"""fosd._arrays: what fosd accepts as an array, and how results come back.

Inputs are numpy arrays or torch tensors (torch is imported only when a torch tensor is seen):
  * bf16: torch.bfloat16, or numpy uint16 holding bf16 bit patterns;
  * float32 (torch or numpy; numpy float64 too): rounded to bf16 where fosd needs bf16, by the same
    rule as fosd and the CLI (round to nearest even; a NaN keeps its sign and payload, made quiet);
  * uint8 (codes, scales) and torch.float8_e4m3fn (scales).
Any layout (strides) and any device: an array is written, converted, straight into the host memory
the call uses (a shared-memory region or a private buffer); a CUDA tensor is read back with one
device-to-host copy into that memory.

Results take the kind of a reference input: torch results are torch tensors on that input's device
(bf16 as torch.bfloat16, codes uint8, scales float8_e4m3fn where torch has it, else uint8, amax
float32); numpy results are numpy arrays (bf16 as uint16 bit patterns when the reference input was
uint16, as float32 when it was float32 or float64; codes and scales uint8; amax float32).
"""

import ctypes
import sys

import numpy as np

from . import _lib
from ._errors import Error

_NP_WIRE = {_lib.DTYPE_BF16: np.uint16, _lib.DTYPE_F32: np.float32, _lib.DTYPE_U8: np.uint8,
            _lib.DTYPE_E4M3: np.uint8}


def _torch():
    return sys.modules.get("torch")


_TORCH_ELEMS = None


def _torch_elems():
    """torch dtype -> element kind (made once torch is in use)."""
    global _TORCH_ELEMS
    if _TORCH_ELEMS is None:
        t = _torch()
        e = {t.bfloat16: "bf16", t.float32: "f32", t.float64: "f32", t.float16: "f32", t.uint8: "u8"}
        if getattr(t, "float8_e4m3fn", None) is not None:
            e[t.float8_e4m3fn] = "e4m3"
        _TORCH_ELEMS = e
    return _TORCH_ELEMS


def is_torch(x):
    t = _torch()
    return t is not None and isinstance(x, t.Tensor)


def f32_to_bf16_np(a):
    """float32 -> bf16 bit patterns (uint16), fosd's rounding (kernels/fos_format.h)."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    r = ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)
    nan = (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    if nan.any():
        r[nan] = ((u[nan] >> np.uint32(16)) | np.uint32(0x40)).astype(np.uint16)
    return r


def bf16_to_f32_np(u16):
    return (np.asarray(u16, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


class Arr:
    """One input array: its library, device, element kind and shape."""

    __slots__ = ("obj", "torch", "elem", "shape", "device", "cuda")

    def __init__(self, x, what):
        if is_torch(x):
            self.torch = True
            dt = x.dtype
            elem = _torch_elems().get(dt)
            if elem is None:
                raise Error(_lib.INVALID_ARGUMENT, "%s: torch dtype %s is not supported (bfloat16, "
                            "float32, uint8 or float8_e4m3fn)" % (what, dt))
            self.elem = elem
            dev = self.device = x.device
            kind = dev.type
            self.cuda = kind == "cuda"
            if not self.cuda and kind != "cpu":
                raise Error(_lib.INVALID_ARGUMENT, "%s: tensors on %s are not supported (cpu or cuda)"
                            % (what, dev))
            self.obj = x
            self.shape = tuple(x.shape)
            return
        else:
            if not isinstance(x, np.ndarray):
                x = np.asarray(x)
            self.torch = False
            self.device = None
            self.cuda = False
            if x.dtype == np.uint16:
                self.elem = "bf16"
            elif x.dtype in (np.float32, np.float64):
                self.elem = "f32"
            elif x.dtype == np.uint8:
                self.elem = "u8"
            else:
                raise Error(_lib.INVALID_ARGUMENT, "%s: numpy dtype %s is not supported (uint16 bf16 "
                            "bit patterns, float32, float64 or uint8)" % (what, x.dtype))
        self.obj = x
        self.shape = tuple(int(d) for d in x.shape)

    def numel(self):
        n = 1
        for d in self.shape:
            n *= d
        return n

    def wire_dtype(self, accept):
        """The wire dtype this array travels as, given the dtypes the field takes."""
        if self.elem == "bf16" and _lib.DTYPE_BF16 in accept:
            return _lib.DTYPE_BF16
        if self.elem == "f32":
            if _lib.DTYPE_F32 in accept:
                return _lib.DTYPE_F32
            if _lib.DTYPE_BF16 in accept:
                return _lib.DTYPE_BF16
        if self.elem in ("u8", "e4m3"):
            for d in (_lib.DTYPE_U8, _lib.DTYPE_E4M3):
                if d in accept:
                    return d
        return None

    # ---- writing into host memory ----

    def write_to(self, addr, wire):
        """Writes the elements, converted to wire, contiguously at host address addr."""
        n = self.numel()
        nbytes = n * _lib.DTYPE_BYTES[wire]
        if not n:
            return
        buf = (ctypes.c_uint8 * nbytes).from_address(addr)
        if self.torch:
            self._write_torch(buf, n, wire)
        else:
            dst = np.frombuffer(buf, dtype=_NP_WIRE[wire], count=n).reshape(self.shape)
            src = self.obj
            if wire == _lib.DTYPE_BF16 and self.elem == "f32":
                dst[...] = f32_to_bf16_np(src).reshape(self.shape)
            else:
                dst[...] = src

    def _write_torch(self, buf, n, wire):
        t = _torch()
        x = self.obj.detach()
        if wire in (_lib.DTYPE_U8, _lib.DTYPE_E4M3):
            if x.dtype != t.uint8:
                x = x.view(t.uint8)
            t.frombuffer(buf, dtype=t.uint8, count=n).view(self.shape).copy_(x)
            return
        tdt = t.bfloat16 if wire == _lib.DTYPE_BF16 else t.float32
        dst = t.frombuffer(buf, dtype=tdt, count=n).view(self.shape)
        if wire == _lib.DTYPE_BF16 and x.dtype != t.bfloat16:
            x = x.to(t.float32)
            dst.copy_(x.to(t.bfloat16) if self.cuda else x)  # a CUDA tensor converts on its GPU
            _fix_nan_bf16(dst, x)
        else:
            dst.copy_(x)

    # ---- a host pointer to the bytes, for the inline path ----

    def host_bytes(self, wire):
        """(address, keepalive): the elements as wire, contiguous in host memory; no copy when
        they already are (a contiguous CPU array of that dtype)."""
        n = self.numel()
        if self.torch:
            t = _torch()
            x = self.obj.detach()
            want = {_lib.DTYPE_BF16: t.bfloat16, _lib.DTYPE_F32: t.float32}.get(wire, t.uint8)
            if wire in (_lib.DTYPE_U8, _lib.DTYPE_E4M3) and x.dtype != t.uint8:
                x = x.view(t.uint8)
            if not self.cuda and x.dtype == want and x.is_contiguous():
                return (x.data_ptr() if n else 0), x
        else:
            x = self.obj
            if x.dtype == _NP_WIRE[wire] and x.flags["C_CONTIGUOUS"]:
                return (x.ctypes.data if n else 0), x
        keep = np.empty(max(n, 1) * _lib.DTYPE_BYTES[wire], dtype=np.uint8)
        self.write_to(keep.ctypes.data, wire)
        return keep.ctypes.data, keep


def _fix_nan_bf16(dst, src_f32):
    """torch rounds a NaN to a canonical bf16 NaN; fosd keeps sign and payload: patch them."""
    t = _torch()
    nan = t.isnan(src_f32)
    if nan.any():
        u = src_f32[nan].cpu().view(t.int32)
        bits = ((u >> 16) & 0xFFFF) | 0x40          # the bf16 pattern, as 0..65535
        bits = bits - ((bits >> 15) << 16)          # the same 16 bits as a signed int16
        dst.view(t.int16)[nan.cpu()] = bits.to(t.int16)


class Out:
    """One result to receive: shape, wire dtype, and the input whose kind it takes."""

    __slots__ = ("shape", "wire", "ref", "value")

    def __init__(self, shape, wire, ref):
        # None: see _plane; the package's own shapes are tuples of ints already
        self.shape = shape if shape is None or type(shape) is tuple else tuple(int(d) for d in shape)
        self.wire = wire
        self.ref = ref
        self.value = None

    def nbytes(self):
        n = 1
        for d in self.shape:
            n *= d
        return n * _lib.DTYPE_BYTES[self.wire]

    # the result's own type for a torch reference
    def _torch_dtype(self):
        t = _torch()
        if self.wire == _lib.DTYPE_BF16:
            return t.bfloat16
        if self.wire == _lib.DTYPE_F32:
            return t.float32
        if self.wire == _lib.DTYPE_E4M3 and getattr(t, "float8_e4m3fn", None) is not None:
            return t.float8_e4m3fn
        return t.uint8

    def _np_finish(self, u):
        """numpy result from an array u of the wire's numpy dtype."""
        if self.wire == _lib.DTYPE_BF16 and self.ref is not None and not self.ref.torch \
                and self.ref.elem == "f32":
            return bf16_to_f32_np(u)
        return u

    def host_target(self):
        """(address, finisher) for the inline path: a buffer libfos writes into, and a function
        that returns the result (no copy for CPU results in the wire's own type)."""
        ref = self.ref
        if ref is not None and ref.torch:
            t = _torch()
            dt = self._torch_dtype()
            host = t.empty(self.shape, dtype=dt)
            addr = host.data_ptr() if host.numel() else 0
            if ref.cuda:
                return addr, lambda: host.to(ref.device)
            return addr, lambda: host
        u = np.empty(self.shape, dtype=_NP_WIRE[self.wire])
        return (u.ctypes.data if u.size else 0), lambda: self._np_finish(u)

    def from_memory(self, addr):
        """The result copied out of host memory at addr (a region)."""
        n = 1
        for d in self.shape:
            n *= d
        nbytes = n * _lib.DTYPE_BYTES[self.wire]
        ref = self.ref
        if ref is not None and ref.torch:
            t = _torch()
            dt = self._torch_dtype()
            out = t.empty(self.shape, dtype=dt, device=ref.device)
            if n:
                buf = (ctypes.c_uint8 * nbytes).from_address(addr)
                src = t.frombuffer(buf, dtype=t.uint8, count=nbytes)
                out.copy_((src if dt == t.uint8 else src.view(dt)).view(self.shape))
            return out
        u = np.empty(self.shape, dtype=_NP_WIRE[self.wire])
        if n:
            ctypes.memmove(u.ctypes.data, addr, nbytes)
        return self._np_finish(u)
