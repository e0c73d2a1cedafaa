"""fosd._conn: the libfos handle under a Client, and what happens to it when fosd restarts or the
process forks (client/python/README.md "When fosd restarts, and after fork").

A Client (the Connection mixin) holds one _Conn in a one-item list (its finalizer's too): the libfos
copy it came from, the handle, its region pool (Plane), the process that made it and the re-put
hook libfos holds. Every call reaches libfos through Connection._conn(), which in a forked child
replaces the parent's _Conn with a new connection (through a fresh copy of libfos.so, _lib.load)
before anything touches it; the parent's is abandoned, never closed, unregistered or released
from the child (close_conn). When fosd lost a weight the client put (a restart, an eviction),
libfos calls the hook, which puts it again from the client's reference to the array it was put
from (Connection._reput_one).
"""

import ctypes
import os
import threading
import weakref

from . import _lib
from ._errors import Error, check
from ._plane import Plane


def _s(b):
    return b.decode("utf-8", "replace")


class _Conn:
    """One libfos handle of a Client and what belongs to it: the libfos copy it came from, its
    region pool (Plane), the process that made it, and the re-put hook libfos holds."""

    __slots__ = ("lib", "handle", "plane", "pid", "hook")

    def __init__(self, lib, handle):
        self.lib, self.handle, self.plane, self.pid, self.hook = lib, handle, None, os.getpid(), None


def close_conn(holder):
    """Closes the Client's current handle (close(), or its finalizer). One made by another
    process (the parent of a fork) is abandoned untouched: nng cannot be used in a forked child,
    and the parent's regions and channel must stay its own."""
    conn = holder[0]
    if conn is None or conn.handle is None:
        return
    h, conn.handle = conn.handle, None
    if conn.pid != os.getpid():
        return
    if conn.plane is not None:
        conn.plane.close()
    conn.lib.fos_close(h)


# the lock of a reconnect after fork: a new one in each child (a parent's thread may hold it)
_fork_lock = threading.Lock()


def _fork_child():
    global _fork_lock
    _fork_lock = threading.Lock()


os.register_at_fork(after_in_child=_fork_child)


def _reput_hook(ref):
    """The fos_reput_hook of a Client (ref: a weakref to it): libfos calls it when fosd lost a
    weight this client put (Client._reput_one)."""

    def hook(_c, name, version, _user):
        try:
            client = ref()
            return client._reput_one(name, version) if client is not None else _lib.NOT_FOUND
        except BaseException:  # never let an exception cross into C
            return 13  # INTERNAL

    return _lib.REPUT_HOOK(hook)


class Connection:
    """The connection part of Client (see the module comment); Client sets url, _keep (token,
    tls_ca, server_name as bytes), _opts, _reput and _holder before calling _connect."""

    def _connect(self):
        """A new _Conn with the client's options (at construction, and in a forked child)."""
        o, opts = _lib.ConnectOpts(), self._opts
        o.token, o.ca_file, o.server_name = self._keep
        o.timeout_ms = opts["timeout_ms"]
        o.reput_weights = 1 if opts["reput_weights"] else 0
        lib = _lib.load()
        h = ctypes.c_void_p()
        st = _lib.Status()
        check(lib.fos_connect_with(self.url.encode(), ctypes.byref(o), ctypes.byref(h), ctypes.byref(st)), st)
        conn = _Conn(lib, h)
        try:
            self._setup(conn)
        except BaseException:
            close_conn([conn])
            raise
        return conn

    def _setup(self, conn):
        from .client import DEVICE_SPIN_US  # fosd.client's (imported here: client imports this module)

        lib, h, opts = conn.lib, conn.handle, self._opts
        shm = opts["shm"]
        if shm is None:
            shm = self.url.startswith("ipc://")
        conn.plane = plane = Plane(lib, h, shm, opts["device_tensors"], opts.get("async_calls", True))
        if self._reput is not None and _lib.has(lib, "fos_set_reput_hook"):
            conn.hook = _reput_hook(weakref.ref(self))
            lib.fos_set_reput_hook(h, conn.hook, None)
        # a trainer's client (fosd on a GPU, device tensors on) polls for its replies: see the top
        trainer = bool(opts["device_tensors"]) and self.url.startswith("ipc://") and \
            lib.fos_server_gpu_uuid(h, None, ctypes.byref(_lib.Status())) == _lib.OK
        spin_us = opts["spin_us"]
        if spin_us is None and trainer and not os.environ.get("FOS_SPIN_US"):
            spin_us = DEVICE_SPIN_US
        if spin_us is not None:
            self._check_spin(spin_us)
            lib.fos_set_spin(h, spin_us)
        channel, channel_spin_us = opts["channel"], opts["channel_spin_us"]
        if channel_spin_us is None:
            channel_spin_us = DEVICE_SPIN_US if trainer else 0
        if channel is None:  # the default: a channel where results go into regions (ipc://)
            if plane.shm:
                st = _lib.Status()
                rc = lib.fos_channel_open(h, 0, int(channel_spin_us), ctypes.byref(st))
                if rc == _lib.INVALID_ARGUMENT:  # channel_spin_us out of range
                    check(rc, st)
                if rc != _lib.OK:
                    plane.channel_off_reason = _s(st.message)  # calls take the socket
            else:
                plane.channel_off_reason = "no shared memory (%s)" % plane.shm_off_reason
        elif channel:
            st = _lib.Status()
            check(lib.fos_channel_open(h, 0, int(channel_spin_us), ctypes.byref(st)), st)
        else:
            plane.channel_off_reason = "turned off (channel=False)"

    def _conn(self):
        """The current _Conn; in a forked child, a new connection in place of the parent's (made
        at the first use after the fork)."""
        conn = self._holder[0]
        if conn.pid != os.getpid() and conn.handle is not None:
            conn = self._after_fork()
        return conn

    def _after_fork(self):
        with _fork_lock:
            old = self._holder[0]
            if old.pid == os.getpid() or old.handle is None:
                return old
            self._wmu = threading.Lock()  # a parent's thread may have held it at the fork
            try:
                conn = self._connect()
            except (Error, OSError) as e:
                raise Error(_lib.FAILED_PRECONDITION, "this client was connected by process %d, which this "
                            "process was forked from; connecting again here failed: %s" % (old.pid, e))
            self._holder[0] = conn  # the parent's handle is abandoned, never touched (close_conn)
            return conn

    @property
    def _lib(self):
        return self._conn().lib

    @property
    def _plane(self):
        return self._conn().plane

    def _reput_one(self, bname, version):
        """Puts weight bname (bytes) again after fosd lost it (the re-put hook): the tensor, version,
        config and placement of its last put through this client, when version is 0 or that one
        and a torch tensor was not changed in place since. A status code."""
        name = bname.decode("utf-8", "replace")
        e = self._reput.get(name) if self._reput is not None else None
        if e is None:
            return _lib.NOT_FOUND
        a, ver, cfg, pl, tver = e
        if version and version != ver:
            return _lib.NOT_FOUND
        if tver is not None and a.obj._version != tver:
            return _lib.FAILED_PRECONDITION  # changed in place: not the bits put as that version
        try:
            self._put(name, bname, a, ver, cfg, placement=pl)
        except Error as err:
            return err.code_number
        return _lib.OK
