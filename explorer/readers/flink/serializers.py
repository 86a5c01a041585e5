"""Flink type-serializer snapshots, and decoders for the values they describe.

Every state in a Flink snapshot carries a *serializer snapshot* for its key,
namespace and value serializers, so a reader knows how the bytes were written
without the job's classes. On the wire a snapshot is::

    utf  snapshot class name          e.g. ...base.LongSerializer$LongSerializerSnapshot
    int  snapshot version
    ...  snapshot content             (class specific, see below)

(at the top level of a state's meta info it is preceded by an ``int`` version of
the wrapping proxy). Content of the ones we understand:

* primitives, ``String``, ``byte[]``, ``VoidNamespace``, ``TimeWindow``: nothing;
* *composite* snapshots (``List``, ``Map``, ``Tuple``, TTL, timers, ``Row``...):
  ``int 0x000DE704``, ``int outer version``, the outer content (the tuple class
  name for ``Tuple``), then ``int 0x001457FD``, ``int 1``, ``int n`` and ``n``
  nested snapshots;
* POJO (version 2): the class name, then three "optional maps" (field
  snapshots, registered and non-registered subclasses). An optional map is
  ``long header``, ``int size``, and per entry a ``utf`` name and two
  *framed* parts (``bool present``, ``int length``, bytes): the field (declaring
  class + field name) and its serializer snapshot. Fields come in Flink's
  order, which is the order the POJO serializer writes them.
* ``RowData`` (Flink SQL): ``int n``, ``n`` Java-serialized ``LogicalType``
  objects (parsed by :mod:`.javaser`, never instantiated), then the nested
  field serializer snapshots.

A snapshot class we do not know cannot be skipped (most snapshots are not
length-prefixed), so :class:`UnknownSnapshot` is raised with the position, and
the caller resynchronises on what must come next (see ``statemeta``).

Serializers beyond the ones here are decoded by modules of their own
(``valuetypes``: enums, java.time, java.sql, ``BigDecimal``, arrays, ``Row``,
``Either``, ``GlobalWindow``; ``internals``: interval join, CEP, SQL runtime
types), which register a factory per snapshot class name with
:func:`register_snapshot_decoder` (see :data:`SnapshotFactory` for the
contract). Every decoder's ``read`` consumes exactly one value, so values that
are not length-prefixed (heap snapshots) can be skipped, and ``arrow_type``
gives the Arrow type of its values (maps stay maps, structs keep their fields).

The decoders read values exactly as the serializers write them (Java
``DataOutput``): ``Long`` 8 bytes, ``String`` in ``StringValue`` format,
``List`` as ``int n`` + elements, ``Map`` as ``int n`` + (key, ``bool isNull``,
value), POJO as a flags byte (1 null, 2 exact class) then per field ``bool
isNull`` + value, ``Tuple`` as its fields, TTL values as ``long
lastAccessTimestamp`` + value, timers as ``long timestamp`` (sign bit flipped
so that bytes sort like numbers) + key + namespace, ``RowData`` as ``int
length`` + Flink's binary row (see :class:`RowDataDecoder`).
"""

from __future__ import annotations

import datetime as dt
import struct
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Callable, Mapping

import pandas as pd
import pyarrow as pa

from ...errors import FlinkFormatError
from ..base import ConversionFailure
from .datainput import DataInput
from .javaser import parse_java_object

COMPOSITE_MAGIC = 0x000DE704
NESTED_MAGIC = 0x001457FD
POJO_MAP_HEADER = 0x4F2C69A3D70


class UnknownSnapshot(Exception):
    """A serializer snapshot class we cannot parse; ``pos`` is where its content starts."""

    def __init__(self, class_name: str, pos: int, partial: "Decoder | None" = None, map_keys: bool = False) -> None:
        super().__init__(class_name)
        self.class_name = class_name
        self.pos = pos
        #: what could be decoded around it: a map state's MapDecoder with known keys and raw values
        self.partial = partial
        #: it is a map's key serializer: the map's keys are raw too
        self.map_keys = map_keys


class UnknownLayout(Exception):
    """Values of this type cannot be decoded (unknown serializer); keep them as raw bytes."""


class Decoder:
    """Reads one value of a type from a :class:`DataInput`."""

    name = "?"
    fixed_length = -1  # bytes per value, or -1 when variable
    key_kind: str | None = None  # how explorer.keygroups hashes it (None: not reproducible)
    arrow: pa.DataType | None = None

    def read(self, inp: DataInput) -> Any:
        raise NotImplementedError

    def describe(self) -> str:
        return self.name

    def arrow_type(self) -> pa.DataType | None:
        """The Arrow type of decoded values, or None to let Arrow infer it."""
        return self.arrow


class _Prim(Decoder):
    def __init__(self, name, fixed, reader, key_kind=None, arrow=None):
        self.name, self.fixed_length, self._reader, self.key_kind, self.arrow = name, fixed, reader, key_kind, arrow

    def read(self, inp):
        return self._reader(inp)


def _read_bytes_array(inp: DataInput) -> bytes | None:
    n = inp.read_int()
    return None if n < 0 else inp.read_bytes(n)


def _read_void(inp: DataInput) -> None:
    inp.read_byte()
    return None


def read_big_integer(inp: DataInput) -> int | None:
    n = inp.read_int()
    if n < 4:  # 0..3 encode null, 0, 1, 10 in BigIntSerializer
        return (None, 0, 1, 10)[n] if n >= 0 else None
    return int.from_bytes(inp.read_bytes(n - 4), "big", signed=True)


PRIMITIVES: dict[str, Decoder] = {
    "StringSerializer": _Prim("String", -1, DataInput.read_flink_string, "str", pa.string()),
    "LongSerializer": _Prim("Long", 8, DataInput.read_long, "long", pa.int64()),
    "IntSerializer": _Prim("Integer", 4, DataInput.read_int, "int", pa.int32()),
    "ShortSerializer": _Prim("Short", 2, DataInput.read_short, None, pa.int16()),
    "ByteSerializer": _Prim("Byte", 1, DataInput.read_byte, None, pa.int8()),
    "BooleanSerializer": _Prim("Boolean", 1, DataInput.read_bool, "bool", pa.bool_()),
    "DoubleSerializer": _Prim("Double", 8, DataInput.read_double, "double", pa.float64()),
    "FloatSerializer": _Prim("Float", 4, DataInput.read_float, None, pa.float32()),
    "CharSerializer": _Prim("Character", 2, DataInput.read_char, None, pa.string()),
    "BytePrimitiveArraySerializer": _Prim("byte[]", -1, _read_bytes_array, None, pa.binary()),
    "BigIntSerializer": _Prim("BigInteger", -1, read_big_integer, None, None),
    "VoidNamespaceSerializer": _Prim("VoidNamespace", 1, _read_void, None, pa.null()),
    "StringDataSerializer": _Prim("STRING", -1, lambda inp: inp.read_bytes(inp.read_int()).decode("utf-8", "replace"), None, pa.string()),
}


class TimeWindowDecoder(Decoder):
    name = "TimeWindow"
    fixed_length = 16
    arrow = pa.struct([("start", pa.int64()), ("end", pa.int64())])

    def read(self, inp):
        return {"start": inp.read_long(), "end": inp.read_long()}


class ListDecoder(Decoder):
    def __init__(self, elem: Decoder):
        self.elem = elem
        self.name = f"List<{elem.describe()}>"

    def read(self, inp):
        n = inp.read_count("list elements", min_width(self.elem))
        return [self.elem.read(inp) for _ in range(n)]

    def arrow_type(self):
        t = self.elem.arrow_type()
        return None if t is None else pa.list_(t)


class MapDecoder(Decoder):
    def __init__(self, key: Decoder, value: Decoder):
        self.key, self.value = key, value
        self.name = f"Map<{key.describe()}, {value.describe()}>"

    def read(self, inp):
        """A whole map (a ValueState of a Map type, a POJO field): a dict, or (key, value) pairs when
        a key is not hashable (a POJO or tuple key decodes to a dict)."""
        out = []
        for _ in range(inp.read_count("map entries", min_width(self.key) + 1)):
            k = self.key.read(inp)
            v = None if inp.read_bool() else self.value.read(inp)
            out.append((k, v))
        try:
            return dict(out)
        except TypeError:
            return out

    def arrow_type(self):
        k, v = self.key.arrow_type(), self.value.arrow_type()
        return None if k is None or v is None or pa.types.is_struct(k) else pa.map_(k, v)


@dataclass
class TtlValue:
    last_access: int
    value: Any


class TtlDecoder(Decoder):
    """A TTL wrapper: ``long`` last-access timestamp (ms), then the user value."""

    def __init__(self, value: Decoder):
        self.value = value
        self.name = f"Ttl<{value.describe()}>"

    def read(self, inp):
        ts = inp.read_long()
        return TtlValue(ts, self.value.read(inp))

    def arrow_type(self):
        return self.value.arrow_type()


class TimerDecoder(Decoder):
    """An internal timer: sign-flipped ``long`` timestamp, key, namespace."""

    def __init__(self, key: Decoder, namespace: Decoder):
        self.key, self.namespace = key, namespace
        self.name = f"Timer<{key.describe()}, {namespace.describe()}>"

    def read(self, inp):
        ts = inp.read_long() ^ (-(1 << 63))
        return ts, self.key.read(inp), self.namespace.read(inp)


class TupleDecoder(Decoder):
    def __init__(self, cls: str, fields: list[Decoder]):
        self.fields = fields
        self.name = f"{cls.rsplit('.', 1)[-1]}<{', '.join(f.describe() for f in fields)}>"
        if fields and all(f.key_kind for f in fields):
            self.key_kind = "tuple"
        if all(f.fixed_length >= 0 for f in fields):
            self.fixed_length = sum(f.fixed_length for f in fields)

    def read(self, inp):
        return {f"f{i}": f.read(inp) for i, f in enumerate(self.fields)}

    def arrow_type(self):
        types = [f.arrow_type() for f in self.fields]
        if any(t is None for t in types):
            return None
        return pa.struct([(f"f{i}", t) for i, t in enumerate(types)])

    def as_key(self, value: dict) -> tuple:
        return tuple(value[f"f{i}"] for i in range(len(self.fields)))


class PojoDecoder(Decoder):
    """A Flink POJO: ``flags`` byte (1 null, 2 exact class), then per field ``bool isNull`` + value.

    A field whose serializer is unknown (``None``) cannot be skipped by length.
    When the value is *bounded* (``DataInput.bounded``: the whole value of a
    key/value-layout entry) and it is the only unknown field, its bytes are found
    by trying every end position for which the remaining fields decode to
    exactly the end of the value; the field is then returned as raw ``bytes``
    and the other fields decoded. Otherwise :class:`UnknownLayout`.
    """

    def __init__(self, cls: str, fields: list[tuple[str, Decoder | None]]):
        self.cls, self.fields = cls, fields
        self.name = f"POJO {cls}"
        self.unknown_fields = [n for n, d in fields if d is None]

    def arrow_type(self):
        types = [(n, d.arrow_type() if d is not None else None) for n, d in self.fields]
        if not types or any(t is None for _, t in types):
            return None
        return pa.struct(types)

    def read(self, inp):
        bounded = inp.bounded
        inp.bounded = False  # nested values are never the whole value
        try:
            return self._read(inp, bounded)
        finally:
            inp.bounded = bounded

    def _read(self, inp, bounded: bool):
        flags = inp.read_ubyte()
        if flags & 1:
            return None
        if not flags & 2:
            raise UnknownLayout(f"POJO {self.cls} value is a subclass instance (flags {flags})")
        out = {}
        fields = self.fields
        for i, (name, dec) in enumerate(fields):
            if dec is None:
                if not bounded:
                    raise UnknownLayout(f"POJO {self.cls} field {name!r} has a serializer State Explorer cannot decode")
                return self._probe(inp, out, i)
            out[name] = None if inp.read_bool() else dec.read(inp)
        return out

    def _probe(self, inp, out: dict, i: int) -> dict:
        """Fields ``i`` (the first unknown) to the last unknown one start at ``inp.pos``: the fields after
        the last unknown one must decode to exactly ``inp.end``. The span between is returned as raw bytes
        on field ``i``; other fields inside the span are left out of the value (``raw_span_fields``)."""
        start, end = inp.pos, inp.end
        last = max(j for j, (_, d) in enumerate(self.fields) if d is None)
        rest = self.fields[last + 1 :]
        for stop in range(start, end + 1):
            probe = DataInput(inp.buf, stop, end)
            got = {}
            try:
                for name, dec in rest:
                    got[name] = None if probe.read_bool() else dec.read(probe)
            except Exception:  # noqa: BLE001 - probing: any failure rejects this length
                continue
            if probe.at_end():
                out[self.fields[i][0]] = bytes(inp.buf[start:stop])
                out.update(got)
                inp.pos = end
                return out
        raise UnknownLayout(f"POJO {self.cls} field {self.fields[i][0]!r} has a serializer State Explorer cannot decode")

    def raw_note(self) -> str | None:
        """What a note says about this POJO's undecodable fields (None: all decodable)."""
        if not self.unknown_fields:
            return None
        names = [n for n, _ in self.fields]
        first, last = names.index(self.unknown_fields[0]), names.index(self.unknown_fields[-1])
        span = names[first : last + 1]
        text = (f"POJO {self.cls}: field(s) {', '.join(repr(n) for n in self.unknown_fields)} use a serializer "
                "State Explorer cannot decode")
        if len(span) > 1:
            text += (f"; where the value's length is known, the bytes of fields {span[0]!r} to {span[-1]!r} are "
                     f"returned raw in field {span[0]!r} (the others of that span are left out) and the other "
                     "fields decoded")
        else:
            text += f"; where the value's length is known, {span[0]!r} is returned as raw bytes and the other fields decoded"
        return text + "; elsewhere the whole value is raw"


class NullableDecoder(Decoder):
    """``NullableSerializer``: a ``bool isNull`` then the value."""

    def __init__(self, inner: Decoder):
        self.inner = inner
        self.name = f"Nullable<{inner.describe()}>"

    def read(self, inp):
        return None if inp.read_bool() else self.inner.read(inp)

    def arrow_type(self):
        return self.inner.arrow_type()


_LOGICAL_NAMES = {
    "BigIntType": "BIGINT", "IntType": "INT", "SmallIntType": "SMALLINT", "TinyIntType": "TINYINT",
    "BooleanType": "BOOLEAN", "DoubleType": "DOUBLE", "FloatType": "FLOAT", "VarCharType": "STRING",
    "CharType": "CHAR", "DateType": "DATE", "TimestampType": "TIMESTAMP", "LocalZonedTimestampType": "TIMESTAMP_LTZ",
    "DecimalType": "DECIMAL", "VarBinaryType": "BYTES", "BinaryType": "BINARY", "TimeType": "TIME",
}


_EPOCH_DAY = dt.date(1970, 1, 1)


@dataclass(frozen=True)
class SqlField:
    """A field of a SQL row whose type is more than a name: its logical type's parameters, as written in the
    ``RowDataSerializer`` snapshot (a Java-serialized ``LogicalType``)."""

    type: str  # "ROW", "RAW", "DECIMAL", ... (the names of _LOGICAL_NAMES)
    row: "RowDataDecoder | None" = None  # ROW: the nested row
    raw_class: str | None = None  # RAW: the Java class it holds (a MapView / ListView data view, ...)
    raw_serializer: str | None = None  # RAW: its serializer's class
    precision: int | None = None
    scale: int | None = None
    elem: Any = None  # ARRAY: its element type (a type name or a SqlField)

    def __str__(self) -> str:
        if self.row is not None:
            return self.row.name
        if self.type == "RAW":
            return f"RAW<{_short(self.raw_class or '?')}>"
        if self.type == "DECIMAL":
            return f"DECIMAL({self.precision}, {self.scale})"
        if self.type == "ARRAY":
            return f"ARRAY<{self.elem}>"
        return self.type


#: RAW fields holding a data view (a SQL accumulator's MapView/ListView) serialized by NullSerializer: the
#: view's entries live in a state of their own (named after the accumulator, e.g. ``distinctAcc_0``), the row
#: holds only a placeholder
_DATA_VIEWS = {"org.apache.flink.table.api.dataview.MapView": "MapView",
               "org.apache.flink.table.api.dataview.ListView": "ListView"}


def sql_field_type(obj: Any) -> "str | SqlField":
    """A ``LogicalType`` object (parsed by :mod:`.javaser`) as a type name, or a :class:`SqlField`."""
    if not isinstance(obj, dict):
        return "?"
    t = _short(str(obj.get("@class", "?")))
    name = _LOGICAL_NAMES.get(t, t)
    if t == "RowType":
        fields = obj.get("fields")
        written = fields.get("list", fields.get("c")) if isinstance(fields, dict) else None
        items = written.get("@written") if isinstance(written, dict) else None
        if not isinstance(items, list):
            return name  # (the field list could not be read: the field stays raw, with a note)
        names = [f.get("name") if isinstance(f, dict) else None for f in items]
        types = [sql_field_type(f.get("type")) if isinstance(f, dict) else "?" for f in items]
        return SqlField("ROW", row=RowDataDecoder(types, [None] * len(types), names))
    if t == "RawType":
        clazz, ser = obj.get("clazz"), obj.get("serializer")
        return SqlField("RAW", raw_class=clazz.get("@class_object") if isinstance(clazz, dict) else None,
                        raw_serializer=ser.get("@class") if isinstance(ser, dict) else None)
    if t == "ArrayType":
        return SqlField("ARRAY", elem=sql_field_type(obj.get("elementType")))
    if t == "DecimalType":
        p, sc = obj.get("precision"), obj.get("scale")
        return SqlField("DECIMAL", precision=p if isinstance(p, int) else None, scale=sc if isinstance(sc, int) else None)
    return name


class RowDataDecoder(Decoder):
    """Flink SQL's ``RowData``, written as ``int length`` + a binary row.

    A binary row is: a null bit set of ``((arity + 63 + 8) // 64) * 8`` bytes (the
    first 8 bits hold the row kind, field ``i``'s null bit is bit ``i + 8``,
    little-endian within each byte), then one 8-byte little-endian slot per
    field, then a variable-length area. Fixed-size values live in their slot.
    A string or binary of at most 7 bytes lives in the slot too (highest bit of
    the slot set, its length in the 7 bits below); a longer one, a nested row, a
    RAW value and a DECIMAL of precision > 18 are at ``offset = slot >> 32`` with
    ``length = slot & 0xFFFFFFFF`` (a nested row is a binary row itself). A field
    type not decoded here leaves the whole value raw, with a note naming it.
    """

    def __init__(self, types: list, precisions: list[int | None] | None = None,
                 names: list[str | None] | None = None):
        self.types = types
        self.precisions = precisions or [None] * len(types)
        self.names = [n or f"f{i}" for i, n in enumerate(names or [None] * len(types))]
        self.name = f"ROW<{', '.join(map(str, types))}>"

    def read(self, inp):
        n = inp.read_int()
        row = inp.read_bytes(n)
        return self.decode_row(row)

    def decode_row(self, row: bytes) -> dict:
        arity = len(self.types)
        null_bytes = ((arity + 63 + 8) // 64) * 8
        out = {}
        for i, t in enumerate(self.types):
            bit = i + 8
            name = self.names[i]
            if row[bit >> 3] & (1 << (bit & 7)):
                out[name] = None
                continue
            off = null_bytes + 8 * i
            slot = row[off : off + 8]
            if isinstance(t, SqlField):
                out[name] = self._field(t, slot, row)
            elif t in ("TIMESTAMP", "TIMESTAMP_LTZ"):
                # precision <= 3: epoch millis in the slot; else the slot holds (offset << 32 | nanos of
                # the millisecond) and the millis are at offset in the variable-length area
                prec = self.precisions[i]
                v = struct.unpack_from("<q", slot)[0]
                if prec is not None and prec > 3:
                    off, nanos = v >> 32, v & 0xFFFFFFFF
                    ms = struct.unpack_from("<q", row, off)[0]
                else:
                    ms, nanos = v, 0
                out[name] = timestamp_from_epoch(ms, nanos, t)
            elif t == "BIGINT":
                out[name] = struct.unpack_from("<q", slot)[0]
            elif t == "DATE":
                out[name] = _EPOCH_DAY + dt.timedelta(days=struct.unpack_from("<i", slot)[0])
            elif t in ("INT", "TIME"):  # (TIME: milliseconds of the day)
                v = struct.unpack_from("<i", slot)[0]
                out[name] = v if t == "INT" else dt.time(v // 3_600_000, v // 60_000 % 60, v // 1000 % 60, v % 1000 * 1000)
            elif t == "SMALLINT":
                out[name] = struct.unpack_from("<h", slot)[0]
            elif t == "TINYINT":
                out[name] = struct.unpack_from("<b", slot)[0]
            elif t == "BOOLEAN":
                out[name] = slot[0] != 0
            elif t == "DOUBLE":
                out[name] = struct.unpack_from("<d", slot)[0]
            elif t == "FLOAT":
                out[name] = struct.unpack_from("<f", slot)[0]
            elif t in ("STRING", "CHAR", "BYTES", "BINARY"):
                raw = _var_bytes(slot, row)
                out[name] = raw.decode("utf-8", "replace") if t in ("STRING", "CHAR") else bytes(raw)
            else:  # never the slot's bytes as if they were the value: the whole value stays raw, noted
                raise UnknownLayout(f"SQL field {name} of type {t} in {self.name} is not decoded by State Explorer")
        return out

    def _field(self, f: SqlField, slot: bytes, row: bytes) -> Any:
        if f.row is not None:
            v = struct.unpack_from("<Q", slot)[0]
            o, ln = v >> 32, v & 0xFFFFFFFF
            return f.row.decode_row(row[o : o + ln])
        if f.type == "RAW" and f.raw_class in _DATA_VIEWS and (f.raw_serializer or "").endswith(".NullSerializer"):
            return {"data_view": _DATA_VIEWS[f.raw_class]}  # its entries: in the state named after it
        if f.type == "DECIMAL" and f.precision is not None and f.scale is not None:
            if f.precision <= 18:  # compact: the unscaled long in the slot
                unscaled = struct.unpack_from("<q", slot)[0]
            else:
                unscaled = int.from_bytes(_var_bytes(slot, row), "big", signed=True)
            return Decimal(unscaled).scaleb(-f.scale)
        if f.type == "ARRAY" and f.elem is not None:
            return decode_binary_array(_var_bytes(slot, row), f.elem, self.name)
        raise UnknownLayout(f"SQL field of type {f} in {self.name} is not decoded by State Explorer")


_ARRAY_ELEMENT_SIZES = {"BOOLEAN": 1, "TINYINT": 1, "SMALLINT": 2, "INT": 4, "FLOAT": 4, "DATE": 4, "TIME": 4}
_ARRAY_FIXED = {"BOOLEAN": "<?", "TINYINT": "<b", "SMALLINT": "<h", "INT": "<i", "FLOAT": "<f", "BIGINT": "<q",
                "DOUBLE": "<d"}


def decode_binary_array(buf: bytes, elem: Any, where: str) -> list:
    """A ``BinaryArrayData``: ``int n`` (little-endian), a null bit set of ``((n + 31) // 32) * 4`` bytes (bit
    ``i`` for element ``i``), then ``n`` elements of the type's width (1 BOOLEAN/TINYINT, 2 SMALLINT, 4 INT,
    FLOAT, DATE, TIME, else 8); a string or binary element is an 8-byte slot as in a binary row, its offset
    counted from the array's start. An element type not decoded here leaves the value raw, with a note."""
    if len(buf) < 4:
        raise FlinkFormatError(f"{where}: found a binary array of {len(buf)} bytes, expected at least 4 (its length)")
    n = struct.unpack_from("<i", buf)[0]
    t = elem.type if isinstance(elem, SqlField) else elem
    width = _ARRAY_ELEMENT_SIZES.get(t, 8)
    start = 4 + ((n + 31) // 32) * 4
    if n < 0 or start + n * width > len(buf):
        raise FlinkFormatError(f"{where}: found a binary array of {n} elements in {len(buf)} bytes, expected "
                               f"{start + max(n, 0) * width} bytes or more")
    if t not in _ARRAY_FIXED and t not in ("STRING", "CHAR", "BYTES", "BINARY", "DATE"):
        raise UnknownLayout(f"array elements of type {elem} in {where} are not decoded by State Explorer")
    out: list[Any] = []
    for i in range(n):
        if buf[4 + (i >> 3)] & (1 << (i & 7)):
            out.append(None)
            continue
        off = start + i * width
        if t in _ARRAY_FIXED:
            out.append(struct.unpack_from(_ARRAY_FIXED[t], buf, off)[0])
        elif t == "DATE":
            out.append(_EPOCH_DAY + dt.timedelta(days=struct.unpack_from("<i", buf, off)[0]))
        else:
            raw = _var_bytes(buf[off : off + 8], buf)
            out.append(raw.decode("utf-8", "replace") if t in ("STRING", "CHAR") else bytes(raw))
    return out


class ArrayDataDecoder(Decoder):
    """Flink SQL's ``ArrayData`` (``ArrayDataSerializer``): ``int length`` + a binary array
    (:func:`decode_binary_array`). The element type is the Java-serialized ``LogicalType`` of the snapshot.
    (COUNT(DISTINCT ..) FILTER over updating input keeps one count per FILTER as an ARRAY<BIGINT>.)"""

    def __init__(self, elem: Any) -> None:
        self.elem = elem
        self.name = f"ARRAY<{elem}>"

    def read(self, inp: DataInput):
        return decode_binary_array(inp.read_bytes(inp.read_int()), self.elem, self.name)


def _var_bytes(slot: bytes, row: bytes) -> bytes:
    """A variable-length field's bytes: in the slot (highest bit set, length in the 7 bits below) or at
    ``offset = slot >> 32`` with ``length = slot & 0xFFFFFFFF``."""
    v = struct.unpack_from("<Q", slot)[0]
    if v >> 63:
        return slot[: (v >> 56) & 0x7F]
    o, ln = v >> 32, v & 0xFFFFFFFF
    return row[o : o + ln]


def timestamp_from_epoch(ms: int, nanos: int = 0, what: str = "timestamp") -> pd.Timestamp:
    """``ms`` epoch milliseconds (+ ``nanos``) as a pandas Timestamp, or :class:`ConversionFailure`."""
    try:
        return pd.Timestamp(ms, unit="ms") + pd.Timedelta(nanoseconds=nanos)
    except (OverflowError, ValueError) as exc:  # (pandas' OutOfBounds* are ValueErrors)
        raise ConversionFailure(f"a {what} of {ms} ms since the epoch does not fit a pandas Timestamp "
                                f"(years 1677 to 2262): {type(exc).__name__}: {exc}") from exc


class RawDecoder(Decoder):
    """Stands for a serializer we do not understand; reading raises :class:`UnknownLayout`."""

    def __init__(self, class_name: str):
        self.class_name = class_name
        self.name = f"unknown ({class_name})"

    def read(self, inp):
        raise UnknownLayout(self.class_name)


def min_width(dec: Decoder | None) -> int:
    """The fewest bytes a value of ``dec`` takes: its fixed length, else 1 (every variable-length
    encoding here starts with at least a length, a flag or a tag byte)."""
    if dec is None:
        return 0
    return dec.fixed_length if dec.fixed_length >= 0 else 1


def iter_decoders(dec: Decoder | None):
    """``dec`` and every decoder nested in it (list elements, map keys and values, fields...)."""
    if dec is None:
        return
    yield dec
    for attr in ("elem", "key", "value", "inner", "namespace", "left", "right"):
        child = getattr(dec, attr, None)
        if isinstance(child, Decoder):
            yield from iter_decoders(child)
    for f in getattr(dec, "fields", None) or ():
        child = f[1] if isinstance(f, tuple) else f
        if isinstance(child, Decoder):
            yield from iter_decoders(child)


def _short(class_name: str) -> str:
    return class_name.rsplit(".", 1)[-1]


# --- the registration hook for value decoders living in other modules -------------------------------

@dataclass(frozen=True)
class SnapshotContext:
    """What a registered factory is told about the snapshot it reads.

    ``class_name``: the full serializer-snapshot class name as written (nested
    classes with ``$``); ``version``: the snapshot's own version int;
    ``options``: what the user passed to ``explorer.open`` for decoding (e.g.
    ``{"jars": [...], "type_hints": {...}}``), empty when nothing was passed.
    """

    class_name: str
    version: int
    options: Mapping[str, Any]

    def read_nested(self, inp: DataInput) -> list[Decoder]:
        """The nested snapshots of a composite snapshot (magic, version, n, n snapshots), same options."""
        return read_nested_snapshots(inp, self.options)

    def read_snapshot(self, inp: DataInput) -> Decoder:
        """One nested ``utf class, int version, content`` snapshot, same options."""
        return read_versioned_snapshot(inp, self.options)


#: ``factory(inp, ctx) -> Decoder``: ``inp`` is positioned right after the snapshot's class name and
#: version; the factory must read exactly the snapshot's content (leaving ``inp`` after it) and return a
#: :class:`Decoder` whose ``read`` consumes exactly one value as the serializer wrote it (so values that
#: are not length-prefixed, as on heap checkpoints, can be skipped). A decoder that cannot decode a
#: particular value raises :class:`UnknownLayout` (the reader keeps that value's bytes, where it can
#: delimit them, with a note). If the factory cannot parse the snapshot content itself it raises
#: :class:`UnknownSnapshot` (``UnknownSnapshot(ctx.class_name, inp.pos)``).
SnapshotFactory = Callable[[DataInput, SnapshotContext], "Decoder"]

SNAPSHOT_DECODERS: dict[str, SnapshotFactory] = {}


def register_snapshot_decoder(class_name: str, factory: SnapshotFactory) -> None:
    """Register ``factory`` for serializer snapshots of ``class_name`` (full name, ``$`` for nested classes).

    Registered factories win over the built-in ones, so a module can also take over a built-in type.
    Registration happens at import: a decoder module registers itself at its top level and is imported
    by ``explorer/readers/flink/__init__.py`` (see ``VALUE_DECODER_MODULES`` there).
    """
    SNAPSHOT_DECODERS[class_name] = factory


def read_top_level_snapshot(inp: DataInput, options: Mapping[str, Any] | None = None) -> Decoder:
    """A serializer snapshot as written in state meta info (with its proxy version)."""
    inp.read_int()  # TypeSerializerSnapshotSerializationProxy version
    return read_versioned_snapshot(inp, options)


def read_versioned_snapshot(inp: DataInput, options: Mapping[str, Any] | None = None) -> Decoder:
    cls = inp.read_utf()
    version = inp.read_int()
    return _read_content(inp, cls, version, options or {})


def read_nested_snapshots(inp: DataInput, options: Mapping[str, Any] | None = None) -> list[Decoder]:
    """``int NESTED_MAGIC``, ``int version``, ``int n``, then ``n`` versioned snapshots."""
    magic = inp.read_int()
    if magic != NESTED_MAGIC:
        raise FlinkFormatError(f"nested serializer snapshots: found magic {magic:#x}, expected {NESTED_MAGIC:#x}")
    inp.read_int()  # delegate version
    return [read_versioned_snapshot(inp, options) for _ in range(inp.read_int())]


def read_composite_header(inp: DataInput) -> int:
    """``int COMPOSITE_MAGIC``, ``int outer version``; returns the outer version."""
    magic = inp.read_int()
    if magic != COMPOSITE_MAGIC:
        raise FlinkFormatError(f"composite serializer snapshot: found magic {magic:#x}, expected {COMPOSITE_MAGIC:#x}")
    return inp.read_int()  # outer version


def _read_content(inp: DataInput, cls: str, version: int, options: Mapping[str, Any]) -> Decoder:
    factory = SNAPSHOT_DECODERS.get(cls)
    if factory is not None:
        return factory(inp, SnapshotContext(cls, version, options))
    _read_nested = lambda i: read_nested_snapshots(i, options)  # noqa: E731
    _composite = read_composite_header
    short = _short(cls)
    base = short.split("$", 1)[0]
    if "$" in short and base in PRIMITIVES and short.endswith("Snapshot"):
        return PRIMITIVES[base]
    if short in ("TimeWindow$Serializer$TimeWindowSerializerSnapshot",):
        return TimeWindowDecoder()
    if short == "ListSerializerSnapshot":
        _composite(inp)
        (elem,) = _read_nested(inp)
        return ListDecoder(elem)
    if short == "MapSerializerSnapshot":
        _composite(inp)
        magic = inp.read_int()
        if magic != NESTED_MAGIC:
            raise FlinkFormatError(f"nested serializer snapshots: found magic {magic:#x}, expected {NESTED_MAGIC:#x}")
        inp.read_int()  # delegate version
        n = inp.read_int()
        if n != 2:
            raise FlinkFormatError(f"map serializer snapshot: found {n} nested serializers, expected 2 (key, value)")
        try:
            k = read_versioned_snapshot(inp, options)
        except UnknownSnapshot as exc:
            raise UnknownSnapshot(exc.class_name, exc.pos, map_keys=True) from exc
        try:
            v = read_versioned_snapshot(inp, options)
        except UnknownSnapshot as exc:  # the keys still decode (a RocksDB map entry's user key is in its own bytes)
            raise UnknownSnapshot(exc.class_name, exc.pos, MapDecoder(k, RawDecoder(exc.class_name))) from exc
        return MapDecoder(k, v)
    if short == "TtlStateFactory$TtlSerializerSnapshot":
        _composite(inp)
        nested = _read_nested(inp)
        return TtlDecoder(nested[-1])
    if short == "TimerSerializerSnapshot":
        _composite(inp)
        k, ns = _read_nested(inp)
        return TimerDecoder(k, ns)
    if short == "TupleSerializerSnapshot":
        _composite(inp)
        tuple_cls = inp.read_utf()
        return TupleDecoder(tuple_cls, _read_nested(inp))
    if short == "NullableSerializer$NullableSerializerSnapshot":
        outer = _composite(inp)
        if outer >= 1:
            inp.read_int()  # null padding length
        (inner,) = _read_nested(inp)
        return NullableDecoder(inner)
    if short == "PojoSerializerSnapshot" and version >= 2:
        return _read_pojo(inp, options)
    if short == "ArrayDataSerializer$ArrayDataSerializerSnapshot":
        # the element's LogicalType, then its TypeSerializer, both Java-serialized (parsed as data)
        elem = sql_field_type(parse_java_object(inp))
        parse_java_object(inp)
        return ArrayDataDecoder(elem)
    if short == "RowDataSerializer$RowDataSerializerSnapshot":
        n = inp.read_int()
        types, precisions = [], []
        for _ in range(n):
            obj = parse_java_object(inp)
            types.append(sql_field_type(obj))
            p = obj.get("precision") if isinstance(obj, dict) else None
            precisions.append(p if isinstance(p, int) else None)
        _read_nested(inp)
        return RowDataDecoder(types, precisions)
    raise UnknownSnapshot(cls, inp.pos)


def _read_pojo(inp: DataInput, options: Mapping[str, Any]) -> Decoder:
    cls = inp.read_utf()
    fields: list[tuple[str, Decoder | None]] = []
    for map_index in range(3):
        header = inp.read_long()
        if header != POJO_MAP_HEADER:
            raise FlinkFormatError(f"POJO snapshot of {cls}: found map header {header:#x}, expected {POJO_MAP_HEADER:#x}")
        for _ in range(inp.read_int()):
            name = inp.read_utf()
            for part in range(2):  # the field (or class), then its serializer snapshot
                if not inp.read_bool():
                    if part == 1 and map_index == 0:
                        fields.append((name, None))
                    continue
                frame = inp.sub(inp.read_int())
                if part == 1 and map_index == 0:
                    try:
                        fields.append((name, read_versioned_snapshot(frame, options)))
                    except UnknownSnapshot:
                        fields.append((name, None))
    return PojoDecoder(cls, fields)
