"""Values encoded as Flink's serializers write them, for the few types this can be done exactly.

Strings (``StringSerializer``: ``StringValue.writeString``, the length + 1 then each UTF-16 unit in
7-bit groups, low group first; 0 for null) and boxed primitives (big-endian, as ``DataOutput``). Every
encoded value is decoded again with the state's own decoder (the reader's) and must come back equal;
anything else is refused, never written approximately.
"""

from __future__ import annotations

import math
import struct
from typing import Any

from ..errors import EditError
from ..readers.flink.datainput import DataInput
from ..readers.flink.serializers import Decoder

_FIXED = {"Long": ">q", "Integer": ">i", "Short": ">h", "Byte": ">b", "Double": ">d", "Float": ">f"}


def _varint(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _string(s: str | None) -> bytes:
    if s is None:
        return b"\x00"
    data = s.encode("utf-16-be", "surrogatepass")
    units = [(data[i] << 8) | data[i + 1] for i in range(0, len(data), 2)]
    return _varint(len(units) + 1) + b"".join(_varint(u) for u in units)


def encode(decoder: Decoder | None, value: Any, where: str) -> bytes:
    """``value`` as ``decoder``'s serializer writes it (see module doc), or :class:`EditError`."""
    kind = decoder.describe() if decoder is not None else "unknown"
    try:
        if kind == "String" and (value is None or isinstance(value, str)):
            data = _string(value)
        elif kind in _FIXED and not isinstance(value, bool) and isinstance(value, (int, float)):
            if kind not in ("Double", "Float") and not isinstance(value, int):
                raise TypeError
            data = struct.pack(_FIXED[kind], value)
        elif kind == "Boolean" and isinstance(value, bool):
            data = b"\x01" if value else b"\x00"
        elif kind == "Character" and isinstance(value, str) and len(value) == 1 and ord(value) <= 0xFFFF:
            data = struct.pack(">H", ord(value))
        else:
            raise TypeError
    except (TypeError, struct.error, OverflowError) as exc:
        raise EditError(f"{where}: cannot encode {value!r} as {kind} exactly; the writer encodes String, "
                        "Long, Integer, Short, Byte, Double, Float, Boolean and Character values") from exc
    inp = DataInput(data, bounded=True)
    back = decoder.read(inp)
    same = back == value or (isinstance(value, float) and math.isnan(value) and math.isnan(back))
    if not inp.at_end() or not same or type(back) is not type(value):
        raise EditError(f"{where}: {value!r} would be read back as {back!r} ({kind}); not written")
    return data
