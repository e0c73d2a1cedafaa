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
    Ordering: when a call's device tensors are all on one GPU, the call is ordered on the
    current stream of that GPU in the calling thread (fos_set_cuda_order with
    FOS_CUDA_ORDER_OUTPUTS): fosd's stream waits for the work queued so far on it, and the call
    may return as soon as fosd has queued its own work, the stream then waiting for fosd's event
    (results are ready for whatever runs on that stream next, as with any CUDA op; the host sees
    them after a synchronize). Memory of the call's tensors is reused by torch's caching
    allocator in that stream's order, so freeing an input right after the call is safe. Otherwise
    (device tensors on several GPUs, an older libfos, or a driver that cannot) the current stream
    of each GPU involved is synchronized before sending and fosd's writes are complete when the
    reply comes. Asynchronous calls: when libfos has FOS_CUDA_ORDER_ASYNC (fos_sync; the
    Client's async_calls, default on), the order is set with it too, and a call whose tensors are
    all device tensors with results allocated here (torch.empty on the current stream of the
    calling thread, before the call) returns as soon as libfos has handed it on, before fosd
    answered; the stream waits for fosd's writes. Its failure is raised by the next call through the
    client, or by Client.synchronize (fos_sync), as fosd.AsyncError naming the op and the request
    id (never retried or taken for the current call's own failure). A driver that cannot (no
    stream memory operations) turns it off (async_off_reason says why), the calls then ordered as
    above. The device-tensor calls of forward and backward take fosd._devcall's fast path.
    Whether memory can be shared is asked of libfos
    (fos_cuda_check, which asks the driver) once per (address, bytes): the answer "yes" is kept
    (at most CHECKS_MAX of them), since torch's caching allocator hands the same blocks out again;
    a call that fosd or libfos refuses for its device memory after such a kept answer forgets them
    all and is made again with fresh checks before anything takes the host path. Anything else (a cpu fosd, another GPU, memory of PyTorch's
    expandable_segments allocator, which CUDA IPC cannot share) takes the paths above, and so
    does every call after fosd refused a device tensor's memory (see Plane.call): the bits are
    the same either way.

Request channel (the Client opens one by default on ipc://, fos_channel_open): a call's request
and reply messages then go through shared memory instead of the socket. Its results are in regions
or device memory, so replies are small; a call whose results must come inline in the reply (no
region could be had, or a result of unknown shape) and might not fit the channel's reply area
closes the channel first (channel_off_reason says so) and takes the socket: fosd would have run
it and answered that the reply did not fit, and libfos would run it again over the socket.

A region that a CUDA tensor's bytes pass through is also page-locked for this process
(cudaHostRegister through torch, once per region), so those copies run at DMA speed.

Invariants: a region is used by one call at a time; after a call that ended without a reply from
fosd (DEADLINE_EXCEEDED, UNAVAILABLE, CANCELLED) fosd may still write into the region, so it is
destroyed rather than pooled. At most POOL_MAX free regions are kept; the pool is emptied by
close().
"""

import ctypes
import re
from ctypes import byref
import sys
import threading

from . import _devcall, _lib, _mps
from ._errors import Error, check, error, is_async_failure

ALIGN = 256
MIN_REGION = 1 << 20
POOL_MAX = 4
# (address, bytes) of device memory found shareable, kept (see the module comment)
CHECKS_MAX = 4096
# codes after which fosd may still be working on the request (the region must not be reused)
_NO_REPLY = (_lib.DEADLINE_EXCEEDED, _lib.UNAVAILABLE, _lib.CANCELLED)
# fosd's refusals of a device tensor's memory (PROTOCOL.md "Device tensors"): the call is made again
# through host memory (Plane.call)
_DEVICE_REFUSALS = (_lib.FAILED_PRECONDITION, _lib.INVALID_ARGUMENT, 13, _lib.PERMISSION_DENIED)  # 13: INTERNAL
_DEVICE_WORDS = re.compile(r"CUDA IPC|device tensor|peer credentials|fosd runs on GPU")
# a reply's bytes besides its inline results (header, shapes, status message)
_REPLY_SLACK = 16384
# finish[j] of a result that libfos allocates (see _call; compared by identity: other entries may
# be tensors, whose == is elementwise)
_MALLOC = object()
# Plane._device_call's (and fosd._devcall's) answer for a call that takes _call's general layout
_HOST = _devcall._HOST


_TORCH_DTYPES = None


def _torch_mod():
    return sys.modules["torch"]


def _torch_dtypes():
    """wire dtype -> torch dtype of a device tensor's elements (made once torch is in use)."""
    global _TORCH_DTYPES
    if _TORCH_DTYPES is None:
        t = _torch_mod()
        _TORCH_DTYPES = {_lib.DTYPE_BF16: t.bfloat16, _lib.DTYPE_F32: t.float32, _lib.DTYPE_U8: t.uint8}
    return _TORCH_DTYPES


def _current_stream(torch, dev):
    """The handle of dev's current stream in this thread (an int; 0: the legacy default stream):
    torch's raw getter where it has one (no Stream object made; a CUDA tensor's device has an
    index), else current_stream(dev)."""
    i = dev.index
    if i is not None:
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        if raw is not None:
            return raw(i)
    return torch.cuda.current_stream(dev).cuda_stream


def _align(n):
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _tensor(dtype, shape, addr, nbytes, mem=_lib.MEM_HOST):
    """A fos_tensor (shape: at most 2 dimensions), its fields set one by one (ctypes builds a
    struct faster that way than from constructor arguments)."""
    t = _lib.Tensor()
    t.dtype, t.data, t.size, t.mem = dtype, addr or None, nbytes, mem
    n = len(shape)
    if n:
        if n > 2:
            raise ValueError("a fos_tensor has at most 2 dimensions, not %d" % n)
        t.ndim = n
        s = t.shape
        s[0] = shape[0]
        if n == 2:
            s[1] = shape[1]
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


def _device_refusal(e):
    """Whether e is fosd's or libfos's refusal of a call's device memory (see Plane.call)."""
    return getattr(e, "_device", False) and e.code_number in _DEVICE_REFUSALS and \
        _DEVICE_WORDS.search(e.message) is not None


class Plane:
    mps_checked = False  # _mps.check ran for this connection

    def __init__(self, lib, handle, use_shm, use_device=True, use_async=True):
        self._lib = lib
        self._handle = handle
        self._mu = threading.Lock()
        self._tls = threading.local()
        self._free = []
        self.shm = bool(use_shm)
        self.shm_off_reason = None if use_shm else "not an ipc:// connection"
        self.regions_created = 0
        # device tensors: None until the first CUDA tensor asks whether fosd has a GPU
        self.device = None if use_device else False
        self.device_off_reason = None if use_device else "turned off (device_tensors=False)"
        self.device_sent = 0  # tensors passed in place (inputs and outputs)
        # calls ordered on a CUDA stream instead of host synchronization (_stream_order)
        self.stream_order = _lib.has(lib, "fos_set_cuda_order")
        self.stream_order_off_reason = None if self.stream_order else "libfos has no fos_set_cuda_order"
        # stream-ordered calls that return before fosd answers (FOS_CUDA_ORDER_ASYNC; see above)
        self.async_calls = bool(use_async) and self.stream_order and _lib.has(lib, "fos_sync")
        self.async_off_reason = None if self.async_calls else (
            "turned off (async_calls=False)" if not use_async else
            "libfos has no fos_sync (FOS_CUDA_ORDER_ASYNC)" if self.stream_order else self.stream_order_off_reason)
        self._shared = {}  # (address, bytes) -> True: fos_cuda_check said yes
        self.device_checks = 0  # fos_cuda_check calls made (the driver asked)
        self.channel_off_reason = None  # set by the Client, and by _inline_reply

    # ---- the request channel (see the module comment) ----

    def _inline_reply(self, nbytes):
        """Before a call whose results come inline, nbytes of them (None: not known): closes the
        channel when the reply might not fit its reply area."""
        cap = self._lib.fos_channel_bytes(self._handle)
        if not cap or (nbytes is not None and nbytes + _REPLY_SLACK <= cap):
            return
        st = _lib.Status()
        self._lib.fos_channel_close(self._handle, ctypes.byref(st))
        self.channel_off_reason = ("closed: a call's results (%s) came inline in the reply, past the "
                                   "channel's reply area of %d bytes" % (
                                       "%d bytes" % nbytes if nbytes is not None else "of unknown size", cap))

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

    def _stream_order(self, devices):
        """Orders a call whose device tensors are on devices (see the module comment): on the
        current stream of the one GPU when libfos can (kept per thread, set again when the
        stream changes), else by synchronizing each GPU's current stream, ordering turned off
        for the thread. True when the call is stream-ordered."""
        if not self.mps_checked:  # warns once when sharing fosd's GPU without MPS (_mps.py)
            self.mps_checked = _mps.check(self, devices)
        torch = _torch_mod()
        tls = self._tls
        if len(devices) == 1 and self.stream_order:
            dev = devices[0]
            # 0 is the legacy default stream: CU_STREAM_LEGACY, in the current context of dev
            key = (dev, _current_stream(torch, dev) or 1)
            if tls.__dict__.get("order") == key:
                return True
            st = _lib.Status()
            with torch.cuda.device(dev):
                flags = _lib.CUDA_ORDER_INPUTS | _lib.CUDA_ORDER_OUTPUTS
                if self.async_calls:
                    rc = self._lib.fos_set_cuda_order(self._handle, key[1], flags | _lib.CUDA_ORDER_ASYNC,
                                                      ctypes.byref(st))
                    if rc == _lib.OK:
                        tls.order = key
                        return True
                    self.async_calls = False  # a driver without stream memory operations
                    self.async_off_reason = st.message.decode("utf-8", "replace")
                rc = self._lib.fos_set_cuda_order(self._handle, key[1], flags, ctypes.byref(st))
            if rc == _lib.OK:
                tls.order = key
                return True
            self.stream_order = False
            self.stream_order_off_reason = st.message.decode("utf-8", "replace")
        if tls.__dict__.get("order") is not None:
            self._lib.fos_set_cuda_order(self._handle, None, 0, None)
            tls.order = None
        for dev in devices:
            torch.cuda.current_stream(dev).synchronize()
        return False

    def _shareable(self, addr, nbytes):
        key = (addr, nbytes)
        if key in self._shared:
            self._tls.cached = True  # this call relies on a kept answer (see call)
            return True
        st = self._tls.__dict__.get("st")
        if st is None:
            st = self._tls.st = _lib.Status()  # one per thread: the check's message, if any
        self.device_checks += 1
        rc = self._lib.fos_cuda_check(self._handle, addr, nbytes, ctypes.byref(st))
        if rc != _lib.OK:
            self.device_off_reason = st.message.decode("utf-8", "replace")  # the last refusal
            return False
        if len(self._shared) >= CHECKS_MAX:
            self._shared.clear()
        self._shared[key] = True
        return True

    def forget_checks(self):
        """Forgets the kept answers of fos_cuda_check (memory released, or refused)."""
        self._shared.clear()

    def device_tensor(self, arr, wire):
        """(fos_tensor naming arr's CUDA memory, keepalive), or None for the host path."""
        if not arr.torch or not arr.cuda or not self._device_on():
            return None
        nbytes = arr.numel() * _lib.DTYPE_BYTES[wire]
        if not nbytes:
            return None
        x = arr.obj
        if wire in (_lib.DTYPE_U8, _lib.DTYPE_E4M3):
            if x.element_size() != 1:
                return None
            u8 = _torch_dtypes()[_lib.DTYPE_U8]
            if x.dtype != u8:
                x = x.detach().view(u8)
        elif x.dtype != _torch_dtypes()[wire]:
            return None  # converted on the host path (fosd's rounding of NaNs)
        if not x.is_contiguous():
            x = x.detach().contiguous()  # one copy on its GPU, kept alive by the caller until the reply
        addr = x.data_ptr()
        if not self._shareable(addr, nbytes):
            return None
        return _tensor(wire, arr.shape, addr, nbytes, _lib.MEM_CUDA), x

    def device_output(self, out):
        """(fos_tensor of a new CUDA tensor for out, finisher returning it), or None."""
        ref = out.ref
        if out.shape is None or not ref.torch or not self._device_on():
            return None
        nbytes = out.nbytes()
        if not nbytes:
            return None
        y = _torch_mod().empty(out.shape, dtype=out._torch_dtype(), device=ref.device)
        addr = y.data_ptr()
        if not self._shareable(addr, nbytes):
            return None
        return _tensor(0, tuple(out.shape), addr, nbytes, _lib.MEM_CUDA), y  # the asked shape (_device_call)

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
        """inputs: [(Arr or None, wire)], outputs: [Out or None]; fn(in_refs, out_refs) returns
        (rc, status) of the libfos call, given ctypes.byref()s of fos_tensors (None for a None
        entry; ._obj is the fos_tensor, ctypes.pointer(ref._obj) a pointer for a struct field). Returns
        the results, one per output (None where the output was None or the reply had none).

        A call with device tensors that fosd refuses for their memory (it cannot open the CUDA
        IPC handle: another IPC namespace, a container without the GPU's device files; no peer
        credentials) is made again through host memory; when that succeeds, device tensors are
        off for this client from then on (device_off_reason says why). Such refusals come before
        fosd runs anything, so the op runs once. When some of the call's device memory was known
        shareable from kept answers (see the module comment), it is first made again with fresh
        ones."""
        try:
            return self._call(inputs, outputs, fn, True)
        except Error as e:
            if not _device_refusal(e):
                raise
            return self._refused(e, inputs, outputs, fn)

    def call_fast(self, fast, args, slow, slow_args=()):
        """A call through fast(*args) (a fosd._devcall function and its arguments), which returns
        its results or _HOST when its tensors do not all go as device tensors as they are; then
        through call(*slow(*slow_args)), slow giving call's (inputs, outputs, fn) of the same call
        (made only then). A refusal of fast's device memory is handled as call()'s first try's."""
        try:
            r = fast(*args)
        except Error as e:
            if not _device_refusal(e):
                raise
            return self._refused(e, *slow(*slow_args))
        if r is _HOST:
            return self.call(*slow(*slow_args))
        return r

    def _refused(self, err, inputs, outputs, fn):
        """call() after fosd or libfos refused the device memory of its first try (err)."""
        if err._cached:
            self.forget_checks()
            try:
                return self._call(inputs, outputs, fn, True)
            except Error as e:
                if not _device_refusal(e):
                    raise
                err = e
        results = self._call(inputs, outputs, fn, False)
        self.device = False
        self.device_off_reason = err.message
        return results

    def _device_call(self, inputs, outputs, fn):
        """The call when every input and result goes as a device tensor as it is (a CUDA tensor
        of the wire's dtype, contiguous, its memory known or found shareable), else _HOST, before
        anything is sent: _call then lays it out (with the same kept answers). The common case of
        a trainer's calls, without the host path's bookkeeping."""
        if self.device is not True and not self._device_on():
            return _HOST
        dts = _TORCH_DTYPES or _torch_dtypes()
        shared = self._shared
        ins, outs, ys, devices = [], [], [], []
        n = 0  # device tensors
        for a, wire in inputs:
            if a is None:
                ins.append(None)
                continue
            if not a.cuda:
                return _HOST
            x = a.obj
            eb = _lib.DTYPE_BYTES[wire]
            if (x.element_size() != 1 if eb == 1 else x.dtype != dts[wire]) or not x.is_contiguous():
                return _HOST
            nb = a.numel() * eb
            addr = x.data_ptr()
            if not nb:
                return _HOST
            if (addr, nb) in shared:
                self._tls.cached = True
            elif not self._shareable(addr, nb):
                return _HOST
            ins.append(_tensor(wire, a.shape, addr, nb, _lib.MEM_CUDA))
            n += 1
            if a.device not in devices:
                devices.append(a.device)
        empty = _torch_mod().empty
        for o in outputs:
            if o is None:
                outs.append(None)
                ys.append(None)
                continue
            ref = o.ref
            if o.shape is None or ref is None or not ref.cuda:
                return _HOST
            nb = o.nbytes()
            if not nb:
                return _HOST
            y = empty(o.shape, dtype=o._torch_dtype(), device=ref.device)
            addr = y.data_ptr()
            if (addr, nb) in shared:
                self._tls.cached = True
            elif not self._shareable(addr, nb):
                return _HOST
            # the asked shape: a reply describes the result over it; an asynchronous call leaves it
            outs.append(_tensor(0, tuple(o.shape), addr, nb, _lib.MEM_CUDA))
            ys.append(y)
            n += 1
            if ref.device not in devices:
                devices.append(ref.device)
        if not n:
            return _HOST
        self._stream_order(devices)
        rc, st = fn([byref(t) if t is not None else None for t in ins],
                    [byref(t) if t is not None else None for t in outs])
        results, rc, st = self._results(outputs, outs, ys, rc, st)
        if rc:
            raise self._error(rc, st, True)
        self.device_sent += n
        return results

    def _call(self, inputs, outputs, fn, use_device):
        self._tls.cached = False
        if use_device:
            r = self._device_call(inputs, outputs, fn)
            if r is not _HOST:
                return r
        ins = [None] * len(inputs)
        outs = [None] * len(outputs)
        finish = [None] * len(outputs)
        keep = []
        host_in, host_out = [], []
        devices = []  # the GPUs of device tensors: the call is ordered on their current streams
        n_dev = 0
        for i, (a, wire) in enumerate(inputs):
            if a is None:
                continue
            d = self.device_tensor(a, wire) if a.cuda and use_device else None
            if d is not None:
                ins[i] = d[0]
                keep.append(d[1])
                n_dev += 1
                if a.device not in devices:
                    devices.append(a.device)
            else:
                host_in.append(i)
        for j, o in enumerate(outputs):
            if o is None:
                continue
            ref = o.ref
            d = self.device_output(o) if ref is not None and ref.cuda and use_device else None
            if d is not None:
                outs[j], finish[j] = d  # the result itself (see the results below)
                n_dev += 1
                if ref.device not in devices:
                    devices.append(ref.device)
            else:
                host_out.append(j)
        if devices:
            self._stream_order(devices)
        region = None
        if host_in or host_out:
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
            inline = 0  # result bytes that come inline in the reply (None: not known)
            for j in host_out:
                if outs[j] is None:  # shape unknown: libfos allocates
                    outs[j] = _tensor(0, (), 0, 0)
                    finish[j] = _MALLOC
                    inline = None
                elif region is None and inline is not None:
                    inline += outs[j].size
            if inline is None or inline:
                self._inline_reply(inline)
            rc, st = fn([byref(t) if t is not None else None for t in ins],
                        [byref(t) if t is not None else None for t in outs])
            results, rc, st = self._results(outputs, outs, finish, rc, st)
        finally:
            if region is not None:
                self._give(region, rc not in _NO_REPLY)
        if rc:
            raise self._error(rc, st, bool(devices))
        self.device_sent += n_dev
        return results

    def _results(self, outputs, outs, finish, rc, st):
        """(results, rc, st) of a call: finish[j] makes result j (a function, _MALLOC, or the
        result itself); a result whose shape is not the expected one fails the call DATA_LOSS."""
        results = []
        for j, o in enumerate(outputs):
            t = outs[j]
            if o is None or t is None:
                results.append(None)
            elif finish[j] is _MALLOC:
                results.append(self._from_malloc(t, o, rc))
            elif rc or (t.size == 0 and t.ndim == 0):
                results.append(None)  # failed, or the reply has no such result (db)
            else:
                got = tuple(t.shape[:t.ndim])
                if got != o.shape:
                    rc, st = _lib.DATA_LOSS, _lib.Status()
                    st.message = ("the reply's result %d has shape %s, expected %s"
                                  % (j, got, o.shape)).encode()
                    results.append(None)
                else:
                    f = finish[j]
                    results.append(f() if callable(f) else f)
        return results, rc, st

    def _error(self, rc, st, device):
        e = error(rc, st.message.decode("utf-8", "replace"))
        e._device = device and not is_async_failure(e)  # device tensors were sent: call() may retry through host memory
        e._cached = self._tls.cached  # ... and were known shareable from kept answers
        return e

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
