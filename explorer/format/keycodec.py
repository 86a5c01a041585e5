"""A deterministic, self-describing binary codec for keys, namespaces and map keys.

The RocksDB backend builds its raw keys by concatenating encoded parts
(key-group prefix, key, namespace, map user key). For that to work, and to
split a raw key back into its parts, every encoding here is

* **deterministic**: one value has exactly one encoding (no dict ordering,
  no hash seeds, no pickle);
* **self-describing**: a tag byte says what follows, so no schema is needed
  to decode (snapshots can be read without the job's code);
* **prefix-free**: no encoding is a proper prefix of another, so
  ``decode_key(encode_key(a) + encode_key(b), 0)`` returns ``a`` and the
  position where ``b`` starts;
* **order-preserving within a type**: for two ints, two floats, two strs, two
  bytes or two tuples of such, byte order equals value order, so a RocksDB
  range scan returns map user keys and keys sorted (values of different
  types sort by tag).

=========  =====  ================================================================
value      tag    payload
=========  =====  ================================================================
(end)      0x00   closes a tuple
None       0x01   --
False      0x02   --
True       0x03   --
int        0x04   8 bytes big-endian, ``value + 2**63`` (64-bit signed range only)
float      0x05   8 bytes IEEE-754 big-endian, sign bit flipped (all bits if negative)
bytes      0x06   raw bytes, ``00`` escaped as ``00 FF``, terminated by ``00 01``
str        0x07   UTF-8 as for bytes
tuple      0x08   each element encoded, then ``00``
=========  =====  ================================================================

Python treats ``1 == 1.0 == True`` as one dict key; this codec (like Java's
``Long``/``Double``/``Boolean`` keys in Flink, which also land in different key
groups) keeps them apart.
"""

from __future__ import annotations

import numbers
import struct
from typing import Any

from ..errors import SerializationError

__all__ = ["decode_key", "encode_key", "encode_key_into", "prefix_successor"]

END, NONE, FALSE, TRUE, INT, FLOAT, BYTES, STR, TUPLE = range(9)

_U64 = struct.Struct(">Q")
_F64 = struct.Struct(">d")
_SIGN = 1 << 63
_MASK = (1 << 64) - 1
_TERM = b"\x00\x01"


def _escape(raw: bytes) -> bytes:
    return raw.replace(b"\x00", b"\x00\xff") if b"\x00" in raw else raw


def encode_key_into(value: Any, out: bytearray) -> None:
    """Append the encoding of ``value`` to ``out``."""
    t = type(value)
    if t is str:
        out.append(STR)
        out += _escape(value.encode("utf-8"))
        out += _TERM
    elif t is int:
        if not -_SIGN <= value < _SIGN:
            raise SerializationError(f"key {value!r} does not fit in a signed 64-bit int (Java long)")
        out.append(INT)
        out += _U64.pack(value + _SIGN)
    elif value is None:
        out.append(NONE)
    elif t is bool:
        out.append(TRUE if value else FALSE)
    elif t is float:
        (u,) = _U64.unpack(_F64.pack(value))
        u = (~u & _MASK) if u & _SIGN else (u | _SIGN)
        out.append(FLOAT)
        out += _U64.pack(u)
    elif t is tuple:
        out.append(TUPLE)
        for v in value:
            encode_key_into(v, out)
        out.append(END)
    elif t is bytes or t is bytearray or t is memoryview:
        out.append(BYTES)
        out += _escape(bytes(value))
        out += _TERM
    elif isinstance(value, bool):  # pragma: no cover - bool cannot be subclassed
        out.append(TRUE if value else FALSE)
    elif isinstance(value, numbers.Integral):  # int subclasses, numpy integers
        encode_key_into(int(value), out)
    elif isinstance(value, numbers.Real):  # float subclasses, numpy floats
        encode_key_into(float(value), out)
    elif isinstance(value, str):
        encode_key_into(str(value), out)
    elif isinstance(value, tuple):
        encode_key_into(tuple(value), out)
    else:
        raise SerializationError(
            f"cannot encode key {value!r:.80} of type {type(value).__name__}: "
            "expected str, int, float, bool, bytes, None or a tuple of those"
        )


def encode_key(value: Any) -> bytes:
    """The encoding of one key, namespace or map user key."""
    t = type(value)
    # fast paths for the common key types
    if t is str:
        raw = value.encode("utf-8")
        return b"\x07" + (raw.replace(b"\x00", b"\x00\xff") if b"\x00" in raw else raw) + _TERM
    if t is int and -_SIGN <= value < _SIGN:
        return b"\x04" + _U64.pack(value + _SIGN)
    if value is None:
        return b"\x01"
    out = bytearray()
    encode_key_into(value, out)
    return bytes(out)


def _decode_escaped(buf: bytes, pos: int) -> tuple[bytes, int]:
    end = buf.find(b"\x00", pos)
    if end < 0:
        raise SerializationError(f"truncated key encoding at byte {pos}: no terminator")
    if buf[end + 1 : end + 2] == b"\x01":  # the common case: no escaped zero bytes
        return buf[pos:end], end + 2
    parts = []
    while True:
        if end < 0 or end + 1 >= len(buf):
            raise SerializationError(f"truncated key encoding at byte {pos}: no terminator")
        nxt = buf[end + 1]
        parts.append(buf[pos:end])
        if nxt == 0x01:
            return b"".join(parts), end + 2
        if nxt != 0xFF:
            raise SerializationError(f"bad escape 00 {nxt:02x} in key encoding at byte {end}")
        parts.append(b"\x00")
        pos = end + 2
        end = buf.find(b"\x00", pos)


def decode_key(buf: bytes, pos: int = 0) -> tuple[Any, int]:
    """Decode one value starting at ``buf[pos]`` (``buf`` is ``bytes``);
    returns ``(value, position after it)``."""
    try:
        tag = buf[pos]
    except IndexError:
        raise SerializationError(f"truncated key encoding: nothing at byte {pos}") from None
    pos += 1
    if tag == STR:
        raw, pos = _decode_escaped(buf, pos)
        return bytes(raw).decode("utf-8"), pos
    if tag == INT:
        if pos + 8 > len(buf):
            raise SerializationError(f"truncated int in key encoding at byte {pos}")
        return _U64.unpack_from(buf, pos)[0] - _SIGN, pos + 8
    if tag == NONE:
        return None, pos
    if tag == FALSE:
        return False, pos
    if tag == TRUE:
        return True, pos
    if tag == FLOAT:
        if pos + 8 > len(buf):
            raise SerializationError(f"truncated float in key encoding at byte {pos}")
        (u,) = _U64.unpack_from(buf, pos)
        u = (u & ~_SIGN) if u & _SIGN else (~u & _MASK)
        return _F64.unpack(_U64.pack(u))[0], pos + 8
    if tag == BYTES:
        raw, pos = _decode_escaped(buf, pos)
        return bytes(raw), pos
    if tag == TUPLE:
        items = []
        while True:
            if pos >= len(buf):
                raise SerializationError("truncated tuple in key encoding: no end marker")
            if buf[pos] == END:
                return tuple(items), pos + 1
            v, pos = decode_key(buf, pos)
            items.append(v)
    raise SerializationError(f"unknown tag 0x{tag:02x} in key encoding at byte {pos - 1}")


def prefix_successor(prefix: bytes) -> bytes | None:
    """The smallest byte string greater than every string starting with ``prefix``
    (an exclusive upper bound for a prefix scan), or None when there is none."""
    b = bytearray(prefix)
    while b and b[-1] == 0xFF:
        b.pop()
    if not b:
        return None
    b[-1] += 1
    return bytes(b)
