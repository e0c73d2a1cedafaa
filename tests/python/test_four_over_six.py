"""four_over_six= in fosd.Client (NUMERICS.md section 11) against a real CPU fosd: for each scope,
linear() (forward and backward) equals `fos linear --four-over-six SCOPE --local` bit for bit; a
weight put with four_over_six= gives the forward of that scope when the forward names none, and
its context's backward equals linear()'s; a forward naming another scope gets the other form of W
made from the master; the plain quantizer's new shapes (16x16, row-scaled) equal the CLI's; bad
scope names are refused before anything is sent."""

import numpy as np
import pytest
import torch

import fosd
from conftest import bits, load_bf16, save_bf16

SCOPES = ("all", "weights", "activations", "none")


def rand_bf16(g, *shape, scale=1.0):
    return (torch.randn(*shape, generator=g) * scale).to(torch.bfloat16)


@pytest.mark.parametrize("scope", SCOPES)
def test_linear_scope_equals_cli(client, cli, tmp_path, rng, scope):
    M, N, K = 48, 32, 128
    x, w, dy = rand_bf16(rng, M, K), rand_bf16(rng, N, K, scale=0.05), rand_bf16(rng, M, N)
    for name, t in (("x", x), ("w", w), ("dy", dy)):
        save_bf16(tmp_path / (name + ".npy"), t)
    r = client.linear(x, w, dy=dy, four_over_six=scope)
    cli("linear", tmp_path / "x.npy", tmp_path / "w.npy", "--dy", tmp_path / "dy.npy", "--out", tmp_path / "o",
        "--local", "--backend", "cpu", "--four-over-six", scope)
    for k in ("y", "dx", "dw"):
        assert np.array_equal(bits(r[k]), bits(load_bf16(tmp_path / "o" / (k + ".npy")))), k
    if scope != "all":
        assert not np.array_equal(bits(r["y"]), bits(client.linear(x, w)["y"]))


@pytest.mark.parametrize("scope", SCOPES)
def test_put_weight_scope(client, rng, scope):
    M, N, K = 32, 48, 64
    x, w, dy = rand_bf16(rng, M, K), rand_bf16(rng, N, K, scale=0.05), rand_bf16(rng, M, N)
    client.put_weight("t.46." + scope, w, four_over_six=scope)
    want = client.linear(x, w, dy=dy, override="quantized", four_over_six=scope)
    y, ctx = client.forward("t.46." + scope, x, override="quantized", save_context=True)
    assert np.array_equal(bits(y), bits(want["y"]))
    dx, dw, _ = client.backward(ctx, dy)
    assert np.array_equal(bits(dx), bits(want["dx"])) and np.array_equal(bits(dw), bits(want["dw"]))
    # the other scopes: the same form of W as is, the other made from the master
    for other in SCOPES:
        y = client.forward("t.46." + scope, x, four_over_six=other)
        assert np.array_equal(bits(y), bits(client.linear(x, w, four_over_six=other)["y"])), other


def test_plain_quantize_shapes_equal_cli(client, cli, tmp_path, rng):
    x = rand_bf16(rng, 64, 128)
    np.save(tmp_path / "x.npy", bits(x))
    for kw, args in ((dict(block="16x16"), ["--block", "16x16"]), (dict(row_scaled=True), ["--row-scaled"])):
        codes, scales, amax = client.quantize(x, recipe="nvfp4", **kw)
        cli("quantize", tmp_path / "x.npy", "--out", tmp_path / "q", "--local", "--backend", "cpu", "--recipe",
            "nvfp4", *args)
        assert np.array_equal(codes.numpy(), np.load(tmp_path / "q" / "codes.npy"))
        assert np.array_equal(bits(scales).view(np.uint8), np.load(tmp_path / "q" / "scales.npy"))
        assert np.array_equal(amax.numpy().reshape(-1), np.load(tmp_path / "q" / "amax.npy").reshape(-1))


def test_bad_scope_names(client, rng):
    x, w = rand_bf16(rng, 16, 16), rand_bf16(rng, 16, 16)
    for call in (lambda: client.linear(x, w, four_over_six="both"),
                 lambda: client.put_weight("t.46.bad", w, four_over_six="plain"),
                 lambda: client.forward("t.46.bad", x, four_over_six="weight")):
        with pytest.raises(fosd.Error) as ei:
            call()
        assert ei.value.code == "INVALID_ARGUMENT" and "four_over_six" in ei.value.message
