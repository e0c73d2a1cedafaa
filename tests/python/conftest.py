"""conftest.py: the fixtures of the Python tests (tests/python/test_*.py, run by tests/python.mk).

* The package under test is the checkout's client/python/fosd (put first on sys.path), over
  $FOS_BUILD/libfos.so (the tests set $FOSD_LIBFOS to it unless it is set already).
* `server`: one real fosd for the session, BUILD/fosd --backend cpu --threads 2 on a private ipc
  socket in a temporary directory ($FOS_TEST_FOSD names another fosd binary, e.g. a sanitizer
  build; $FOS_TEST_BACKEND another backend), stopped with SIGTERM at the end; its log is printed
  when a test fails to start it.
* `start_fosd(*extra_args)`: a private fosd of the test's own (stopped after the test).
* `client`: a fosd.Client of `server`, closed after the test.
* `cuda_server`: a cuda fosd per test module (skipped without a GPU that torch sees);
  `cuda_torch()`: torch when it sees a CUDA GPU, else None.
* `cli(*args)`: runs BUILD/fos and returns its CompletedProcess (check=True).
* `rng`: a seeded torch generator; helpers to write and read the CLI's .npy files (bf16 as '<u2').
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "client", "python"))


def build_dir():
    b = os.environ.get("FOS_BUILD") or "build"
    return b if os.path.isabs(b) else os.path.join(REPO, b)


os.environ.setdefault("FOSD_LIBFOS", os.path.join(build_dir(), "libfos.so"))

import fosd  # noqa: E402

BACKEND = os.environ.get("FOS_TEST_BACKEND") or "cpu"


class Fosd:
    """A fosd process on ipc://DIR/fosd.sock."""

    def __init__(self, extra=(), backend=None):
        self.dir = tempfile.mkdtemp(prefix="fosd-py-")
        self.url = "ipc://%s/fosd.sock" % self.dir
        self.log = os.path.join(self.dir, "fosd.log")
        binary = os.environ.get("FOS_TEST_FOSD") or os.path.join(build_dir(), "fosd")
        # no HTTP endpoint unless extra names one: the tests' fosds run side by side
        self.argv = [binary, "--backend", backend or BACKEND, "--threads", "2", "--listen", self.url,
                     "--metrics-listen", "off"] + list(extra)
        with open(self.log, "wb") as logf:
            self.proc = subprocess.Popen(self.argv, stdout=logf, stderr=subprocess.STDOUT)
        t0 = time.monotonic()
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("fosd exited during startup (%s):\n%s" % (self.proc.returncode, self.log_text()))
            try:
                with fosd.connect(self.url, timeout=1.0, shm=False) as c:
                    self.health = c.health()
                break
            except fosd.Error:
                if time.monotonic() - t0 > 20:
                    self.kill()
                    raise RuntimeError("fosd did not answer within 20 s:\n" + self.log_text())
                time.sleep(0.02)

    def log_text(self):
        try:
            with open(self.log, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def stop(self, timeout=20):
        """SIGTERM, then the exit status (SIGKILL after timeout s)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def cleanup(self):
        rc = self.stop()
        keep = os.environ.get("FOS_TEST_KEEP")
        if not keep:
            shutil.rmtree(self.dir, ignore_errors=True)
        return rc


@pytest.fixture(scope="session")
def server():
    s = Fosd()
    yield s
    rc = s.cleanup()
    assert rc == 0, "fosd exited %s:\n%s" % (rc, s.log_text())


@pytest.fixture
def start_fosd():
    started = []

    def start(*extra, backend=None):
        s = Fosd(extra, backend)
        started.append(s)
        return s

    yield start
    for s in started:
        s.kill()
        shutil.rmtree(s.dir, ignore_errors=True)


def cuda_torch():
    """torch when it is installed and sees a CUDA GPU, else None."""
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


@pytest.fixture(scope="module")
def cuda_server():
    """A cuda fosd of the test module's own; skips without a GPU torch sees or a fosd that runs on it."""
    if cuda_torch() is None:
        pytest.skip("torch sees no CUDA GPU")
    try:
        s = Fosd(backend="cuda")
    except RuntimeError as e:
        pytest.skip("no cuda fosd: %s" % str(e).splitlines()[0])
    if s.health["backend"] != "cuda":
        s.cleanup()
        pytest.skip("fosd runs on %s" % s.health["backend"])
    yield s
    s.cleanup()


@pytest.fixture
def client(server):
    c = fosd.connect(server.url, timeout=60)
    yield c
    c.close()


def run_cli(*args, check=True):
    exe = os.path.join(build_dir(), "fos")
    return subprocess.run([exe] + [str(a) for a in args], check=check, capture_output=True, text=True)


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture
def rng():
    import torch
    return torch.Generator().manual_seed(1234)


def bits(t):
    """A torch bf16 (or any) tensor's bytes as a numpy array, for bitwise comparison."""
    import numpy as np
    import torch
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    if t.element_size() == 1 and t.dtype not in (torch.uint8, torch.int8):
        return t.view(torch.uint8).numpy()  # float8_e4m3fn scales: their bytes
    return t.numpy()


def save_bf16(path, t):
    import numpy as np
    np.save(path, bits(t))


def load_bf16(path):
    """A '<u2' .npy (bf16 bit patterns) as a torch bf16 tensor."""
    import numpy as np
    import torch
    a = np.load(path)
    assert a.dtype == np.uint16, "%s: %s" % (path, a.dtype)
    return torch.from_numpy(a.astype(np.int16)).view(torch.bfloat16)


def shape_refused(e):
    """True for fosd's refusal of a shape it does not accept yet (M, N or K not a multiple of 128):
    the any-M cases skip on it until fosd takes those shapes."""
    return (isinstance(e, fosd.Error) and e.code == "INVALID_ARGUMENT"
            and ("divisible by" in e.message or "multiple of" in e.message))


def standin_client(monkeypatch, lib, cuda_stream):
    """A Client over lib (a stand-in libfos) with device tensors on: CPU tensors stand in for CUDA
    ones (torch.cuda's current stream and device context patched), the connection's plane already
    past its checks. Returns (client, connection, stream stand-in)."""
    import contextlib
    import ctypes
    import threading
    import types

    import torch
    from fosd import _conn, _devcall, _plane, client as fclient

    stream = types.SimpleNamespace(synchronize=lambda: None, cuda_stream=cuda_stream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda dev=None: stream)
    monkeypatch.setattr(torch.cuda, "device", lambda dev: contextlib.nullcontext())
    monkeypatch.setattr(_devcall, "CUDA_ATTR", "is_cpu")
    c = fclient.Client.__new__(fclient.Client)
    c.url = "ipc:///fake"
    conn = _conn._Conn(lib, ctypes.c_void_p(1))
    conn.plane = _plane.Plane(lib, conn.handle, False, True)
    conn.plane.device = True
    conn.plane.mps_checked = True
    c._holder = [conn]
    c._weight_n, c._wmu, c._reput, c._put_pid, c._opts = {}, threading.Lock(), None, {}, {}
    c._fin = lambda: None
    return c, conn, stream
