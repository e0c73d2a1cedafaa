"""fosd.torch under torch.compile and torch.export (issue 29 item 2), against a real CPU fosd: a
two-layer model compiles with no graph break (torch._dynamo.explain) and gives the eager bits for
Y, dX, dW and db; the compiled graph's fosd contexts are released with the graph (backward or
not); torch.export captures fosd::linear and its program gives the eager bits; the custom ops
called eagerly give the autograd.Function path's bits, pass torch.library.opcheck, and take M = 0.
Needs torch >= 2.4 (torch.library.custom_op) and, for torch.compile's default backend on the CPU,
a C++ compiler (g++) and Python's headers (python3-dev)."""

import gc
import shutil
import sysconfig
import os

import pytest
import torch
from torch import nn

import fosd.torch as ft
from fosd import _torch_ops
from conftest import bits

pytestmark = pytest.mark.skipif(not _torch_ops.HAVE_OPS, reason="torch %s has no torch.library.custom_op "
                                "(2.4 or later): fosd.torch runs eagerly only" % torch.__version__)


def need_inductor():
    if not (shutil.which("g++") or shutil.which("c++")):
        pytest.skip("torch.compile on the CPU needs a C++ compiler (apt-get install g++)")
    if not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")):
        pytest.skip("torch.compile on the CPU needs Python.h (apt-get install python3-dev)")


def model_and_input(client, rng, bias=True):
    torch.manual_seed(11)
    model = nn.Sequential(ft.Linear(64, 128, bias=bias, client=client), nn.ReLU(),
                          ft.Linear(128, 32, bias=bias, client=client, override="high_precision"))
    x = (torch.randn(48, 64, generator=rng)).to(torch.bfloat16)
    return model, x


def step(model, x, dy):
    """y, dx and every parameter's gradient of one forward and backward."""
    model.zero_grad(set_to_none=True)
    xg = x.clone().requires_grad_(True)
    y = model(xg)
    y.backward(dy)
    return [y.detach(), xg.grad] + [p.grad for p in model.parameters()]


def assert_same(got, want, what):
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape and g.dtype == w.dtype, "%s %d: %s %s, want %s %s" % (
            what, i, tuple(g.shape), g.dtype, tuple(w.shape), w.dtype)
        assert (bits(g) == bits(w)).all(), "%s %d: bits differ" % (what, i)


def test_compile_no_graph_break_same_bits(client, rng):
    need_inductor()
    model, x = model_and_input(client, rng)
    dy = torch.randn(48, 32, generator=rng).to(torch.bfloat16)
    eager = step(model, x, dy)
    ex = torch._dynamo.explain(model)(x.clone().requires_grad_(True))
    assert ex.graph_break_count == 0 and ex.graph_count == 1, ex.break_reasons
    compiled = torch.compile(model)
    assert_same(step(compiled, x, dy), eager, "compiled")
    # the weights change (an optimizer step): the compiled model puts them again
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(0.5)
    eager2 = step(model, x, dy)
    assert_same(step(compiled, x, dy), eager2, "compiled after a step")
    assert not (bits(eager2[0]) == bits(eager[0])).all()
    # no grad: the same Y, no context
    base = client.stats()["contexts"]
    with torch.no_grad():
        assert (bits(compiled(x)) == bits(eager2[0])).all()
    assert client.stats()["contexts"] == base


def test_compiled_contexts_released_with_the_graph(client, rng):
    need_inductor()
    model, x = model_and_input(client, rng, bias=False)
    compiled = torch.compile(model)
    xg = x.clone().requires_grad_(True)
    base = client.stats()["contexts"]
    y = compiled(xg)
    assert client.stats()["contexts"] == base + 2  # one per fosd layer, kept by the graph
    del y
    gc.collect()
    assert client.stats()["contexts"] == base
    y = compiled(xg)
    y.float().sum().backward()
    del y
    gc.collect()
    assert client.stats()["contexts"] == base


def test_export_captures_the_op(client, rng):
    model, x = model_and_input(client, rng)
    with torch.no_grad():
        want = model(x)
        ep = torch.export.export(model, (x,))
    ops = [n.target for n in ep.graph.nodes if n.op == "call_function"]
    assert ops.count(torch.ops.fosd.linear.default) == 2, ops
    with torch.no_grad():
        assert (bits(ep.module()(x)) == bits(want)).all()


def test_ops_called_eagerly(client, rng, monkeypatch):
    """The custom ops in eager calls (as tracers call them) give the autograd.Function path's
    bits, forward and backward, M = 0 included."""
    model, x = model_and_input(client, rng)
    dy = torch.randn(48, 32, generator=rng).to(torch.bfloat16)
    want = step(model, x, dy)
    monkeypatch.setattr(_torch_ops, "FORCE_OPS", True)
    assert_same(step(model, x, dy), want, "ops")
    empty = step(model, x[:0], dy[:0])
    assert empty[0].shape == (0, 32) and empty[1].shape == (0, 64)
    assert all(not g.any() for g in empty[2:])


def test_opcheck(client, rng):
    """torch.library.opcheck: fosd::linear's schema, fake implementation and autograd registration
    agree with what it does."""
    layer = ft.Linear(64, 32, client=client)
    r = layer.recipe
    x = torch.randn(16, 64, generator=rng).to(torch.bfloat16).requires_grad_(True)
    args = (x, layer.weight, layer.bias, layer.name, r.override, r.weight_block, r.row_scaled, r.err, r.bound,
            r.four_over_six, True)
    torch.library.opcheck(torch.ops.fosd.linear.default, args,
                          test_utils=("test_schema", "test_autograd_registration", "test_faketensor"))
