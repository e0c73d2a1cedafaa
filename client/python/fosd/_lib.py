"""fosd._lib: loads libfos.so and declares its C API (client/libfos/fos.h) for ctypes.

Where libfos.so comes from, first match wins:
  1. $FOSD_LIBFOS (a path to the library);
  2. libfos.so next to this package (an installed package carries its own copy);
  3. in a checkout (this file at client/python/fosd/): $FOS_BUILD/libfos.so, then build/libfos.so
     of the repository;
  4. the system's loader path: "libfos.so.1" (the runtime library `make install` puts in
     PREFIX/lib; a private PREFIX needs $LD_LIBRARY_PATH), then "libfos.so".
A package installed with pip from a checkout (`pip install ./client/python`) carries no libfos.so:
it finds the one of `make install` (4.), or the build's through $FOSD_LIBFOS (1.).

In a process forked from one where libfos had connected, the loaded copy cannot be used (nng, its
transport, aborts a forked child that touches it): load() then loads another copy of the same
file, through a memfd, whose nng has never run (fresh_after_fork).

The structs below mirror fos.h field for field (tests/python/test_layout.py compiles a C program
that prints the C sizes and offsets and compares them with these). fos_stats_info is received
into a buffer with slack after it, so a header that grows at the end cannot overrun it.
"""

import ctypes
import os

# ---- status codes and option values (fos.h enums) ----------------------------------------------

CODE_NAMES = {
    0: "OK", 1: "CANCELLED", 2: "UNKNOWN", 3: "INVALID_ARGUMENT", 4: "DEADLINE_EXCEEDED",
    5: "NOT_FOUND", 6: "ALREADY_EXISTS", 7: "PERMISSION_DENIED", 8: "RESOURCE_EXHAUSTED",
    9: "FAILED_PRECONDITION", 10: "ABORTED", 11: "OUT_OF_RANGE", 12: "UNIMPLEMENTED",
    13: "INTERNAL", 14: "UNAVAILABLE", 15: "DATA_LOSS", 16: "UNAUTHENTICATED",
}
OK, INVALID_ARGUMENT, DEADLINE_EXCEEDED, NOT_FOUND = 0, 3, 4, 5
FAILED_PRECONDITION, UNAVAILABLE, CANCELLED = 9, 14, 1
PERMISSION_DENIED, RESOURCE_EXHAUSTED, UNIMPLEMENTED, DATA_LOSS = 7, 8, 12, 15
OUT_OF_RANGE = 11

DTYPE_BF16, DTYPE_F32, DTYPE_U8, DTYPE_E4M3 = 1, 2, 3, 4
DTYPE_BYTES = {DTYPE_BF16: 2, DTYPE_F32: 4, DTYPE_U8: 1, DTYPE_E4M3: 1}

OVERRIDES = {None: 0, "default": 0, "quantized": 1, "high_precision": 2, "dequantized": 3}
OVERRIDE_NAMES = {0: "default", 1: "quantized", 2: "high_precision", 3: "dequantized"}
BLOCKS = {None: 0, "1x16": 1, "16x16": 2}
BLOCK_NAMES = {0: "default", 1: "1x16", 2: "16x16"}
ERR_MODES = {None: 0, "mae": 0, "mse": 1}
ERR_NAMES = {0: "mae", 1: "mse"}
RECIPES = {None: 0, "4over6": 0, "nvfp4": 1}
# which forward operands use 4/6 (fos.FourOverSix; NUMERICS.md section 11); None: the default
FOUR_OVER_SIX = {None: 0, "all": 1, "weights": 2, "activations": 3, "none": 4}

REGION_MEMFD = 0
NAME_MAX = 128
STATS_MAX_OPS = 16
STATS_CODES = 17

c_u64, c_i64, c_int, c_char, c_double = (ctypes.c_uint64, ctypes.c_int64, ctypes.c_int,
                                         ctypes.c_char, ctypes.c_double)


class Status(ctypes.Structure):
    _fields_ = [("code", c_int), ("message", c_char * 512)]


MEM_HOST, MEM_CUDA = 0, 1  # fos_tensor.mem (enum fos_mem)
CUDA_ORDER_INPUTS, CUDA_ORDER_OUTPUTS, CUDA_ORDER_ASYNC = 1, 2, 4  # fos_set_cuda_order flags


class Tensor(ctypes.Structure):
    _fields_ = [("dtype", c_int), ("ndim", c_int), ("shape", c_i64 * 2),
                ("data", ctypes.c_void_p), ("size", ctypes.c_size_t), ("mem", c_int)]


class HealthInfo(ctypes.Structure):
    _fields_ = [("version", c_char * 32), ("backend", c_char * 16), ("device", c_char * 128),
                ("uptime_ms", c_u64), ("max_message_bytes", c_u64), ("draining", c_int)]


_LAT = ["count", "mean_us", "p50_us", "p90_us", "p99_us", "p999_us", "max_us"]


def _lat_fields(prefix):
    return [(prefix + "_count", c_u64), (prefix + "_mean_us", c_double)] + \
        [(prefix + "_" + n, c_u64) for n in _LAT[2:]]


class OpStats(ctypes.Structure):
    _fields_ = ([("op", c_char * 32), ("requests", c_u64), ("by_code", c_u64 * STATS_CODES)]
                + _lat_fields("lat") + [("bytes_in", c_u64), ("bytes_out", c_u64)]
                + _lat_fields("queue") + _lat_fields("run") + [("ran_at_once", c_u64)])


STATS_U64_FIELDS = ["cache_bytes", "cache_budget", "cache_entries", "cache_hits", "cache_misses",
                    "cache_evictions", "contexts", "context_bytes", "context_budget",
                    "contexts_expired", "contexts_evicted", "inflight", "queued", "duplicates",
                    "bad_messages", "workers", "msg_pool_taken", "msg_pool_reused",
                    "msg_pool_mapped_new", "msg_pool_bytes_free", "msg_pool_bytes_used",
                    "msg_pool_bytes_pinned", "msg_pool_pin_failures"]


class StatsInfo(ctypes.Structure):
    _fields_ = ([("uptime_ms", c_u64), ("backend", c_char * 16), ("device", c_char * 128),
                 ("n_ops", c_int), ("ops", OpStats * STATS_MAX_OPS)]
                + [(n, c_u64) for n in STATS_U64_FIELDS]
                + [("msg_pool_active", c_int), ("channels", c_u64), ("channel_requests", c_u64)])


class StatsBuffer(ctypes.Structure):
    """StatsInfo followed by slack (see the module comment)."""
    _fields_ = [("info", StatsInfo), ("_slack", ctypes.c_uint8 * 4096)]


class WeightConfig(ctypes.Structure):
    _fields_ = [("weight_block", c_int), ("err_mode", c_int), ("bound", c_int), ("pin", c_int),
                ("drop_master", c_int), ("eager_columnwise", c_int), ("uses", c_int),
                ("four_over_six", c_int)]


# fos_weight_config.uses bits (FOS_WEIGHT_USE_*), by name
WEIGHT_USES = {"forward": 1, "quantized": 2, "high_precision": 4, "dequantized": 8}


class WeightInfo(ctypes.Structure):
    _fields_ = [("name", c_char * (NAME_MAX + 1)), ("version", c_u64), ("n", c_i64), ("k", c_i64),
                ("weight_block", c_int), ("err_mode", c_int), ("bound", c_int), ("bytes", c_u64),
                ("pinned", c_int), ("has_master", c_int), ("has_columnwise", c_int),
                ("uses", c_u64), ("idle_ms", c_u64), ("weight_uses", c_int),
                ("codes_bytes", c_u64), ("columnwise_bytes", c_u64), ("master_bytes", c_u64),
                ("decoded_tier_bytes", c_u64)]


DEVICES_MAX = 64  # FOS_DEVICES_MAX: devices one fos_weight_entry lists


class DeviceInfo(ctypes.Structure):
    _fields_ = [("index", ctypes.c_uint32), ("backend", c_char * 16), ("device", c_char * 128),
                ("has_gpu_uuid", c_int), ("gpu_uuid", ctypes.c_uint8 * 16)]


class Placement(ctypes.Structure):
    _fields_ = [("devices", ctypes.POINTER(ctypes.c_uint32)), ("n_devices", ctypes.c_size_t),
                ("replicas", ctypes.c_uint32)]


class WeightEntry(ctypes.Structure):
    _fields_ = [("info", WeightInfo), ("n_devices", ctypes.c_size_t),
                ("devices", ctypes.c_uint32 * DEVICES_MAX)]


class ForwardOpts(ctypes.Structure):
    _fields_ = [("weight_version", c_u64), ("override", c_int), ("row_scaled", c_int),
                ("save_context", c_int), ("four_over_six", c_int)]


class ContextStruct(ctypes.Structure):
    _fields_ = [("id", c_u64), ("resolved_override", c_int), ("ttl_ms", c_u64),
                ("recomputed", c_int), ("weight", c_char * (NAME_MAX + 1)),
                ("weight_version", c_u64), ("override", c_int), ("row_scaled", c_int),
                ("m", c_i64), ("n", c_i64), ("k", c_i64), ("has_bias", c_int),
                ("four_over_six", c_int)]


class BackwardOpts(ctypes.Structure):
    _fields_ = [("keep_context", c_int), ("recompute_x", ctypes.POINTER(Tensor)),
                ("recompute_bias", ctypes.POINTER(Tensor))]


class QuantConfig(ctypes.Structure):
    _fields_ = [("recipe", c_int), ("block", c_int), ("err_mode", c_int), ("bound", c_int),
                ("row_scaled", c_int)]


class LinearConfig(ctypes.Structure):
    _fields_ = [("override", c_int), ("weight_block", c_int), ("err_mode", c_int),
                ("bound", c_int), ("row_scaled", c_int), ("four_over_six", c_int)]


class ConnectOpts(ctypes.Structure):
    _fields_ = [("token", ctypes.c_char_p), ("timeout_ms", c_int), ("ca_file", ctypes.c_char_p),
                ("server_name", ctypes.c_char_p), ("reput_weights", c_int)]


# the layouts the layout test checks: python name -> (C type name, struct class)
LAYOUTS = {
    "Status": ("fos_status", Status), "Tensor": ("fos_tensor", Tensor),
    "HealthInfo": ("fos_health_info", HealthInfo), "OpStats": ("fos_op_stats", OpStats),
    "StatsInfo": ("fos_stats_info", StatsInfo), "WeightConfig": ("fos_weight_config", WeightConfig),
    "WeightInfo": ("fos_weight_info", WeightInfo), "ForwardOpts": ("fos_forward_opts", ForwardOpts),
    "ContextStruct": ("fos_context", ContextStruct), "BackwardOpts": ("fos_backward_opts", BackwardOpts),
    "QuantConfig": ("fos_quant_config", QuantConfig), "LinearConfig": ("fos_linear_config", LinearConfig),
    "ConnectOpts": ("fos_connect_opts", ConnectOpts),
    "Placement": ("fos_placement", Placement), "WeightEntry": ("fos_weight_entry", WeightEntry),
    "DeviceInfo": ("fos_device_info", DeviceInfo),
}

# ---- finding and loading the library --------------------------------------------------------

_HERE = os.path.dirname(os.path.abspath(__file__))
SOVERSION = 1  # FOS_SOVERSION of proto/fos_version.h: the SONAME libfos.so.1


def candidates():
    """The paths tried, in order (see the module comment)."""
    out = []
    env = os.environ.get("FOSD_LIBFOS")
    if env:
        out.append(env)
    out.append(os.path.join(_HERE, "libfos.so"))
    repo = os.path.dirname(os.path.dirname(os.path.dirname(_HERE)))
    if os.path.isfile(os.path.join(repo, "client", "libfos", "fos.h")):
        build = os.environ.get("FOS_BUILD")
        if build:
            out.append(os.path.join(build if os.path.isabs(build) else os.path.join(repo, build),
                                    "libfos.so"))
        out.append(os.path.join(repo, "build", "libfos.so"))
    out += ["libfos.so.%d" % SOVERSION, "libfos.so"]
    return out


_lib = None
_lib_path = None  # the file _lib was loaded from
_lib_pid = None   # the process that loaded it

# fos_reput_hook: int (*)(fos_client *c, const char *name, uint64_t version, void *user)
REPUT_HOOK = ctypes.CFUNCTYPE(c_int, ctypes.c_void_p, ctypes.c_char_p, c_u64, ctypes.c_void_p)


def _declare(lib):
    P, V, I, U64, SZ, S = (ctypes.POINTER, ctypes.c_void_p, c_int, c_u64, ctypes.c_size_t,
                           ctypes.c_char_p)
    T, ST = P(Tensor), P(Status)
    sig = {
        "fos_code_name": (S, [I]),
        "fos_connect_with": (I, [S, P(ConnectOpts), P(V), ST]),
        "fos_close": (None, [V]),
        "fos_set_timeout": (None, [V, I]),
        "fos_set_spin": (None, [V, I]),
        "fos_max_message_bytes": (U64, [V]),
        "fos_reput_count": (U64, [V]),
        "fos_health": (I, [V, P(HealthInfo), ST]),
        "fos_stats": (I, [V, V, ST]),
        "fos_stats_take": (I, [V, P(V), ST]),
        "fos_stats_free": (None, [V]),
        "fos_stats_count": (SZ, [V]),
        "fos_stats_name_at": (S, [V, SZ]),
        "fos_stats_get": (I, [V, S, P(U64)]),
        "fos_stats_get_double": (I, [V, S, P(ctypes.c_double)]),
        "fos_stats_text": (S, [V, S]),
        "fos_version": (S, []),
        "fos_put_weight": (I, [V, S, U64, T, P(WeightConfig), P(WeightInfo), ST]),
        "fos_drop_weight": (I, [V, S, ST]),
        "fos_list_weights": (I, [V, P(P(WeightInfo)), P(SZ), ST]),
        "fos_forward": (I, [V, S, T, T, P(ForwardOpts), T, P(ContextStruct), ST]),
        "fos_backward": (I, [V, P(ContextStruct), T, P(BackwardOpts), T, T, T, ST]),
        "fos_release": (I, [V, P(ContextStruct), ST]),
        "fos_quantize": (I, [V, T, P(QuantConfig), T, T, T, T, ST]),
        "fos_dequantize": (I, [V, T, T, T, I, I, I, T, ST]),
        "fos_linear": (I, [V, T, T, T, T, P(LinearConfig), T, T, T, T, ST]),
        "fos_region_create": (I, [V, S, SZ, I, P(V), ST]),
        "fos_region_destroy": (I, [V, ST]),
        "fos_region_data": (V, [V]),
        "fos_region_size": (SZ, [V]),
        "fos_region_stats": (I, [V, P(U64), P(U64), P(U64), ST]),
        "fos_channel_open": (I, [V, SZ, I, ST]),
        "fos_channel_close": (I, [V, ST]),
        "fos_channel_bytes": (SZ, [V]),
        "fos_server_gpu_uuid": (I, [V, ctypes.c_char_p, ST]),
        "fos_cuda_check": (I, [V, V, SZ, ST]),
        "fos_cuda_release": (I, [V, V, ST]),
        "fos_cuda_ptr_uuid": (I, [V, ctypes.c_char_p, ST]),
    }
    # calls a libfos of an earlier release may lack (has(name) says whether this one has them)
    optional = {
        "fos_put_weight_on": (I, [V, S, U64, T, P(WeightConfig), P(Placement), P(WeightEntry), ST]),
        "fos_list_weight_entries": (I, [V, P(P(WeightEntry)), P(SZ), ST]),
        "fos_health_devices": (I, [V, P(DeviceInfo), SZ, P(SZ), ST]),
        "fos_set_cuda_order": (I, [V, V, ctypes.c_uint, ST]),
        "fos_set_reput_hook": (None, [V, REPUT_HOOK, V]),
        "fos_after_fork": (I, []),
        "fos_server_mps": (I, [V]),
        "fos_forward_put": (I, [V, S, U64, T, P(WeightConfig), T, T, P(ForwardOpts), T, P(ContextStruct), ST]),
        "fos_sync": (I, [V, ST]),
        "fos_async_count": (U64, [V]),
    }
    for name, (res, args) in list(sig.items()) + list(optional.items()):
        try:
            f = getattr(lib, name)
        except AttributeError:
            if name in optional:
                continue
            raise
        f.restype = res
        f.argtypes = args


def has(lib, name):
    """Whether the loaded libfos has the call name (see _declare's optional ones)."""
    try:
        getattr(lib, name)
    except AttributeError:
        return False
    return True


def forked(lib):
    """Whether lib (a loaded libfos) cannot be used in this process: it had connected in a process
    this one was forked from (fos_after_fork; a libfos without it: whenever it was loaded by
    another process)."""
    if has(lib, "fos_after_fork"):
        return bool(lib.fos_after_fork())
    return _lib_pid is not None and _lib_pid != os.getpid()


def _mapped_path(name):
    """The file of the loaded library name (a bare "libfos.so" the loader found), from
    /proc/self/maps; name itself when not found."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                p = line.split(None, 5)
                if len(p) == 6 and os.path.basename(p[5].strip()).startswith(name):
                    return p[5].strip()
    except OSError:
        pass
    return name


def fresh_after_fork():
    """Another copy of the libfos file loaded before the fork, from a memfd (a file the loader
    has not seen, so its nng starts afresh); becomes the one load() returns."""
    global _lib, _lib_pid
    fd = os.memfd_create("libfos.so", os.MFD_CLOEXEC)
    try:
        with open(_lib_path, "rb") as f:
            while True:
                chunk = f.read(1 << 20)
                if not chunk:
                    break
                os.write(fd, chunk)
        lib = ctypes.CDLL("/proc/self/fd/%d" % fd)
    finally:
        os.close(fd)  # the loader keeps its own mapping
    _declare(lib)
    _lib, _lib_pid = lib, os.getpid()
    return lib


def load():
    """The loaded libfos (loaded once; in a forked child where that copy cannot be used, another
    copy: fresh_after_fork); raises OSError naming every path tried."""
    global _lib, _lib_path, _lib_pid
    if _lib is not None:
        if _lib_pid == os.getpid() or not forked(_lib):
            return _lib
        return fresh_after_fork()
    tried = []
    for path in candidates():
        if os.sep in path and not os.path.isfile(path):
            tried.append("%s (no such file)" % path)
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
            continue
        _declare(lib)
        _lib, _lib_pid = lib, os.getpid()
        _lib_path = path if os.sep in path else _mapped_path(path)
        return lib
    raise OSError("fosd: cannot load libfos.so; tried: " + "; ".join(tried) +
                  ". Build it (make) and set $FOSD_LIBFOS to its path (e.g. FOSD_LIBFOS=$PWD/build/libfos.so"
                  " in the checkout), or install it (make install) where the loader finds it.")


_libc = None


def libc_free(ptr):
    """free() of the C library (lists that libfos malloc'd)."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None)
        _libc.free.argtypes = [ctypes.c_void_p]
        _libc.free.restype = None
    _libc.free(ptr)
