"""fosd._plane: where a call's tensor bytes live while libfos sends them.

Every call hands its inputs (Arr) and the results it expects (Out) to Plane.call, which lays them
out in one of these ways and returns the results:

  * shared memory (ipc:// connections): the call borrows a region of the client's pool (created
    with fos_region_create, registered with fosd on this connection). Inputs are written into it,
    converted, in one pass each (a CUDA tensor: one device-to-host copy into the region); fosd reads
    them there and writes the results there; each result is copied out once into a new array of
    the reference input's kind (a CUDA result: one host-to-device copy).
  * inline (tcp, tls, or when a region cannot be had): inputs go from a host pointer (the array
    itself when it is a contiguous CPU array of the wire dtype, else a converted copy); results are
    written by libfos straight into newly allocated arrays.
  * a result whose shape is not known beforehand (a forward of a weight another client put) is
    allocated by libfos (data NULL), copied into an array and freed.

  * device tensors (a cuda fosd on the same host and GPU, fos.h "device tensors"): a CUDA torch
    tensor whose memory libfos can share with fosd (fos_cuda_check: exportable as a CUDA IPC
    handle, on fosd's GPU) goes as a device tensor, read by fosd in place: device_tensor() names
    it (a non-contiguous one through one contiguous copy on its GPU; one whose dtype is not the
    wire's takes the host path, where it converts). A result whose reference input is such a
    CUDA tensor is allocated on that GPU (torch.empty) and written there by fosd: device_output().
    Before sending, the current stream of each GPU involved is synchronized (the work producing
    the inputs, and the last uses of the outputs' memory, are complete); fosd's writes are
    complete when the reply comes. Anything else (a cpu fosd, another GPU, memory of PyTorch's
    expandable_segments allocator, which CUDA IPC cannot share) takes the paths above, and so
    does every call after fosd refused a device tensor's memory (see Plane.call): the bits are
    the same either way.

A region that a CUDA tensor's bytes pass through is also page-locked for this process
(cudaHostRegister through torch, once per region), so those copies run at DMA speed.

Invariants: a region is used by one call at a time; after a call that ended without a reply from
fosd (DEADLINE_EXCEEDED, UNAVAILABLE, CANCELLED) fosd may still write into the region, so it is
destroyed rather than pooled. At most POOL_MAX free regions are kept; the pool is emptied by
close().
"""

import ctypes
import re
import sys
import threading

from . import _lib
from ._errors import Error, check

ALIGN = 256
MIN_REGION = 1 << 20
POOL_MAX = 4
# codes after which fosd may still be working on the request (the region must not be reused)
_NO_REPLY = (_lib.DEADLINE_EXCEEDED, _lib.UNAVAILABLE, _lib.CANCELLED)
# fosd's refusals of a device tensor's memory (PROTOCOL.md "Device tensors"): the call is made again
# through host memory (Plane.call)
_DEVICE_REFUSALS = (_lib.FAILED_PRECONDITION, _lib.INVALID_ARGUMENT, 13, _lib.PERMISSION_DENIED)  # 13: INTERNAL
_DEVICE_WORDS = re.compile(r"CUDA IPC|device tensor|peer credentials|fosd runs on GPU")


def _align(n):
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _tensor(dtype, shape, addr, nbytes, mem=_lib.MEM_HOST):
    t = _lib.Tensor()
    t.dtype = dtype
    t.ndim = len(shape)
    for i, d in enumerate(shape):
        t.shape[i] = d
    t.data = addr or None
    t.size = nbytes
    t.mem = mem
    return t


class _Region:
    __slots__ = ("ptr", "base", "size", "pinned")

    def __init__(self, ptr, base, size):
        self.ptr, self.base, self.size = ptr, base, size
        self.pinned = False


def _cudart():
    t = sys.modules.get("torch")
    try:
        return t.cuda.cudart() if t is not None and t.cuda.is_initialized() else None
    except Exception:  # a torch without the runtime bindings: copies stay pageable
        return None


def _pin(r):
    """Page-locks a region for this process's CUDA copies (fosd pins its own mapping), so copies
    between it and a CUDA tensor run at DMA speed; once per region, best effort."""
    if r.pinned:
        return
    rt = _cudart()
    if rt is not None:
        try:
            r.pinned = int(rt.cudaHostRegister(r.base, r.size, 0)) == 0
        except Exception:
            r.pinned = False
    if not r.pinned:
        r.pinned = None  # tried: do not try again


def _unpin(r):
    if r.pinned:
        rt = _cudart()
        if rt is not None:
            try:
                rt.cudaHostUnregister(r.base)
            except Exception:
                pass
        r.pinned = False


def _destroy(lib, r):
    _unpin(r)
    st = _lib.Status()
    lib.fos_region_destroy(r.ptr, ctypes.byref(st))


class Plane:
    def __init__(self, lib, handle, use_shm, use_device=True):
        self._lib = lib
        self._handle = handle
        self._mu = threading.Lock()
        self._free = []
        self.shm = bool(use_shm)
        self.shm_off_reason = None if use_shm else "not an ipc:// connection"
        self.regions_created = 0
        # device tensors: None until the first CUDA tensor asks whether fosd has a GPU
        self.device = None if use_device else False
        self.device_off_reason = None if use_device else "turned off (device_tensors=False)"
        self.device_sent = 0  # tensors passed in place (inputs and outputs)

    # ---- device tensors (see the module comment) ----

    def _device_on(self):
        if self.device is None:
            st = _lib.Status()
            uuid = ctypes.create_string_buffer(16)
            rc = self._lib.fos_server_gpu_uuid(self._handle, uuid, ctypes.byref(st))
            self.device = rc == _lib.OK
            if not self.device:
                self.device_off_reason = st.message.decode("utf-8", "replace")
        return self.device

    def _shareable(self, addr, nbytes):
        st = _lib.Status()
        rc = self._lib.fos_cuda_check(self._handle, addr, nbytes, ctypes.byref(st))
        if rc != _lib.OK:
            self.device_off_reason = st.message.decode("utf-8", "replace")  # the last refusal
            return False
        return True

    def device_tensor(self, arr, wire):
        """(fos_tensor naming arr's CUDA memory, keepalive), or None for the host path."""
        if not arr.torch or not arr.cuda or not arr.numel() or not self._device_on():
            return None
        t = sys.modules["torch"]
        x = arr.obj.detach()
        if wire in (_lib.DTYPE_U8, _lib.DTYPE_E4M3):
            if x.element_size() != 1:
                return None
            if x.dtype != t.uint8:
                x = x.view(t.uint8)
        elif x.dtype != {_lib.DTYPE_BF16: t.bfloat16, _lib.DTYPE_F32: t.float32}[wire]:
            return None  # converted on the host path (fosd's rounding of NaNs)
        if not x.is_contiguous():
            x = x.contiguous()
        nbytes = arr.numel() * _lib.DTYPE_BYTES[wire]
        if not self._shareable(x.data_ptr(), nbytes):
            return None
        return _tensor(wire, arr.shape, x.data_ptr(), nbytes, _lib.MEM_CUDA), x

    def device_output(self, out):
        """(fos_tensor of a new CUDA tensor for out, finisher returning it), or None."""
        ref = out.ref
        if out.shape is None or not ref.torch or not self._device_on():
            return None
        n = 1
        for d in out.shape:
            n *= d
        if not n:
            return None
        t = sys.modules["torch"]
        y = t.empty(out.shape, dtype=out._torch_dtype(), device=ref.device)
        nbytes = out.nbytes()
        if not self._shareable(y.data_ptr(), nbytes):
            return None
        return _tensor(0, (), y.data_ptr(), nbytes, _lib.MEM_CUDA), (lambda: y)

    # ---- the region pool ----

    def _take(self, nbytes):
        with self._mu:
            best = None
            for r in self._free:
                if r.size >= nbytes and (best is None or r.size < best.size):
                    best = r
            if best is not None:
                self._free.remove(best)
                return best
        size = MIN_REGION
        while size < nbytes:
            size *= 2
        st = _lib.Status()
        ptr = ctypes.c_void_p()
        rc = self._lib.fos_region_create(self._handle, None, size, _lib.REGION_MEMFD,
                                         ctypes.byref(ptr), ctypes.byref(st))
        if rc == _lib.RESOURCE_EXHAUSTED:
            return None  # no region this time: this call goes inline
        if rc in (_lib.FAILED_PRECONDITION, _lib.PERMISSION_DENIED, _lib.UNIMPLEMENTED):
            self.shm = False  # this connection cannot share memory: inline from now on
            self.shm_off_reason = st.message.decode("utf-8", "replace")
            return None
        check(rc, st)
        self.regions_created += 1
        return _Region(ptr, self._lib.fos_region_data(ptr), size)

    def _give(self, r, reusable):
        if reusable:
            with self._mu:
                self._free.append(r)
                if len(self._free) <= POOL_MAX:
                    return
                r = min(self._free, key=lambda g: g.size)
                self._free.remove(r)
        _destroy(self._lib, r)

    def close(self):
        with self._mu:
            regions, self._free = self._free, []
        for r in regions:
            _destroy(self._lib, r)

    def pooled(self):
        with self._mu:
            return len(self._free)

    # ---- one call ----

    def call(self, inputs, outputs, fn):
        """inputs: [(Arr or None, wire)], outputs: [Out or None]; fn(in_ptrs, out_ptrs) returns
        (rc, status) of the libfos call, given POINTER(Tensor)s (None for a None entry). Returns
        the results, one per output (None where the output was None or the reply had none).

        A call with device tensors that fosd refuses for their memory (it cannot open the CUDA
        IPC handle: another IPC namespace, a container without the GPU's device files; no peer
        credentials) is made again through host memory; when that succeeds, device tensors are
        off for this client from then on (device_off_reason says why). Such refusals come before
        fosd runs anything, so the op runs once."""
        try:
            return self._call(inputs, outputs, fn, True)
        except Error as e:
            if not getattr(e, "_device", False) or e.code_number not in _DEVICE_REFUSALS or \
                    not _DEVICE_WORDS.search(e.message):
                raise
            results = self._call(inputs, outputs, fn, False)
            self.device = False
            self.device_off_reason = e.message
            return results

    def _call(self, inputs, outputs, fn, use_device):
        ins = [None] * len(inputs)
        outs = [None] * len(outputs)
        finish = [None] * len(outputs)
        keep = []
        host_in, host_out = [], []
        devices = set()  # the GPUs of device tensors: their current streams are synchronized
        for i, (a, wire) in enumerate(inputs):
            if a is None:
                continue
            d = self.device_tensor(a, wire) if a.cuda and use_device else None
            if d is not None:
                ins[i] = d[0]
                keep.append(d[1])
                devices.add(a.device)
            else:
                host_in.append(i)
        for j, o in enumerate(outputs):
            if o is None:
                continue
            d = self.device_output(o) if o.ref is not None and o.ref.cuda and use_device else None
            if d is not None:
                outs[j], finish[j] = d
                devices.add(o.ref.device)
            else:
                host_out.append(j)
        if devices:
            t = sys.modules["torch"]
            for dev in devices:
                t.cuda.current_stream(dev).synchronize()
        n_dev = sum(1 for x in ins if x is not None and x.mem == _lib.MEM_CUDA) + \
            sum(1 for x in outs if x is not None and x.mem == _lib.MEM_CUDA)
        total = sum(_align(inputs[i][0].numel() * _lib.DTYPE_BYTES[inputs[i][1]]) for i in host_in)
        total += sum(_align(outputs[j].nbytes()) for j in host_out if outputs[j].shape is not None)
        region = self._take(total) if self.shm and total else None
        rc, st = 0, None
        try:
            if region is not None:
                if any(inputs[i][0].cuda for i in host_in) or \
                        any(outputs[j].ref is not None and outputs[j].ref.cuda for j in host_out):
                    _pin(region)
                off = 0
                for i in host_in:
                    a, wire = inputs[i]
                    nb = a.numel() * _lib.DTYPE_BYTES[wire]
                    a.write_to(region.base + off, wire)
                    ins[i] = _tensor(wire, a.shape, region.base + off, nb)
                    off += _align(nb)
                for j in host_out:
                    o = outputs[j]
                    if o.shape is None:
                        continue
                    nb = o.nbytes()
                    outs[j] = _tensor(0, (), region.base + off, nb)
                    finish[j] = (lambda o=o, addr=region.base + off: o.from_memory(addr))
                    off += _align(nb)
            else:
                for i in host_in:
                    a, wire = inputs[i]
                    addr, k = a.host_bytes(wire)
                    keep.append(k)
                    ins[i] = _tensor(wire, a.shape, addr, a.numel() * _lib.DTYPE_BYTES[wire])
                for j in host_out:
                    o = outputs[j]
                    if o.shape is None:
                        continue
                    addr, fin = o.host_target()
                    outs[j] = _tensor(0, (), addr, o.nbytes())
                    finish[j] = fin
            for j in host_out:
                if outs[j] is None:  # shape unknown: libfos allocates
                    outs[j] = _tensor(0, (), 0, 0)
                    finish[j] = "malloc"
            rc, st = fn([ctypes.pointer(t) if t is not None else None for t in ins],
                        [ctypes.pointer(t) if t is not None else None for t in outs])
            results = []
            for j, o in enumerate(outputs):
                t = outs[j]
                if o is None or t is None:
                    results.append(None)
                elif finish[j] == "malloc":
                    results.append(self._from_malloc(t, o, rc))
                elif rc or (t.size == 0 and t.ndim == 0):
                    results.append(None)  # failed, or the reply has no such result (db)
                else:
                    got = tuple(t.shape[i] for i in range(t.ndim))
                    if got != o.shape:
                        rc, st = _lib.DATA_LOSS, _lib.Status()
                        st.message = ("the reply's result %d has shape %s, expected %s"
                                      % (j, got, o.shape)).encode()
                        results.append(None)
                    else:
                        results.append(finish[j]())
        finally:
            if region is not None:
                self._give(region, rc not in _NO_REPLY)
        if rc:
            e = Error(rc, st.message.decode("utf-8", "replace"))
            e._device = bool(devices)  # device tensors were sent: call() may retry through host memory
            raise e
        self.device_sent += n_dev
        return results

    def _from_malloc(self, t, o, rc):
        if not t.data:
            return None
        try:
            if rc:
                return None
            o.shape = tuple(t.shape[i] for i in range(t.ndim))
            return o.from_memory(t.data)
        finally:
            _lib.libc_free(t.data)
            t.data = None
