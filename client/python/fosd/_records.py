"""fosd._records: what the Client hands back besides arrays: WeightInfo (a weight in fosd's cache),
Context (a forward's saved context, released on fosd when garbage collected while still saved
there) and placement() (the fos_placement of put_weight's devices and replicas, checked). Split
from fosd.client, which re-exports them."""

import ctypes
import os

from . import _lib
from ._errors import Error


def _s(b):
    return b.decode("utf-8", "replace")


class WeightInfo:
    """A weight in fosd's cache (put_weight, list_weights)."""

    __slots__ = ("name", "version", "n", "k", "weight_block", "err", "bound", "bytes", "pinned",
                 "has_master", "has_columnwise", "uses", "idle_ms", "weight_uses", "codes_bytes",
                 "columnwise_bytes", "master_bytes", "decoded_tier_bytes", "devices")

    def __init__(self, s, devices=None):
        self.name = _s(s.name)
        self.version = s.version
        self.n, self.k = s.n, s.k
        self.weight_block = _lib.BLOCK_NAMES.get(s.weight_block, str(s.weight_block))
        self.err = _lib.ERR_NAMES.get(s.err_mode, str(s.err_mode))
        self.bound = s.bound
        self.bytes = s.bytes
        self.pinned, self.has_master, self.has_columnwise = (bool(s.pinned), bool(s.has_master),
                                                             bool(s.has_columnwise))
        self.uses, self.idle_ms = s.uses, s.idle_ms
        # what it was put for, and its bytes by part (PROTOCOL.md "Weight uses")
        self.weight_uses = tuple(u for u, b in _lib.WEIGHT_USES.items() if s.weight_uses & b)
        self.codes_bytes, self.columnwise_bytes = s.codes_bytes, s.columnwise_bytes
        self.master_bytes, self.decoded_tier_bytes = s.master_bytes, s.decoded_tier_bytes
        # the indices of the devices holding a copy (PROTOCOL.md "Devices"; bytes are one copy's),
        # None where libfos does not say (a libfos without fos_list_weight_entries)
        self.devices = devices

    def __repr__(self):
        return "WeightInfo(%s)" % ", ".join("%s=%r" % (k, getattr(self, k)) for k in self.__slots__)


def _entry_devices(e):
    return tuple(e.devices[i] for i in range(min(e.n_devices, _lib.DEVICES_MAX)))


def _u32(v, what):
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 1 << 32:
        raise Error(_lib.INVALID_ARGUMENT, "%s: %r is not a device index or count (an integer 0 .. 2^32-1)"
                    % (what, v))
    return v


def placement(devices=None, replicas=0):
    """The fos_placement of put_weight's devices and replicas (checked), or None for the default
    (neither given). Keeps its device array alive as ._keep."""
    if replicas is None:
        replicas = 0
    if devices is None and not replicas:
        _u32(replicas, "replicas")
        return None
    if devices is not None and replicas:
        raise Error(_lib.INVALID_ARGUMENT, "devices and replicas: give one of them, not both")
    pl = _lib.Placement()
    if devices is not None:
        if isinstance(devices, (str, bytes)) or not hasattr(devices, "__iter__"):
            raise Error(_lib.INVALID_ARGUMENT, "devices: %r is not a list of device indices" % (devices,))
        idx = [_u32(d, "devices") for d in devices]
        if not idx:
            raise Error(_lib.INVALID_ARGUMENT, "devices is empty (None: the default placement)")
        arr = (ctypes.c_uint32 * len(idx))(*idx)
        pl.devices, pl.n_devices = ctypes.cast(arr, ctypes.POINTER(ctypes.c_uint32)), len(idx)
        pl._keep = arr
    else:
        pl.replicas = _u32(replicas, "replicas")
    return pl


def _release_ctx(c, struct, pid):
    """Finalizer of a Context: release it on fosd if it is still saved there (not from a forked
    child: the context is its parent's)."""
    conn = c._holder[0]
    if not struct.id or pid != os.getpid() or conn is None or conn.handle is None or conn.pid != pid:
        return
    st = _lib.Status()
    try:
        conn.lib.fos_release(conn.handle, ctypes.byref(struct), ctypes.byref(st))
    except Exception:  # a finalizer must not raise (interpreter shutdown)
        pass


class Context:
    """A forward's saved context on fosd. .id is 0 once consumed by backward or released; one
    still saved when the Context is garbage collected is released on fosd then (__del__, cheaper
    per forward than a weakref.finalize)."""

    __slots__ = ("_struct", "_client", "_pid", "__weakref__")

    def __init__(self, client, struct, pid=None):
        self._struct = struct
        self._client = client
        self._pid = pid or os.getpid()

    def __del__(self):
        try:
            if self._struct.id:
                _release_ctx(self._client, self._struct, self._pid)
        except Exception:  # interpreter shutdown: nothing to release into
            pass

    @property
    def id(self):
        return self._struct.id

    @property
    def saved(self):
        return self._struct.id != 0

    resolved_override = property(lambda s: _lib.OVERRIDE_NAMES.get(s._struct.resolved_override))
    ttl_ms = property(lambda s: s._struct.ttl_ms)
    recomputed = property(lambda s: s._struct.recomputed)
    weight = property(lambda s: _s(s._struct.weight))
    weight_version = property(lambda s: s._struct.weight_version)
    m = property(lambda s: s._struct.m)
    n = property(lambda s: s._struct.n)
    k = property(lambda s: s._struct.k)
    has_bias = property(lambda s: bool(s._struct.has_bias))

    def __repr__(self):
        return "Context(id=%d, weight=%r, version=%d, m=%d, n=%d, k=%d)" % (
            self.id, self.weight, self.weight_version, self.m, self.n, self.k)
