"""test_proto_client.py: the protocol test client (fosproto.py: sockets + python3-protobuf, written
from proto/PROTOCOL.md alone) against a real cpu fosd over ipc:// and tcp://.

* the bytes of PROTOCOL.md's example Health exchange, byte for byte;
* Health, PutWeight and Forward (f32 inputs rounded to bf16 by the client, a bias placed after X at
  the next 64-byte offset) over both transports, with Y bit-identical to `fos forward` (libfos, and
  the CLI's own f32 rounding) on the same float32 .npy inputs;
* the SP rules the document states: replies matched by request ID when several are in flight, the
  message limit counting the 4-byte request ID, a bad connection header or ipc message type closing
  the connection (fosd serves on), every fos message answered (garbage: id 0, INVALID_ARGUMENT; an
  op fosd does not know: INVALID_ARGUMENT with the request's id), an f32 X refused, the token rule
  over tcp, and requests dropped with their connection counted as CANCELLED in Stats.
"""

import os
import socket
import struct
import time

import numpy as np
import pytest

import fosproto
from proto_fixtures import cli, fos, server, start_fosd  # noqa: F401 (the fixtures)

TRANSPORTS = ["ipc", "tcp"]


def url_of(server, transport):
    if transport == "tcp":
        assert server.tcp_url, "fosd logged no tcp port:\n" + server.log_text()
        return server.tcp_url
    return server.url


def code(fos, name):
    return fosproto.enum_value(fos, "Code", name)


def status_of(fos, resp):
    return fosproto.enum_name(fos, "Code", resp.status.code), resp.status.message


def health_request(fos, rid):
    rq = fos["fos.Request"](id=rid)
    rq.health.SetInParent()
    return rq


def test_example_bytes(fos, server):
    """PROTOCOL.md's example: a Health request with id 7 under SP request ID 1 over ipc."""
    msg = fosproto.pack(health_request(fos, 7))
    assert msg == bytes.fromhex("04000000 08075200")
    wire = bytes.fromhex("01 000000000000000c 80000001 04000000 08075200")
    with fosproto.Connection(server.url) as c:
        c.sock.sendall(wire)
        head = c._read(13)
        assert head[0] == 1 and head[9:13] == bytes.fromhex("80000001"), head.hex(" ")
        (n,) = struct.unpack(">Q", head[1:9])
        resp, data = fosproto.unpack(fos, c._read(n - 4))
    assert resp.id == 7 and resp.WhichOneof("result") == "health" and len(data) == 0


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_health(fos, server, transport):
    with fosproto.Connection(url_of(server, transport)) as c:
        resp, _ = c.call(fos, health_request(fos, 11))
    assert resp.id == 11 and not resp.HasField("status"), status_of(fos, resp)
    h = resp.health
    assert h.backend == "cpu" and h.version and not h.draining and h.max_message_bytes >= 1 << 20
    # MPS: not applicable to the cpu backend (PROTOCOL.md's Health row)
    assert h.mps == h.DESCRIPTOR.enum_values_by_name["MPS_NOT_APPLICABLE"].number == 1


def f32_data(rng, shape, ties=True):
    """float32 values, a quarter of them exactly halfway between two bf16 values."""
    a = rng.standard_normal(shape).astype(np.float32)
    if ties:
        u = a.view(np.uint32)
        pick = rng.random(shape) < 0.25
        u[pick] = (u[pick] & np.uint32(0xFFFF0000)) | np.uint32(0x8000)
    return a


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_put_forward_bitwise_with_libfos(fos, server, cli, tmp_path, transport):
    M, N, K = 37, 48, 272
    rng = np.random.default_rng(18 + len(transport))
    w = f32_data(rng, (N, K))
    x = f32_data(rng, (M, K))
    x[3, 5] = np.uint32(0x7FA12345).view(np.float32)  # NaN payloads: the client keeps sign and top bits
    x[7, 9] = np.uint32(0xFF800001).view(np.float32)
    bias = f32_data(rng, (N,))
    name = "pc.raw." + transport
    cid = struct.unpack("<Q", os.urandom(8))[0]  # a random client id: (client_id, id) must be new
    Tensor = fos["fos.Tensor"]
    bf16 = fosproto.enum_value(fos, "DType", "DTYPE_BF16")

    with fosproto.Connection(url_of(server, transport)) as c:
        rq = fos["fos.Request"](id=21, client_id=cid, auth_token=server.token)
        rq.put_weight.name, rq.put_weight.version = name, 1
        rq.put_weight.w.CopyFrom(Tensor(dtype=bf16, shape=[N, K]))
        resp, _ = c.call(fos, rq, [(rq.put_weight.w, fosproto.f32_to_bf16(w).tobytes())])
        assert not resp.HasField("status") or resp.status.code == 0, status_of(fos, resp)
        info = resp.put_weight.info
        assert (info.name, info.version, info.n, info.k) == (name, 1, N, K)

        rq = fos["fos.Request"](id=22, client_id=cid, auth_token=server.token)
        rq.forward.weight = name
        rq.forward.x.CopyFrom(Tensor(dtype=bf16, shape=[M, K]))
        rq.forward.bias.CopyFrom(Tensor(dtype=bf16, shape=[N]))
        xb, bb = fosproto.f32_to_bf16(x).tobytes(), fosproto.f32_to_bf16(bias).tobytes()
        resp, data = c.call(fos, rq, [(rq.forward.x, xb), (rq.forward.bias, bb)])
        assert rq.forward.bias.offset == fosproto.round_up(M * K * 2) != M * K * 2
        assert not resp.HasField("status") or resp.status.code == 0, status_of(fos, resp)
        y = resp.forward.y
        assert y.dtype == bf16 and list(y.shape) == [M, N] and y.length == M * N * 2
        y_raw = np.frombuffer(fosproto.tensor_bytes(data, y), dtype="<u2").reshape(M, N)

    # libfos through the CLI, on the float32 files: its own put, its own rounding, its own forward
    for nm, a in (("w", w), ("x", x), ("b", bias)):
        np.save(tmp_path / (nm + ".npy"), a)
    g = ["--server", server.url, "--token", server.token.decode()]
    cli(*g, "put-weight", "pc.cli." + transport, tmp_path / "w.npy")
    cli(*g, "forward", "pc.cli." + transport, tmp_path / "x.npy", "--bias", tmp_path / "b.npy",
        "--out", tmp_path / "y.npy")
    y_cli = np.load(tmp_path / "y.npy")
    assert y_cli.dtype == np.uint16 and y_cli.shape == (M, N)
    assert np.array_equal(y_raw, y_cli), "%d of %d elements differ" % (np.sum(y_raw != y_cli), M * N)
    assert np.isfinite(fosproto.bf16_to_f32(y_raw)).any()


def test_bf16_rounding_table():
    """PROTOCOL.md's table of f32 -> bf16 cases."""
    cases = {
        0x3F808000: 0x3F80, 0x3F818000: 0x3F82, 0x3F808001: 0x3F81, 0xBF808000: 0xBF80,
        0x7F7FFFFF: 0x7F80, 0x7F800000: 0x7F80, 0xFF800000: 0xFF80, 0x7F800001: 0x7FC0,
        0xFFA12345: 0xFFE1, 0x80000000: 0x8000, 0x00008000: 0x0000, 0x00018000: 0x0002,
    }
    f = np.array(list(cases), dtype=np.uint32).view(np.float32)
    got = fosproto.f32_to_bf16(f)
    assert [hex(v) for v in got] == [hex(v) for v in cases.values()]


def test_pipelined_replies_matched_by_id(fos, server):
    with fosproto.Connection(server.url) as c:
        sent = {}
        for i in range(6):
            sent[c.send(fosproto.pack(health_request(fos, 100 + i)), sp_id=0x1000 + i)] = 100 + i
        got = {}
        for _ in sent:
            sp_id, msg = c.recv()
            got[sp_id] = fosproto.unpack(fos, msg)[0].id
    assert got == sent


def test_every_message_answered(fos, server):
    with fosproto.Connection(server.url) as c:
        c.send(b"\x03\x00\x00\x00abc")  # a header that is no fos.Request
        resp, _ = fosproto.unpack(fos, c.recv()[1])
        assert resp.id == 0 and resp.status.code == code(fos, "INVALID_ARGUMENT"), status_of(fos, resp)
        # field 99 (no op fosd knows), length-delimited and empty: the op is unset for fosd
        hdr = fos["fos.Request"](id=5, auth_token=server.token).SerializeToString() + b"\x9a\x06\x00"
        c.send(struct.pack("<I", len(hdr)) + hdr)
        resp, _ = fosproto.unpack(fos, c.recv()[1])
        assert resp.id == 5 and resp.status.code == code(fos, "INVALID_ARGUMENT"), status_of(fos, resp)
        assert "names no operation" in resp.status.message


def test_token_rule_over_tcp(fos, server):
    with fosproto.Connection(url_of(server, "tcp")) as c:
        rq = fos["fos.Request"](id=31)
        rq.list_weights.SetInParent()
        resp, _ = c.call(fos, rq)
        assert resp.status.code == code(fos, "UNAUTHENTICATED"), status_of(fos, resp)
        resp, _ = c.call(fos, health_request(fos, 32))
        assert resp.id == 32 and resp.status.code == 0
        rq.auth_token = server.token
        resp, _ = c.call(fos, rq)
        assert resp.status.code == 0 and resp.WhichOneof("result") == "list_weights", status_of(fos, resp)


def closed(conn, payload_fn):
    """True when fosd closes `conn` instead of answering what payload_fn sends."""
    try:
        payload_fn()
        conn.recv_raw()
    except (fosproto.ProtoError, OSError):
        return True
    return False


def test_message_limit_counts_the_request_id(fos, start_fosd):
    s = start_fosd("--max-message-bytes", "4096")
    msg = fosproto.pack(health_request(fos, 41))
    with fosproto.Connection(s.url) as c:  # 4 + 4092 bytes: at the limit, answered
        c.send(msg + bytes(4092 - len(msg)))
        resp, _ = fosproto.unpack(fos, c.recv()[1])
        assert resp.id == 41 and resp.status.code == code(fos, "INVALID_ARGUMENT")
        assert "beyond its last tensor" in resp.status.message
    with fosproto.Connection(s.url) as c:  # 4 + 4093: over it, the connection is closed
        assert closed(c, lambda: c.send(msg + bytes(4093 - len(msg))))
    with fosproto.Connection(s.url) as c:
        assert c.call(fos, health_request(fos, 42))[0].id == 42


@pytest.mark.parametrize("case", ["rep-peer", "reserved", "ipc-type-0"])
def test_bad_sp_framing_closes(fos, server, case):
    payload = struct.pack(">I", 0x80000001) + fosproto.pack(health_request(fos, 51))
    c = fosproto.Connection.__new__(fosproto.Connection)
    c.ipc, c.sock = True, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.sock.settimeout(10)
    c.sock.connect(server.path)
    try:
        header = {"rep-peer": fosproto.SP_HEADER_REP, "reserved": fosproto.SP_HEADER_REQ[:7] + b"\x01"}
        c.sock.sendall(header.get(case, fosproto.SP_HEADER_REQ))
        assert c._read(8) == fosproto.SP_HEADER_REP
        if case == "ipc-type-0":
            send = lambda: c.sock.sendall(b"\x00" + struct.pack(">Q", len(payload)) + payload)  # noqa: E731
        else:
            send = lambda: c.send_raw(payload)  # noqa: E731
        assert closed(c, send)
    finally:
        c.close()
    with fosproto.Connection(server.url) as c:
        assert c.call(fos, health_request(fos, 52))[0].id == 52


def op_stats(fos, conn, op):
    rq = fos["fos.Request"](id=61)
    rq.stats.SetInParent()
    resp, _ = conn.call(fos, rq)
    for o in resp.stats.ops:
        if o.op == op:
            return o.requests, {fosproto.enum_name(fos, "Code", c.code): c.count for c in o.codes}
    return 0, {}


def test_cancelled_is_counted_never_sent(fos, start_fosd):
    """Forwards queued behind a long one when their connection closes are dropped unrun: no reply
    (nobody to read it), counted under CANCELLED in Stats."""
    s = start_fosd()
    M, N, K, n = 512, 1024, 1024, 8
    bf16 = fosproto.enum_value(fos, "DType", "DTYPE_BF16")
    Tensor = fos["fos.Tensor"]
    rng = np.random.default_rng(61)
    with fosproto.Connection(s.url) as c:
        rq = fos["fos.Request"](id=1)
        rq.put_weight.name, rq.put_weight.version = "pc.cancel", 1
        rq.put_weight.w.CopyFrom(Tensor(dtype=bf16, shape=[N, K]))
        resp, _ = c.call(fos, rq, [(rq.put_weight.w, fosproto.f32_to_bf16(f32_data(rng, (N, K))).tobytes())])
        assert resp.status.code == 0, status_of(fos, resp)
    x = fosproto.f32_to_bf16(f32_data(rng, (M, K), ties=False)).tobytes()
    with fosproto.Connection(s.url) as c:
        for i in range(n):
            rq = fos["fos.Request"](id=10 + i)
            rq.forward.weight = "pc.cancel"
            rq.forward.x.CopyFrom(Tensor(dtype=bf16, shape=[M, K]))
            c.send(fosproto.pack(rq, [(rq.forward.x, x)]))
    with fosproto.Connection(s.url) as c:
        for _ in range(2000):
            requests, codes = op_stats(fos, c, "forward")
            if requests == n and sum(codes.values()) == n:
                break
            time.sleep(0.01)
    assert requests == n and codes.get("CANCELLED", 0) >= 1, codes
    assert codes.get("CANCELLED", 0) + codes.get("OK", 0) == n, codes


def test_f32_operand_refused(fos, server):
    """X must be bf16: the client rounds float32 itself (PROTOCOL.md "float32 values")."""
    f32 = fosproto.enum_value(fos, "DType", "DTYPE_F32")
    with fosproto.Connection(server.url) as c:
        rq = fos["fos.Request"](id=71, auth_token=server.token)
        rq.forward.weight = "pc.f32"  # no such weight: the dtype is checked first
        rq.forward.x.CopyFrom(fos["fos.Tensor"](dtype=f32, shape=[16, 272]))
        resp, _ = c.call(fos, rq, [(rq.forward.x, bytes(16 * 272 * 4))])
    assert resp.id == 71 and resp.status.code == code(fos, "INVALID_ARGUMENT"), status_of(fos, resp)
    assert "x" in resp.status.message and "bf16" in resp.status.message, resp.status.message
