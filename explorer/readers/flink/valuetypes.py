"""Decoders for the value serializers Flink ships beyond primitives, strings, tuples and POJOs.

Each registers itself with :func:`.serializers.register_snapshot_decoder` under
its serializer-snapshot class name. Wire formats (Java ``DataOutput``, big-endian),
and what a user gets back:

========================  ==============================================  =========================
serializer                bytes of one value                              Python value
========================  ==============================================  =========================
``EnumSerializer``        ``int`` ordinal; the snapshot lists the         the constant's name (str)
                          constant names in ordinal order
``InstantSerializer``     ``long`` epoch seconds, ``int`` nanos           ``pd.Timestamp`` (UTC, ns)
                          (null: ``Long.MIN_VALUE``, ``Integer.MIN_VALUE``)
``LocalDateSerializer``   ``int`` year, ``byte`` month, ``byte`` day      ``datetime.date``
                          (null: ``Integer.MIN_VALUE``, ``short`` MIN)
``LocalTimeSerializer``   ``byte`` hour, minute, second, ``int`` nano     ``datetime.time`` (µs; a time with
                                                                          nanoseconds: ``pd.Timedelta`` since midnight)
                          (null: hour ``Byte.MIN_VALUE``)
``LocalDateTimeSer..``    a local date then a local time                  ``pd.Timestamp`` (naive)
``DateSerializer``        ``long`` epoch ms (null: ``Long.MIN_VALUE``)    ``pd.Timestamp`` (UTC)
``SqlTimestampSer..``     ``long`` epoch ms, ``int`` nanos of the second  ``pd.Timestamp`` (UTC, ns)
``SqlDate/SqlTime``       ``long`` epoch ms                               ``pd.Timestamp`` (UTC)
``BigIntSerializer``      ``int n``: 0 null, 1/2/3 for 0/1/10, else       ``int``
                          ``n - 4`` two's-complement bytes
``BigDecSerializer``      the unscaled value as above, then ``int``       ``decimal.Decimal``
                          scale (not written for null/0/1/10)
primitive arrays          ``int n``, n elements                           ``list``
``StringArraySer..``      ``int n``, n ``StringValue`` strings            ``list[str | None]``
``GenericArraySer..``     ``int n``, per element ``bool present`` + value ``list``
``RowSerializer``         a bit mask (2 row-kind bits when the snapshot   ``dict`` f0.. (positional)
                          says so, then one null bit per field, first
                          bit = most significant), then non-null fields
``JavaEitherSer..``       ``bool isLeft``, then the left or right value   ``{"left": .., "right": ..}``
``SetSerializer``         ``int n``, per element ``bool isNull`` + value  ``list`` (Arrow has no set)
``GlobalWindow``          one byte                                        ``"GlobalWindow"``
========================  ==============================================  =========================
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pandas as pd
import pyarrow as pa

from ..base import ConversionFailure
from .datainput import DataInput
from .serializers import (
    PRIMITIVES,
    Decoder,
    SnapshotContext,
    read_composite_header,
    register_snapshot_decoder,
)

_BASE = "org.apache.flink.api.common.typeutils.base."
_LONG_MIN = -(1 << 63)
_INT_MIN = -(1 << 31)
_EPOCH = pd.Timestamp(0, tz="UTC")


def _in_pandas(make, what: str):
    """``make()``: a pandas Timestamp of a decoded value; one pandas cannot hold (outside the years 1677-2262) is
    State Explorer's limit, not damage (:class:`~explorer.readers.base.ConversionFailure`)."""
    try:
        return make()
    except (OverflowError, ValueError) as exc:  # (pandas' OutOfBounds* are ValueErrors)
        raise ConversionFailure(f"{what} does not fit a pandas Timestamp (years 1677 to 2262): "
                                f"{type(exc).__name__}: {exc}") from exc


class EnumDecoder(Decoder):
    fixed_length = 4
    arrow = pa.string()

    def __init__(self, cls: str, names: list[str]) -> None:
        self.cls, self.names = cls, names
        self.name = f"Enum {cls.rsplit('.', 1)[-1]}"

    def read(self, inp: DataInput):
        i = inp.read_int()
        return self.names[i] if 0 <= i < len(self.names) else f"{self.cls}#{i}"


def _enum(inp: DataInput, ctx: SnapshotContext) -> Decoder:
    cls = inp.read_utf()
    names = [inp.read_utf() for _ in range(inp.read_int())]
    return EnumDecoder(cls, names)


class _Fixed(Decoder):
    def __init__(self, name: str, width: int, reader, arrow: pa.DataType | None) -> None:
        self.name, self.fixed_length, self._read, self.arrow = name, width, reader, arrow

    def read(self, inp: DataInput):
        return self._read(inp)


def _instant(inp: DataInput):
    sec, nano = inp.read_long(), inp.read_int()
    if sec == _LONG_MIN:
        return None
    return _in_pandas(lambda: _EPOCH + pd.Timedelta(seconds=sec) + pd.Timedelta(nanoseconds=nano), f"an Instant of {sec} s")


def _local_date_parts(inp: DataInput):
    year = inp.read_int()
    month, day = inp.read_byte(), inp.read_byte()
    return None if year == _INT_MIN else dt.date(year, month, day)


def _local_time_parts(inp: DataInput):
    h, m, s = inp.read_byte(), inp.read_byte(), inp.read_byte()
    nano = inp.read_int()
    return None if h == -128 else dt.time(h, m, s, nano // 1000), nano


def _local_time(inp: DataInput):
    t, nano = _local_time_parts(inp)
    if t is not None and nano % 1000:  # finer than Python's time holds: the time since midnight, exact
        return pd.Timedelta(hours=t.hour, minutes=t.minute, seconds=t.second) + pd.Timedelta(nanoseconds=nano)
    return t


def _local_datetime(inp: DataInput):
    d = _local_date_parts(inp)
    t, nano = _local_time_parts(inp)
    if d is None or t is None:
        return None
    return _in_pandas(lambda: pd.Timestamp(dt.datetime.combine(d, t.replace(microsecond=0))) + pd.Timedelta(nanoseconds=nano),
                      f"a LocalDateTime of {d} {t}")


def _epoch_ms(inp: DataInput):
    ms = inp.read_long()
    return None if ms == _LONG_MIN else _in_pandas(lambda: _EPOCH + pd.Timedelta(milliseconds=ms), f"a Date of {ms} ms")


def _sql_timestamp(inp: DataInput):
    ms, nanos = inp.read_long(), inp.read_int()
    if ms == _LONG_MIN:
        return None
    return _in_pandas(lambda: _EPOCH + pd.Timedelta(seconds=ms // 1000) + pd.Timedelta(nanoseconds=nanos),
                      f"a java.sql.Timestamp of {ms} ms")


def _big_dec(inp: DataInput):
    n = inp.read_int()
    if n < 4:
        return (None, Decimal(0), Decimal(1), Decimal(10))[n] if n >= 0 else None
    unscaled = int.from_bytes(inp.read_bytes(n - 4), "big", signed=True)
    scale = inp.read_int()
    return Decimal(unscaled).scaleb(-scale)


def _global_window(inp: DataInput):
    inp.read_byte()
    return "GlobalWindow"


_TS_NS = pa.timestamp("ns", tz="UTC")
_FIXED = {
    "InstantSerializer": ("Instant", 12, _instant, _TS_NS),
    "LocalDateSerializer": ("LocalDate", 6, _local_date_parts, pa.date32()),
    "LocalTimeSerializer": ("LocalTime", 7, _local_time, pa.time64("us")),
    "LocalDateTimeSerializer": ("LocalDateTime", 13, _local_datetime, pa.timestamp("ns")),
    "DateSerializer": ("java.util.Date", 8, _epoch_ms, _TS_NS),
    "SqlDateSerializer": ("java.sql.Date", 8, _epoch_ms, _TS_NS),
    "SqlTimeSerializer": ("java.sql.Time", 8, _epoch_ms, _TS_NS),
    "SqlTimestampSerializer": ("java.sql.Timestamp", 12, _sql_timestamp, _TS_NS),
    "BigDecSerializer": ("BigDecimal", -1, _big_dec, None),
}


def _no_content(decoder: Decoder):
    return lambda inp, ctx: decoder


for _name, (_label, _width, _reader, _arrow) in _FIXED.items():
    register_snapshot_decoder(f"{_BASE}{_name}${_name}Snapshot", _no_content(_Fixed(_label, _width, _reader, _arrow)))

register_snapshot_decoder(f"{_BASE}EnumSerializer$EnumSerializerSnapshot", _enum)
register_snapshot_decoder(
    "org.apache.flink.streaming.api.windowing.windows.GlobalWindow$Serializer$GlobalWindowSerializerSnapshot",
    _no_content(_Fixed("GlobalWindow", 1, _global_window, pa.string())),
)


# --- arrays ------------------------------------------------------------------------------------------

class ArrayDecoder(Decoder):
    """``int n`` then ``n`` elements (``nullable``: each preceded by ``bool present``)."""

    def __init__(self, elem: Decoder, label: str, nullable: bool = False) -> None:
        self.elem, self.nullable = elem, nullable
        self.name = f"{label}[]"

    def read(self, inp: DataInput):
        n = inp.read_int()
        if n < 0:
            return None
        elem = self.elem
        if self.nullable:
            return [elem.read(inp) if inp.read_bool() else None for _ in range(n)]
        return [elem.read(inp) for _ in range(n)]

    def arrow_type(self):
        t = self.elem.arrow_type()
        return None if t is None else pa.list_(t)


_PRIM_ARRAYS = {
    "Boolean": ("boolean", "BooleanSerializer"), "Char": ("char", "CharSerializer"),
    "Double": ("double", "DoubleSerializer"), "Float": ("float", "FloatSerializer"),
    "Int": ("int", "IntSerializer"), "Long": ("long", "LongSerializer"), "Short": ("short", "ShortSerializer"),
}
for _java, (_label, _prim) in _PRIM_ARRAYS.items():
    _cls = f"{_BASE}array.{_java}PrimitiveArraySerializer${_java}PrimitiveArraySerializerSnapshot"
    register_snapshot_decoder(_cls, _no_content(ArrayDecoder(PRIMITIVES[_prim], _label)))
register_snapshot_decoder(
    f"{_BASE}array.StringArraySerializer$StringArraySerializerSnapshot",
    _no_content(ArrayDecoder(PRIMITIVES["StringSerializer"], "String")),
)


def _generic_array(inp: DataInput, ctx: SnapshotContext) -> Decoder:
    read_composite_header(inp)
    component = inp.read_utf()
    (elem,) = ctx.read_nested(inp)
    return ArrayDecoder(elem, component.rsplit(".", 1)[-1], nullable=True)


register_snapshot_decoder(f"{_BASE}GenericArraySerializerSnapshot", _generic_array)


class SetDecoder(ArrayDecoder):
    """``SetSerializer`` (Flink 2.x ``Types.SET``): like a nullable array; the values as a list."""

    def __init__(self, elem: Decoder) -> None:
        super().__init__(elem, "", nullable=False)
        self.name = f"Set<{elem.describe()}>"

    def read(self, inp: DataInput):
        n = inp.read_int()
        elem = self.elem
        return [None if inp.read_bool() else elem.read(inp) for _ in range(n)]


def _set(inp: DataInput, ctx: SnapshotContext) -> Decoder:
    read_composite_header(inp)
    (elem,) = ctx.read_nested(inp)
    return SetDecoder(elem)


register_snapshot_decoder(f"{_BASE}SetSerializerSnapshot", _set)


# --- Row, Either ---------------------------------------------------------------------------------------

class RowDecoder(Decoder):
    """``org.apache.flink.types.Row`` (``RowSerializer``), positional fields ``f0``, ``f1``..."""

    def __init__(self, fields: list[Decoder], row_kind: bool) -> None:
        self.fields, self.row_kind = fields, row_kind
        self.kind_bits = 2 if row_kind else 0
        self.mask_bytes = (self.kind_bits + len(fields) + 7) // 8
        self.name = f"Row<{', '.join(f.describe() for f in fields)}>"

    def read(self, inp: DataInput):
        mask = int.from_bytes(inp.read_bytes(self.mask_bytes), "big")
        total = self.mask_bytes * 8
        out = {}
        for i, f in enumerate(self.fields):
            bit = total - 1 - (self.kind_bits + i)
            out[f"f{i}"] = None if (mask >> bit) & 1 else f.read(inp)
        return out

    def arrow_type(self):
        types = [f.arrow_type() for f in self.fields]
        if any(t is None for t in types):
            return None
        return pa.struct([(f"f{i}", t) for i, t in enumerate(types)])


def _row(inp: DataInput, ctx: SnapshotContext) -> Decoder:
    outer = read_composite_header(inp)
    row_kind = inp.read_bool() if outer >= 3 else False
    return RowDecoder(ctx.read_nested(inp), row_kind)


register_snapshot_decoder("org.apache.flink.api.java.typeutils.runtime.RowSerializer$RowSerializerSnapshot", _row)


class EitherDecoder(Decoder):
    def __init__(self, left: Decoder, right: Decoder) -> None:
        self.left, self.right = left, right
        self.name = f"Either<{left.describe()}, {right.describe()}>"

    def read(self, inp: DataInput):
        if inp.read_bool():
            return {"left": self.left.read(inp), "right": None}
        return {"left": None, "right": self.right.read(inp)}

    def arrow_type(self):
        lt, rt = self.left.arrow_type(), self.right.arrow_type()
        return None if lt is None or rt is None else pa.struct([("left", lt), ("right", rt)])


def _either(inp: DataInput, ctx: SnapshotContext) -> Decoder:
    read_composite_header(inp)
    left, right = ctx.read_nested(inp)
    return EitherDecoder(left, right)


register_snapshot_decoder("org.apache.flink.api.java.typeutils.runtime.JavaEitherSerializerSnapshot", _either)
register_snapshot_decoder("org.apache.flink.api.java.typeutils.runtime.EitherSerializerSnapshot", _either)
