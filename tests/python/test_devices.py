"""Placement through the fosd package (PROTOCOL.md "Devices"): Client.put_weight's and
fosd.torch.Linear's devices and replicas, passed to libfos's fos_put_weight_on; Client.health_devices;
WeightInfo.devices from puts and list_weights. Against a cpu fosd with two stand-in devices
(--devices 0,1): a weight lands where it was asked to, every placement gives the bits of the
default one, and bad placements raise fosd.Error INVALID_ARGUMENT naming the field, before
anything is sent where the package can tell."""

import numpy as np
import pytest
import torch

import fosd
import fosd.torch as ft
from conftest import bits


@pytest.fixture(scope="module")
def two():
    from conftest import Fosd
    s = Fosd(("--devices", "0,1"), backend="cpu")  # cpu stand-ins, whatever $FOS_TEST_BACKEND says
    yield s
    rc = s.cleanup()
    assert rc == 0, "fosd exited %s:\n%s" % (rc, s.log_text())


@pytest.fixture
def dclient(two):
    with fosd.connect(two.url, timeout=60) as c:
        yield c


def rand(g, *shape, scale=1.0):
    return (torch.randn(*shape, generator=g) * scale).to(torch.bfloat16)


def test_health_devices(dclient):
    d = dclient.health_devices()
    assert [x["index"] for x in d] == [0, 1]
    assert all(x["backend"] == "cpu" and x["gpu_uuid"] is None for x in d), d
    assert d[0]["device"] != d[1]["device"]


def test_put_weight_placement(dclient):
    g = torch.Generator().manual_seed(7)
    w, x = rand(g, 128, 128, scale=0.1), rand(g, 64, 128)
    want = None
    for name, kw, where in (("pl.default", {}, None), ("pl.both", {"devices": [0, 1]}, (0, 1)),
                            ("pl.one", {"devices": [1]}, (1,)), ("pl.tuple", {"devices": (0,)}, (0,)),
                            ("pl.replicas", {"replicas": 2}, (0, 1)), ("pl.replica", {"replicas": 1}, None)):
        info = dclient.put_weight(name, w, **kw)
        assert info.name == name and info.n == 128 and info.k == 128
        if where is None:
            assert len(info.devices) == 1 and info.devices[0] in (0, 1), (name, info.devices)
        else:
            assert info.devices == where, (name, info.devices)
        listed = {i.name: i.devices for i in dclient.list_weights()}
        assert listed[name] == info.devices
        y = dclient.forward(name, x)
        if want is None:
            want = bits(y)
        assert np.array_equal(bits(y), want), name
    # a re-put without a placement stays where the name is
    info = dclient.put_weight("pl.one", w, version=2)
    assert info.devices == (1,) and "devices=(1,)" in repr(info) and "name='pl.one'" in repr(info)
    for name in ("pl.default", "pl.both", "pl.one", "pl.tuple", "pl.replicas", "pl.replica"):
        dclient.drop_weight(name)


@pytest.mark.parametrize("kw,words", [
    ({"devices": [0, 1], "replicas": 1}, "not both"),
    ({"devices": []}, "devices is empty"),
    ({"devices": "0"}, "devices"),
    ({"devices": [0, -1]}, "devices"),
    ({"devices": [True]}, "devices"),
    ({"replicas": -1}, "replicas"),
    ({"replicas": 1.5}, "replicas"),
], ids=["both", "empty", "str", "negative", "bool", "replicas-negative", "replicas-float"])
def test_bad_placement_checked_here(dclient, kw, words):
    before = dclient.stats()["ops"].get("put_weight", {}).get("requests", 0)
    with pytest.raises(fosd.Error) as e:
        dclient.put_weight("pl.bad", np.zeros((128, 128), dtype=np.uint16), **kw)
    assert e.value.code == "INVALID_ARGUMENT" and words in e.value.message, e.value.message
    assert dclient.stats()["ops"].get("put_weight", {}).get("requests", 0) == before
    with pytest.raises(fosd.Error) as e:
        ft.Linear(128, 128, dtype=torch.bfloat16, client=dclient, **kw)
    assert e.value.code == "INVALID_ARGUMENT" and words in e.value.message, e.value.message


@pytest.mark.parametrize("kw,words", [({"devices": [2]}, "2"), ({"devices": [1, 1]}, "twice"),
                                      ({"replicas": 3}, "replicas")],
                         ids=["past-the-end", "twice", "too-many-replicas"])
def test_bad_placement_refused(dclient, kw, words):
    """What only libfos or fosd can tell (the device count, a device listed twice): INVALID_ARGUMENT
    naming it; fosd keeps serving."""
    with pytest.raises(fosd.Error) as e:
        dclient.put_weight("pl.refused", np.zeros((128, 128), dtype=np.uint16), **kw)
    assert e.value.code == "INVALID_ARGUMENT" and words in e.value.message, e.value.message
    assert "pl.refused" not in {i.name for i in dclient.list_weights()}
    assert dclient.health()["version"]


def test_linear_placement_same_bits(dclient):
    """fosd.torch.Linear on both devices, on device 1 alone and by default: every put lands where
    asked (re-puts after SGD steps too), and the layers train bit for bit alike."""
    torch.manual_seed(5)
    layers = [ft.Linear(128, 256, dtype=torch.bfloat16, client=dclient, **kw) for kw in ({}, {"devices": [0, 1]}, {"devices": [1]},
                                                                   {"replicas": 2})]
    for m in layers[1:]:
        m.load_state_dict(layers[0].state_dict())
    assert "devices=[0, 1]" in repr(layers[1]) and "replicas=2" in repr(layers[3])
    g = torch.Generator().manual_seed(6)
    x, dy = rand(g, 64, 128), rand(g, 64, 256)
    for step in range(3):
        outs = []
        for m in layers:
            m.zero_grad()
            y = m(x)
            y.backward(dy)
            outs.append((bits(y), bits(m.weight.grad), bits(m.bias.grad)))
            with torch.no_grad():
                for p in m.parameters():
                    p.add_(p.grad, alpha=-0.01)
        for o in outs[1:]:
            for a, b in zip(o, outs[0]):
                assert np.array_equal(a, b), step
    where = {i.name: i.devices for i in dclient.list_weights()}
    assert where[layers[1].name] == (0, 1) and where[layers[2].name] == (1,) and where[layers[3].name] == (0, 1)
    assert len(where[layers[0].name]) == 1
    assert all(m.puts == 3 for m in layers)
    conv = ft.convert(torch.nn.Linear(128, 128, dtype=torch.bfloat16), client=dclient, devices=[1])
    conv(x)
    assert {i.name: i.devices for i in dclient.list_weights()}[conv.name] == (1,)
    fw = torch.nn.Parameter(rand(g, 64, 128))  # the only weight with N = 64
    ft.linear(x, fw, client=dclient, replicas=2)
    assert [i.devices for i in dclient.list_weights() if i.n == 64] == [(0, 1)]
