"""test_hints.py: errors of the Python client that a user fixes say how (issue 30 item 7): a URL
fosd cannot have lists the schemes it can."""

import pytest

import fosd


@pytest.mark.parametrize("url", ["http://localhost:1", "/tmp/fosd.sock", "tcp//host:1"])
def test_bad_url_lists_schemes(url):
    with pytest.raises(fosd.Error) as ei:
        fosd.connect(url, timeout=2)
    assert ei.value.code == "INVALID_ARGUMENT"
    assert "a fosd URL is ipc:///PATH, tcp://HOST:PORT or tls+tcp://HOST:PORT" in str(ei.value)
    assert url in str(ei.value)
