"""fosd.torch.Linear, fosd.torch.linear and fosd.torch.convert against `fos linear --local` (the
CLI computing the same layer in its own process on the same .npy inputs): forward Y and backward
dX, dW, db bit for bit, for every override, weight_block, row_scaled, err, bound and bias; X of
any leading shape; float32 parameters; shapes fosd does not take yet skip (see shape_refused)."""

import itertools

import pytest
import torch

import fosd
import fosd.torch as ft
from conftest import bits, load_bf16, save_bf16, shape_refused

OVERRIDES = ["default", "quantized", "high_precision", "dequantized"]
# every (override, row_scaled) fosd accepts, each with both weight blocks; err, bound and bias
# cycle through their 8 combinations so every value meets several overrides
CASES = []
for i, (ov, rs, wb) in enumerate((o, r, b) for o in OVERRIDES for r in (False, True)
                                 for b in ("16x16", "1x16") if not (o == "quantized" and r)):
    err, bound, bias = list(itertools.product(("mae", "mse"), (256, 448), (True, False)))[(i * 3) % 8]
    CASES.append((ov, wb, rs, err, bound, bias))


def rand_bf16(g, *shape, scale=1.0):
    return (torch.randn(*shape, generator=g) * scale).to(torch.bfloat16)


def cli_linear(cli, tmp, x, w, b, dy, override, weight_block, row_scaled, err, bound):
    """The CLI's y, dx, dw, db (db None without a bias) for 2-D x."""
    for name, t in (("x", x), ("w", w), ("dy", dy)) + ((("b", b),) if b is not None else ()):
        save_bf16(tmp / (name + ".npy"), t)
    args = ["linear", tmp / "x.npy", tmp / "w.npy", "--out", tmp / "ref", "--dy", tmp / "dy.npy",
            "--override", override, "--weight-block", weight_block, "--err", err, "--bound", bound,
            "--local", "--backend", "cpu"]
    if row_scaled:
        args.append("--row-scaled")
    if b is not None:
        args += ["--bias", tmp / "b.npy"]
    cli(*args)
    out = [load_bf16(tmp / "ref" / (n + ".npy")) for n in ("y", "dx", "dw")]
    out.append(load_bf16(tmp / "ref" / "db.npy") if b is not None else None)
    return out


def run_layer(layer, x, dy):
    """y, dx, dw, db of layer on x with output gradient dy."""
    x = x.clone().requires_grad_(True)
    y = layer(x)
    y.backward(dy)
    db = layer.bias.grad if layer.bias is not None else None
    return y.detach(), x.grad, layer.weight.grad, db


def assert_bits(got, want, what):
    assert got.shape == want.shape, "%s: shape %s, want %s" % (what, tuple(got.shape), tuple(want.shape))
    g, w = bits(got.to(torch.bfloat16)), bits(want.to(torch.bfloat16))
    n = int((g != w).sum())
    assert n == 0, "%s: %d of %d elements differ" % (what, n, g.size)


@pytest.mark.parametrize("override,weight_block,row_scaled,err,bound,bias", CASES,
                         ids=["%s-%s-%s-%s-%d-%s" % (o, b, "rows" if r else "tensor", e, d, "bias" if bb else "nobias")
                              for o, b, r, e, d, bb in CASES])
def test_linear_matches_cli(client, cli, tmp_path, rng, override, weight_block, row_scaled, err, bound, bias):
    M, N, K = 128, 128, 256
    x, w, dy = rand_bf16(rng, M, K), rand_bf16(rng, N, K, scale=0.05), rand_bf16(rng, M, N)
    b = rand_bf16(rng, N) if bias else None
    layer = ft.Linear(K, N, bias=bias, client=client, override=override, weight_block=weight_block,
                      row_scaled=row_scaled, err=err, bound=bound)
    with torch.no_grad():
        layer.weight.copy_(w)
        if bias:
            layer.bias.copy_(b)
    got = run_layer(layer, x, dy)
    want = cli_linear(cli, tmp_path, x, w, b, dy, override, weight_block, row_scaled, err, bound)
    for g, wnt, what in zip(got, want, ("y", "dx", "dw", "db")):
        if wnt is None:
            assert g is None
        else:
            assert_bits(g, wnt, what)


def test_leading_shape_and_functional(client, cli, tmp_path, rng):
    """X (2, 3, 128, K) is the (768, K) layer; fosd.torch.linear computes the same bits."""
    N, K = 128, 128
    x4 = rand_bf16(rng, 2, 3, 128, K)
    w, b, dy4 = rand_bf16(rng, N, K, scale=0.05), rand_bf16(rng, N), rand_bf16(rng, 2, 3, 128, N)
    want = cli_linear(cli, tmp_path, x4.reshape(-1, K), w, b, dy4.reshape(-1, N), "default", "16x16",
                      False, "mae", 256)
    layer = ft.Linear(K, N, client=client)
    with torch.no_grad():
        layer.weight.copy_(w)
        layer.bias.copy_(b)
    y, dx, dw, db = run_layer(layer, x4, dy4)
    assert y.shape == (2, 3, 128, N) and dx.shape == x4.shape
    for g, wnt, what in zip((y.reshape(-1, N), dx.reshape(-1, K), dw, db), want, ("y", "dx", "dw", "db")):
        assert_bits(g, wnt, what)
    wp = w.clone().requires_grad_(True)
    bp = b.clone().requires_grad_(True)
    xp = x4.clone().requires_grad_(True)
    yf = ft.linear(xp, wp, bp, client=client)
    yf.backward(dy4)
    for g, wnt, what in zip((yf.detach().reshape(-1, N), xp.grad.reshape(-1, K), wp.grad, bp.grad), want,
                            ("y", "dx", "dw", "db")):
        assert_bits(g, wnt, "functional " + what)


def test_float32_parameters(client, cli, tmp_path, rng):
    """A float32 layer on float32 X: fosd rounds both to bf16 (as the CLI does float32 .npy files);
    Y and the gradients come back as float32 holding the bf16 results."""
    M, N, K = 128, 256, 128
    x = torch.randn(M, K, generator=rng)
    w = torch.randn(N, K, generator=rng) * 0.05
    b = torch.randn(N, generator=rng)
    dy = torch.randn(M, N, generator=rng)
    layer = ft.Linear(K, N, client=client, dtype=torch.float32, override="high_precision")
    with torch.no_grad():
        layer.weight.copy_(w)
        layer.bias.copy_(b)
    y, dx, dw, db = run_layer(layer, x, dy.to(torch.bfloat16).float())
    assert y.dtype == dx.dtype == dw.dtype == db.dtype == torch.float32
    want = cli_linear(cli, tmp_path, x.to(torch.bfloat16), w.to(torch.bfloat16), b.to(torch.bfloat16),
                      dy.to(torch.bfloat16), "high_precision", "16x16", False, "mae", 256)
    for g, wnt, what in zip((y, dx, dw, db), want, ("y", "dx", "dw", "db")):
        assert torch.equal(g, g.to(torch.bfloat16).float()), what + " is not a bf16 value"
        assert_bits(g, wnt, what)


def test_convert_shares_parameters(client, rng):
    """convert() replaces the nn.Linear layers (sharing their Parameters) and keeps the others;
    include= picks which; the converted model gives the layers' fosd results."""
    torch.manual_seed(5)
    model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 128, bias=False))
    model = model.to(torch.bfloat16)
    params = [p for p in model.parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ft.convert(model, client=client, include=lambda name, m: name != "2", err="mse")
    assert isinstance(model[0], ft.Linear) and isinstance(model[2], torch.nn.Linear)
    assert not isinstance(model[2], ft.Linear)
    assert model[0].err == "mse" and model[0].weight is params[0] and model[0].bias is params[1]
    ft.convert(model, client=client)
    assert isinstance(model[2], ft.Linear) and model[2].bias is None and model[2].weight is params[2]
    assert [p for p in model.parameters()] == params
    x = rand_bf16(rng, 128, 128)
    loss = model(x).float().pow(2).mean()
    loss.backward()
    before = params[0].detach().clone()
    opt.step()  # the optimizer made before convert() updates the shared parameters
    assert not torch.equal(before, params[0].detach())
    single = ft.convert(torch.nn.Linear(128, 128).to(torch.bfloat16), client=client)
    assert isinstance(single, ft.Linear)


def test_options_are_checked_at_construction(client):
    for kw, word in ((dict(override="fast"), "override"), (dict(weight_block="8x8"), "weight_block"),
                     (dict(err="l1"), "err"), (dict(bound=300), "bound"),
                     (dict(override="quantized", row_scaled=True), "row_scaled")):
        with pytest.raises(fosd.Error) as ei:
            ft.Linear(128, 128, client=client, **kw)
        assert ei.value.code == "INVALID_ARGUMENT" and word in ei.value.message


ANY_SHAPES = [(100, 128, 128), (1, 128, 256), (130, 256, 128), (128, 48, 128), (64, 128, 80)]


@pytest.mark.parametrize("m,n,k", ANY_SHAPES, ids=["%dx%dx%d" % s for s in ANY_SHAPES])
def test_any_shape(client, cli, tmp_path, rng, m, n, k):
    """Any M (and N, K multiples of 16) once fosd takes them; skipped while fosd refuses the shape."""
    x, w, b, dy = rand_bf16(rng, m, k), rand_bf16(rng, n, k, scale=0.05), rand_bf16(rng, n), rand_bf16(rng, m, n)
    layer = ft.Linear(k, n, client=client)
    with torch.no_grad():
        layer.weight.copy_(w)
        layer.bias.copy_(b)
    try:
        got = run_layer(layer, x, dy)
    except fosd.Error as e:
        if shape_refused(e):
            pytest.skip("fosd refuses %dx%dx%d today: %s" % (m, n, k, e.message))
        raise
    want = cli_linear(cli, tmp_path, x, w, b, dy, "default", "16x16", False, "mae", 256)
    for g, wnt, what in zip(got, want, ("y", "dx", "dw", "db")):
        assert_bits(g, wnt, what)


def test_gradients_not_needed_are_skipped(client, rng):
    """An input without requires_grad (a first layer) and a frozen weight (fine-tuning): fosd is
    asked for only the gradients autograd needs (BackwardRequest.skip_dx / skip_dw), and those have
    the bits of the layer computing all of them."""
    N, K, M = 64, 128, 48
    x, dy = rand_bf16(rng, M, K), rand_bf16(rng, M, N)
    w, b = rand_bf16(rng, N, K, scale=0.05), rand_bf16(rng, N)
    layer = ft.Linear(K, N, client=client)
    with torch.no_grad():
        layer.weight.copy_(w)
        layer.bias.copy_(b)
    y, dx, dw, db = run_layer(layer, x, dy)
    # X needs no gradient: only dW and db
    layer.weight.grad = layer.bias.grad = None
    y2 = layer(x)
    y2.backward(dy)
    assert_bits(y2.detach(), y, "y")
    assert_bits(layer.weight.grad, dw, "dw without dx")
    assert_bits(layer.bias.grad, db, "db without dx")
    # a frozen weight: only dX (and db)
    layer.weight.requires_grad_(False)
    layer.weight.grad = layer.bias.grad = None
    xg = x.clone().requires_grad_(True)
    layer(xg).backward(dy)
    assert layer.weight.grad is None
    assert_bits(xg.grad, dx, "dx without dw")
    assert_bits(layer.bias.grad, db, "db without dw")
    # the Client call itself: the skipped ones come back None
    y3, ctx = client.forward(layer.name, x, save_context=True)
    gx, gw, gb = client.backward(ctx, dy, need_dx=False)
    assert gx is None and gb is None
    assert_bits(gw, dw, "Client.backward dw")
    y4, ctx = client.forward(layer.name, x, save_context=True)
    gx, gw, gb = client.backward(ctx, dy, need_dw=False)
    assert gw is None
    assert_bits(gx, dx, "Client.backward dx")
