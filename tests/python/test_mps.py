"""test_mps.py: the warning of fosd._mps (a process sharing fosd's GPU without NVIDIA MPS), with
fosd's Health answer and this process's GPU faked where a CPU host has none:

* decide(): a warning when this process's GPU is one of fosd's and fosd's mps is off, or fosd's is
  on and this process is not an MPS client; none when both are under MPS, for another GPU, for a
  cpu fosd (not applicable), when fosd cannot tell, or when the local GPU is unknown;
* check(): warns once per process (a second connection, a second GPU: nothing more), with
  fosd.PerformanceWarning (a UserWarning, shown by default, silenced by its category), naming the
  cost and the README section; a fact that cannot be had never fails the call;
* against the real cpu fosd: libfos's fos_server_mps says not applicable and names no GPU, so
  check() stays silent whatever this process's GPU; Plane._stream_order runs the check once per
  connection (the hook).
"""

import os
import warnings

import pytest

import fosd
from fosd import _mps

GPU_A = bytes(range(16))
GPU_B = bytes(range(16, 32))


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    monkeypatch.setattr(_mps, "_warned", False)


def test_decide_table():
    on, off, na, unknown = _mps.MPS_ON, _mps.MPS_OFF, _mps.MPS_NOT_APPLICABLE, _mps.MPS_UNKNOWN
    fosd_gpus = {GPU_A, GPU_B}
    # same GPU, fosd without MPS: warns whatever this process is
    for local in (True, False, None):
        assert "fosd is not under NVIDIA MPS" in _mps.decide(off, fosd_gpus, GPU_A, local)
    # fosd under MPS: warns only when this process is known not to be
    assert "but this process" in _mps.decide(on, fosd_gpus, GPU_B, False)
    assert _mps.decide(on, fosd_gpus, GPU_B, True) is None
    assert _mps.decide(on, fosd_gpus, GPU_B, None) is None
    # another GPU, an unknown local GPU, a cpu fosd, fosd cannot tell
    assert _mps.decide(off, {GPU_B}, GPU_A, False) is None
    assert _mps.decide(off, fosd_gpus, None, False) is None
    assert _mps.decide(na, set(), GPU_A, False) is None
    assert _mps.decide(unknown, fosd_gpus, GPU_A, False) is None


def test_text_says_cost_and_way_out():
    t = _mps.decide(_mps.MPS_OFF, {GPU_A}, GPU_A, None, "cuda:3")
    assert "cuda:3 (GPU-00010203-0405-0607-0809-0a0b0c0d0e0f)" in t
    assert "0.1-0.15 ms of GPU time" in t and "session 7" in t
    assert "nvidia-cuda-mps-control -d" in t and "CUDA_MPS_PIPE_DIRECTORY" in t
    assert 'README.md "Sharing a GPU with trainers: MPS"' in t
    assert "fosd.PerformanceWarning" in t


def fake_facts(monkeypatch, mps, fosd_gpus, gpus, local_mps=None):
    """fosd's Health answer and this process's GPUs (device index -> UUID) faked."""
    monkeypatch.setattr(_mps, "server_facts", lambda plane: (mps, set(fosd_gpus)))
    monkeypatch.setattr(_mps, "local_uuid", lambda dev: gpus[dev])
    monkeypatch.setattr(_mps, "local_mps", lambda dev: local_mps)
    monkeypatch.setattr(_mps, "_ordinal", lambda dev: dev)


def test_warns_once_same_gpu_without_mps(monkeypatch):
    fake_facts(monkeypatch, _mps.MPS_OFF, [GPU_A], {0: GPU_A, 1: GPU_A})
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert _mps.check(object(), [0]) is True
        assert _mps.check(object(), [1]) is True  # another connection: already warned
        assert _mps.check(object(), [0]) is True
    assert len(w) == 1, [str(x.message) for x in w]
    assert issubclass(w[0].category, fosd.PerformanceWarning)
    assert issubclass(fosd.PerformanceWarning, UserWarning)  # shown by default
    assert "cuda:0" in str(w[0].message)
    assert w[0].filename == __file__  # names the user's line, not the package's


def test_second_gpu_of_the_call_is_fosds(monkeypatch):
    fake_facts(monkeypatch, _mps.MPS_OFF, [GPU_B], {0: GPU_A, 1: GPU_B})
    with pytest.warns(fosd.PerformanceWarning, match="cuda:1"):
        _mps.check(object(), [0, 1])


def test_this_process_outside_fosds_mps(monkeypatch):
    fake_facts(monkeypatch, _mps.MPS_ON, [GPU_A], {0: GPU_A}, local_mps=False)
    with pytest.warns(fosd.PerformanceWarning, match="this process, on cuda:0"):
        _mps.check(object(), [0])


@pytest.mark.parametrize("mps,fosd_gpus,local_mps", [
    (_mps.MPS_ON, [GPU_A], True),             # both under MPS
    (_mps.MPS_ON, [GPU_A], None),             # fosd under MPS, this process cannot tell
    (_mps.MPS_OFF, [GPU_B], None),            # fosd on another GPU
    (_mps.MPS_NOT_APPLICABLE, [], None),      # a cpu fosd
    (_mps.MPS_UNKNOWN, [GPU_A], False),       # fosd cannot tell
])
def test_never(monkeypatch, mps, fosd_gpus, local_mps):
    fake_facts(monkeypatch, mps, fosd_gpus, {0: GPU_A}, local_mps)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _mps.check(object(), [0]) is True
    assert _mps._warned is False


def test_filtered_by_category(monkeypatch):
    fake_facts(monkeypatch, _mps.MPS_OFF, [GPU_A], {0: GPU_A})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", category=fosd.PerformanceWarning)
        _mps.check(object(), [0])


def test_facts_that_fail_never_fail_the_call(monkeypatch):
    def broken(plane):
        raise fosd.Error(14, "fosd went away")
    monkeypatch.setattr(_mps, "server_facts", broken)
    assert _mps.check(object(), [0]) is True
    fake_facts(monkeypatch, _mps.MPS_OFF, [GPU_A], {})  # the local GPU's lookup fails (KeyError)
    assert _mps.check(object(), [0]) is True


def test_local_uuid_forms(monkeypatch):
    torch = pytest.importorskip("torch")

    class Props:
        def __init__(self, uuid):
            self.uuid = uuid

    class Uuid:  # torch 2.x's _CUuuid: bytes, and str() as 8-4-4-4-12 hex
        bytes = list(GPU_A)

    class StrOnly:
        def __str__(self):
            return "GPU-10111213-1415-1617-1819-1a1b1c1d1e1f"

    for props, want in ((Props(Uuid()), GPU_A), (Props(StrOnly()), GPU_B), (object(), None)):
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i, p=props: p)
        assert _mps.local_uuid(2) == want


def test_cpu_fosd_real(client, monkeypatch):
    """libfos's answer from the real cpu fosd: not applicable, no GPU; check stays silent."""
    plane = client._plane
    assert client._lib.fos_server_mps(client._h()) == _mps.MPS_NOT_APPLICABLE
    assert _mps.server_facts(plane) == (_mps.MPS_NOT_APPLICABLE, set())
    monkeypatch.setattr(_mps, "local_uuid", lambda dev: GPU_A)
    monkeypatch.setattr(_mps, "local_mps", lambda dev: False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _mps.check(plane, [0]) is True


def test_hook_once_per_connection(client, monkeypatch):
    """Plane._stream_order (every call with device tensors) runs the check once per connection."""
    pytest.importorskip("torch")
    calls = []
    monkeypatch.setattr(_mps, "check", lambda plane, devices: calls.append(list(devices)) or True)
    plane = client._plane
    plane.stream_order = False  # no GPU here: the path that synchronizes each device (none given)
    plane._stream_order([])
    plane._stream_order([])
    assert calls == [[]]


# ---- on a GPU (the device run; skipped elsewhere) ----------------------------------------------------


def _cuda_fosd(monkeypatch, pipe):
    """A cuda fosd started with CUDA_MPS_PIPE_DIRECTORY=pipe (this process's environment untouched
    after), or a skip."""
    from conftest import Fosd
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", pipe)
    try:
        s = Fosd(backend="cuda")
    except RuntimeError as e:
        pytest.skip("no cuda fosd: %s" % str(e).splitlines()[0])
    finally:
        monkeypatch.delenv("CUDA_MPS_PIPE_DIRECTORY")
    if s.health["backend"] != "cuda":
        s.cleanup()
        pytest.skip("fosd runs on %s" % s.health["backend"])
    return s


def _first_device_call(url):
    """A Linear with CUDA tensors on a new connection (its first device-tensor call), the warnings
    it raised, and the facts _mps gathered through the real libfos, torch and driver."""
    import torch
    dev = torch.device("cuda", 0)
    x = torch.randn(64, 128, device=dev).to(torch.bfloat16)
    w = torch.randn(64, 128, device=dev).to(torch.bfloat16)
    with fosd.connect(url, timeout=120) as c, warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        c.linear(x, w)
        assert c.device_tensors_sent > 0, c.device_off_reason
        facts = _mps.server_facts(c._plane)
    return [x for x in got if issubclass(x.category, fosd.PerformanceWarning)], facts


def test_gpu_warning_without_mps(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA GPU")
    s = _cuda_fosd(monkeypatch, str(tmp_path))  # an empty pipe directory: no daemon there
    try:
        got, (mps, uuids) = _first_device_call(s.url)
    finally:
        s.cleanup()
    assert mps == _mps.MPS_OFF
    assert _mps.local_uuid(0) in uuids  # torch's UUID of cuda:0 is fosd's GPU's
    assert len(got) == 1 and "fosd is not under NVIDIA MPS" in str(got[0].message), [str(x.message) for x in got]


def test_gpu_fosd_under_mps_this_process_not(tmp_path, monkeypatch):
    """fosd under a private MPS daemon, this process (started without its pipe directory) not: the
    warning says so when the driver can tell; nothing when it cannot."""
    torch = pytest.importorskip("torch")
    import shutil
    import subprocess
    if not torch.cuda.is_available() or not shutil.which("nvidia-cuda-mps-control"):
        pytest.skip("needs a GPU and nvidia-cuda-mps-control")
    env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=str(tmp_path / "pipe"),
               CUDA_MPS_LOG_DIRECTORY=str(tmp_path / "log"))
    os.makedirs(env["CUDA_MPS_PIPE_DIRECTORY"])
    os.makedirs(env["CUDA_MPS_LOG_DIRECTORY"])
    subprocess.run(["nvidia-cuda-mps-control", "-d"], env=env, check=True)
    try:
        s = _cuda_fosd(monkeypatch, env["CUDA_MPS_PIPE_DIRECTORY"])
        try:
            got, (mps, uuids) = _first_device_call(s.url)
        finally:
            s.cleanup()
    finally:
        subprocess.run(["nvidia-cuda-mps-control"], input=b"quit\n", env=env, check=False)
    assert mps == _mps.MPS_ON and _mps.local_uuid(0) in uuids
    local = _mps.local_mps(0)
    assert local in (False, None)  # this process never saw the pipe directory
    if local is False:
        assert len(got) == 1 and "but this process" in str(got[0].message)
    else:
        assert got == []
