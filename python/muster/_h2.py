"""Unary gRPC calls over HTTP/2 in pure Python (RFC 9113, RFC 7541, and
gRPC's "PROTOCOL-HTTP2.md"), with the standard library only.

Why not grpcio: a worker's interpreter is often a virtual environment made
without the system's packages, where grpcio is not installed and Debian's
python3-grpcio (a C extension built for Debian's Python) must not be put on
its path. The Store client needs a small part of gRPC: one unary call at a
time per connection, metadata, trailers, deadlines, TLS. That part is here.

What a call does: HEADERS and DATA (the 5-byte gRPC message prefix and the
message) on a new client stream, then reads frames until the server ends the
stream, answering SETTINGS and PING, keeping the HPACK dynamic table in step,
honouring the server's flow-control windows when sending and opening ours
wide when receiving. A connection idle for ``KEEPALIVE_S`` during a call gets
a PING; one unanswered for another ``KEEPALIVE_S`` ends the call with
UNAVAILABLE (musterd accepts a ping every 5 s), so a cut network ends a long
wait, as grpcio's keepalive did.

A ``Connection`` is not thread-safe: the client keeps a pool and lends each
one to one call at a time (muster._client).
"""

from __future__ import annotations

import enum
import socket
import ssl
import struct
import time
import urllib.parse
from typing import Dict, List, Optional, Sequence, Tuple

__all__ = ["Connection", "RpcError", "StatusCode", "KEEPALIVE_S"]

KEEPALIVE_S = 10.0
_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

# Frame types and flags (RFC 9113 section 6).
_DATA, _HEADERS, _PRIORITY, _RST_STREAM, _SETTINGS = 0, 1, 2, 3, 4
_PUSH_PROMISE, _PING, _GOAWAY, _WINDOW_UPDATE, _CONTINUATION = 5, 6, 7, 8, 9
_END_STREAM, _ACK, _END_HEADERS, _PADDED, _PRIORITY_FLAG = 1, 1, 4, 8, 0x20
_SETTINGS_HEADER_TABLE_SIZE, _SETTINGS_ENABLE_PUSH = 1, 2
_SETTINGS_INITIAL_WINDOW_SIZE, _SETTINGS_MAX_FRAME_SIZE = 4, 5
_MAX_WINDOW = (1 << 31) - 1
_DEFAULT_WINDOW = 65535
_DEFAULT_MAX_FRAME = 16384
# Our receive window is opened to the maximum; the connection's is topped up
# once this much has arrived.
_REFILL = 1 << 24


class StatusCode(enum.IntEnum):
    """gRPC's status codes (the values absl::StatusCode and c_api.h use)."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16


class RpcError(Exception):
    """A call that did not end with OK. ``trailers`` holds the response's
    headers and trailers (lower-case names, str values)."""

    def __init__(self, code: StatusCode, details: str,
                 trailers: Optional[Dict[str, str]] = None,
                 unprocessed: bool = False) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details
        self.trailers: Dict[str, str] = dict(trailers or {})
        # The server did not process the call (it refused the stream):
        # safe to repeat whatever the call was.
        self.unprocessed = unprocessed


# gRPC's mapping of an HTTP status without grpc-status (PROTOCOL-HTTP2.md).
_HTTP_TO_GRPC = {400: StatusCode.INTERNAL, 401: StatusCode.UNAUTHENTICATED,
                 403: StatusCode.PERMISSION_DENIED,
                 404: StatusCode.UNIMPLEMENTED, 429: StatusCode.UNAVAILABLE,
                 502: StatusCode.UNAVAILABLE, 503: StatusCode.UNAVAILABLE,
                 504: StatusCode.UNAVAILABLE}
# And of a RST_STREAM's error code (the rest: INTERNAL).
_REFUSED_STREAM = 7
_RST_TO_GRPC = {_REFUSED_STREAM: StatusCode.UNAVAILABLE, 8: StatusCode.CANCELLED,
                11: StatusCode.RESOURCE_EXHAUSTED,
                12: StatusCode.PERMISSION_DENIED}

# ---- HPACK (RFC 7541)

# Appendix A.
_STATIC_TABLE: Tuple[Tuple[str, str], ...] = (
    (":authority", ""), (":method", "GET"), (":method", "POST"),
    (":path", "/"), (":path", "/index.html"), (":scheme", "http"),
    (":scheme", "https"), (":status", "200"), (":status", "204"),
    (":status", "206"), (":status", "304"), (":status", "400"),
    (":status", "404"), (":status", "500"), ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"), ("accept-language", ""),
    ("accept-ranges", ""), ("accept", ""),
    ("access-control-allow-origin", ""), ("age", ""), ("allow", ""),
    ("authorization", ""), ("cache-control", ""),
    ("content-disposition", ""), ("content-encoding", ""),
    ("content-language", ""), ("content-length", ""),
    ("content-location", ""), ("content-range", ""), ("content-type", ""),
    ("cookie", ""), ("date", ""), ("etag", ""), ("expect", ""),
    ("expires", ""), ("from", ""), ("host", ""), ("if-match", ""),
    ("if-modified-since", ""), ("if-none-match", ""), ("if-range", ""),
    ("if-unmodified-since", ""), ("last-modified", ""), ("link", ""),
    ("location", ""), ("max-forwards", ""), ("proxy-authenticate", ""),
    ("proxy-authorization", ""), ("range", ""), ("referer", ""),
    ("refresh", ""), ("retry-after", ""), ("server", ""),
    ("set-cookie", ""), ("strict-transport-security", ""),
    ("transfer-encoding", ""), ("user-agent", ""), ("vary", ""),
    ("via", ""), ("www-authenticate", ""))

# Appendix B: the code length of each of the 256 byte values. The code is
# canonical (codes of one length are consecutive in symbol order, shorter
# lengths first), so the lengths determine it; EOS is 30 ones.
_HUFFMAN_LENGTHS = bytes.fromhex(
    "0d171c1c1c1c1c1c1c181e1c1c1e1c1c1c1c1c1c1c1c1e1c1c1c1c1c1c1c1c1c"
    "060a0a0c0d06080b0a0a080b080606060505050606060606060607080f060c0a"
    "0d06070707070707070707070707070707070707070707070807080d130d0e06"
    "0f05060506050606060507070606060506070605050607070707070f0b0e0d1c"
    "1416141416161617161717171717181718181617181717171715161716171718"
    "1615141616171715171616181516171715151615171617171416161617161617"
    "1a1a1413161716191a1a1a1b1b1a181913151a1b1b1a1b1815151a1a1c1b1b1b"
    "14181415161515171616191918181a171a1b1a1a1b1b1b1b1b1c1b1b1b1b1b1a")


def _huffman_decoder() -> Dict[Tuple[int, int], int]:
    """{(length, code): byte} of the canonical code."""
    order = sorted(range(256), key=lambda s: (_HUFFMAN_LENGTHS[s], s))
    table: Dict[Tuple[int, int], int] = {}
    code, length = 0, _HUFFMAN_LENGTHS[order[0]]
    for i, symbol in enumerate(order):
        if i:
            code = (code + 1) << (_HUFFMAN_LENGTHS[symbol] - length)
            length = _HUFFMAN_LENGTHS[symbol]
        table[(length, code)] = symbol
    return table


_HUFFMAN = _huffman_decoder()


def huffman_decode(data: bytes) -> bytes:
    """Decodes an HPACK Huffman string. Raises ValueError on a code that is
    not in the table or bad padding (more than 7 bits, or not all ones)."""
    out = bytearray()
    code = length = 0
    for byte in data:
        for shift in range(7, -1, -1):
            code = code << 1 | (byte >> shift) & 1
            length += 1
            symbol = _HUFFMAN.get((length, code))
            if symbol is not None:
                out.append(symbol)
                code = length = 0
            elif length >= 30:
                raise ValueError("bad Huffman code")
    if length > 7 or code != (1 << length) - 1:
        raise ValueError("bad Huffman padding")
    return bytes(out)


def _read_int(data: bytes, pos: int, prefix_bits: int) -> Tuple[int, int]:
    mask = (1 << prefix_bits) - 1
    value = data[pos] & mask
    pos += 1
    if value < mask:
        return value, pos
    shift = 0
    while True:
        if pos >= len(data) or shift > 28:
            raise ValueError("bad HPACK integer")
        byte = data[pos]
        pos += 1
        value += (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def _encode_int(value: int, prefix_bits: int, first: int) -> bytes:
    mask = (1 << prefix_bits) - 1
    if value < mask:
        return bytes([first | value])
    out = bytearray([first | mask])
    value -= mask
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


class HpackDecoder:
    """One connection's header decoder (its dynamic table)."""

    def __init__(self, max_size: int = 4096) -> None:
        self._table: List[Tuple[str, str]] = []
        self._size = 0
        self._max = max_size

    def _entry(self, index: int) -> Tuple[str, str]:
        if 0 < index <= len(_STATIC_TABLE):
            return _STATIC_TABLE[index - 1]
        index -= len(_STATIC_TABLE) + 1
        if 0 <= index < len(self._table):
            return self._table[index]
        raise ValueError(f"HPACK index {index} out of range")

    def _add(self, name: str, value: str) -> None:
        self._table.insert(0, (name, value))
        self._size += len(name) + len(value) + 32
        self._evict()

    def _evict(self) -> None:
        while self._size > self._max and self._table:
            name, value = self._table.pop()
            self._size -= len(name) + len(value) + 32

    @staticmethod
    def _string(data: bytes, pos: int) -> Tuple[str, int]:
        huffman = data[pos] & 0x80
        length, pos = _read_int(data, pos, 7)
        if pos + length > len(data):
            raise ValueError("truncated HPACK string")
        raw = data[pos:pos + length]
        text = huffman_decode(raw) if huffman else raw
        return text.decode("latin-1"), pos + length

    def decode(self, block: bytes) -> List[Tuple[str, str]]:
        """The header list of one header block. Raises ValueError."""
        headers: List[Tuple[str, str]] = []
        pos = 0
        while pos < len(block):
            byte = block[pos]
            if byte & 0x80:  # indexed
                index, pos = _read_int(block, pos, 7)
                headers.append(self._entry(index))
                continue
            if byte & 0xE0 == 0x20:  # dynamic table size update
                self._max, pos = _read_int(block, pos, 5)
                self._evict()
                continue
            indexing = byte & 0xC0 == 0x40
            index, pos = _read_int(block, pos, 6 if indexing else 4)
            if index:
                name = self._entry(index)[0]
            else:
                name, pos = self._string(block, pos)
            value, pos = self._string(block, pos)
            if indexing:
                self._add(name, value)
            headers.append((name, value))
        return headers


def encode_headers(headers: Sequence[Tuple[str, str]]) -> bytes:
    """A header block of literals without indexing and without Huffman: the
    server's table is never touched, so there is no encoder state."""
    out = bytearray()
    for name, value in headers:
        raw_name, raw_value = name.encode(), value.encode()
        out += b"\x00" + _encode_int(len(raw_name), 7, 0) + raw_name
        out += _encode_int(len(raw_value), 7, 0) + raw_value
    return bytes(out)


def grpc_timeout(seconds: float) -> str:
    """The grpc-timeout header: at most 8 digits and a unit."""
    for unit, scale in (("m", 1e3), ("S", 1.0), ("M", 1 / 60),
                        ("H", 1 / 3600)):
        value = max(1, int(seconds * scale + 0.999))
        if value < 10 ** 8:
            return f"{value}{unit}"
    return "99999999H"


class _Closed(Exception):
    """The connection ended (EOF, reset, GOAWAY before our stream).
    ``unprocessed``: the server said it did not start our stream (GOAWAY)."""

    def __init__(self, message: str, unprocessed: bool = False) -> None:
        super().__init__(message)
        self.unprocessed = unprocessed


class Connection:
    """One HTTP/2 connection to ``target`` ("host:port", "[v6]:port"),
    TLS when ``tls_context`` is given. Connects in the constructor (blocks up
    to ``timeout`` s; raises RpcError UNAVAILABLE when it cannot)."""

    def __init__(self, target: str, timeout: float,
                 tls_context: Optional[ssl.SSLContext] = None) -> None:
        self.target = target
        host, _, port = target.rpartition(":")
        self._host = host.strip("[]")
        self._authority = target
        self._scheme = "https" if tls_context else "http"
        self._next_stream = 1
        self.closed = False
        self._buffer = b""
        self._decoder = HpackDecoder()
        self._send_window = _DEFAULT_WINDOW
        self._stream_initial = _DEFAULT_WINDOW
        self._max_frame = _DEFAULT_MAX_FRAME
        self._received = 0
        try:
            sock = socket.create_connection((self._host, int(port)),
                                            timeout=timeout)
        except OSError as e:
            raise RpcError(StatusCode.UNAVAILABLE, f"failed to connect to "
                           f"{target}: {e.strerror or e}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            if tls_context is not None:
                sock = tls_context.wrap_socket(sock,
                                               server_hostname=self._host)
            self._sock = sock
            settings = struct.pack(">HIHI", _SETTINGS_ENABLE_PUSH, 0,
                                   _SETTINGS_INITIAL_WINDOW_SIZE, _MAX_WINDOW)
            self._sock.sendall(
                _PREFACE + self._frame(_SETTINGS, 0, 0, settings) +
                self._frame(_WINDOW_UPDATE, 0, 0, struct.pack(
                    ">I", _MAX_WINDOW - _DEFAULT_WINDOW)))
        except (OSError, ssl.SSLError) as e:
            sock.close()
            raise RpcError(StatusCode.UNAVAILABLE, f"failed to connect to "
                           f"{target}: {e}") from None

    @property
    def next_stream(self) -> int:
        """The id the next call's stream gets."""
        return self._next_stream

    def close(self) -> None:
        self.closed = True
        try:
            self._sock.close()
        except OSError:
            pass

    def alive(self) -> bool:
        """Whether an idle connection may carry a call: not closed and the
        server has not hung up (no EOF, no GOAWAY waiting to be read).
        Never blocks."""
        if self.closed:
            return False
        try:
            self._sock.setblocking(False)
            try:
                while True:
                    data = self._sock.recv(65536)
                    if not data:
                        self.close()
                        return False
                    self._buffer += data
            finally:
                self._sock.setblocking(True)
        except (BlockingIOError, ssl.SSLWantReadError):
            pass
        except OSError:
            self.close()
            return False
        # Frames that came while idle: answered now, and a GOAWAY retires
        # the connection before a call is lost on it.
        windows = {"stream": self._stream_initial}
        try:
            while self._has_frame():
                kind, flags, sid, payload = self._pop_frame()
                if kind == _GOAWAY:
                    self.close()
                    return False
                if kind == _WINDOW_UPDATE and sid == 0:
                    self._send_window += struct.unpack(
                        ">I", payload[:4])[0] & _MAX_WINDOW
                elif sid == 0:
                    self._on_control(kind, flags, payload, windows)
        except OSError:
            self.close()
            return False
        return True

    @staticmethod
    def _frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
        return struct.pack(">I", len(payload))[1:] + struct.pack(
            ">BBI", kind, flags, stream) + payload

    def _has_frame(self) -> bool:
        return len(self._buffer) >= 9 and len(self._buffer) >= 9 + \
            int.from_bytes(self._buffer[:3], "big")

    def _pop_frame(self) -> Tuple[int, int, int, bytes]:
        length = int.from_bytes(self._buffer[:3], "big")
        kind, flags, stream = struct.unpack(">BBI", self._buffer[3:9])
        payload = self._buffer[9:9 + length]
        self._buffer = self._buffer[9 + length:]
        return kind, flags, stream & _MAX_WINDOW, payload

    def _recv_frame(self, deadline: float
                    ) -> Tuple[int, int, int, bytes]:
        ping_sent = False
        while not self._has_frame():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise socket.timeout()
            self._sock.settimeout(min(remaining, KEEPALIVE_S))
            try:
                data = self._sock.recv(1 << 20)
            except socket.timeout:
                if time.monotonic() >= deadline:
                    raise
                if ping_sent:
                    raise _Closed(f"no answer to a keepalive ping within "
                                  f"{KEEPALIVE_S:g} s") from None
                self._sock.sendall(self._frame(_PING, 0, 0, b"musterka"))
                ping_sent = True
                continue
            if not data:
                raise _Closed("the server closed the connection")
            self._buffer += data
            ping_sent = False
        return self._pop_frame()

    def _on_control(self, kind: int, flags: int, payload: bytes,
                    windows: Dict[str, int]) -> None:
        """A frame of the connection (stream 0) or of no stream of ours."""
        if kind == _SETTINGS and not flags & _ACK:
            for i in range(0, len(payload) - 5, 6):
                ident, value = struct.unpack(">HI", payload[i:i + 6])
                if ident == _SETTINGS_INITIAL_WINDOW_SIZE:
                    windows["stream"] += value - self._stream_initial
                    self._stream_initial = value
                elif ident == _SETTINGS_MAX_FRAME_SIZE:
                    self._max_frame = value
            self._sock.sendall(self._frame(_SETTINGS, _ACK, 0, b""))
        elif kind == _PING and not flags & _ACK:
            self._sock.sendall(self._frame(_PING, _ACK, 0, payload))

    def call(self, path: str, message: bytes,
             metadata: Sequence[Tuple[str, str]], timeout: float
             ) -> Tuple[bytes, Dict[str, str]]:
        """One unary call: returns the response message and the trailers.
        Blocks up to ``timeout`` s. Raises RpcError: the server's status,
        DEADLINE_EXCEEDED ("Deadline Exceeded") at the timeout, UNAVAILABLE
        when the connection breaks (the connection is then closed)."""
        deadline = time.monotonic() + timeout
        stream = self._next_stream
        self._next_stream += 2
        headers = [(":method", "POST"), (":scheme", self._scheme),
                   (":path", path), (":authority", self._authority),
                   ("te", "trailers"), ("content-type", "application/grpc"),
                   ("user-agent", "muster-python"),
                   ("grpc-timeout", grpc_timeout(timeout)), *metadata]
        body = b"\x00" + struct.pack(">I", len(message)) + message
        try:
            return self._exchange(stream, headers, body, deadline)
        except socket.timeout:
            self.close()
            raise RpcError(StatusCode.DEADLINE_EXCEEDED,
                           "Deadline Exceeded") from None
        except _Closed as e:
            self.close()
            raise RpcError(StatusCode.UNAVAILABLE,
                           f"connection to {self.target} lost: {e}",
                           unprocessed=e.unprocessed) from None
        except OSError as e:  # ssl.SSLError included
            self.close()
            raise RpcError(StatusCode.UNAVAILABLE,
                           f"connection to {self.target} lost: {e}") from None
        except ValueError as e:  # a malformed frame or header block
            self.close()
            raise RpcError(StatusCode.INTERNAL, f"bad response from "
                           f"{self.target}: {e}") from None

    def _exchange(self, stream: int, headers: Sequence[Tuple[str, str]],
                  body: bytes, deadline: float
                  ) -> Tuple[bytes, Dict[str, str]]:
        windows = {"stream": self._stream_initial}
        received: Dict[str, str] = {}
        data = bytearray()
        block = b""
        stream_of_block = 0
        ended = False
        self._sock.sendall(self._frame(_HEADERS, _END_HEADERS, stream,
                                       encode_headers(headers)))
        sent = 0
        while not ended:
            # Send what the windows allow; then read one frame.
            while sent < len(body):
                chunk = min(len(body) - sent, self._max_frame,
                            self._send_window, windows["stream"])
                if chunk <= 0:
                    break
                last = sent + chunk == len(body)
                self._sock.sendall(self._frame(
                    _DATA, _END_STREAM if last else 0, stream,
                    body[sent:sent + chunk]))
                sent += chunk
                self._send_window -= chunk
                windows["stream"] -= chunk
            kind, flags, sid, payload = self._recv_frame(deadline)
            if kind == _WINDOW_UPDATE:
                increment = struct.unpack(">I", payload[:4])[0] & _MAX_WINDOW
                if sid == 0:
                    self._send_window += increment
                elif sid == stream:
                    windows["stream"] += increment
                continue
            if kind == _GOAWAY:
                last_id = struct.unpack(">I", payload[:4])[0] & _MAX_WINDOW
                self._next_stream = _MAX_WINDOW + 1  # no new streams here
                if last_id < stream:
                    raise _Closed("the server is going away (GOAWAY)",
                                  unprocessed=True)
                continue
            if kind in (_HEADERS, _CONTINUATION):
                if kind == _HEADERS:
                    block = self._header_fragment(flags, payload)
                    ended = ended or bool(flags & _END_STREAM)
                    stream_of_block = sid
                else:
                    block += payload
                if flags & _END_HEADERS:
                    decoded = self._decoder.decode(block)
                    if stream_of_block == stream:
                        received.update(decoded)
                continue
            if sid != stream or sid == 0:
                self._on_control(kind, flags, payload, windows)
                continue
            if kind == _DATA:
                data += self._unpad(flags, payload)
                self._received += len(payload)
                if self._received >= _REFILL:
                    self._sock.sendall(self._frame(
                        _WINDOW_UPDATE, 0, 0,
                        struct.pack(">I", self._received)))
                    self._received = 0
                ended = bool(flags & _END_STREAM)
            elif kind == _RST_STREAM:
                error = struct.unpack(">I", payload[:4])[0]
                raise RpcError(_RST_TO_GRPC.get(error, StatusCode.INTERNAL),
                               f"stream reset by the server (HTTP/2 error "
                               f"{error})", received,
                               unprocessed=error == _REFUSED_STREAM)
        if self._next_stream > _MAX_WINDOW:
            self.close()  # GOAWAY'd: our stream done, nothing more here
        return self._result(bytes(data), received)

    @staticmethod
    def _unpad(flags: int, payload: bytes) -> bytes:
        if flags & _PADDED:
            return payload[1:len(payload) - payload[0]]
        return payload

    def _header_fragment(self, flags: int, payload: bytes) -> bytes:
        payload = self._unpad(flags, payload)
        return payload[5:] if flags & _PRIORITY_FLAG else payload

    @staticmethod
    def _result(data: bytes, headers: Dict[str, str]
                ) -> Tuple[bytes, Dict[str, str]]:
        if "grpc-status" not in headers:
            http = int(headers.get(":status", "0") or 0)
            raise RpcError(_HTTP_TO_GRPC.get(http, StatusCode.UNKNOWN),
                           f"no grpc-status (HTTP status {http})", headers)
        try:
            code = StatusCode(int(headers["grpc-status"]))
        except ValueError:
            code = StatusCode.UNKNOWN
        if code != StatusCode.OK:
            raise RpcError(code, urllib.parse.unquote(
                headers.get("grpc-message", "")), headers)
        if len(data) < 5:
            raise RpcError(StatusCode.INTERNAL, "no response message",
                           headers)
        if data[0] != 0:
            raise RpcError(StatusCode.INTERNAL, "a compressed response "
                           "(none was asked for)", headers)
        length = struct.unpack(">I", data[1:5])[0]
        return data[5:5 + length], headers
