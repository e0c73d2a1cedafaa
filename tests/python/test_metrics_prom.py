"""fosd's HTTP endpoint read as Prometheus reads it: /metrics of a real CPU fosd (with a tokens
file) parsed by python3-prometheus-client's own text parser (prometheus_client.parser), which
refuses a malformed page. After put_weight, forwards and a NOT_FOUND from tenant alice: request
counters carry op, code and tenant labels; the latency histograms are by op and code (errors
included), their buckets cumulative with +Inf equal to _count; the parts of a request (queue,
input copy, compute, output copy) count the requests a lane ran; the process families are there;
GPU families are present and empty without NVML (a CPU host); /livez, /readyz and /healthz answer
200 with their texts, and /readyz turns 503 while fosd drains."""

import math
import os
import re
import time
import urllib.error
import urllib.request

import pytest
import torch

import fosd

parser = pytest.importorskip("prometheus_client.parser", reason="python3-prometheus-client is not installed")

SECRET = "alice-secret-0123456789abcdef"


def metrics_port(srv, timeout=10.0):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        m = re.search(r"metrics on http://127\.0\.0\.1:(\d+)", srv.log_text())
        if m:
            return int(m.group(1))
        time.sleep(0.02)
    raise AssertionError("no 'metrics on' line in fosd's log:\n" + srv.log_text())


def get(port, path):
    """(status, body) of GET path."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def families(text):
    return {f.name: f for f in parser.text_string_to_metric_families(text)}


def samples(fam, name=None, **labels):
    return [s for s in fam.samples if (name is None or s.name == name) and
            all(s.labels.get(k) == v for k, v in labels.items())]


@pytest.fixture
def metrics_fosd(start_fosd, tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text("alice %s\n" % SECRET)
    tokens.chmod(0o600)
    srv = start_fosd("--metrics-listen", "http://127.0.0.1:0", "--tokens", str(tokens))
    return srv, metrics_port(srv)


def test_metrics_parse(metrics_fosd):
    srv, port = metrics_fosd
    g = torch.Generator().manual_seed(7)
    with fosd.connect(srv.url, token=SECRET, timeout=60, shm=False) as c:
        c.put_weight("m.w", (torch.randn(128, 256, generator=g) * 0.05).to(torch.bfloat16))
        x = torch.randn(128, 256, generator=g).to(torch.bfloat16)
        for _ in range(4):
            c.forward("m.w", x)
        with pytest.raises(fosd.Error) as ei:
            c.forward("m.nope", x)
        assert ei.value.code == "NOT_FOUND"

    status, text = get(port, "/metrics")
    assert status == 200
    fams = families(text)  # raises on anything the exposition format does not allow

    req = fams["fosd_requests"]  # the parser names a counter family without _total
    assert req.type == "counter"
    ok = samples(req, "fosd_requests_total", op="forward", code="OK", tenant="alice")
    assert [s.value for s in ok] == [4.0]
    nf = samples(req, "fosd_requests_total", op="forward", code="NOT_FOUND", tenant="alice")
    assert [s.value for s in nf] == [1.0]
    assert all(set(s.labels) == {"op", "code", "tenant"} for s in req.samples)

    dur = fams["fosd_request_duration_seconds"]
    assert dur.type == "histogram"
    for code, n in (("OK", 4), ("NOT_FOUND", 1)):
        buckets = samples(dur, "fosd_request_duration_seconds_bucket", op="forward", code=code)
        les = [float(s.labels["le"]) for s in buckets]
        counts = [s.value for s in buckets]
        assert les == sorted(les) and les[-1] == math.inf
        assert counts == sorted(counts) and counts[-1] == n
        assert samples(dur, "fosd_request_duration_seconds_count", op="forward", code=code)[0].value == n
        assert samples(dur, "fosd_request_duration_seconds_sum", op="forward", code=code)[0].value > 0

    # the parts of the OK forwards a lane ran
    run = samples(fams["fosd_request_run_seconds"], "fosd_request_run_seconds_count", op="forward")[0].value
    assert run == 4
    total = 0.0
    for part in ("queue", "input_copy", "compute", "output_copy"):
        f = fams["fosd_request_%s_seconds" % part]
        assert f.type == "histogram"
        assert samples(f, "fosd_request_%s_seconds_count" % part, op="forward")[0].value == run
        if part != "queue":
            total += samples(f, "fosd_request_%s_seconds_sum" % part, op="forward")[0].value
    run_sum = samples(fams["fosd_request_run_seconds"], "fosd_request_run_seconds_sum", op="forward")[0].value
    assert run_sum - 4 * 2e-6 - 1e-9 <= total <= run_sum + 1e-9

    # the process
    assert fams["process_cpu_seconds"].type == "counter"
    assert fams["process_cpu_seconds"].samples[0].value > 0
    assert fams["process_resident_memory_bytes"].samples[0].value > 1e6
    assert fams["process_open_fds"].samples[0].value > 3
    assert abs(fams["process_start_time_seconds"].samples[0].value - time.time()) < 600

    # the GPU: NVML where the driver is, else the families without series
    nvml = fams["fosd_nvml_available"].samples[0].value
    gpu = fams["fosd_gpu_memory_total_bytes"]
    if nvml == 0:
        assert gpu.samples == []
    else:
        assert all(s.value > 0 and s.labels["uuid"] for s in gpu.samples)

    assert SECRET not in text


def test_probes(metrics_fosd):
    srv, port = metrics_fosd
    assert get(port, "/livez") == (200, "ok\n")
    assert get(port, "/readyz") == (200, "ready\n")
    assert get(port, "/healthz") == (200, "ok\n")
    assert get(port, "/nope")[0] == 404
    # a connected client keeps a draining fosd up a moment: /readyz says so, /livez stays 200
    c = fosd.connect(srv.url, token=SECRET, timeout=10, shm=False)
    c.health()
    srv.proc.send_signal(15)
    seen = None
    t0 = time.monotonic()
    while time.monotonic() - t0 < 5:
        try:
            seen = get(port, "/readyz")
        except (urllib.error.URLError, ConnectionError, OSError):
            break
        if seen[0] == 503:
            break
        time.sleep(0.005)
    c.close()
    assert seen == (503, "not ready: draining\n")
    assert srv.proc.wait(20) == 0
