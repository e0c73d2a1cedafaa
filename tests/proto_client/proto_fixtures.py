"""proto_fixtures.py: the pytest fixtures of the protocol test client's tests (test_proto_client.py
imports them; not a conftest.py, whose module name would shadow tests/python's conftest when
tests/python/run.sh collects both directories in one session).

* `fos`: the message classes, built from proto/fos.proto by fosproto.load_messages (once).
* `server`: one real fosd for the session, $FOS_BUILD/fosd --backend cpu --threads 2 with a tokens
  file (tenant "pc", secret `server.token`) listening on ipc://DIR/fosd.sock and tcp://127.0.0.1:0
  (the port read from its log); ready once a Health over the SP framing answers. SIGTERM at the
  end, which must exit 0. $FOS_TEST_FOSD names another fosd binary (e.g. a sanitizer build).
* `start_fosd(*args)`: a private fosd on ipc of the test's own, killed after the test.
Every fosd serves its HTTP endpoint on a free port (`--metrics-listen http://127.0.0.1:0`).
* `cli(*args)`: runs $FOS_BUILD/fos (libfos's client) and returns its CompletedProcess.
Nothing here loads libfos or nng into the test process.
"""

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

import fosproto

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

TOKEN = b"pc-secret-0123456789abcdef"


def build_dir():
    b = os.environ.get("FOS_BUILD") or "build"
    return b if os.path.isabs(b) else os.path.join(REPO, b)


@pytest.fixture(scope="session")
def fos(tmp_path_factory):
    try:
        import google.protobuf  # noqa: F401
    except ImportError:
        pytest.fail("no python3-protobuf (apt-get install python3-protobuf; deploy/install-deps.sh installs it)")
    return fosproto.load_messages(os.path.join(REPO, "proto", "fos.proto"), str(tmp_path_factory.mktemp("proto")))


class Fosd:
    """A fosd process on ipc://DIR/fosd.sock (and whatever else `extra` asks for)."""

    def __init__(self, fos, extra=()):
        self.dir = tempfile.mkdtemp(prefix="fosd-proto-")
        self.path = os.path.join(self.dir, "fosd.sock")
        self.url = "ipc://" + self.path
        self.log = os.path.join(self.dir, "fosd.log")
        binary = os.environ.get("FOS_TEST_FOSD") or os.path.join(build_dir(), "fosd")
        # the HTTP endpoint on a free port: several fosds run at once
        argv = [binary, "--backend", "cpu", "--threads", "2", "--listen", self.url,
                "--metrics-listen", "http://127.0.0.1:0"] + list(extra)
        with open(self.log, "wb") as logf:
            self.proc = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT)
        t0 = time.monotonic()
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("fosd exited during startup (%s):\n%s" % (self.proc.returncode, self.log_text()))
            try:
                with fosproto.Connection(self.url, timeout=2.0) as c:
                    rq = fos["fos.Request"](id=1)
                    rq.health.SetInParent()
                    self.health = c.call(fos, rq)[0].health
                break
            except fosproto.ProtoError:
                if time.monotonic() - t0 > 20:
                    self.kill()
                    raise RuntimeError("fosd did not answer within 20 s:\n" + self.log_text())
                time.sleep(0.02)
        m = re.search(r"listening on tcp://\S+ \(port (\d+)\)", self.log_text())
        self.tcp_url = "tcp://127.0.0.1:%s" % m.group(1) if m else None

    def log_text(self):
        try:
            with open(self.log, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def stop(self, timeout=20):
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


@pytest.fixture(scope="session")
def server(fos):
    d = tempfile.mkdtemp(prefix="fosd-proto-tokens-")
    tokens = os.path.join(d, "tokens")
    fd = os.open(tokens, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(b"pc " + TOKEN + b"\n")
    s = Fosd(fos, ["--listen", "tcp://127.0.0.1:0", "--tokens", tokens])
    s.token = TOKEN
    yield s
    rc = s.stop()
    log = s.log_text()
    if not os.environ.get("FOS_TEST_KEEP"):
        shutil.rmtree(s.dir, ignore_errors=True)
        shutil.rmtree(d, ignore_errors=True)
    assert rc == 0, "fosd exited %s:\n%s" % (rc, log)


@pytest.fixture
def start_fosd(fos):
    started = []

    def start(*extra):
        s = Fosd(fos, extra)
        started.append(s)
        return s

    yield start
    for s in started:
        s.kill()
        shutil.rmtree(s.dir, ignore_errors=True)


@pytest.fixture
def cli():
    def run(*args, check=True):
        exe = os.path.join(build_dir(), "fos")
        return subprocess.run([exe] + [str(a) for a in args], check=check, capture_output=True, text=True)
    return run
