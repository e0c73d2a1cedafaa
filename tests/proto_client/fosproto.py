"""fosproto.py: a fosd client written from proto/PROTOCOL.md alone, with Python's standard-library
sockets and Debian's python3-protobuf: no nng, no libfos. It exists to prove that the document
suffices (tests/proto_client/test_proto_client.py runs it against a real fosd).

Layers, each as PROTOCOL.md names it:
* the SP layer ("Under the framing: SP over ipc:// and tcp://"): the 8-byte connection headers, then
  each message as [0x01 on ipc] + u64 big-endian length + payload, the payload of a request being
  a u32 big-endian request ID with its high bit set followed by the fos message, echoed in the reply;
* the fos message ("Message framing"): u32 little-endian header length H, the packed fos.Request,
  zero padding to a multiple of 64, the data section with each tensor at a 64-byte aligned offset;
* the message classes, built at run time from proto/fos.proto: `protoc` (protobuf-compiler) or
  `protoc-c` (protobuf-c-compiler, which fosd's build needs anyway) writes the FileDescriptorSet
  and python3-protobuf's descriptor APIs make the classes from it;
* bf16 ("Values"): the client rounds float32 to bf16 itself, round to nearest even, a NaN keeps its
  sign and upper payload bits and is made quiet.

Invariants: one Connection is one SP pipe; several requests may be in flight on it (send, then
recv in any order: replies are matched by their SP request ID). Nothing here retries or resends.
"""

import os
import shutil
import socket
import struct
import subprocess

import numpy as np

SP_HEADER_REQ = b"\x00SP\x00\x00\x30\x00\x00"  # protocol 0x0030: REQ (the client's side)
SP_HEADER_REP = b"\x00SP\x00\x00\x31\x00\x00"  # protocol 0x0031: REP (fosd's side)
IPC_MSG_TYPE = b"\x01"                          # ipc:// only, before each message's length
ALIGN = 64


class ProtoError(Exception):
    """A transport or framing failure (the connection is unusable afterwards)."""


def load_messages(proto_path, workdir):
    """The fos message classes, from the .proto: returns a dict full name -> class (e.g.
    'fos.Request') plus the FileDescriptorProto under the key None (for the enums)."""
    from google.protobuf import descriptor_pb2, message_factory

    out = os.path.join(workdir, "fos.desc")
    compilers = [c for c in ("protoc", "protoc-c") if shutil.which(c)]
    if not compilers:
        raise ProtoError("neither protoc (protobuf-compiler) nor protoc-c (protobuf-c-compiler) is installed")
    subprocess.run([compilers[0], "--descriptor_set_out=" + out, "-I" + os.path.dirname(proto_path),
                    os.path.basename(proto_path)], check=True, cwd=os.path.dirname(proto_path))
    fds = descriptor_pb2.FileDescriptorSet()
    with open(out, "rb") as f:
        fds.ParseFromString(f.read())
    classes = message_factory.GetMessages(list(fds.file))
    classes[None] = fds.file[0]
    return classes


def enum_value(classes, enum, name):
    """The number of enum value `name` of enum `enum` (e.g. 'Code', 'INVALID_ARGUMENT')."""
    for e in classes[None].enum_type:
        if e.name == enum:
            for v in e.value:
                if v.name == name:
                    return v.number
    raise KeyError("%s.%s" % (enum, name))


def enum_name(classes, enum, number):
    for e in classes[None].enum_type:
        if e.name == enum:
            for v in e.value:
                if v.number == number:
                    return v.name
    return str(number)


# ---- bf16 -------------------------------------------------------------------------------------

def f32_to_bf16(a):
    """float32 values -> bf16 bit patterns (uint16): round to nearest even; a NaN keeps its sign and
    upper 7 payload bits and gets the quiet bit (0x0040); infinities stay infinities."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF
    quiet = (u >> 16) | 0x0040
    return np.where(nan, quiet, rounded).astype(np.uint16)


def bf16_to_f32(b):
    return (np.asarray(b, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


# ---- the fos message --------------------------------------------------------------------------

def round_up(n, a=ALIGN):
    return (n + a - 1) // a * a


def pack(req, tensors=()):
    """The fos message of `req` with `tensors` [(Tensor message in req, raw bytes)]: sets each
    Tensor's offset and length and places the bytes 64-byte aligned in the data section."""
    off = 0
    for t, raw in tensors:
        t.offset, t.length = off, len(raw)
        off = round_up(off + len(raw))
    hdr = req.SerializeToString()
    start = round_up(4 + len(hdr))
    end = start + max(t.offset + t.length for t, _ in tensors) if tensors else 4 + len(hdr)
    body = bytearray(end)
    struct.pack_into("<I", body, 0, len(hdr))
    body[4:4 + len(hdr)] = hdr
    for t, raw in tensors:
        body[start + t.offset:start + t.offset + t.length] = raw
    return bytes(body)


def unpack(classes, msg):
    """(Response, data section as a memoryview) of a fos reply message."""
    if len(msg) < 4:
        raise ProtoError("reply of %d bytes: no header length" % len(msg))
    (h,) = struct.unpack_from("<I", msg, 0)
    if 4 + h > len(msg):
        raise ProtoError("reply header length %d past the reply's %d bytes" % (h, len(msg)))
    resp = classes["fos.Response"].FromString(bytes(msg[4:4 + h]))
    return resp, memoryview(msg)[round_up(4 + h):]


def tensor_bytes(data, t):
    """The bytes of result Tensor t in the data section `data`."""
    if t.offset + t.length > len(data):
        raise ProtoError("tensor [%d, +%d) past the data section's %d bytes" % (t.offset, t.length, len(data)))
    return bytes(data[t.offset:t.offset + t.length])


# ---- the SP layer -----------------------------------------------------------------------------

class Connection:
    """One SP REQ pipe to fosd over ipc://PATH or tcp://HOST:PORT."""

    def __init__(self, url, timeout=30.0):
        if url.startswith("ipc://"):
            self.ipc = True
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            addr = url[len("ipc://"):]
        elif url.startswith("tcp://"):
            self.ipc = False
            host, port = url[len("tcp://"):].rsplit(":", 1)
            self.sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
            addr = (host.strip("[]"), int(port))
        else:
            raise ProtoError("%s: only ipc:// and tcp:// URLs" % url)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(addr)
            if not self.ipc:
                self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.sock.sendall(SP_HEADER_REQ)
            peer = self._read(8)
        except OSError as e:
            self.sock.close()
            raise ProtoError("%s: %s" % (url, e)) from e
        if peer != SP_HEADER_REP:
            self.sock.close()
            raise ProtoError("%s: not an SP REP peer (header %s)" % (url, peer.hex(" ")))
        self.next_id = 1

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _read(self, n):
        buf = bytearray(n)
        view, got = memoryview(buf), 0
        while got < n:
            k = self.sock.recv_into(view[got:])
            if k == 0:
                raise ProtoError("connection closed by fosd (%d of %d bytes read)" % (got, n))
            got += k
        return bytes(buf)

    def send_raw(self, payload):
        """One SP message: [0x01 on ipc] + u64 big-endian length + payload."""
        self.sock.sendall((IPC_MSG_TYPE if self.ipc else b"") + struct.pack(">Q", len(payload)) + payload)

    def recv_raw(self):
        head = self._read(9 if self.ipc else 8)
        if self.ipc and head[0:1] != IPC_MSG_TYPE:
            raise ProtoError("ipc message type %d, 1 expected" % head[0])
        (n,) = struct.unpack(">Q", head[-8:])
        return self._read(n)

    def send(self, fos_msg, sp_id=None):
        """Sends a fos message under a new (or the given) 31-bit SP request ID; returns the ID."""
        if sp_id is None:
            sp_id, self.next_id = self.next_id, (self.next_id + 1) & 0x7FFFFFFF
        self.send_raw(struct.pack(">I", 0x80000000 | sp_id) + fos_msg)
        return sp_id

    def recv(self):
        """(SP request ID, fos reply message) of the next reply."""
        p = self.recv_raw()
        if len(p) < 4:
            raise ProtoError("SP reply of %d bytes: no request ID" % len(p))
        (tag,) = struct.unpack_from(">I", p, 0)
        if not tag & 0x80000000:
            raise ProtoError("SP reply tag %08x without the high bit" % tag)
        return tag & 0x7FFFFFFF, p[4:]

    def call(self, classes, req, tensors=()):
        """One request, its reply: (Response, data section)."""
        sp_id = self.send(pack(req, tensors))
        got, msg = self.recv()
        if got != sp_id:
            raise ProtoError("reply to SP request %d while waiting for %d" % (got, sp_id))
        return unpack(classes, msg)
