"""Training through fosd.torch against a real CPU fosd: a 20-step SGD loop on a two-layer model
(its loss goes down; each layer's weight is put once per step, counted by the layer and by fosd's
weight versions, inside the layer's forward: Stats counts one forward per layer and step and no
put_weight; the same bits as with separate puts, and separate puts where fosd serves several
devices, known from its Health without a refused request), two layers with different options in one process, contexts that
never leak (Stats contexts back to the start once the graphs are gone, also without a backward),
an expired context recomputed from X, a second backward (retain_graph), a weight fosd lost put
again, and a layer's weight dropped from fosd when the layer is garbage collected."""

import copy
import gc
import time

import numpy as np
import pytest
import torch

import fosd
import fosd.torch as ft
from conftest import bits


def rand_bf16(g, *shape, scale=1.0):
    return (torch.randn(*shape, generator=g) * scale).to(torch.bfloat16)


def weights(client):
    return {w.name: w for w in client.list_weights()}


def test_sgd_loop_reputs_once_per_step(client):
    torch.manual_seed(7)
    model = torch.nn.Sequential(ft.Linear(128, 256, dtype=torch.bfloat16, client=client), torch.nn.ReLU(),
                                ft.Linear(256, 128, dtype=torch.bfloat16, client=client, override="high_precision"))
    target = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.Tanh(), torch.nn.Linear(256, 128))
    x = torch.randn(256, 128)
    with torch.no_grad():
        yt = target(x).to(torch.bfloat16)
    xb = x.to(torch.bfloat16)
    opt = torch.optim.SGD(model.parameters(), lr=2.0)
    ops0 = client.stats()["ops"]
    puts0, fwd0 = ops0["put_weight"]["requests"], ops0["forward"]["requests"]
    ctx0 = client.stats()["contexts"]
    losses = []
    for step in range(20):
        opt.zero_grad()
        loss = (model(xb).float() - yt.float()).pow(2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    del loss
    l1, l2 = model[0], model[2]
    assert l1.puts == 20 and l2.puts == 20
    cached = weights(client)
    assert cached[l1.name].version == 20 and cached[l2.name].version == 20
    # each put went inside its layer's forward: one round trip per layer and step (fos_forward_put)
    assert client.fused_put and client.fused_put_off_reason is None
    ops = client.stats()["ops"]
    assert ops["put_weight"]["requests"] - puts0 == 0
    assert ops["forward"]["requests"] - fwd0 == 40
    assert losses[-1] < 0.7 * losses[0], losses
    assert client.stats()["contexts"] == ctx0
    # evaluation with grad off puts the stepped weight once more, saves no context
    with torch.no_grad():
        model(xb)
    assert l1.puts == 21 and client.stats()["contexts"] == ctx0


def _train(client, steps=5):
    """Losses and final weights of a seeded two-layer SGD run through client."""
    torch.manual_seed(11)
    model = torch.nn.Sequential(ft.Linear(64, 128, dtype=torch.bfloat16, client=client), torch.nn.ReLU(),
                                ft.Linear(128, 64, dtype=torch.bfloat16, client=client))
    g = torch.Generator().manual_seed(12)
    x, yt = rand_bf16(g, 96, 64), rand_bf16(g, 96, 64)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = (model(x).float() - yt.float()).pow(2).mean()
        loss.backward()
        opt.step()
        losses.append(bits(loss.detach().to(torch.bfloat16)).tobytes())
    return losses, [bits(p.detach()) for p in model.parameters()], model


def test_fused_put_same_bits_as_separate_puts(server):
    """A training loop whose puts travel inside the forwards gives the bits of one that puts
    separately (fused_put turned off by hand): losses and weights after 5 steps."""
    with fosd.connect(server.url) as a, fosd.connect(server.url) as b:
        b._fused_off = "turned off by the test"
        assert a.fused_put and not b.fused_put
        p0 = b.stats()["ops"]["put_weight"]["requests"]
        la, wa, ma = _train(a)
        lb, wb, mb = _train(b)
        assert b.stats()["ops"]["put_weight"]["requests"] - p0 == 10  # b: 2 layers x 5 steps
        assert la == lb
        for x, y in zip(wa, wb):
            np.testing.assert_array_equal(x, y)
        del ma, mb


def test_fused_put_refused_by_a_fosd_of_several_devices(start_fosd):
    """A fosd serving several devices refuses a put inside a forward (FAILED_PRECONDITION): the
    layer puts separately from then on, with the same bits, and says why. libfos knows it from
    fosd's Health at connect: no Forward is sent for it (Stats: every forward request ran)."""
    s = start_fosd("--devices", "0,1", backend="cpu")
    with fosd.connect(s.url) as c:
        assert c.fused_put
        ops0 = c.stats()["ops"]
        p0, f0 = ops0["put_weight"]["requests"], ops0.get("forward", {}).get("requests", 0)
        losses, w, m = _train(c, steps=2)
        assert not c.fused_put
        assert "put inside a forward" in c.fused_put_off_reason
        assert "serves 2 devices" in c.fused_put_off_reason
        ops = c.stats()["ops"]
        assert ops["put_weight"]["requests"] - p0 == 4
        assert ops["forward"]["requests"] - f0 == 4  # 2 layers x 2 steps, none refused
        assert "FAILED_PRECONDITION" not in ops["forward"]["by_code"]
        del m
    with fosd.connect(s.url) as c1:
        c1._fused_off = "off"
        l1, w1, m1 = _train(c1, steps=2)
        assert l1 == losses
        del m1


def test_two_layers_different_options(client, rng):
    """Two layers of different options in one process each give their own one-shot results."""
    x, dy = rand_bf16(rng, 128, 128), rand_bf16(rng, 128, 128)
    opts = [dict(override="quantized", weight_block="16x16", err="mae", bound=256),
            dict(override="dequantized", weight_block="1x16", err="mse", bound=448, row_scaled=True)]
    layers = [ft.Linear(128, 128, dtype=torch.bfloat16, client=client, **o) for o in opts]
    for layer in layers:
        with torch.no_grad():
            layer.weight.copy_(rand_bf16(rng, 128, 128, scale=0.05))
    outs = []
    for layer in layers:
        xi = x.clone().requires_grad_(True)
        y = layer(xi)
        y.backward(dy)
        outs.append((y.detach(), xi.grad, layer.weight.grad, layer.bias.grad))
    for layer, o, (y, dx, dw, db) in zip(layers, opts, outs):
        ref = client.linear(x, layer.weight.detach(), dy=dy, bias=layer.bias.detach(), **o)
        for got, k in ((y, "y"), (dx, "dx"), (dw, "dw"), (db, "db")):
            assert np.array_equal(bits(got), bits(ref[k])), "%s %s" % (o, k)
    assert not np.array_equal(bits(outs[0][0]), bits(outs[1][0]))
    w = weights(client)
    assert w[layers[0].name].weight_block == "16x16" and w[layers[1].name].weight_block == "1x16"
    assert w[layers[1].name].err == "mse" and w[layers[1].name].bound == 448


def test_contexts_released_with_the_graph(client, rng):
    layer = ft.Linear(128, 128, dtype=torch.bfloat16, client=client)
    x = rand_bf16(rng, 128, 128).requires_grad_(True)
    base = client.stats()["contexts"]
    ys = [layer(x) for _ in range(3)]  # three graphs, no backward
    assert client.stats()["contexts"] == base + 3
    del ys
    assert client.stats()["contexts"] == base
    # a graph with two fosd layers, freed after its backward
    l2 = ft.Linear(128, 128, dtype=torch.bfloat16, client=client)
    loss = l2(torch.relu(layer(x))).float().sum()
    assert client.stats()["contexts"] == base + 2
    loss.backward()
    assert client.stats()["contexts"] == base
    del loss
    gc.collect()
    assert client.stats()["contexts"] == base
    # no grad: no context at all
    with torch.no_grad():
        layer(x)
    assert client.stats()["contexts"] == base


def test_second_backward_recomputes(client, rng):
    """backward(retain_graph=True) twice: the second finds the context consumed and recomputes it
    from the saved X; same bits."""
    layer = ft.Linear(128, 128, dtype=torch.bfloat16, client=client)
    x = rand_bf16(rng, 128, 128).requires_grad_(True)
    dy = rand_bf16(rng, 128, 128)
    y = layer(x)
    y.backward(dy, retain_graph=True)
    g1 = (x.grad.clone(), layer.weight.grad.clone())
    x.grad = None
    layer.weight.grad = None
    y.backward(dy)
    assert np.array_equal(bits(x.grad), bits(g1[0])) and np.array_equal(bits(layer.weight.grad), bits(g1[1]))


def test_expired_context_recomputed(start_fosd, rng):
    """fosd forgets contexts after --context-ttl: the backward recomputes from the saved X."""
    s = start_fosd("--context-ttl", "200ms", "--sweep-interval", "50ms")
    with fosd.connect(s.url) as c:
        layer = ft.Linear(128, 128, dtype=torch.bfloat16, client=c)
        x = rand_bf16(rng, 128, 128)
        dy = rand_bf16(rng, 128, 128)
        ref = c.linear(x, layer.weight.detach(), dy=dy, bias=layer.bias.detach())
        xg = x.clone().requires_grad_(True)
        y = layer(xg)
        t0 = time.monotonic()
        while c.stats()["contexts"] and time.monotonic() - t0 < 10:
            time.sleep(0.05)
        assert c.stats()["contexts"] == 0 and c.stats()["contexts_expired"] >= 1
        y.backward(dy)
        assert np.array_equal(bits(xg.grad), bits(ref["dx"]))
        assert np.array_equal(bits(layer.weight.grad), bits(ref["dw"]))
        assert np.array_equal(bits(layer.bias.grad), bits(ref["db"]))
        # X changed in place after the forward: autograd refuses the recompute
        xin = x.clone()
        y = layer(xin)
        xin.add_(1)
        t0 = time.monotonic()
        while c.stats()["contexts"] and time.monotonic() - t0 < 10:
            time.sleep(0.05)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.backward(dy)


def test_lost_weight_is_put_again(client, rng):
    layer = ft.Linear(128, 128, dtype=torch.bfloat16, client=client)
    x = rand_bf16(rng, 128, 128)
    with torch.no_grad():
        y1 = layer(x)
        client.drop_weight(layer.name)  # as if fosd evicted it
        y2 = layer(x)
    assert layer.puts == 2 and np.array_equal(bits(y1), bits(y2))


def test_weight_dropped_with_the_layer(client):
    layer = ft.Linear(128, 128, dtype=torch.bfloat16, client=client)
    with torch.no_grad():
        layer(torch.zeros(128, 128, dtype=torch.bfloat16))
    name = layer.name
    twin = copy.deepcopy(layer)
    assert twin.name != name and torch.equal(twin.weight, layer.weight)
    with torch.no_grad():
        twin(torch.zeros(128, 128, dtype=torch.bfloat16))
    assert name in weights(client) and twin.name in weights(client)
    del layer
    gc.collect()
    assert name not in weights(client) and twin.name in weights(client)
    named = ft.Linear(128, 128, dtype=torch.bfloat16, client=client, name="t.named.layer")
    with torch.no_grad():
        named(torch.zeros(128, 128, dtype=torch.bfloat16))
    assert "t.named.layer" in weights(client)
    del named, twin
    gc.collect()
    assert "t.named.layer" not in weights(client)
