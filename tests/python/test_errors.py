"""Every error path of the fosd package raises fosd.Error with the right status name and a
message naming what was wrong: bad shapes, unknown weights and contexts, bad options, bad dtypes,
a closed client, nothing listening, and a fosd that went away."""

import numpy as np
import pytest
import torch

import fosd
import fosd.torch as ft


def raises(code, fn, *args, match=None, **kw):
    with pytest.raises(fosd.Error) as ei:
        fn(*args, **kw)
    e = ei.value
    assert e.code == code, "%s: %s" % (e.code, e.message)
    assert isinstance(e.code_number, int) and str(e).startswith(code + ": ")
    if match:
        assert match in e.message, e.message
    return e


def bf(*shape):
    return torch.ones(*shape, dtype=torch.bfloat16)


def test_bad_shapes(client):
    client.put_weight("e.w", bf(128, 256))
    raises("INVALID_ARGUMENT", client.forward, "e.w", bf(128, 128), match="x")  # K differs from the weight's
    raises("INVALID_ARGUMENT", client.forward, "e.w", bf(128, 256, 1), match="2-D")
    raises("INVALID_ARGUMENT", client.forward, "e.w", bf(128, 256), bias=bf(64), match="bias")
    raises("INVALID_ARGUMENT", client.linear, bf(128, 256), bf(128, 128))
    raises("INVALID_ARGUMENT", client.put_weight, "e.v", bf(128))
    raises("INVALID_ARGUMENT", client.quantize, bf(128, 20), match="multiple of 16")
    y, ctx = client.forward("e.w", bf(128, 256), save_context=True)
    raises("INVALID_ARGUMENT", client.backward, ctx, bf(128, 64), match="dy")
    assert ctx.saved  # a failed backward leaves the context
    layer = ft.Linear(256, 128, dtype=torch.bfloat16, client=client)
    raises("INVALID_ARGUMENT", layer, bf(4, 128), match="in_features")
    client.release(ctx)
    client.drop_weight("e.w")


def test_unknown_names(client):
    raises("NOT_FOUND", client.forward, "e.nothing", bf(128, 128), match="e.nothing")
    raises("NOT_FOUND", client.drop_weight, "e.nothing")
    client.put_weight("e.w2", bf(128, 128))
    y, ctx = client.forward("e.w2", bf(128, 128), save_context=True)
    client.backward(ctx, bf(128, 128))
    raises("NOT_FOUND", client.backward, ctx, bf(128, 128))
    raises("INVALID_ARGUMENT", client.backward, "not a context", bf(128, 128))
    raises("INVALID_ARGUMENT", client.put_weight, "bad name!", bf(128, 128), match="name")
    raises("INVALID_ARGUMENT", client.put_weight, 7, bf(128, 128), match="name")
    client.drop_weight("e.w2")


def test_bad_options(client):
    x, w = bf(128, 128), bf(128, 128)
    raises("INVALID_ARGUMENT", client.linear, x, w, override="fastest", match="override")
    raises("INVALID_ARGUMENT", client.linear, x, w, weight_block="4x4", match="weight_block")
    raises("INVALID_ARGUMENT", client.linear, x, w, err="l1", match="err")
    raises("INVALID_ARGUMENT", client.linear, x, w, bound=300, match="bound")
    raises("INVALID_ARGUMENT", client.linear, x, w, bound="256", match="bound")
    raises("INVALID_ARGUMENT", client.linear, x, w, dy=x, override="quantized", row_scaled=True)
    raises("INVALID_ARGUMENT", client.put_weight, "e.o", w, bound=100, match="bound")
    raises("INVALID_ARGUMENT", client.put_weight, "e.o", w, version=-1, match="version")
    raises("INVALID_ARGUMENT", client.quantize, x, recipe="fp8", match="recipe")
    raises("INVALID_ARGUMENT", client.dequantize, *client.quantize(x), dtype="f16", match="dtype")
    raises("INVALID_ARGUMENT", ft.Linear, 128, 128, client=client, bound=512, match="bound")
    raises("INVALID_ARGUMENT", ft.linear, x, w, client=client, err="max", match="err")


def test_bad_dtypes(client):
    raises("INVALID_ARGUMENT", client.linear, torch.ones(128, 128, dtype=torch.int32), bf(128, 128),
           match="x: torch dtype")
    raises("INVALID_ARGUMENT", client.linear, np.ones((128, 128), dtype=np.int64), bf(128, 128),
           match="x: numpy dtype")
    raises("INVALID_ARGUMENT", client.linear, torch.ones(128, 128, dtype=torch.uint8), bf(128, 128),
           match="x")


def test_closed_client_and_nothing_listening(server, tmp_path):
    c = fosd.connect(server.url)
    c.close()
    c.close()  # twice is fine
    assert c.closed
    raises("FAILED_PRECONDITION", c.health, match="closed")
    raises("UNAVAILABLE", fosd.connect, "ipc://%s/none.sock" % tmp_path, timeout=1)
    raises("INVALID_ARGUMENT", fosd.connect, "bogus://x", timeout=1)
    raises("INVALID_ARGUMENT", fosd.connect, server.url, timeout=0, match="timeout")


def test_fosd_gone(start_fosd):
    """Calls after fosd died fail UNAVAILABLE or DEADLINE_EXCEEDED (the handle's timeout), never
    hang; through a fosd.torch layer too."""
    s = start_fosd()
    c = fosd.connect(s.url, timeout=2)
    layer = ft.Linear(128, 128, dtype=torch.bfloat16, client=c)
    x = bf(128, 128)
    layer(x)
    s.kill()
    for fn in (c.health, lambda: c.linear(x, x), lambda: layer(x)):
        with pytest.raises(fosd.Error) as ei:
            fn()
        assert ei.value.code in ("UNAVAILABLE", "DEADLINE_EXCEEDED"), ei.value
    c.close()
