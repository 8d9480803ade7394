"""The protobuf wire format of the Store's messages (proto/muster/v1/store.proto).

The package encodes the few messages it sends by hand instead of importing
generated code, so that a worker needs no protobuf module (a virtual
environment usually has none, and Debian's python3-protobuf is not on its
path). ``MESSAGES`` is checked against store.proto by
tests/python/wire_test.py, so a field renumbered there fails a test here.

No I/O; thread-safe (no state).
"""

from __future__ import annotations

from typing import Dict, List, Mapping, Tuple, Union, cast

__all__ = ["MESSAGES", "Value", "decode", "encode"]

# What a field of these messages holds in Python.
Value = Union[str, bytes, int, bool, List[str], List[bytes]]

# message name -> field name -> (number, kind). Kinds: the proto3 scalar types
# used by store.proto, "repeated string" and "repeated bytes".
MESSAGES: Dict[str, Dict[str, Tuple[int, str]]] = {
    "SetRequest": {"prefix": (1, "string"), "key": (2, "string"),
                   "value": (3, "bytes")},
    "SetResponse": {},
    "GetRequest": {"prefix": (1, "string"), "key": (2, "string"),
                   "timeout_ms": (3, "int64")},
    "GetResponse": {"value": (1, "bytes")},
    "AddRequest": {"prefix": (1, "string"), "key": (2, "string"),
                   "delta": (3, "int64")},
    "AddResponse": {"value": (1, "int64")},
    "CompareSetRequest": {"prefix": (1, "string"), "key": (2, "string"),
                          "expected": (3, "bytes"), "desired": (4, "bytes")},
    "CompareSetResponse": {"value": (1, "bytes")},
    "WaitRequest": {"prefix": (1, "string"), "keys": (2, "repeated string"),
                    "timeout_ms": (3, "int64")},
    "WaitResponse": {},
    "DeleteRequest": {"prefix": (1, "string"), "key": (2, "string")},
    "DeleteResponse": {"deleted": (1, "bool")},
    "NumKeysRequest": {"prefix": (1, "string")},
    "NumKeysResponse": {"count": (1, "int64")},
}

_VARINT = 0
_FIXED64 = 1
_LENGTH_DELIMITED = 2
_FIXED32 = 5
_VARINT_KINDS = ("int64", "bool")


def _varint(n: int) -> bytes:
    if n < 0:
        n += 1 << 64  # int64: two's complement in ten bytes
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read_varint(data: bytes, pos: int) -> Tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("truncated or overlong varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _key(number: int, wire_type: int) -> bytes:
    return _varint(number << 3 | wire_type)


def _delimited(number: int, payload: bytes) -> bytes:
    return _key(number, _LENGTH_DELIMITED) + _varint(len(payload)) + payload


def encode(message: str, **fields: Value) -> bytes:
    """``message`` with ``fields`` in the wire format; fields at their
    default (0, empty) are left out, as proto3 does. Raises KeyError for a
    field the message does not have."""
    schema = MESSAGES[message]
    out = bytearray()
    for name, value in fields.items():
        number, kind = schema[name]
        if kind in _VARINT_KINDS:
            assert isinstance(value, int)
            if value:
                out += _key(number, _VARINT) + _varint(int(value))
        elif kind == "string":
            assert isinstance(value, str)
            if value:
                out += _delimited(number, value.encode())
        elif kind == "bytes":
            assert isinstance(value, bytes)
            if value:
                out += _delimited(number, value)
        else:  # repeated string / bytes: one record per element
            assert isinstance(value, list)
            for item in value:
                out += _delimited(number, item.encode() if isinstance(
                    item, str) else bytes(item))
    return bytes(out)


def _default(kind: str) -> Value:
    if kind in _VARINT_KINDS:
        return False if kind == "bool" else 0
    if kind == "string":
        return ""
    if kind == "bytes":
        return b""
    empty: List[str] = []  # a new list for each message
    return empty


def decode(message: str, data: bytes) -> Dict[str, Value]:
    """The fields of ``message`` in ``data``, every one present (defaults for
    absent ones); unknown fields are skipped, as protobuf does. Raises
    ValueError on malformed data."""
    schema = MESSAGES[message]
    by_number: Mapping[int, Tuple[str, str]] = {
        number: (name, kind) for name, (number, kind) in schema.items()}
    out: Dict[str, Value] = {name: _default(kind)
                             for name, (_, kind) in schema.items()}
    pos = 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        number, wire_type = key >> 3, key & 7
        if wire_type == _VARINT:
            value, pos = _read_varint(data, pos)
            payload = b""
        elif wire_type == _LENGTH_DELIMITED:
            length, pos = _read_varint(data, pos)
            if pos + length > len(data):
                raise ValueError("truncated length-delimited field")
            payload, pos = data[pos:pos + length], pos + length
            value = 0
        elif wire_type == _FIXED64:
            pos += 8
            continue
        elif wire_type == _FIXED32:
            pos += 4
            continue
        else:
            raise ValueError(f"unsupported wire type {wire_type}")
        if number not in by_number:
            continue
        name, kind = by_number[number]
        if kind == "int64":
            out[name] = value - (1 << 64) if value >= 1 << 63 else value
        elif kind == "bool":
            out[name] = bool(value)
        elif kind == "string":
            out[name] = payload.decode()
        elif kind == "bytes":
            out[name] = bytes(payload)
        elif kind == "repeated string":
            cast(List[str], out[name]).append(payload.decode())
        else:
            cast(List[bytes], out[name]).append(bytes(payload))
    return out
