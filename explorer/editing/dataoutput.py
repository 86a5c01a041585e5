"""Java ``DataOutput`` (big-endian) for the writers of Flink's formats: the mirror of
``readers.flink.datainput`` for the few types metadata and state streams use."""

from __future__ import annotations

import struct

_INT, _LONG, _SHORT = struct.Struct(">i"), struct.Struct(">q"), struct.Struct(">H")


def encode_modified_utf8(s: str) -> bytes:
    """Java's modified UTF-8: NUL as two bytes, characters past U+FFFF as two 3-byte surrogates."""
    out = bytearray()
    for unit in _utf16_units(s):
        if 0 < unit < 0x80:
            out.append(unit)
        elif unit < 0x800:
            out += bytes((0xC0 | (unit >> 6), 0x80 | (unit & 0x3F)))
        else:
            out += bytes((0xE0 | (unit >> 12), 0x80 | ((unit >> 6) & 0x3F), 0x80 | (unit & 0x3F)))
    return bytes(out)


def _utf16_units(s: str):
    data = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        yield (data[i] << 8) | data[i + 1]


class DataOutput:
    """Appends Java ``DataOutput`` values to a ``bytearray`` (``buf``)."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def write_int(self, v: int) -> None:
        self.buf += _INT.pack(v)

    def write_long(self, v: int) -> None:
        self.buf += _LONG.pack(v)

    def write_short(self, v: int) -> None:
        self.buf += _SHORT.pack(v)

    def write_byte(self, v: int) -> None:
        self.buf.append(v & 0xFF)

    def write_bytes(self, b: bytes) -> None:
        self.buf += b

    def write_utf(self, s: str) -> None:
        """``DataOutput.writeUTF``: 2-byte length, modified UTF-8 (at most 65,535 bytes)."""
        b = encode_modified_utf8(s)
        if len(b) > 0xFFFF:
            raise ValueError(f"a string of {len(b)} bytes in modified UTF-8 does not fit writeUTF (at most 65535)")
        self.write_short(len(b))
        self.buf += b
