"""fosd.Client.put_weight(uses=...) against a real CPU fosd (PROTOCOL.md "Weight uses"): what a
weight put for some uses reports (weight_uses, bytes by part), that its uses work bit for bit like
a weight put for all of them, that the others fail FAILED_PRECONDITION naming the use, that bad
uses are refused before a request, and the decoded tier in stats() after a small forward."""

import pytest
import torch

import fosd
from conftest import bits


def test_put_for_forward_only(client):
    g = torch.Generator().manual_seed(7)
    w = (torch.randn(64, 128, generator=g) * 0.1).to(torch.bfloat16)
    x = torch.randn(32, 128, generator=g).to(torch.bfloat16)
    codes = 64 * 128 // 2 + 64 * 128 // 16 + 4
    info = client.put_weight("u.fwd", w, uses=("forward",))
    assert info.weight_uses == ("forward",)
    assert (info.bytes, info.codes_bytes, info.columnwise_bytes, info.master_bytes) == (codes, codes, 0, 0)
    full = client.put_weight("u.all", w)
    assert set(full.weight_uses) == {"forward", "quantized", "high_precision", "dequantized"}
    assert full.bytes == 2 * codes + 64 * 128 * 2
    assert (bits(client.forward("u.fwd", x)) == bits(client.forward("u.all", x))).all()
    for ov in ("quantized", "high_precision", "dequantized"):
        with pytest.raises(fosd.Error) as ei:
            client.forward("u.fwd", x, override=ov, save_context=True)
        assert ei.value.code == "FAILED_PRECONDITION" and ("use '%s'" % ov) in ei.value.message
    s = client.stats()
    assert s["decoded_tier_entries"] >= 1 and s["decoded_tier_bytes"] >= 64 * 128 * 2
    listed = {i.name: i for i in client.list_weights()}
    assert listed["u.fwd"].decoded_tier_bytes in (0, 64 * 128 * 2)
    client.drop_weight("u.fwd")
    client.drop_weight("u.all")


def test_backward_use_alone(client):
    g = torch.Generator().manual_seed(8)
    w = (torch.randn(64, 128, generator=g) * 0.1).to(torch.bfloat16)
    x, dy = torch.randn(32, 128, generator=g).to(torch.bfloat16), torch.randn(32, 64, generator=g).to(torch.bfloat16)
    client.put_weight("u.q", w, uses="quantized")
    client.put_weight("u.a", w)
    y1, c1 = client.forward("u.q", x, override="quantized", save_context=True)
    y2, c2 = client.forward("u.a", x, override="quantized", save_context=True)
    for a, b in zip((y1,) + tuple(client.backward(c1, dy)), (y2,) + tuple(client.backward(c2, dy))):
        if a is not None:
            assert (bits(a) == bits(b)).all()
    with pytest.raises(fosd.Error) as ei:
        client.forward("u.q", x)
    assert ei.value.code == "FAILED_PRECONDITION" and "use 'forward'" in ei.value.message
    client.drop_weight("u.q")
    client.drop_weight("u.a")


def test_bad_uses(client):
    w = torch.zeros(64, 128, dtype=torch.bfloat16)
    for bad in (("forward", "forward"), ("inference",), ()):
        with pytest.raises(fosd.Error) as ei:
            client.put_weight("u.bad", w, uses=bad)
        assert ei.value.code == "INVALID_ARGUMENT"
    with pytest.raises(fosd.Error) as ei:
        client.put_weight("u.bad", w, uses=("high_precision",), drop_master=True)
    assert ei.value.code == "INVALID_ARGUMENT" and "drop_master" in ei.value.message


@pytest.mark.parametrize("override,row_scaled,want", [
    (None, False, ("forward", "quantized")), (None, True, ("forward", "high_precision")),
    ("quantized", False, ("forward", "quantized")), ("high_precision", False, ("forward", "high_precision")),
    ("dequantized", True, ("forward", "dequantized"))])
def test_layer_puts_its_uses(client, override, row_scaled, want):
    """fosd.torch.Linear puts its weight for forwards without a context and for the backward its
    override resolves to (the default: quantized, high_precision with row-scaled X), so no bf16
    master is kept unless it is high_precision; a training step and a no-grad forward run; a
    change of the layer's override puts the weight again, for the new use."""
    import fosd.torch as ft
    torch.manual_seed(9)
    m = ft.Linear(128, 64, dtype=torch.bfloat16, client=client, override=override, row_scaled=row_scaled)
    x, dy = torch.randn(32, 128).to(torch.bfloat16), torch.randn(32, 64).to(torch.bfloat16)
    m(x).backward(dy)
    with torch.no_grad():
        m(x)
    info = {i.name: i for i in client.list_weights()}[m.name]
    assert info.weight_uses == want
    assert (info.master_bytes == 0) == ("high_precision" not in want)
    assert m.puts == 1
    m.override = "dequantized" if override != "dequantized" else "high_precision"
    m.row_scaled = True
    m(x).backward(dy)
    assert m.puts == 2
    assert {i.name: i for i in client.list_weights()}[m.name].weight_uses == ("forward", m.override)
