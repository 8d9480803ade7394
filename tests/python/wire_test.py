"""What the package speaks without grpcio or protobuf, checked against its
sources of truth: muster._wire's messages against proto/muster/v1/store.proto,
muster._h2's header compression against RFC 7541's examples (Appendix C), and
the package's version against the project's (CMakeLists.txt)."""

from __future__ import annotations

import os
import re
import socket
import threading
from typing import Dict, Iterator, Tuple

import pytest

import muster
from muster import _h2
from muster import _wire

SOURCE_DIR = os.environ.get("MUSTER_SOURCE_DIR") or os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def proto_messages() -> Dict[str, Dict[str, Tuple[int, str]]]:
    """{message: {field: (number, kind)}} of store.proto's flat messages."""
    with open(os.path.join(SOURCE_DIR, "proto", "muster", "v1",
                           "store.proto")) as f:
        text = re.sub(r"//[^\n]*", "", f.read())
    out = {}
    for name, body in re.findall(r"message (\w+) \{([^{}]*)\}", text):
        fields = {}
        for repeated, kind, field, number in re.findall(
                r"(repeated )?(\w+) (\w+) = (\d+);", body):
            fields[field] = (int(number), (repeated or "") + kind)
        out[name] = fields
    return out


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A TCP server that accepts and reads but never answers (a frozen
    musterd, or a cut network that still completes the handshake)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    stop = threading.Event()

    def serve() -> None:
        conns = []
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
                conn.setblocking(False)
                conns.append(conn)
            except OSError:
                pass
        for c in conns:
            c.close()

    thread = threading.Thread(target=serve)
    thread.start()
    yield f"127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    thread.join()
    listener.close()


class WireTest:
    def test_messages_match_the_proto(self) -> None:
        proto = proto_messages()
        for message, fields in _wire.MESSAGES.items():
            assert message in proto, message
            assert fields == proto[message], message

    def test_round_trip_and_defaults(self) -> None:
        data = _wire.encode("WaitRequest", prefix="job/1", keys=["a", "b"],
                            timeout_ms=1500)
        assert _wire.decode("WaitRequest", data) == {
            "prefix": "job/1", "keys": ["a", "b"], "timeout_ms": 1500}
        # proto3: defaults are not sent, and read back as defaults.
        assert _wire.encode("AddRequest", prefix="", key="", delta=0) == b""
        assert _wire.decode("DeleteResponse", b"") == {"deleted": False}
        # int64 below zero: ten bytes of two's complement.
        data = _wire.encode("AddRequest", delta=-2)
        assert len(data) == 11
        assert _wire.decode("AddRequest", data)["delta"] == -2
        # Unknown fields (a newer server's) are skipped.
        extra = _wire.encode("GetResponse", value=b"v") + bytes(
            [0x10, 0x05, 0x1a, 0x01, 0x78])
        assert _wire.decode("GetResponse", extra) == {"value": b"v"}
        with pytest.raises(ValueError):
            _wire.decode("GetResponse", b"\x0a\x05ab")

    def test_hpack_examples_of_rfc_7541(self) -> None:
        # C.4: requests with Huffman coding, one connection's table.
        d = _h2.HpackDecoder()
        assert d.decode(bytes.fromhex(
            "828684418cf1e3c2e5f23a6ba0ab90f4ff")) == [
            (":method", "GET"), (":scheme", "http"), (":path", "/"),
            (":authority", "www.example.com")]
        assert d.decode(bytes.fromhex("828684be5886a8eb10649cbf"))[-1] == (
            "cache-control", "no-cache")
        assert d.decode(bytes.fromhex(
            "828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf"))[-1] == (
            "custom-key", "custom-value")
        # C.6.1: a response, Huffman-coded literals with indexing.
        r = _h2.HpackDecoder(256)
        assert r.decode(bytes.fromhex(
            "488264025885aec3771a4b6196d07abe941054d444a8200595040b8166e082"
            "a62d1bff6e919d29ad171863c78f0b97c8e9ae82ae43d3")) == [
            (":status", "302"), ("cache-control", "private"),
            ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
            ("location", "https://www.example.com")]
        with pytest.raises(ValueError):
            _h2.huffman_decode(b"\x00")  # padding that is not ones
        # What the client sends decodes as it was meant.
        headers = [(":path", "/muster.v1.Store/Get"), ("x", "y" * 200)]
        assert _h2.HpackDecoder().decode(
            _h2.encode_headers(headers)) == headers

    def test_grpc_timeout_header(self) -> None:
        assert _h2.grpc_timeout(30.0) == "30000m"
        assert _h2.grpc_timeout(0.0001) == "1m"
        # At most 8 digits: a wait "for ever" (ten years) in minutes.
        assert _h2.grpc_timeout(10 * 365 * 86400 + 5) == "5256001M"

    def test_version_is_the_projects(self) -> None:
        with open(os.path.join(SOURCE_DIR, "CMakeLists.txt")) as f:
            m = re.search(r"project\(muster VERSION ([\d.]+)", f.read())
        assert m, "no project(muster VERSION ...) in CMakeLists.txt"
        with open(os.path.join(SOURCE_DIR, "python", "pyproject.toml")) as f:
            pyproject = f.read()
        assert f'\nversion = "{m.group(1)}"\n' in pyproject
        assert muster.__version__ == m.group(1)

    def test_public_modules_say_what_they_export(self) -> None:
        from muster import _client, _control, _sockets
        for module in (muster, _client, _control, _sockets, _h2, _wire):
            for name in module.__all__:
                assert hasattr(module, name), (module.__name__, name)

    def test_silent_server_deadline_and_keepalive(
            self, silent_server: str,
            monkeypatch: pytest.MonkeyPatch) -> None:
        conn = _h2.Connection(silent_server, 5)
        with pytest.raises(_h2.RpcError) as e:
            conn.call("/muster.v1.Store/NumKeys", b"", (), 0.3)
        assert e.value.code == _h2.StatusCode.DEADLINE_EXCEEDED
        assert e.value.details == "Deadline Exceeded"
        assert conn.closed
        # A long call on a connection that stops answering: a keepalive
        # ping, unanswered, ends it long before its deadline.
        monkeypatch.setattr(_h2, "KEEPALIVE_S", 0.2)
        conn = _h2.Connection(silent_server, 5)
        with pytest.raises(_h2.RpcError) as e:
            conn.call("/muster.v1.Store/Wait", b"", (), 60)
        assert e.value.code == _h2.StatusCode.UNAVAILABLE
        assert "keepalive ping" in e.value.details
