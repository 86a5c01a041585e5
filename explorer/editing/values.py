"""Values encoded as Flink's serializers write them, for every serializer the reader decodes exactly.

The serializer is the one the snapshot declares (its decoder, built from the serializer snapshot in the
state's header), so a POJO is written with the field layout its ``PojoSerializer`` snapshot records, a Row
with its recorded arity and row-kind flag, an enum by the constant names the snapshot lists. Wire formats:

=====================================  =====================================================================
serializer (decoder)                   bytes written; the Python value taken (as the reader returns it)
=====================================  =====================================================================
``StringSerializer``                   ``StringValue.writeString``: length + 1, UTF-16 units as varints; str
boxed primitives, ``Character``        big-endian ``DataOutput``; int, float, bool, one-character str
``BytePrimitiveArraySerializer``       ``int n`` + bytes; bytes
``BigIntSerializer``/``BigDecSer..``   ``int n + 4``, ``BigInteger.toByteArray()`` (+ ``int`` scale); int, Decimal
``InstantSerializer``                  ``long`` seconds, ``int`` nanos; a UTC timestamp
``LocalDate``/``LocalDateTime``        ``int`` year, ``byte`` month, day (+ ``byte`` h, m, s, ``int`` nano)
``Date``/``SqlDate``/``SqlTime``       ``long`` epoch ms; ``SqlTimestamp``: + ``int`` nanos of the second
``EnumSerializer``                     ``int`` ordinal of the snapshot's constant names; the name
primitive/``String``/generic arrays    ``int n`` + elements (generic: ``bool present`` each); a list
``ListSerializer``                     ``int n`` + elements; a list
``MapSerializer``                      ``int n``, then key, ``bool isNull``, value; a dict (or pairs)
``SetSerializer``                      ``int n``, then ``bool isNull``, element; a list
``TupleSerializer``                    the fields in order; a dict f0.. (or a tuple)
``RowSerializer``                      the null mask (row-kind bits first when recorded), non-null fields;
                                       a dict f0.. (or a tuple)
``Either``                             ``bool isLeft`` + the side; ``{"left": .., "right": ..}``
``PojoSerializer``                     flags 2 (exact class), per recorded field ``bool isNull`` + value
                                       (``None``: flags 1); a dict with exactly the recorded fields
``NullableSerializer``                 ``bool isNull`` + the value (non-null only)
TTL wrapper (``TtlSerializer``)        ``long`` last access (ms) + the value; a :class:`TtlValue`
=====================================  =====================================================================

Every encoded value is decoded again with the state's own decoder (the reader's) and must come back
equal (same types, same Decimal scale, NaN as NaN); anything else is refused with :class:`EditError`,
never written approximately. Kryo, Avro, SQL ``RowData`` and other undecoded serializers are refused.
"""

from __future__ import annotations

import datetime as dt
import math
import struct
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pandas as pd

from ..errors import EditError
from ..readers.flink.datainput import DataInput
from ..readers.flink.serializers import (
    Decoder,
    ListDecoder,
    MapDecoder,
    NullableDecoder,
    PojoDecoder,
    TtlDecoder,
    TtlValue,
    TupleDecoder,
)
from ..readers.flink.valuetypes import ArrayDecoder, EitherDecoder, EnumDecoder, RowDecoder, SetDecoder

_FIXED = {"Long": ">q", "Integer": ">i", "Short": ">h", "Byte": ">b", "Double": ">d", "Float": ">f"}
_NS = 1_000_000_000


@dataclass(frozen=True)
class Touched:
    """A new value and the TTL last-access time (epoch ms) to write with it (``last_access=`` of an edit)."""

    value: Any
    last_access: int


class _Refused(Exception):
    """A value this writer does not encode as ``kind``; the message says what it takes."""


def last_access_ms(when: Any, where: str) -> int:
    """``when`` (epoch ms, or a timestamp; naive means UTC) as epoch milliseconds."""
    if isinstance(when, bool):
        raise EditError(f"{where}: last_access={when!r}; expected epoch milliseconds or a timestamp")
    if isinstance(when, int):
        return when
    try:
        ts = pd.Timestamp(when)
    except (TypeError, ValueError) as exc:
        raise EditError(f"{where}: last_access={when!r}; expected epoch milliseconds or a timestamp") from exc
    if ts is pd.NaT:
        raise EditError(f"{where}: last_access={when!r}; expected epoch milliseconds or a timestamp")
    ts = ts.tz_localize("UTC") if ts.tzinfo is None else ts
    if ts.value % 1_000_000:
        raise EditError(f"{where}: last_access={when!r} is finer than the millisecond a TTL stamp holds")
    return ts.value // 1_000_000


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


def _plain(v: Any) -> Any:
    """NumPy scalars and arrays (as a DataFrame hands them over) as Python values and lists."""
    if hasattr(v, "tolist") and not isinstance(v, (pd.Timestamp, pd.Timedelta)) and type(v).__module__ == "numpy":
        return v.tolist()
    return v


def _java_bytes(n: int) -> bytes:
    """``BigInteger.toByteArray()``: the shortest two's-complement big-endian form."""
    bits = n.bit_length() if n >= 0 else (-n - 1).bit_length()
    return n.to_bytes(bits // 8 + 1, "big", signed=True)


def _timestamp(v: Any, kind: str, tz: bool) -> pd.Timestamp:
    if v is None or isinstance(v, (bool, int, float, str)):
        raise _Refused(f"{kind} values are written from timestamps (not None: nulls only where a null flag is declared)")
    ts = pd.Timestamp(v)
    if tz:
        ts = ts.tz_localize("UTC") if ts.tzinfo is None else ts.tz_convert("UTC")
    elif ts.tzinfo is not None:
        raise _Refused(f"{kind} values are local date-times; found a timestamp with a time zone")
    return ts


def _fixed_kind(kind: str, v: Any) -> bytes:
    if kind == "Instant":
        ns = _timestamp(v, kind, True).value
        return struct.pack(">qi", ns // _NS, ns % _NS)
    if kind == "LocalDate":
        if not isinstance(v, dt.date) or isinstance(v, dt.datetime):
            raise _Refused("a LocalDate is written from a datetime.date")
        return struct.pack(">ibb", v.year, v.month, v.day)
    if kind == "LocalDateTime":
        ts = _timestamp(v, kind, False)
        return struct.pack(">ibbbbbi", ts.year, ts.month, ts.day, ts.hour, ts.minute, ts.second,
                           ts.microsecond * 1000 + ts.nanosecond)
    if kind in ("java.util.Date", "java.sql.Date", "java.sql.Time"):
        return struct.pack(">q", _timestamp(v, kind, True).value // 1_000_000)
    if kind == "java.sql.Timestamp":
        ns = _timestamp(v, kind, True).value
        return struct.pack(">qi", (ns // _NS) * 1000 + (ns % _NS) // 1_000_000, ns % _NS)
    if kind == "BigDecimal":
        if not isinstance(v, Decimal) or not v.is_finite():
            raise _Refused("a BigDecimal is written from a finite decimal.Decimal")
        sign, digits, exp = v.as_tuple()
        unscaled = int("".join(map(str, digits)) or "0") * (-1 if sign else 1)
        raw = _java_bytes(unscaled)
        return struct.pack(">i", len(raw) + 4) + raw + struct.pack(">i", -exp)
    if kind == "BigInteger":
        if isinstance(v, bool) or not isinstance(v, int):
            raise _Refused("a BigInteger is written from an int")
        raw = _java_bytes(v)
        return struct.pack(">i", len(raw) + 4) + raw
    if kind in ("byte[]", "byte[] (PyFlink pickles decoded)"):  # (bytes that read back as a pickle are refused)
        if not isinstance(v, (bytes, bytearray)):
            raise _Refused("a byte[] is written from bytes")
        return struct.pack(">i", len(v)) + bytes(v)
    if kind == "String":
        if v is not None and not isinstance(v, str):
            raise _Refused("a String is written from a str")
        return _string(v)
    if kind in _FIXED:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (kind not in ("Double", "Float") and not isinstance(v, int)):
            raise _Refused(f"a {kind} is written from {'a float' if kind in ('Double', 'Float') else 'an int'}")
        return struct.pack(_FIXED[kind], v)
    if kind == "Boolean":
        if not isinstance(v, bool):
            raise _Refused("a Boolean is written from a bool")
        return b"\x01" if v else b"\x00"
    if kind == "Character":
        if not (isinstance(v, str) and len(v) == 1 and ord(v) <= 0xFFFF):
            raise _Refused("a Character is written from a one-character str of the Basic Multilingual Plane")
        return struct.pack(">H", ord(v))
    raise _Refused(f"the writer does not encode values of {kind}")


def _fields(v: Any, n: int, what: str) -> list:
    """A Tuple's or Row's fields: a dict f0..f{n-1}, or a tuple/list of n."""
    v = _plain(v)
    if isinstance(v, dict):
        if set(v) != {f"f{i}" for i in range(n)}:
            raise _Refused(f"a {what} of {n} fields is written from a dict of keys f0..f{n - 1}; found {sorted(v)}")
        return [v[f"f{i}"] for i in range(n)]
    if isinstance(v, (list, tuple)) and len(v) == n:
        return list(v)
    raise _Refused(f"a {what} of {n} fields is written from a dict f0..f{n - 1} or a tuple of {n}")


def _write(dec: Decoder, v: Any, out: bytearray) -> None:
    """Append ``v`` as ``dec``'s serializer writes it."""
    v = _plain(v)
    if isinstance(dec, TtlDecoder):
        if not isinstance(v, TtlValue) or isinstance(v.last_access, bool) or not isinstance(v.last_access, int):
            raise _Refused("a TTL-wrapped value is written from a TtlValue(last_access ms, value)")
        out += struct.pack(">q", v.last_access)
        _write(dec.value, v.value, out)
    elif isinstance(dec, PojoDecoder):
        if v is None:
            out.append(1)
            return
        names = [n for n, _ in dec.fields]
        if not isinstance(v, dict) or set(v) != set(names):
            raise _Refused(f"POJO {dec.cls} is written from a dict of exactly its recorded fields {names}; found "
                           f"{sorted(v) if isinstance(v, dict) else type(v).__name__}")
        if dec.unknown_fields:
            raise _Refused(f"POJO {dec.cls} has fields {dec.unknown_fields} whose serializer is not decoded")
        out.append(2)  # NO_SUBCLASS: the exact class the snapshot records
        for name, fdec in dec.fields:
            if v[name] is None:
                out.append(1)
            else:
                out.append(0)
                _write(fdec, v[name], out)
    elif isinstance(dec, NullableDecoder):
        if v is None:
            raise _Refused("a NullableSerializer's null is not written (its padding is not decoded)")
        out.append(0)
        _write(dec.inner, v, out)
    elif isinstance(dec, TupleDecoder):
        for fdec, f in zip(dec.fields, _fields(v, len(dec.fields), "Tuple")):
            if f is None:
                raise _Refused("a Tuple field cannot be null (TupleSerializer writes no null flag)")
            _write(fdec, f, out)
    elif isinstance(dec, RowDecoder):
        fields = _fields(v, len(dec.fields), "Row")
        mask, total = 0, dec.mask_bytes * 8
        for i, f in enumerate(fields):
            if f is None:
                mask |= 1 << (total - 1 - (dec.kind_bits + i))
        out += mask.to_bytes(dec.mask_bytes, "big")  # (row kind INSERT: its bits are 0)
        for fdec, f in zip(dec.fields, fields):
            if f is not None:
                _write(fdec, f, out)
    elif isinstance(dec, EitherDecoder):
        if not isinstance(v, dict) or set(v) != {"left", "right"} or (v["left"] is None) == (v["right"] is None):
            raise _Refused("an Either is written from {'left': value, 'right': None} or {'left': None, 'right': value}")
        left = v["left"] is not None
        out.append(1 if left else 0)
        _write(dec.left if left else dec.right, v["left"] if left else v["right"], out)
    elif isinstance(dec, EnumDecoder):
        if v not in dec.names:
            raise _Refused(f"enum {dec.cls} is written from one of its recorded constant names {dec.names}")
        out += struct.pack(">i", dec.names.index(v))
    elif isinstance(dec, SetDecoder):
        if not isinstance(v, (list, tuple, set, frozenset)):
            raise _Refused("a Set is written from a list or set")
        out += struct.pack(">i", len(v))
        for e in v:
            out.append(1 if e is None else 0)
            if e is not None:
                _write(dec.elem, e, out)
    elif isinstance(dec, (ArrayDecoder, ListDecoder)):
        if not isinstance(v, (list, tuple)):
            raise _Refused(f"a {dec.describe()} is written from a list")
        out += struct.pack(">i", len(v))
        for e in v:
            if isinstance(dec, ArrayDecoder) and dec.nullable:
                out.append(0 if e is None else 1)
                if e is None:
                    continue
            elif e is None and dec.describe() != "String[]":
                raise _Refused(f"a {dec.describe()} holds no nulls")
            _write(dec.elem, e, out)
    elif isinstance(dec, MapDecoder):
        pairs = list(v.items()) if isinstance(v, dict) else v
        if not isinstance(pairs, (list, tuple)) or not all(isinstance(p, (list, tuple)) and len(p) == 2 for p in pairs):
            raise _Refused("a Map is written from a dict (or a list of key, value pairs)")
        out += struct.pack(">i", len(pairs))
        for k, e in pairs:
            _write(dec.key, k, out)
            out.append(1 if e is None else 0)
            if e is not None:
                _write(dec.value, e, out)
    else:
        out += _fixed_kind(dec.name, v)


def _same(want: Any, got: Any) -> bool:
    """Is ``got`` (decoded) the value ``want`` (given) exactly: types of numbers, Decimal scales, NaN."""
    want = _plain(want)
    if isinstance(want, TtlValue):
        return isinstance(got, TtlValue) and want.last_access == got.last_access and _same(want.value, got.value)
    if want is None or got is None:
        return want is None and got is None
    if isinstance(want, (bool, int, float)):
        if type(want) is not type(got):
            return False
        return want == got or (isinstance(want, float) and math.isnan(want) and math.isnan(got))
    if isinstance(want, Decimal):
        return isinstance(got, Decimal) and want.as_tuple() == got.as_tuple()
    if isinstance(want, dict):
        if isinstance(got, list):  # a map whose keys are not hashable decodes to pairs
            return _same(list(want.items()), got)
        return isinstance(got, dict) and set(want) == set(got) and all(_same(want[k], got[k]) for k in want)
    if isinstance(want, (list, tuple, set, frozenset)):
        if isinstance(got, dict):  # a Tuple or Row given as a tuple
            got = list(got.values())
        if isinstance(want, (set, frozenset)):
            return isinstance(got, list) and len(got) == len(want) and set(got) == want
        return isinstance(got, (list, tuple)) and len(got) == len(want) and all(map(_same, want, got))
    if isinstance(want, (str, bytes)):
        return type(want) is type(got) and want == got
    if isinstance(want, dt.datetime) and isinstance(got, pd.Timestamp):  # (a naive time given for an instant: UTC)
        want = pd.Timestamp(want)
        if want.tzinfo is None and got.tzinfo is not None:
            want = want.tz_localize("UTC")
        return want.tzinfo is not None and got.tzinfo is not None and want == got or \
            want.tzinfo is None and got.tzinfo is None and want == got
    try:
        return bool(want == got) and type(got) is not str
    except (TypeError, ValueError):
        return False


def encode(decoder: Decoder | None, value: Any, where: str) -> bytes:
    """``value`` as ``decoder``'s serializer writes it (see module doc), or :class:`EditError`."""
    kind = decoder.describe() if decoder is not None else "unknown"
    out = bytearray()
    try:
        if decoder is None:
            raise _Refused("the state's serializer is not decoded")
        _write(decoder, value, out)
    except (_Refused, struct.error, OverflowError, ValueError, TypeError) as exc:
        why = str(exc) if isinstance(exc, _Refused) else f"{type(exc).__name__}: {exc}"
        raise EditError(f"{where}: cannot encode {value!r} as {kind} exactly ({why})") from exc
    data = bytes(out)
    inp = DataInput(data, bounded=True)
    try:
        back = decoder.read(inp)
    except Exception as exc:  # noqa: BLE001 - any failure to read it back is a refusal
        raise EditError(f"{where}: {value!r} encoded as {kind} does not read back ({type(exc).__name__}: {exc}); "
                        "not written") from exc
    if not inp.at_end() or not _same(value, back):
        raise EditError(f"{where}: {value!r} would be read back as {back!r} ({kind}); not written")
    return data
