"""fosd.torch as PyTorch code expects a layer (issue 29 item 3), against a real CPU fosd: Linear is an
nn.Linear (isinstance, state_dict keys, loading an nn.Linear's state); dtype follows torch's
default; M = 0 gives empty outputs and zero weight gradients without asking fosd; sizes fosd
refuses are rejected at construction naming the rule and the value; autocast gives its dtype;
unquantized() runs plain F.linear; fosd.Recipe is frozen, hashable, canonical and checked, and its
four_over_six reaches the Client only when not "all"; convert(model, recipe, filter_fn,
skip_unsupported) / unconvert; include= still works with a DeprecationWarning; pickle and DDP;
every public parameter named in its docstring; type hints and py.typed. Reference values come
from fosd's stateless Client.linear (one request computing the whole layer) or torch itself."""

import dataclasses
import inspect
import os
import pickle
import typing

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import fosd
import fosd.torch as ft
from conftest import bits


def rand_bf16(g, *shape, scale=1.0):
    return (torch.randn(*shape, generator=g) * scale).to(torch.bfloat16)


def same_bits(a, b):
    return np.array_equal(bits(a.detach().to(torch.bfloat16)), bits(b.detach().to(torch.bfloat16)))


def test_is_an_nn_linear_with_its_state_dict(client, rng):
    """isinstance nn.Linear; the same state_dict keys; an nn.Linear's state loads and the layer
    then computes fosd's layer of those parameters."""
    plain = nn.Linear(64, 32).to(torch.bfloat16)
    layer = ft.Linear(64, 32, client=client, dtype=torch.bfloat16)
    assert isinstance(layer, nn.Linear) and isinstance(layer, ft.Linear)
    assert list(layer.state_dict()) == list(plain.state_dict()) == ["weight", "bias"]
    assert [n for n, _ in layer.named_parameters()] == ["weight", "bias"]
    layer.load_state_dict(plain.state_dict())
    x = rand_bf16(rng, 16, 64)
    with torch.no_grad():
        y = layer(x)
    ref = client.linear(x, plain.weight.detach(), bias=plain.bias.detach())["y"]
    assert same_bits(y, ref)
    assert not same_bits(y, plain(x))  # fosd's NVFP4 numerics, not torch's bf16 GEMM


def test_dtype_follows_torch_default(client):
    assert ft.Linear(32, 16, client=client).weight.dtype == torch.get_default_dtype()
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        layer = ft.Linear(32, 16, client=client)
    finally:
        torch.set_default_dtype(old)
    assert layer.weight.dtype == layer.bias.dtype == torch.float64
    assert ft.Linear(32, 16, client=client, dtype=torch.bfloat16).weight.dtype == torch.bfloat16


@pytest.mark.parametrize("shape", [(0, 64), (3, 0, 64)], ids=["0x64", "3x0x64"])
def test_empty_batch(client, shape):
    """M = 0: Y empty of shape (..., N), dX empty, dW and db zeros as torch.nn.Linear gives; no
    request reaches fosd."""
    layer = ft.Linear(64, 32, client=client)
    plain = nn.Linear(64, 32)
    plain.load_state_dict(layer.state_dict())
    fwd0 = client.stats()["ops"]["forward"]["requests"]
    x = torch.zeros(shape, requires_grad=True)
    y = layer(x)
    assert y.shape == shape[:-1] + (32,) and y.dtype == torch.float32
    y.sum().backward()
    xp = torch.zeros(shape, requires_grad=True)
    plain(xp).sum().backward()
    assert x.grad.shape == xp.grad.shape == shape
    for got, want in ((layer.weight.grad, plain.weight.grad), (layer.bias.grad, plain.bias.grad)):
        assert got.shape == want.shape and got.dtype == want.dtype and torch.equal(got, want)
        assert not got.any()
    with torch.no_grad():
        assert layer(torch.zeros(shape)).shape == shape[:-1] + (32,)
    assert client.stats()["ops"]["forward"]["requests"] == fwd0 and layer.puts == 0


@pytest.mark.parametrize("k,n,field", [(10, 32, "in_features (K) = 10"), (32, 40, "out_features (N) = 40"),
                                       (0, 32, "in_features (K) = 0")])
def test_refused_sizes_at_construction(client, k, n, field):
    with pytest.raises(fosd.Error) as ei:
        ft.Linear(k, n, client=client)
    assert ei.value.code == "INVALID_ARGUMENT"
    assert field in ei.value.message and "multiple of 16" in ei.value.message
    with pytest.raises(fosd.Error, match="multiple of 16"):
        ft.Linear.from_linear(nn.Linear(max(k, 1), n))
    assert ft.supported(k, n) == ei.value.message and ft.supported(32, 48) is None


def test_autocast(client, rng):
    """Under torch.autocast(bf16) a float32 layer on float32 X returns bf16 (as nn.Linear does):
    fosd's layer of X rounded to bf16; dX comes back float32."""
    layer = ft.Linear(64, 32, client=client)
    x = torch.randn(16, 64, generator=rng).requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = layer(x)
        yp = F.linear(x, layer.weight, layer.bias)
    assert y.dtype == yp.dtype == torch.bfloat16
    ref = client.linear(x.detach().to(torch.bfloat16), layer.weight.detach(), bias=layer.bias.detach())["y"]
    assert same_bits(y, ref)
    y.float().sum().backward()
    assert x.grad.dtype == torch.float32 and layer.weight.grad.dtype == torch.float32
    with torch.no_grad():
        assert layer(x).dtype == torch.float32  # autocast off again


def test_unquantized(client, rng):
    """unquantized(model) and unquantized() run the fosd layers as plain F.linear (torch's own
    result, bit for bit), nest, and restore fosd afterwards."""
    torch.manual_seed(3)
    plain = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 32))
    model = ft.convert(nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 32)), client=client)
    model.load_state_dict(plain.state_dict())
    other = ft.Linear(64, 32, client=client)
    x = torch.randn(16, 64, generator=rng)
    with torch.no_grad():
        want, fosd_y, other_y = plain(x), model(x), other(x)
        assert not torch.equal(fosd_y, want)
        with ft.unquantized(model):
            assert torch.equal(model(x), want)
            assert torch.equal(other(x), other_y)  # not in the model: still fosd
            with ft.unquantized():
                assert torch.equal(other(x), F.linear(x, other.weight, other.bias))
            assert torch.equal(other(x), other_y)
        assert torch.equal(model(x), fosd_y)
        with ft.unquantized():
            assert torch.equal(model(x), want)
            xb = x.to(torch.bfloat16)  # float32 parameters on bf16 X: cast to X's dtype
            assert torch.equal(model(xb), plain.to(torch.bfloat16)(xb))
    # gradients flow through the unquantized path
    xg = x.clone().requires_grad_(True)
    with ft.unquantized(model):
        model(xg).sum().backward()
    assert xg.grad is not None and model[0].weight.grad is not None


def test_recipe_value():
    r = fosd.Recipe()
    assert r == fosd.Recipe(override=None, weight_block="16x16", row_scaled=False, err="MAE", bound=256,
                            four_over_six="all")
    assert (r.override, r.four_over_six) == ("default", "all")
    assert hash(r) == hash(fosd.Recipe(override="default"))
    assert len({r, fosd.Recipe(), fosd.Recipe(err="mse")}) == 2
    assert {fosd.Recipe(bound=448): 1}[fosd.Recipe(bound=448)] == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.err = "mse"
    r2 = r.replace(err="mse", four_over_six="weights")
    assert r2.err == "mse" and r2.four_over_six == "weights" and r.err == "mae"
    assert r2 != r and fosd.Recipe(row_scaled=1) == fosd.Recipe(row_scaled=True)
    with pytest.raises(TypeError, match="no field 'erro'"):
        r.replace(erro="mse")
    for kw, word in ((dict(override="fast"), "override"), (dict(weight_block="8x8"), "weight_block"),
                     (dict(err="l1"), "err"), (dict(bound=300), "bound"), (dict(bound=True), "bound"),
                     (dict(row_scaled="yes"), "row_scaled"), (dict(four_over_six="some"), "four_over_six"),
                     (dict(override="quantized", row_scaled=True), "row_scaled")):
        with pytest.raises(fosd.Error) as ei:
            fosd.Recipe(**kw)
        assert ei.value.code == "INVALID_ARGUMENT" and word in ei.value.message, (kw, ei.value.message)
        assert repr(list(kw.values())[0]) in ei.value.message or word == "row_scaled"


def test_recipe_on_layers(client):
    r = fosd.Recipe(err="mse", bound=448)
    a, b = ft.Linear(32, 32, client=client, recipe=r), ft.Linear(32, 32, client=client, recipe=r)
    assert a.recipe is r and b.recipe == r and a.err == "mse" and a.bound == 448
    c = ft.Linear(32, 32, client=client, recipe=r, weight_block="1x16")  # a loose option wins
    assert c.recipe == r.replace(weight_block="1x16")
    c.override = "dequantized"
    assert c.recipe.override == "dequantized" and c.recipe.err == "mse"
    with pytest.raises(TypeError, match="fosd.Recipe"):
        ft.Linear(32, 32, recipe={"err": "mse"})
    assert "four_over_six=all" in repr(a)


@pytest.mark.parametrize("scope", ["all", "weights", "activations", "none"])
def test_four_over_six_reaches_the_client(client, monkeypatch, scope):
    """four_over_six reaches the put's weight config as the keyword four_over_six= only when not
    "all" (today's calls unchanged); the forward passes none (it follows its weight's scope); a
    client without the keyword refuses the other scopes with UNIMPLEMENTED naming the field and
    the value."""
    seen = {}
    real_cfg, real_fwd = client._weight_config, client._forward
    unset = object()

    def weight_config(*a, four_over_six=unset, **k):
        seen["put"] = four_over_six
        return real_cfg(*a, **k)

    def forward(*a, four_over_six=unset, **k):
        seen["forward"] = four_over_six
        return real_fwd(*a, **k)

    monkeypatch.setattr(client, "_weight_config", weight_config)
    monkeypatch.setattr(client, "_forward", forward)
    layer = ft.Linear(32, 32, client=client, four_over_six=scope)
    with torch.no_grad():
        layer(torch.ones(16, 32))
    want = unset if scope == "all" else scope
    assert seen["put"] is want or seen["put"] == want
    assert seen["forward"] is unset

    # a client without the keyword
    monkeypatch.setattr(client, "_weight_config", lambda *a, **k: real_cfg(*a, **k))
    layer = ft.Linear(32, 32, client=client, four_over_six=scope)
    with torch.no_grad():
        if scope == "all":
            layer(torch.ones(16, 32))
            return
        with pytest.raises(fosd.Error) as ei:
            layer(torch.ones(16, 32))
    assert ei.value.code == "UNIMPLEMENTED" and "four_over_six='%s'" % scope in ei.value.message


def test_convert_and_unconvert(client, rng):
    """convert(model, recipe, filter_fn=(module, fqn)) converts what filter_fn picks and fosd takes
    (sizes it refuses stay nn.Linear, or raise with skip_unsupported=False), sharing parameters,
    never a fosd layer twice; unconvert puts plain nn.Linear layers back, sharing them too."""
    torch.manual_seed(4)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Sequential(nn.Linear(64, 32), nn.Linear(32, 10)))
    before = {n: p for n, p in model.named_parameters()}
    x = torch.randn(8, 64, generator=rng)
    with torch.no_grad():
        want_plain = model(x)
    calls = []
    r = fosd.Recipe(err="mse")

    def pick(m, fqn):
        calls.append((type(m), fqn))
        return fqn != "2.0"

    out = ft.convert(model, r, filter_fn=pick, client=client)
    assert out is model and (nn.Linear, "0") in calls and (nn.Linear, "2.0") in calls
    assert type(model[0]) is ft.Linear and model[0].recipe is r
    assert type(model[2][0]) is nn.Linear  # filtered out
    assert type(model[2][1]) is nn.Linear  # N = 10: fosd refuses it, skipped
    assert {n: p for n, p in model.named_parameters()} == before
    first = model[0]
    ft.convert(model, client=client)  # again: the fosd layer stays as it is
    assert model[0] is first and type(model[2][0]) is ft.Linear
    with pytest.raises(fosd.Error, match="out_features \\(N\\) = 10"):
        ft.convert(nn.Sequential(nn.Linear(64, 10)), skip_unsupported=False, client=client)
    with torch.no_grad():
        assert not torch.equal(model(x), want_plain)
    back = ft.unconvert(model)
    assert back is model and not any(isinstance(m, ft.Linear) for m in model.modules())
    assert type(model[0]) is nn.Linear and {n: p for n, p in model.named_parameters()} == before
    with torch.no_grad():
        assert torch.equal(model(x), want_plain)
    single = ft.convert(nn.Linear(32, 32), client=client)
    assert type(single) is ft.Linear and type(ft.unconvert(single)) is nn.Linear
    with pytest.raises(TypeError, match="unknown option 'errr'"):
        ft.convert(model, errr="mse")


def test_include_is_deprecated(client):
    model = nn.Sequential(nn.Linear(32, 32), nn.Linear(32, 32))
    with pytest.warns(DeprecationWarning, match="filter_fn"):
        ft.convert(model, client=client, include=lambda name, m: name == "1", err="mse")
    assert type(model[0]) is nn.Linear and type(model[1]) is ft.Linear and model[1].err == "mse"


def test_pickle_and_deepcopy(rng):
    """A layer pickles (its client is looked up again: the default) into another layer of the
    same parameters and recipe under a fresh name."""
    layer = ft.Linear(32, 16, recipe=fosd.Recipe(bound=448))
    twin = pickle.loads(pickle.dumps(layer))
    assert type(twin) is ft.Linear and twin.recipe == layer.recipe and twin.name != layer.name
    assert torch.equal(twin.weight, layer.weight) and list(twin.state_dict()) == ["weight", "bias"]
    named = pickle.loads(pickle.dumps(ft.Linear(32, 16, name="t.pickled")))
    assert named.name == "t.pickled"


def test_ddp(client, rng, tmp_path):
    """DistributedDataParallel (gloo, one process) over a converted model: the same output and
    gradients as the model alone."""
    import torch.distributed as dist
    if not dist.is_available():
        pytest.skip("this torch has no torch.distributed")
    torch.manual_seed(6)
    model = ft.convert(nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 32)), client=client)
    x = torch.randn(16, 64, generator=rng)
    model(x).sum().backward()
    want = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    dist.init_process_group("gloo", init_method="file://" + str(tmp_path / "pg"), rank=0, world_size=1)
    try:
        ddp = nn.parallel.DistributedDataParallel(model)
        ddp(x).sum().backward()
    finally:
        dist.destroy_process_group()
    for p, w in zip(model.parameters(), want):
        assert torch.equal(p.grad, w)


def _params(fn):
    return [n for n, p in inspect.signature(fn).parameters.items()
            if n != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


@pytest.mark.parametrize("obj,doc_of", [
    (ft.Linear.__init__, ft.Linear), (ft.Linear.from_linear, None), (ft.linear, None), (ft.convert, None),
    (ft.unconvert, None), (ft.unquantized, None), (fosd.Recipe, None), (ft.supported, None)],
    ids=["Linear", "from_linear", "linear", "convert", "unconvert", "unquantized", "Recipe", "supported"])
def test_docstrings_name_every_parameter(obj, doc_of):
    doc = inspect.getdoc(doc_of if doc_of is not None else obj) or ""
    missing = [n for n in _params(obj) if n not in ("cls",) and n not in doc]
    assert not missing, "%s: the docstring names no %s" % (obj.__qualname__, missing)


def test_type_hints_and_py_typed():
    pkg = os.path.dirname(fosd.__file__)
    assert os.path.isfile(os.path.join(pkg, "py.typed"))
    with open(os.path.join(pkg, "..", "pyproject.toml")) as f:
        assert "py.typed" in f.read()
    for fn in (ft.Linear.__init__, ft.Linear.forward, ft.linear, ft.convert, ft.unconvert, ft.unquantized,
               ft.supported, fosd.Recipe.replace):
        hints = typing.get_type_hints(fn)
        assert "return" in hints and all(n in hints for n in _params(fn)), fn.__qualname__
    assert typing.get_type_hints(fosd.Recipe)["bound"] is int
