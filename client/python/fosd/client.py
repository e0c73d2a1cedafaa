"""fosd.client: Client, one libfos handle (client/libfos/fos.h) and its shared-memory pool.

A Client is thread-safe (libfos handles are; each call borrows its own region). Every method
raises fosd.Error on any status but OK. Arrays are numpy arrays or torch tensors (fosd._arrays says
which dtypes and what results come back as); shapes are as fosd's (PROTOCOL.md): X (M, K), W (N, K),
Y and dY (M, N), bias (N,).

Transport: an ipc:// client with shared memory (the default there) opens a request channel at
connect (fos_channel_open), so its calls skip the socket; fosd.connect(channel=False) keeps them on
the socket, and a fosd that cannot give one leaves them there (channel_off_reason says why). The
results of a call are in regions or device memory, so its reply fits the channel (_plane.py).

Waiting for replies: an ipc:// client of a fosd on a GPU with device tensors on (a trainer on
fosd's host, whose thread waits for each result anyway) polls for each reply for up to
DEVICE_SPIN_US before it sleeps (fos_set_spin; unless $FOS_SPIN_US says otherwise) and asks its
channel for the same polling (fosd polls for the next request for at most its own
channel_spin_us): a call then ends when fosd's reply is written, not a futex wake-up later.
Other clients keep libfos's defaults.

Restarts and fork: the connection, its re-put of lost weights and its replacement in a forked
child are fosd._conn's.

Contexts: forward(..., save_context=True) returns a Context besides Y. A Context that is garbage
collected while still saved on fosd is released there (a finalizer), so a dropped autograd graph
does not leave contexts behind. backward(ctx, dy, x=X) recomputes an expired context from X.
"""

import ctypes
import os
import threading
import weakref

from . import _devcall, _lib
from ._arrays import Arr, Out
from ._errors import Error, check, is_async_failure
from ._conn import Connection, close_conn
from ._records import Context, WeightInfo, _entry_devices, placement  # noqa: F401 (re-exported)

DEFAULT_URL = "ipc:///tmp/fosd.sock"
# microseconds a client of a GPU fosd polls for a reply (and asks its channel to), see the top
DEVICE_SPIN_US = 2000
BF16, F32, U8, E4M3 = _lib.DTYPE_BF16, _lib.DTYPE_F32, _lib.DTYPE_U8, _lib.DTYPE_E4M3


def _opt(table, value, what):
    if isinstance(value, str):
        value = value.lower()
    if value not in table:
        names = sorted(k for k in table if k is not None)
        raise Error(_lib.INVALID_ARGUMENT, "%s: %r is not one of %s" % (what, value, ", ".join(names)))
    return table[value]


def _bound(b, what="bound"):
    if b is None:
        return 0
    if isinstance(b, bool) or not isinstance(b, int):
        raise Error(_lib.INVALID_ARGUMENT, "%s: %r is not an integer (256 or 448)" % (what, b))
    return b


def _arr(x, what, ndim=None):
    if x is None:
        return None
    a = Arr(x, what)
    if ndim is not None and len(a.shape) != ndim:
        want = {1: "1-D (N,)", 2: "2-D"}[ndim]
        raise Error(_lib.INVALID_ARGUMENT, "%s must be %s, got shape %s" % (what, want, a.shape))
    return a


def _need(x, what, ndim):
    """_arr of an array the call cannot do without."""
    if x is None:
        raise Error(_lib.INVALID_ARGUMENT, "%s is missing (None): an array is needed" % what)
    return _arr(x, what, ndim)


def _wire(a, what, accept):
    if a is None:
        return None
    w = a.wire_dtype(accept)
    if w is None:
        raise Error(_lib.INVALID_ARGUMENT, "%s: %s elements are not accepted here" % (what, a.elem))
    return w


def _s(b):
    return b.decode("utf-8", "replace")


def _n_of(w):
    """N of a weight (N, K) given as an Arr or an array."""
    return w.shape[0] if type(w) is Arr else int(w.shape[0])


def _no_nul(v, what):
    """A str argument handed to C as a NUL-terminated string: a NUL byte would cut it there."""
    if isinstance(v, (str, bytes)) and ("\0" if isinstance(v, str) else b"\0") in v:
        raise Error(_lib.INVALID_ARGUMENT, "%s %r contains a NUL byte" % (what, v))
    return v


def _u64(v, what):
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 1 << 64:
        raise Error(_lib.INVALID_ARGUMENT, "%s must be an integer 0 .. 2^64-1, got %r" % (what, v))
    return v


def _backward_layout(lib, h, s, dy, keep, need_dx, need_dw, ax=None, ab=None):
    """Plane.call's (inputs, outputs, fn) of Client.backward's fos_backward of context structure s
    (with ax, the Arr of X, and ab, of the bias or None: recomputed from them)."""
    ad = _need(dy, "dy", 2)
    m, n = ad.shape
    k = s.k
    outs = [Out((m, k), BF16, ad) if need_dx else None, Out((n, k), BF16, ad) if need_dw else None,
            Out((n,), BF16, ad) if s.has_bias else None]
    bo = _lib.BackwardOpts(keep, None, None)
    ins = [(ad, _wire(ad, "dy", (BF16,)))]
    if ax is not None:
        ins.append((ax, _wire(ax, "x", (BF16,))))
        ins.append((ab, _wire(ab, "bias", (BF16,))))

    def fn(i, o):
        st = _lib.Status()
        if ax is not None:
            bo.recompute_x = ctypes.pointer(i[1]._obj)
            bo.recompute_bias = ctypes.pointer(i[2]._obj) if i[2] is not None else None
        return lib.fos_backward(h, ctypes.byref(s), i[0], ctypes.byref(bo), o[0], o[1], o[2],
                                ctypes.byref(st)), st

    return ins, outs, fn


class Client(Connection):
    """A connection to fosd (see fosd.connect)."""

    def __init__(self, url=None, token=None, timeout=30.0, tls_ca=None, server_name=None, *,
                 reput_weights=None, shm=None, channel=None, channel_spin_us=None, device_tensors=True,
                 spin_us=None, async_calls=True):
        self.url = _no_nul(url or os.environ.get("FOS_SERVER") or DEFAULT_URL, "url")
        if token is None:
            token = os.environ.get("FOS_TOKEN") or None
        _no_nul(token, "token")
        _no_nul(tls_ca, "tls_ca")
        _no_nul(server_name, "server_name")
        self._keep = [x.encode() if isinstance(x, str) else x for x in (token, tls_ca, server_name)]
        self._opts = dict(timeout_ms=self._ms(timeout), reput_weights=reput_weights, shm=shm, channel=channel,
                          channel_spin_us=channel_spin_us, device_tensors=device_tensors, spin_us=spin_us,
                          async_calls=async_calls)
        self._weight_n = {}
        self._wmu = threading.Lock()
        # what a weight fosd lost is put again from (reput_weights not False): name -> (Arr, version,
        # fos_weight_config, placement, torch in-place version at the put or None)
        self._reput = {} if reput_weights is not False else None
        self._put_pid = {}  # name -> the process that last put it through this client
        self._holder = [None]
        self._holder[0] = self._connect()
        self._fin = weakref.finalize(self, close_conn, self._holder)

    @staticmethod
    def _ms(timeout):
        if timeout is None:
            return 0
        ms = int(round(float(timeout) * 1000))
        if not 0 < ms < 1 << 31:
            raise Error(_lib.INVALID_ARGUMENT, "timeout must be positive seconds, at most %d, got %r"
                        % (((1 << 31) - 1) // 1000, timeout))
        return ms

    @staticmethod
    def _check_spin(spin_us):
        if isinstance(spin_us, bool) or not isinstance(spin_us, int) or not 0 <= spin_us < 1 << 31:
            raise Error(_lib.INVALID_ARGUMENT, "spin_us must be an integer 0 .. 2^31-1, got %r" % (spin_us,))

    @property
    def _handle(self):
        return self._holder[0].handle

    def _h(self):
        h = self._conn().handle
        if h is None:
            raise Error(_lib.FAILED_PRECONDITION, "the client is closed")
        return h

    # ---- lifetime ----

    def close(self):
        """Releases the shared-memory regions and the connection. Contexts still saved on fosd
        stay until their TTL (close the client after their backward or release)."""
        self._fin()

    @property
    def closed(self):
        return self._holder[0].handle is None

    def __enter__(self):
        return self

    # a Client is a connection: copies share it, and it cannot be pickled
    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __reduce__(self):
        raise TypeError("a fosd.Client cannot be pickled (pickle a model's state_dict, or build its "
                        "layers with client=None to use fosd.default_client())")

    def __exit__(self, *exc):
        self.close()

    def set_timeout(self, seconds):
        ms = self._ms(seconds)
        self._lib.fos_set_timeout(self._h(), ms)
        self._opts["timeout_ms"] = ms  # a connection made after a fork takes it too

    def set_spin(self, spin_us):
        """How long each call polls for its reply before it sleeps (microseconds, 0: it sleeps at
        once; a call on a channel polls for the larger of this and the channel's spin)."""
        self._check_spin(spin_us)
        self._lib.fos_set_spin(self._h(), spin_us)
        self._opts["spin_us"] = spin_us

    @property
    def reput_count(self):
        return self._lib.fos_reput_count(self._h())

    @property
    def shm(self):
        """True while tensors go through shared memory (False: inline; see shm_off_reason)."""
        return self._plane.shm

    @property
    def shm_off_reason(self):
        return self._plane.shm_off_reason

    @property
    def device_tensors(self):
        """True once a CUDA tensor went to fosd in place (fosd runs on a GPU), False when fosd has
        none or device_tensors=False, None before any CUDA tensor was seen."""
        return self._plane.device

    @property
    def device_off_reason(self):
        """Why the last CUDA tensor took the host path (None: none did)."""
        return self._plane.device_off_reason

    @property
    def device_tensors_sent(self):
        """CUDA tensors (inputs and results) fosd read or wrote in place through this client."""
        return self._plane.device_sent

    @property
    def async_calls(self):
        """True while device-tensor calls may return before fosd answers (FOS_CUDA_ORDER_ASYNC;
        False: see async_off_reason)."""
        return self._plane.async_calls

    @property
    def async_off_reason(self):
        return self._plane.async_off_reason

    @property
    def async_calls_made(self):
        """Calls of this client that returned before fosd answered (libfos's fos_async_count)."""
        lib = self._lib
        return lib.fos_async_count(self._h()) if _lib.has(lib, "fos_async_count") else 0

    def synchronize(self):
        """Waits until every asynchronous call made through this client is answered by fosd (its
        GPU work queued in its stream's order: synchronize the stream to wait for the work itself),
        and raises the first failure of one not yet reported, as fosd.AsyncError naming the op and
        request id. Nothing to wait for without asynchronous calls (a libfos without fos_sync)."""
        lib = self._lib
        if not _lib.has(lib, "fos_sync"):
            return
        st = _lib.Status()
        check(lib.fos_sync(self._h(), ctypes.byref(st)), st)

    @property
    def fused_put(self):
        """True while a changed weight's put travels inside the forward that needs it
        (fos_forward_put: one round trip); False: see fused_put_off_reason."""
        from ._torch_ops import fused_put  # needs torch; the Client itself does not
        return fused_put(self)

    @property
    def fused_put_off_reason(self):
        return getattr(self, "_fused_off", None) or None

    def release_device_memory(self, tensor):
        """Tells fosd to close its mapping of the CUDA allocation holding tensor (a torch tensor or a
        device address); fosd keeps a mapping, and so the allocation's memory, until then or until
        the client closes. Returns False when no device tensor of that allocation was sent."""
        addr = tensor.data_ptr() if hasattr(tensor, "data_ptr") else int(tensor)
        st = _lib.Status()
        self._plane.forget_checks()  # the memory may be freed and allocated anew
        rc = self._lib.fos_cuda_release(self._h(), addr, ctypes.byref(st))
        if rc == _lib.NOT_FOUND:
            return False
        check(rc, st)
        return True

    def open_channel(self, nbytes=0, spin_us=0):
        """A request channel (fos_channel_open): same-host requests skip the socket. nbytes: the
        channel's size (0: libfos's 4 MiB); spin_us: how long each side polls before it sleeps
        (0: fosd's default)."""
        st = _lib.Status()
        check(self._lib.fos_channel_open(self._h(), nbytes, spin_us, ctypes.byref(st)), st)
        self._plane.channel_off_reason = None

    def close_channel(self):
        st = _lib.Status()
        check(self._lib.fos_channel_close(self._h(), ctypes.byref(st)), st)
        self._plane.channel_off_reason = "closed (close_channel)"

    @property
    def channel(self):
        """True while the connection has a request channel open (see channel_off_reason)."""
        conn = self._holder[0]
        return conn.handle is not None and conn.lib.fos_channel_bytes(conn.handle) > 0

    @property
    def channel_off_reason(self):
        """Why the connection has no request channel (None: it has one, or never asked)."""
        return self._plane.channel_off_reason

    # ---- health, stats, regions ----

    def health(self):
        info = _lib.HealthInfo()
        st = _lib.Status()
        check(self._lib.fos_health(self._h(), ctypes.byref(info), ctypes.byref(st)), st)
        return {"version": _s(info.version), "backend": _s(info.backend), "device": _s(info.device),
                "uptime_ms": info.uptime_ms, "max_message_bytes": info.max_message_bytes,
                "draining": bool(info.draining)}

    def health_devices(self):
        """The devices fosd serves (fosd --devices; one for a fosd without), in index order: dicts
        of "index" (what put_weight's devices name), "backend", "device" and "gpu_uuid" (16 bytes,
        None without a GPU)."""
        if not _lib.has(self._lib, "fos_health_devices"):
            raise Error(_lib.UNIMPLEMENTED, "health_devices: this libfos has no fos_health_devices "
                        "(a libfos of an earlier release)")
        h = self._h()
        n = ctypes.c_size_t()
        st = _lib.Status()
        check(self._lib.fos_health_devices(h, None, 0, ctypes.byref(n), ctypes.byref(st)), st)
        while True:
            arr = (_lib.DeviceInfo * max(n.value, 1))()
            rc = self._lib.fos_health_devices(h, arr, len(arr), ctypes.byref(n), ctypes.byref(st))
            if rc != _lib.OUT_OF_RANGE:  # OUT_OF_RANGE: more devices than a moment ago
                check(rc, st)
                break
        return [{"index": d.index, "backend": _s(d.backend), "device": _s(d.device),
                 "gpu_uuid": bytes(d.gpu_uuid) if d.has_gpu_uuid else None} for d in arr[:n.value]]

    def stats(self):
        """fosd's Stats as a dict of every value fosd sends (libfos's named snapshot, so counters
        added to fosd appear without a change here): top-level counters by their fos.proto names,
        "backend" and "device"; "ops" maps an op name to its counts ("requests", "bytes_in", ...),
        "by_code" (code name -> requests, nonzero only) and latencies "lat_*", "queue_*", "run_*"
        (count, mean_us, p50_us, p90_us, p99_us, p999_us, max_us)."""
        snap = ctypes.c_void_p()
        st = _lib.Status()
        check(self._lib.fos_stats_take(self._h(), ctypes.byref(snap), ctypes.byref(st)), st)
        try:
            out, ops = {}, {}
            lat = {"latency": "lat", "queue": "queue", "run": "run"}
            d = ctypes.c_double()
            for i in range(self._lib.fos_stats_count(snap)):
                raw = self._lib.fos_stats_name_at(snap, i)
                name = raw.decode()
                text = self._lib.fos_stats_text(snap, raw)
                if text is not None:
                    value = text.decode(errors="replace")
                else:
                    u = ctypes.c_uint64()
                    if self._lib.fos_stats_get(snap, raw, ctypes.byref(u)) == 0:
                        value = u.value
                    else:
                        self._lib.fos_stats_get_double(snap, raw, ctypes.byref(d))
                        value = d.value
                parts = name.split(".")
                if parts[0] != "ops" or len(parts) < 3:
                    out[name] = value
                    continue
                o = ops.setdefault(parts[1], {"by_code": {}})
                if parts[2] == "codes" and len(parts) == 5:
                    if value:
                        o["by_code"][parts[3]] = value
                elif parts[2] in lat and len(parts) == 4:
                    o["%s_%s" % (lat[parts[2]], parts[3])] = value
                elif len(parts) == 3:
                    o[parts[2]] = value
            out["msg_pool_active"] = bool(out.get("msg_pool_active", 0))
            out["ops"] = ops
            return out
        finally:
            self._lib.fos_stats_free(snap)

    def region_stats(self):
        """fosd's shared-memory regions over all connections: (regions, bytes, mapped bytes)."""
        a, b, c = ctypes.c_uint64(), ctypes.c_uint64(), ctypes.c_uint64()
        st = _lib.Status()
        check(self._lib.fos_region_stats(self._h(), ctypes.byref(a), ctypes.byref(b), ctypes.byref(c),
                                         ctypes.byref(st)), st)
        return a.value, b.value, c.value

    # ---- the weight cache ----

    def put_weight(self, name, w, version=1, weight_block="16x16", err="mae", bound=256, *,
                   pin=False, drop_master=False, eager_columnwise=False, uses=None, devices=None,
                   replicas=0, four_over_six=None):
        """Quantizes w (N, K) once and caches it as (name, version); returns its WeightInfo.

        uses: what the weight serves, names out of "forward", "quantized", "high_precision",
        "dequantized" (None: all); it keeps only what they need (PROTOCOL.md "Weight uses").
        devices, replicas: where a fosd serving several devices (fosd --devices) keeps copies
        (PROTOCOL.md "Devices"): devices, a list of device indices (health_devices lists
        them); or replicas, a number of devices fosd picks; not both. Neither: the devices
        of the name's current copies, else the least loaded one. The WeightInfo's devices say
        where it went. four_over_six: the scope W is quantized for, "all" (None), "weights",
        "activations" or "none" (NUMERICS.md section 11); forwards default to it."""
        a = _need(w, "w", 2)
        cfg = self._weight_config(weight_block, err, bound, pin, drop_master, eager_columnwise, uses,
                                  four_over_six)
        pl = placement(devices, replicas)
        _u64(version, "version")
        if pl is None and not _lib.has(self._lib, "fos_put_weight_on"):
            info = _lib.WeightInfo()
            self._put(name, self._name(name), a, version, cfg, info)
            return WeightInfo(info)
        entry = _lib.WeightEntry()
        self._put(name, self._name(name), a, version, cfg, entry=entry, placement=pl)
        return WeightInfo(entry.info, _entry_devices(entry))

    @staticmethod
    def _weight_config(weight_block="16x16", err="mae", bound=256, pin=False, drop_master=False,
                       eager_columnwise=False, uses=None, four_over_six=None):
        """The fos_weight_config of put_weight's options (checked)."""
        ubits = 0
        if uses is not None:
            if isinstance(uses, str):
                uses = uses.split(",")
            for u in uses:
                if u not in _lib.WEIGHT_USES or ubits & _lib.WEIGHT_USES[u]:
                    raise Error(_lib.INVALID_ARGUMENT, "uses: %r is not one of %s (each once)"
                                % (u, ", ".join(_lib.WEIGHT_USES)))
                ubits |= _lib.WEIGHT_USES[u]
            if not ubits:
                raise Error(_lib.INVALID_ARGUMENT, "uses is empty")
        return _lib.WeightConfig(_opt(_lib.BLOCKS, weight_block, "weight_block"),
                                 _opt(_lib.ERR_MODES, err, "err"), _bound(bound), int(bool(pin)),
                                 int(bool(drop_master)), int(bool(eager_columnwise)), ubits,
                                 _opt(_lib.FOUR_OVER_SIX, four_over_six, "four_over_six"))

    def _put(self, name, bname, a, version, cfg, info=None, entry=None, placement=None):
        """The put of Arr a (N, K) as (name, version) with a checked fos_weight_config; bname is
        name encoded. info: a fos_weight_info to fill (None: libfos fills none). With a placement
        (fosd.client.placement) or an entry (a fos_weight_entry to fill): fos_put_weight_on."""
        h = self._h()
        lib = self._lib
        on = placement is not None or entry is not None
        if on and not _lib.has(lib, "fos_put_weight_on"):
            raise Error(_lib.UNIMPLEMENTED, "devices, replicas: this libfos has no fos_put_weight_on "
                        "(a libfos of an earlier release)")
        target = entry if on else info
        ref = ctypes.byref(target) if target is not None else None
        pref = ctypes.byref(placement) if placement is not None else None

        def fn(i, o):
            st = _lib.Status()
            if on:
                return lib.fos_put_weight_on(h, bname, version, i[0], ctypes.byref(cfg), pref, ref,
                                             ctypes.byref(st)), st
            return lib.fos_put_weight(h, bname, version, i[0], ctypes.byref(cfg), ref, ctypes.byref(st)), st

        self._plane.call([(a, _wire(a, "w", (BF16,)))], [], fn)
        self._put_done(name, a, version, cfg, placement)

    def _put_done(self, name, a, version, cfg, placement):
        """The bookkeeping of a put of a (an Arr or an array) that succeeded."""
        self._weight_n[name] = _n_of(a)  # one dict store: atomic
        self._put_pid[name] = os.getpid()
        if self._reput is not None:  # kept for a fosd that loses it (restart, eviction): a reference
            if type(a) is not Arr:
                a = _arr(a, "w", 2)
            self._reput[name] = (a, version, cfg, placement, a.obj._version if a.torch else None)

    @staticmethod
    def _name(name):
        if not isinstance(name, str):
            raise Error(_lib.INVALID_ARGUMENT, "a weight name must be a str, got %r" % (name,))
        _no_nul(name, "weight name")
        return name.encode()

    def drop_weight(self, name):
        """Drops weight name from fosd's cache. In a forked child, a weight this client put in the
        parent is the parent's: FAILED_PRECONDITION (drop it there)."""
        bname = self._name(name)
        pid = self._put_pid.get(name)
        if pid is not None and pid != os.getpid():
            raise Error(_lib.FAILED_PRECONDITION, "weight %r was put through this client by process %d, "
                        "which this one was forked from: it is that process's to drop" % (name, pid))
        st = _lib.Status()
        with self._wmu:
            self._weight_n.pop(name, None)
        if self._reput is not None:
            self._reput.pop(name, None)
        self._put_pid.pop(name, None)
        check(self._lib.fos_drop_weight(self._h(), bname, ctypes.byref(st)), st)

    def list_weights(self):
        """The tenant's cached weights, most recently used first (each once, its devices saying
        where its copies are)."""
        entries = _lib.has(self._lib, "fos_list_weight_entries")
        p = ctypes.POINTER(_lib.WeightEntry if entries else _lib.WeightInfo)()
        n = ctypes.c_size_t()
        st = _lib.Status()
        f = self._lib.fos_list_weight_entries if entries else self._lib.fos_list_weights
        check(f(self._h(), ctypes.byref(p), ctypes.byref(n), ctypes.byref(st)), st)
        try:
            out = [WeightInfo(p[i].info, _entry_devices(p[i])) if entries else WeightInfo(p[i])
                   for i in range(n.value)]
        finally:
            if p:
                _lib.libc_free(ctypes.cast(p, ctypes.c_void_p))
        with self._wmu:
            for w in out:
                self._weight_n[w.name] = w.n
        return out

    # ---- forward / backward ----

    def forward(self, name, x, bias=None, override=None, row_scaled=False, save_context=False,
                version=0, four_over_six=None):
        """y (M, N) = x (M, K) W^T [+ bias] with the cached weight name (version 0: whichever is
        cached, else it must match). save_context: also return the Context for backward.
        four_over_six: "all", "weights", "activations" or "none" (None: the weight's scope)."""
        if getattr(x, _devcall.CUDA_ATTR, False) and x.dim() == 2 and (bias is None or bias.dim() == 1):
            ax, ab = x, bias  # checked as Arrs only if they take the general layout (_forward)
        else:
            ax, ab = _need(x, "x", 2), _arr(bias, "bias", 1)
        return self._forward(name, self._name(name), ax, ab, _u64(version, "version"),
                             _opt(_lib.OVERRIDES, override, "override"), int(bool(row_scaled)),
                             bool(save_context), _opt(_lib.FOUR_OVER_SIX, four_over_six, "four_over_six"))

    def _forward(self, name, bname, x, bias, version, override, row_scaled, save_context, scope=0, put=None):
        """forward with its arguments checked: bname (name encoded), x (2-D) and bias (1-D or None)
        as arrays or Arrs, the option codes of fos_forward_opts (scope: its four_over_six).
        put: (w, cfg), the weight put as (name, version) inside the forward (fos_forward_put;
        cfg a checked fos_weight_config), or None. Device tensors take fosd._devcall's fast path."""
        conn = self._conn()
        h, lib, plane = conn.handle, conn.lib, conn.plane
        if h is None:
            raise Error(_lib.FAILED_PRECONDITION, "the client is closed")
        ctx = _lib.ContextStruct() if save_context else None
        n = self._weight_n.get(name) if put is None else _n_of(put[0])
        if n is None:  # a weight another client put: its N from the list, so Y has a buffer
            try:
                self.list_weights()
            except Error:
                pass
            n = self._weight_n.get(name)
        xt = x.obj if type(x) is Arr else x
        bt = bias.obj if type(bias) is Arr else bias
        wt = put and (put[0].obj if type(put[0]) is Arr else put[0])

        def slow():
            ax = x if type(x) is Arr else _arr(x, "x", 2)
            ab = bias if type(bias) is Arr or bias is None else _arr(bias, "bias", 1)
            fo = _lib.ForwardOpts(version, override, row_scaled, 1 if save_context else 0, scope)
            rctx = ctypes.byref(ctx) if ctx is not None else None
            ins = [(ax, _wire(ax, "x", (BF16,))), (ab, _wire(ab, "bias", (BF16,)))]
            if put is not None:
                aw = put[0] if type(put[0]) is Arr else _arr(put[0], "w", 2)
                ins.append((aw, _wire(aw, "w", (BF16,))))

            def fn(i, o):
                st = _lib.Status()
                if put is not None:
                    return lib.fos_forward_put(h, bname, version, i[2], ctypes.byref(put[1]), i[0], i[1],
                                               ctypes.byref(fo), o[0], rctx, ctypes.byref(st)), st
                return lib.fos_forward(h, bname, i[0], i[1], ctypes.byref(fo), o[0], rctx, ctypes.byref(st)), st

            return ins, [Out((ax.shape[0], n) if n is not None else None, BF16, ax)], fn

        (y,) = plane.call_fast(_devcall.forward, (plane, lib, h, bname, xt, bt, n, version, override, row_scaled,
                                                  ctx, scope, put and (wt, put[1])), slow)
        if put is not None:
            self._put_done(name, put[0], version, put[1], None)
        if save_context:
            return y, Context(self, ctx)
        return y

    def backward(self, ctx, dy, keep_context=False, x=None, bias=None, need_dx=True, need_dw=True):
        """(dx, dw, db) from dy (M, N) and a saved Context (db None when the forward had no
        bias). The context is consumed unless keep_context. If it has expired (or was consumed),
        x (and bias) of the forward recompute it, against the same weight version. need_dx /
        need_dw False: that gradient is not computed (fosd skips its GEMM) and comes back None."""
        if not isinstance(ctx, Context):
            raise Error(_lib.INVALID_ARGUMENT, "ctx must be a fosd Context (from forward with save_context)")
        s = ctx._struct
        conn = self._conn()
        h, lib, plane = conn.handle, conn.lib, conn.plane
        if h is None:
            raise Error(_lib.FAILED_PRECONDITION, "the client is closed")
        keep = 1 if keep_context else 0
        try:
            if getattr(dy, _devcall.CUDA_ATTR, False) and dy.dim() == 2:
                args = (plane, lib, h, s, dy, s.k, s.has_bias, need_dx, need_dw, keep)
                dx, dw, db = plane.call_fast(_devcall.backward, args, _backward_layout,
                                             (lib, h, s, dy, keep, need_dx, need_dw))
            else:
                dx, dw, db = plane.call(*_backward_layout(lib, h, s, dy, keep, need_dx, need_dw))
        except Error as e:
            if e.code_number != _lib.NOT_FOUND or x is None or is_async_failure(e):
                raise
            # the context expired or was consumed: send X (and bias) and let libfos recompute it
            dx, dw, db = plane.call(*_backward_layout(lib, h, s, dy, keep, need_dx, need_dw, _arr(x, "x", 2),
                                                      _arr(bias, "bias", 1)))
        return dx, dw, db

    def release(self, ctx):
        """Frees a saved context on fosd now (nothing to do once consumed or released)."""
        if not isinstance(ctx, Context):
            raise Error(_lib.INVALID_ARGUMENT, "ctx must be a fosd Context")
        if not ctx._struct.id:
            return
        st = _lib.Status()
        check(self._lib.fos_release(self._h(), ctypes.byref(ctx._struct), ctypes.byref(st)), st)

    # ---- stateless ops ----

    def linear(self, x, w, dy=None, bias=None, override=None, weight_block="16x16", row_scaled=False,
               err="mae", bound=256, four_over_six=None):
        """One linear layer without the cache: {"y"} and with dy also "dx", "dw" (and "db" with a
        bias). four_over_six: "all" (None), "weights", "activations" or "none"."""
        ax, aw, ad, ab = _need(x, "x", 2), _need(w, "w", 2), _arr(dy, "dy", 2), _arr(bias, "bias", 1)
        cfg = _lib.LinearConfig(_opt(_lib.OVERRIDES, override, "override"),
                                _opt(_lib.BLOCKS, weight_block, "weight_block"),
                                _opt(_lib.ERR_MODES, err, "err"), _bound(bound), int(bool(row_scaled)),
                                _opt(_lib.FOUR_OVER_SIX, four_over_six, "four_over_six"))
        m, k = ax.shape
        n = aw.shape[0]
        outs = [Out((m, n), BF16, ax)]
        if ad is not None:
            outs += [Out((m, k), BF16, ax), Out((n, k), BF16, aw),
                     Out((n,), BF16, ab) if ab is not None else None]
        h = self._h()

        def fn(i, o):
            st = _lib.Status()
            o = o + [None] * (4 - len(o))
            return self._lib.fos_linear(h, i[0], i[1], i[2], i[3], ctypes.byref(cfg), o[0], o[1], o[2],
                                        o[3], ctypes.byref(st)), st

        res = self._plane.call([(ax, _wire(ax, "x", (BF16,))), (aw, _wire(aw, "w", (BF16,))),
                                (ab, _wire(ab, "bias", (BF16,))), (ad, _wire(ad, "dy", (BF16,)))],
                               outs, fn)
        out = {"y": res[0]}
        if ad is not None:
            out["dx"], out["dw"] = res[1], res[2]
            if ab is not None:
                out["db"] = res[3]
        return out

    def quantize(self, x, recipe="4over6", block="1x16", err="mae", bound=None, row_scaled=False,
                 amax=None):
        """x (rows, cols) bf16 or float32 -> (codes uint8 (rows, cols/2), scales e4m3
        (rows, cols/16), amax float32 (1,) or (rows,)). amax: use it instead of max|x|."""
        ax, aa = _need(x, "x", 2), _arr(amax, "amax", 1)
        cfg = _lib.QuantConfig(_opt(_lib.RECIPES, recipe, "recipe"), _opt(_lib.BLOCKS, block, "block"),
                               _opt(_lib.ERR_MODES, err, "err"), _bound(bound), int(bool(row_scaled)))
        rows, cols = ax.shape
        if cols % 16:
            raise Error(_lib.INVALID_ARGUMENT, "x (%d, %d): cols must be a multiple of 16" % (rows, cols))
        outs = [Out((rows, cols // 2), U8, ax), Out((rows, cols // 16), E4M3, ax),
                Out((rows if row_scaled else 1,), F32, ax)]
        h = self._h()

        def fn(i, o):
            st = _lib.Status()
            return self._lib.fos_quantize(h, i[0], ctypes.byref(cfg), i[1], o[0], o[1], o[2],
                                          ctypes.byref(st)), st

        codes, scales, am = self._plane.call(
            [(ax, _wire(ax, "x", (BF16, F32))), (aa, _wire(aa, "amax", (F32,)))], outs, fn)
        return codes, scales, am

    def dequantize(self, codes, scales, amax, bound=256, row_scaled=False, dtype="bf16"):
        """(rows, cols) of dtype ("bf16" or "float32") from codes, scales and amax."""
        ac, asc, aa = _need(codes, "codes", 2), _need(scales, "scales", 2), _need(amax, "amax", 1)
        odt = {"bf16": BF16, "bfloat16": BF16, "f32": F32, "float32": F32}.get(str(dtype).lower())
        if odt is None:
            raise Error(_lib.INVALID_ARGUMENT, "dtype: %r is not one of bf16, float32" % (dtype,))
        rows, half = ac.shape
        out = Out((rows, half * 2), odt, ac)
        if not ac.torch and odt == BF16:
            out.ref = None  # numpy codes: bf16 comes back as uint16 bit patterns
        h = self._h()

        def fn(i, o):
            st = _lib.Status()
            return self._lib.fos_dequantize(h, i[0], i[1], i[2], _bound(bound), int(bool(row_scaled)),
                                            odt, o[0], ctypes.byref(st)), st

        (y,) = self._plane.call([(ac, _wire(ac, "codes", (U8,))), (asc, _wire(asc, "scales", (E4M3,))),
                                 (aa, _wire(aa, "amax", (F32,)))], [out], fn)
        return y


def connect(url=None, token=None, timeout=30.0, tls_ca=None, server_name=None, **kw):
    """A Client connected to url (default $FOS_SERVER, then ipc:///tmp/fosd.sock). token: the
    tenant's secret (default $FOS_TOKEN). timeout: seconds for the connect and every call.
    tls_ca, server_name: for tls+tcp:// URLs. Keywords: reput_weights (when fosd lost a weight this
    client put, after a restart or an eviction: None, the default, puts it again from a reference
    to the array it was put from; True from a private copy libfos keeps; False not at all; see
    client/python/README.md "When fosd restarts, and after fork"), shm (tensors through shared memory; default: on for ipc://),
    channel (a request channel, so that calls skip the socket: True opens one or raises, False
    never; default None: opened whenever shm is on, and the socket is used when fosd cannot
    give one, channel_off_reason saying why), channel_spin_us (how long both sides of the channel
    poll before they sleep, at most 1000000, fosd's side at most its channel_spin_us; 0: fosd's
    default, 50; default None: DEVICE_SPIN_US for an ipc:// fosd on a GPU with device tensors on,
    else 0),
    device_tensors (CUDA tensors read and written by fosd in place when it runs on their GPU;
    default on), spin_us (how long every call polls for its reply before it sleeps, see
    Client.set_spin; default None: DEVICE_SPIN_US for an ipc:// fosd on a GPU with device tensors
    on unless $FOS_SPIN_US is set, else libfos's $FOS_SPIN_US or 0), async_calls (device-tensor
    calls return before fosd answers where libfos can, FOS_CUDA_ORDER_ASYNC, their failures raised
    by the next call or Client.synchronize as fosd.AsyncError; default on)."""
    return Client(url, token, timeout, tls_ca, server_name, **kw)
