"""Names and numbers the Python client must not let C cut or wrap (issue 25, point 6): a weight
name with a NUL byte (C would stop at it: 'fw\\0other' ran 'fw'), a version past 2^64-1 (ctypes
kept its low 64 bits: 2**64 cached version 0), strings of the connection with a NUL, timeouts and
spins past a C int, and a missing array (None raised AttributeError): each INVALID_ARGUMENT naming
the value, before anything reaches fosd (its cache and the C name checks are unchanged)."""

import numpy as np
import pytest

import fosd

W = (np.random.default_rng(2).standard_normal((128, 128)) * 0.05).astype(np.float32)
X = np.random.default_rng(3).standard_normal((128, 128)).astype(np.float32)


def invalid(fn, *args, match=None, **kw):
    with pytest.raises(fosd.Error) as ei:
        fn(*args, **kw)
    assert ei.value.code == "INVALID_ARGUMENT", ei.value
    if match is not None:
        assert match in ei.value.message, ei.value.message
    return ei.value


def names(client):
    return {w.name: w.version for w in client.list_weights()}


def test_nul_in_weight_name(client):
    client.put_weight("nm.fw", W)
    invalid(client.forward, "nm.fw\0other", X, match="'nm.fw\\x00other'")
    invalid(client.put_weight, "nm.nul\0name", W, match="NUL")
    invalid(client.drop_weight, "nm.fw\0x", match="NUL")
    got = names(client)
    assert "nm.nul" not in got and "nm.fw" in got


@pytest.mark.parametrize("version", [2 ** 64, 2 ** 64 + 1, -1, 1.0, True])
def test_version_out_of_range(client, version):
    e = invalid(client.put_weight, "nm.v", W, version=version, match="version")
    assert repr(version) in e.message
    assert "nm.v" not in names(client)
    client.put_weight("nm.v2", W, version=1)
    invalid(client.forward, "nm.v2", X, version=version, match=repr(version))
    client.drop_weight("nm.v2")


def test_largest_version(client):
    client.put_weight("nm.max", W, version=2 ** 64 - 1)
    assert names(client)["nm.max"] == 2 ** 64 - 1
    assert client.forward("nm.max", X, version=2 ** 64 - 1).shape == (128, 128)


def test_missing_arrays(client):
    client.put_weight("nm.none", W)
    invalid(client.forward, "nm.none", None, match="x is missing")
    invalid(client.put_weight, "nm.none", None, match="w is missing")
    y, ctx = client.forward("nm.none", X, save_context=True)
    invalid(client.backward, ctx, None, match="dy is missing")
    client.release(ctx)
    invalid(client.linear, None, W, match="x is missing")
    invalid(client.quantize, None, match="x is missing")


def test_connection_strings_and_numbers(server):
    invalid(fosd.connect, server.url + "\0junk", match="url")
    invalid(fosd.connect, server.url, token="sec\0ret", match="token")
    invalid(fosd.connect, server.url, tls_ca="/etc/ssl\0x", match="tls_ca")
    invalid(fosd.connect, server.url, timeout=1e10, match="timeout")
    with fosd.connect(server.url) as c:
        invalid(c.set_timeout, 3e6, match="timeout")
        invalid(c.set_spin, 2 ** 31, match="spin_us")
        c.set_timeout(5)
