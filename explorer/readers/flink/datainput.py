"""Java ``DataInput`` primitives over an in-memory buffer.

Everything Flink writes into snapshots goes through ``java.io.DataOutput`` (or
Flink's ``DataOutputView``, which is the same on the wire):

* integers are big-endian two's complement: ``short`` 2 bytes, ``int`` 4,
  ``long`` 8; ``boolean`` is one byte (0 or 1); ``float``/``double`` are the
  IEEE-754 bits written as an ``int``/``long``;
* ``writeUTF`` is a 2-byte length followed by *modified* UTF-8: NUL is the
  two bytes ``C0 80`` and characters outside the BMP are written as their two
  UTF-16 surrogates, each encoded like a 3-byte character (CESU-8);
* Flink's own ``StringValue.writeString`` (used by ``StringSerializer``) is a
  different format: ``length + 1`` as a variable-length integer (7 bits per
  byte, low group first, high bit = "more follows"; 0 means null), then every
  UTF-16 code unit as the same kind of variable-length integer.

:class:`DataInput` reads these from a ``bytes``/``memoryview`` and raises
:class:`EOFError` when the buffer ends early; callers turn that into a
:class:`~explorer.errors.SnapshotCorruptError` naming the file.
"""

from __future__ import annotations

import struct

from ...format import budget

_INT = struct.Struct(">i")
_UINT = struct.Struct(">I")
_LONG = struct.Struct(">q")
_SHORT = struct.Struct(">h")
_USHORT = struct.Struct(">H")
_DOUBLE = struct.Struct(">d")
_FLOAT = struct.Struct(">f")

#: the most values of zero bytes each (e.g. void namespaces) a count may announce
MAX_EMPTY_COUNT = 1 << 24


def decode_modified_utf8(raw: bytes) -> str:
    """Decode Java's modified UTF-8 (``DataOutput.writeUTF``) into a Python string."""
    if raw.isascii():
        return raw.decode("ascii")
    raw = raw.replace(b"\xc0\x80", b"\x00")
    s = raw.decode("utf-8", "surrogatepass")
    # join surrogate pairs written as two 3-byte sequences into one code point
    return s.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def utf16_units_to_str(units: list[int]) -> str:
    """Join UTF-16 code units (as Java ``char`` values) into a Python string."""
    if all(u < 0xD800 or u > 0xDFFF for u in units):
        return "".join(map(chr, units))
    return struct.pack(f"<{len(units)}H", *units).decode("utf-16-le", "replace")


class DataInput:
    """A cursor over bytes that reads Java ``DataInput`` values (big-endian)."""

    __slots__ = ("buf", "pos", "end", "bounded")

    def __init__(
        self, buf: bytes | bytearray | memoryview, pos: int = 0, end: int | None = None, bounded: bool = False
    ) -> None:
        """``bounded``: ``end`` is the end of exactly one value (a length-prefixed value of the key/value
        layout), so a decoder may find an undecodable part's length from what must follow it."""
        self.buf = buf if isinstance(buf, (bytes, memoryview)) else bytes(buf)
        self.pos = pos
        self.end = len(buf) if end is None else end
        self.bounded = bounded

    def remaining(self) -> int:
        return self.end - self.pos

    def at_end(self) -> bool:
        return self.pos >= self.end

    def _need(self, n: int) -> int:
        p = self.pos
        if n < 0 or p + n > self.end:
            raise EOFError(f"needed {n} bytes at offset {p}, only {self.end - p} left")
        self.pos = p + n
        return p

    def read_bytes(self, n: int) -> bytes:
        p = self._need(n)
        return bytes(self.buf[p : p + n])

    def skip(self, n: int) -> None:
        self._need(n)

    def read_byte(self) -> int:
        p = self._need(1)
        b = self.buf[p]
        return b - 256 if b > 127 else b

    def read_ubyte(self) -> int:
        p = self._need(1)
        return self.buf[p]

    def read_bool(self) -> bool:
        return self.read_ubyte() != 0

    def read_short(self) -> int:
        return _SHORT.unpack_from(self.buf, self._need(2))[0]

    def read_ushort(self) -> int:
        return _USHORT.unpack_from(self.buf, self._need(2))[0]

    def read_char(self) -> str:
        return chr(self.read_ushort())

    def read_int(self) -> int:
        return _INT.unpack_from(self.buf, self._need(4))[0]

    def read_uint(self) -> int:
        return _UINT.unpack_from(self.buf, self._need(4))[0]

    def read_long(self) -> int:
        return _LONG.unpack_from(self.buf, self._need(8))[0]

    def read_float(self) -> float:
        return _FLOAT.unpack_from(self.buf, self._need(4))[0]

    def read_double(self) -> float:
        return _DOUBLE.unpack_from(self.buf, self._need(8))[0]

    def read_utf(self) -> str:
        """``DataInput.readUTF``: 2-byte length, modified UTF-8."""
        n = self.read_ushort()
        p = self._need(n)
        return decode_modified_utf8(bytes(self.buf[p : p + n]))

    def read_varint(self) -> int:
        """Flink's 7-bit variable-length unsigned int (low group first)."""
        buf = self.buf
        p = self.pos
        result = 0
        shift = 0
        while True:
            if p >= self.end:
                raise EOFError(f"variable-length int runs past the end at offset {p}")
            b = buf[p]
            p += 1
            result |= (b & 0x7F) << shift
            if b < 0x80:
                break
            shift += 7
        self.pos = p
        return result

    def read_count(self, what: str = "entries", min_bytes: int = 1) -> int:
        """An ``int`` count of ``what`` that follow, each at least ``min_bytes`` long: a count that
        is negative, or that the bytes left cannot hold, fails here at once (``EOFError``) rather
        than after a long loop or a huge allocation. ``min_bytes`` 0 (values of no bytes) caps the
        count at :data:`MAX_EMPTY_COUNT`."""
        p = self.pos
        return self.check_count(self.read_int(), what, min_bytes, p)

    def check_count(self, n: int, what: str = "entries", min_bytes: int = 1, at: int | None = None) -> int:
        """``n``, a count of ``what`` read at offset ``at`` (a varint's, say), checked as :meth:`read_count`
        checks its own, and against the memory budget (a slot each) before anything is allocated for it."""
        p = self.pos if at is None else at
        if n < 0:
            raise EOFError(f"found a count of {n} {what} at offset {p}; expected 0 or more")
        left = self.end - self.pos
        if (n * min_bytes > left) if min_bytes > 0 else n > MAX_EMPTY_COUNT:
            raise EOFError(f"found a count of {n} {what} at offset {p}, of at least {min_bytes} bytes each; "
                           f"expected at most what the {left} bytes left can hold")
        budget.check(n * 8, file=f"offset {p}", what=f"a count of {n:,} {what} (a slot each)")
        return n

    def read_flink_string(self) -> str | None:
        """``StringValue.readString`` (Flink's ``StringSerializer``); ``None`` for null."""
        p0 = self.pos
        n = self.read_varint()
        if n == 0:
            return None
        n -= 1
        if n > self.end - self.pos:  # every char takes at least one byte
            raise EOFError(f"found a string of {n} chars at offset {p0}; only {self.end - self.pos} bytes left")
        buf = self.buf
        p = self.pos
        chunk = bytes(buf[p : p + n])
        if len(chunk) == n and chunk.isascii():  # one byte per char
            self.pos = p + n
            return chunk.decode("ascii")
        units = [self.read_varint() for _ in range(n)]
        return utf16_units_to_str(units)

    def sub(self, n: int) -> "DataInput":
        """A reader over the next ``n`` bytes; this one skips past them."""
        p = self._need(n)
        return DataInput(self.buf, p, p + n)
