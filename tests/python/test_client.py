"""fosd.Client against a real CPU fosd: health, stats, the weight cache, forward/backward equal to
the one-shot Linear bit for bit, numpy and torch inputs giving the same bits with results of the
input's kind, shared memory and inline giving the same bits, quantize/dequantize equal to the
CLI's, contexts (keep, release, recompute, the finalizer), a request channel, threads, and the
`python3 -m fosd health` smoke command."""

import os
import subprocess
import sys
import threading

import numpy as np
import pytest
import torch

import fosd
from conftest import REPO, bits


def rand_bf16(g, *shape, scale=1.0):
    return (torch.randn(*shape, generator=g) * scale).to(torch.bfloat16)


def u16(t):
    """torch bf16 -> numpy uint16 bit patterns."""
    return bits(t)


def test_health_and_stats(client):
    h = client.health()
    assert h["backend"] == os.environ.get("FOS_TEST_BACKEND", "cpu") and h["version"] and not h["draining"]
    assert h["max_message_bytes"] > 0
    s = client.stats()
    assert s["backend"] == h["backend"] and "forward" in s["ops"] and s["ops"]["health"]["requests"] >= 1
    assert s["workers"] >= 1 and isinstance(s["ops"]["health"]["by_code"], dict)


def test_weight_cache(client, rng):
    w = rand_bf16(rng, 256, 128)
    info = client.put_weight("t.cache", w, version=3, weight_block="1x16", err="mse", bound=448)
    assert (info.name, info.version, info.n, info.k) == ("t.cache", 3, 256, 128)
    assert (info.weight_block, info.err, info.bound) == ("1x16", "mse", 448)
    listed = {x.name: x for x in client.list_weights()}
    assert listed["t.cache"].version == 3 and listed["t.cache"].n == 256
    x = rand_bf16(rng, 128, 128)
    assert client.forward("t.cache", x, version=3).shape == (128, 256)
    with pytest.raises(fosd.Error) as ei:
        client.forward("t.cache", x, version=2)
    assert ei.value.code == "FAILED_PRECONDITION"
    client.drop_weight("t.cache")
    assert "t.cache" not in {x.name for x in client.list_weights()}
    with pytest.raises(fosd.Error) as ei:
        client.forward("t.cache", x)
    assert ei.value.code == "NOT_FOUND" and "t.cache" in ei.value.message


def test_forward_backward_equal_one_shot_linear(client, rng):
    M, N, K = 256, 128, 256
    x, w, b, dy = rand_bf16(rng, M, K), rand_bf16(rng, N, K, scale=0.05), rand_bf16(rng, N), rand_bf16(rng, M, N)
    client.put_weight("t.fb", w, version=1, weight_block="16x16")
    for ov in ("quantized", "high_precision", "dequantized"):
        y, ctx = client.forward("t.fb", x, bias=b, override=ov, save_context=True)
        assert ctx.saved and ctx.m == M and ctx.n == N and ctx.k == K and ctx.has_bias
        assert ctx.resolved_override == ov and ctx.weight == "t.fb" and ctx.weight_version == 1
        dx, dw, db = client.backward(ctx, dy)
        assert not ctx.saved
        ref = client.linear(x, w, dy=dy, bias=b, override=ov)
        assert sorted(ref) == ["db", "dw", "dx", "y"]
        for got, name in ((y, "y"), (dx, "dx"), (dw, "dw"), (db, "db")):
            assert got.dtype == torch.bfloat16
            assert np.array_equal(u16(got), u16(ref[name])), "%s %s" % (ov, name)
    no_bias = client.linear(x, w, dy=dy)
    assert "db" not in no_bias
    y, ctx = client.forward("t.fb", x, save_context=True)
    dx, dw, db = client.backward(ctx, dy)
    assert db is None and np.array_equal(u16(dx), u16(no_bias["dx"]))
    client.drop_weight("t.fb")


def test_numpy_and_torch_inputs(client, rng):
    """torch bf16, torch float32, numpy uint16 and numpy float32 inputs give the same bits; results
    come back as torch bf16, numpy uint16 and numpy float32 respectively."""
    M, N, K = 128, 128, 128
    xf = torch.randn(M, K, generator=rng)
    wf = torch.randn(N, K, generator=rng) * 0.05
    xb, wb = xf.to(torch.bfloat16), wf.to(torch.bfloat16)
    ref = client.linear(xb, wb)["y"]
    for x, w in ((xf, wf), (u16(xb), u16(wb)), (xf.numpy(), wf.numpy()), (xf.double().numpy(), wb),
                 (xb.t().contiguous().t(), wb)):
        y = client.linear(x, w)["y"]
        if isinstance(x, torch.Tensor):
            assert isinstance(y, torch.Tensor) and y.dtype == torch.bfloat16
            assert np.array_equal(u16(y), u16(ref))
        elif x.dtype == np.uint16:
            assert isinstance(y, np.ndarray) and y.dtype == np.uint16
            assert np.array_equal(y, u16(ref))
        else:
            assert isinstance(y, np.ndarray) and y.dtype == np.float32
            assert np.array_equal(y, ref.float().numpy())
    # a non-contiguous (transposed) view is read through its strides
    xt = xb.t().contiguous()
    assert np.array_equal(u16(client.linear(xt.t(), wb)["y"]), u16(ref))


def test_float32_rounding_matches_fosd(client):
    """float32 inputs are rounded to bf16 exactly as fosd rounds (ties to even, NaN kept quiet)."""
    from fosd._arrays import f32_to_bf16_np
    v = np.array([1.0, 1.00390625, 1.01171875, -2.5, 3.4e38, 1e-40, np.inf, -np.inf], dtype=np.float32)
    got = f32_to_bf16_np(v)
    assert list(got) == [0x3F80, 0x3F80, 0x3F82, 0xC020, 0x7F80, 0x0001, 0x7F80, 0xFF80]
    nan = np.array([0x7FA00001, 0xFF800001], dtype=np.uint32).view(np.float32)
    assert list(f32_to_bf16_np(nan)) == [0x7FE0, 0xFFC0]
    # torch float32 inputs take the same path to the same bits
    from fosd._arrays import Arr
    t = torch.from_numpy(np.concatenate([v, nan]))
    buf = np.zeros(t.numel(), dtype=np.uint16)
    Arr(t, "x").write_to(buf.ctypes.data, 1)
    assert list(buf) == list(got) + [0x7FE0, 0xFFC0]


def test_shm_and_inline_same_bits(server, rng):
    """Over ipc the client moves tensors through its shared-memory regions (only references
    cross the socket); shm=False sends them inline; the results are the same bits."""
    M, N, K = 256, 256, 256
    x, w, dy = rand_bf16(rng, M, K), rand_bf16(rng, N, K, scale=0.05), rand_bf16(rng, M, N)
    out = {}
    for shm in (True, False):
        with fosd.connect(server.url, shm=shm) as c:
            assert c.shm == shm
            before = c.stats()["ops"]["linear"]["bytes_in"]
            out[shm] = c.linear(x, w, dy=dy)
            sent = c.stats()["ops"]["linear"]["bytes_in"] - before
            if shm:
                assert sent < 4096, "tensors went inline (%d bytes)" % sent
                assert c.region_stats()[0] >= 1
            else:
                assert sent >= (M * K + N * K + M * N) * 2
    for k in ("y", "dx", "dw"):
        assert np.array_equal(u16(out[True][k]), u16(out[False][k])), k


def test_quantize_dequantize_match_cli(client, cli, tmp_path, rng):
    x = rand_bf16(rng, 128, 256)
    np.save(tmp_path / "x.npy", u16(x))
    for kw, args in ((dict(), []), (dict(block="16x16", err="mse", bound=448), ["--block", "16x16", "--err", "mse", "--bound", "448"]),
                     (dict(row_scaled=True), ["--row-scaled"]), (dict(recipe="nvfp4"), ["--recipe", "nvfp4"])):
        codes, scales, amax = client.quantize(x, **kw)
        assert codes.dtype == torch.uint8 and codes.shape == (128, 128) and scales.shape == (128, 16)
        assert amax.dtype == torch.float32 and amax.shape == ((128,) if kw.get("row_scaled") else (1,))
        cli("quantize", tmp_path / "x.npy", "--out", tmp_path / "q", "--local", "--backend", "cpu", *args)
        assert np.array_equal(codes.numpy(), np.load(tmp_path / "q" / "codes.npy"))
        assert np.array_equal(bits(scales).view(np.uint8), np.load(tmp_path / "q" / "scales.npy"))
        assert np.array_equal(amax.numpy().reshape(-1), np.load(tmp_path / "q" / "amax.npy").reshape(-1))
        bound = kw.get("bound", 448 if kw.get("recipe") == "nvfp4" else 256)
        for dt in ("bf16", "f32"):
            d = client.dequantize(codes, scales, amax, bound=bound, row_scaled=kw.get("row_scaled", False), dtype=dt)
            cli("dequantize", "--codes", tmp_path / "q" / "codes.npy", "--scales", tmp_path / "q" / "scales.npy",
                "--amax", tmp_path / "q" / "amax.npy", "--out", tmp_path / "d.npy", "--bound", bound, "--dtype", dt,
                "--local", "--backend", "cpu")
            want = np.load(tmp_path / "d.npy")
            assert np.array_equal(bits(d), want), "%s %s" % (kw, dt)
    # numpy in, numpy out; float32 input as float32 on the wire; an amax given
    xf = x.float().numpy()
    c2, s2, a2 = client.quantize(xf, amax=np.array([8.0], dtype=np.float32))
    assert c2.dtype == np.uint8 and s2.dtype == np.uint8 and a2.dtype == np.float32 and a2[0] == 8.0
    d2 = client.dequantize(c2, s2, a2)
    assert d2.dtype == np.uint16 and d2.shape == (128, 256)
    assert client.dequantize(c2, s2, a2, dtype="float32").dtype == np.float32


def test_contexts_keep_release_recompute(client, rng):
    M, N, K = 128, 128, 128
    x, w, b, dy = rand_bf16(rng, M, K), rand_bf16(rng, N, K, scale=0.05), rand_bf16(rng, N), rand_bf16(rng, M, N)
    client.put_weight("t.ctx", w)
    base = client.stats()["contexts"]
    y, ctx = client.forward("t.ctx", x, bias=b, save_context=True)
    first = client.backward(ctx, dy, keep_context=True)
    assert ctx.saved and client.stats()["contexts"] == base + 1
    again = client.backward(ctx, dy)
    assert not ctx.saved and all(np.array_equal(u16(p), u16(q)) for p, q in zip(first, again))
    # a consumed (or expired) context is recomputed from X and the bias, bit for bit
    with pytest.raises(fosd.Error) as ei:
        client.backward(ctx, dy)
    assert ei.value.code == "NOT_FOUND"
    third = client.backward(ctx, dy, x=x, bias=b)
    assert ctx.recomputed == 1 and all(np.array_equal(u16(p), u16(q)) for p, q in zip(first, third))
    # released explicitly, and by the finalizer when the Context is garbage collected
    y, ctx = client.forward("t.ctx", x, save_context=True)
    client.release(ctx)
    assert not ctx.saved and client.stats()["contexts"] == base
    client.release(ctx)  # nothing left to release: no error
    y, ctx = client.forward("t.ctx", x, save_context=True)
    assert client.stats()["contexts"] == base + 1
    del ctx
    assert client.stats()["contexts"] == base
    client.drop_weight("t.ctx")


def test_channel_and_threads(server, rng):
    M, N, K = 128, 128, 128
    w = rand_bf16(rng, N, K, scale=0.05)
    xs = [rand_bf16(rng, M, K) for _ in range(8)]
    with fosd.connect(server.url) as plain:
        plain.put_weight("t.thr", w)
        want = [u16(plain.forward("t.thr", x)) for x in xs]
    with fosd.connect(server.url, channel=True) as c:
        assert np.array_equal(u16(c.forward("t.thr", xs[0])), want[0])
        errors = []

        def work(i):
            try:
                for r in range(3):
                    j = (i + r) % len(xs)
                    if not np.array_equal(u16(c.forward("t.thr", xs[j])), want[j]):
                        errors.append("thread %d: forward %d differs" % (i, j))
            except Exception as e:  # reported below
                errors.append(repr(e))

        ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert not errors
        assert c.stats()["channels"] >= 1
        c.drop_weight("t.thr")


def test_module_smoke_command(server):
    env = dict(os.environ, FOS_SERVER=server.url, PYTHONPATH=os.path.join(REPO, "client", "python"))
    r = subprocess.run([sys.executable, "-m", "fosd", "health"], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "cpu" in r.stdout or "cuda" in r.stdout
    r = subprocess.run([sys.executable, "-m", "fosd", "health", "--server", "ipc:///nonexistent/fosd.sock",
                        "--timeout", "1"], env=env, capture_output=True, text=True)
    assert r.returncode == 1 and "UNAVAILABLE" in r.stderr
