"""fosd._mps: the warning a trainer gets when its process shares fosd's GPU without NVIDIA MPS.

Every process on a GPU has its own CUDA context, and the GPU switches contexts whenever work passes
between a trainer and fosd: about 0.14 ms of GPU time a switch on an H200 without MPS, 6.9 us with
it (bench/BENCHMARKS.md session 7), several per training step. MPS runs the work of every client
process in one shared context (README.md "Sharing a GPU with trainers: MPS").

check() runs once per connection, at its first call with device tensors (fosd._plane,
Plane._stream_order, with the GPUs of that call's CUDA tensors), and warns, once per process, with
a PerformanceWarning when one of those GPUs is one fosd runs on (the UUID torch gives the device is
among the GPU UUIDs of fosd's Health) and
  * fosd is not under MPS (Health's mps is off), or
  * fosd is and this process is not (the CUDA driver's cudaDevAttrMpsEnabled in this process: a
    trainer started without fosd's CUDA_MPS_PIPE_DIRECTORY, or as another user).
Never for a cpu fosd, another GPU, or when fosd cannot tell (mps unknown, or a libfos without
fos_server_mps). The package does not use the logging module; the warning goes through warnings.
Silence it with warnings.filterwarnings("ignore", category=fosd.PerformanceWarning).
Invariant: check never raises and never fails the call it runs in.
"""

import ctypes
import os
import sys
import threading
import warnings

from . import _lib

# HealthResult.Mps (fos_wire_enums.h FOS_MPS_*)
MPS_UNKNOWN, MPS_NOT_APPLICABLE, MPS_OFF, MPS_ON = 0, 1, 2, 3
_CU_DEVICE_ATTRIBUTE_MPS_ENABLED = 133  # cuda.h: contexts created on this device are shared via MPS

_HERE = os.path.dirname(os.path.abspath(__file__))
_lock = threading.Lock()
_warned = False  # once per process
_cuda = None  # libcuda.so.1 (False: not loadable)


class PerformanceWarning(UserWarning):
    """fosd works, but slower than it could (e.g. a GPU shared with fosd without MPS)."""


_COST = ("the GPU switches between this process's CUDA context and fosd's at every call, about "
         "0.1-0.15 ms of GPU time a switch (bench/BENCHMARKS.md session 7: 142 us a hand-off "
         "without MPS, 6.9 us with it), several per training step")
_HOWTO = ("Turn MPS on: start `nvidia-cuda-mps-control -d` before fosd and the trainers, all as one "
          "user with the same CUDA_MPS_PIPE_DIRECTORY (README.md \"Sharing a GPU with trainers: "
          "MPS\"; `make run` and deploy/nvidia-mps.service do it). Silence this with "
          "warnings.filterwarnings(\"ignore\", category=fosd.PerformanceWarning).")


def uuid_str(u):
    """16 bytes as NVIDIA's tools write a GPU UUID: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx."""
    h = u.hex()
    return "GPU-%s-%s-%s-%s-%s" % (h[:8], h[8:12], h[12:16], h[16:20], h[20:])


def decide(server_mps, server_uuids, local_uuid, local_mps, where="this GPU"):
    """The warning's text for these facts, or None: server_mps (MPS_*) and server_uuids (16-byte
    UUIDs of fosd's GPUs) from fosd's Health; local_uuid (16 bytes, None: unknown) the GPU of this
    process's CUDA tensors; local_mps (True, False, None: unknown) whether this process is an MPS
    client on it; where names that GPU in the text."""
    if local_uuid is None or local_uuid not in server_uuids:
        return None
    gpu = "%s (%s)" % (where, uuid_str(local_uuid))
    if server_mps == MPS_OFF:
        return ("this process runs CUDA work on %s, a GPU fosd runs on, and fosd is not under NVIDIA "
                "MPS: %s. %s" % (gpu, _COST, _HOWTO))
    if server_mps == MPS_ON and local_mps is False:
        return ("fosd runs under NVIDIA MPS but this process, on %s, a GPU fosd runs on, does not: %s. "
                "Start this process with fosd's CUDA_MPS_PIPE_DIRECTORY, as fosd's user, so that it "
                "joins fosd's MPS server. %s" % (gpu, _COST, _HOWTO))
    return None


def server_facts(plane):
    """(mps, set of 16-byte GPU UUIDs) of the plane's fosd, from one Health (fos_health_devices;
    fos_server_gpu_uuid's device 0 with a libfos without it). mps is MPS_UNKNOWN with a libfos
    without fos_server_mps."""
    lib, h = plane._lib, plane._handle
    if not _lib.has(lib, "fos_server_mps"):
        return MPS_UNKNOWN, set()
    uuids = set()
    st = _lib.Status()
    if _lib.has(lib, "fos_health_devices"):
        n = ctypes.c_size_t()
        arr = (_lib.DeviceInfo * 64)()
        rc = lib.fos_health_devices(h, arr, len(arr), ctypes.byref(n), ctypes.byref(st))
        if rc in (_lib.OK, _lib.OUT_OF_RANGE):
            uuids = {bytes(d.gpu_uuid) for d in arr[:min(n.value, len(arr))] if d.has_gpu_uuid}
    if not uuids:
        u = ctypes.create_string_buffer(16)
        if lib.fos_server_gpu_uuid(h, u, ctypes.byref(st)) == _lib.OK:
            uuids = {u.raw[:16]}
    return lib.fos_server_mps(h), uuids


def _ordinal(device):
    """The CUDA ordinal of a torch device (its index, else the current device)."""
    import torch
    idx = getattr(device, "index", device)
    return torch.cuda.current_device() if idx is None else int(idx)


def local_uuid(device):
    """The 16-byte UUID of a torch CUDA device (torch 2.x's device properties), None if unknown."""
    import torch
    u = getattr(torch.cuda.get_device_properties(_ordinal(device)), "uuid", None)
    if u is None:
        return None
    raw = getattr(u, "bytes", None)
    if raw is not None:
        return bytes(bytearray(raw))
    s = str(u)
    s = (s[4:] if s.startswith("GPU-") else s).replace("-", "")
    try:
        b = bytes.fromhex(s)
    except ValueError:
        return None
    return b if len(b) == 16 else None


def local_mps(device):
    """Whether this process's contexts on a torch CUDA device are MPS clients (the driver's
    cudaDevAttrMpsEnabled through libcuda.so.1), None when the driver cannot tell."""
    global _cuda
    if _cuda is None:
        try:
            _cuda = ctypes.CDLL("libcuda.so.1")
        except OSError:
            _cuda = False
    if not _cuda:
        return None
    dev, val = ctypes.c_int(), ctypes.c_int()
    if (_cuda.cuInit(0) or _cuda.cuDeviceGet(ctypes.byref(dev), _ordinal(device)) or
            _cuda.cuDeviceGetAttribute(ctypes.byref(val), _CU_DEVICE_ATTRIBUTE_MPS_ENABLED, dev)):
        return None
    return bool(val.value)


def _stacklevel():
    """warnings.warn's stacklevel naming the first frame outside this package (the user's call)."""
    f, level = sys._getframe(1), 1  # the caller's frame: stacklevel 1 names it
    while f is not None and os.path.dirname(os.path.abspath(f.f_code.co_filename)) == _HERE:
        f = f.f_back
        level += 1
    return level


def _warn(text):
    global _warned
    with _lock:
        if _warned:
            return False
        _warned = True
    warnings.warn(text, PerformanceWarning, stacklevel=_stacklevel())
    return True


def check(plane, devices):
    """Warns (once per process) when this call's CUDA devices share a GPU with fosd without MPS
    (see the module comment). Returns True: the caller need not check this connection again."""
    if _warned:
        return True
    try:
        mps, uuids = server_facts(plane)
        if mps not in (MPS_OFF, MPS_ON):
            return True
        for dev in devices:
            text = decide(mps, uuids, local_uuid(dev), local_mps(dev) if mps == MPS_ON else None,
                          "cuda:%d" % _ordinal(dev))
            if text:
                _warn(text)
                break
    except Exception:  # noqa: BLE001 -- a hint only: whatever fails here never fails the call
        pass
    return True
