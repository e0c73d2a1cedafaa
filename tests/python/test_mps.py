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
