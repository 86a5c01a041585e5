"""Values Flink handed to Kryo (``KryoSerializer``), decoded without running any code.

Flink serializes a type it has no serializer of its own for ("GenericType")
with Kryo: Kryo 2.24 in Flink 1.x, Kryo 5.6 in Flink 2.x. Kryo writes no
schema, so the class layouts come from the job's jar (``explorer.open(path,
jars=["job.jar"])``, class files parsed as data by :mod:`.classfile`) or from
a user hint (``type_hints={"pkg.Cls": {"field": "java type"}}``).

What the state's serializer snapshot (``KryoSerializerSnapshot``, version 2)
holds::

    utf   the state's type class name
    optional map  registrations: per entry a class name, then framed (bool present, int length, bytes)
                  the class (utf) and the registration (utf class, int kind: 0 default serializer,
                  1 serializer class (utf), 2 serializer instance (Java-serialized))
    optional map  default serializers (instances), optional map default serializer classes

An optional map is ``long 0x4F2C69A3D70``, ``int size``, entries. Flink
registers the type class and the user's registrations in that order starting
at id 85 (ids 73..84 are Flink's fixed registrations of chill's Java
serializers, 0..8 Kryo's primitives and ``String``; 9 is ``void`` in Kryo 2).

The value itself is ``kryo.writeClassAndObject`` with references on:

* class: ``varint id + 2`` for a registered class, ``0`` for null, ``1`` then
  ``varint nameId`` and (the first time in this value) the class name as a
  Kryo string for an unregistered class;
* reference marker before an object whose class uses references (not the boxed
  primitives; in Kryo 5 not enums either): ``1`` a new object, ``0`` null
  (where null is allowed), ``n + 2`` the n-th object read before;
* Kryo strings: an ASCII run whose last byte has bit 7 set, or (bit 7 of the
  first byte set) a length ``chars + 1`` in 6 + 7k bits (``0`` null, ``1``
  empty) then each UTF-16 unit as 1 to 3 UTF-8-like bytes;
* ``int``/``long``: variable-length zig-zag; ``float``/``double``/``short``/
  ``char``: fixed width, big-endian in Kryo 2, little-endian in Kryo 5;
* collections: Kryo 2 ``varint n``; Kryo 5 ``n + 1`` (a flag bit in bit 7 of the
  first byte says "elements may be null" when the element type is known,
  "all elements have one class" when it is not; then that class once);
  elements of a known final type (from the field's generic argument) without
  their class, otherwise each with its class. Maps alike, key then value;
* ``FieldSerializer``: every non-static, non-transient field of the class and
  its superclasses, sorted by name; primitives inline, a field of a final type
  as an object that may be null, any other with its class first;
* ``Optional``: its value with its class (Kryo 5's serializer and Kryo 2's
  ``FieldSerializer`` over its one field write the same bytes); enums:
  ``varint ordinal + 1``.
"""

from __future__ import annotations

import datetime as dt
import re
import struct
import uuid
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Mapping

import pandas as pd

from .classfile import ClassLayout, FieldInfo, JarClasses, JType, parse_type_descriptor
from .datainput import DataInput
from .serializers import (
    POJO_MAP_HEADER,
    Decoder,
    SnapshotContext,
    UnknownLayout,
    UnknownSnapshot,
    register_snapshot_decoder,
)

SNAPSHOT_CLASS = "org.apache.flink.api.java.typeutils.runtime.kryo.KryoSerializerSnapshot"
FIRST_USER_ID = 85
MAX_DEPTH = 200  # nested objects per value (a cyclic or hostile value stops here, not at Python's stack)

_KRYO_DEFAULT_IDS = ["java.lang.Integer", "java.lang.String", "java.lang.Float", "java.lang.Boolean", "java.lang.Byte",
                     "java.lang.Character", "java.lang.Short", "java.lang.Long", "java.lang.Double"]
_FLINK_FIXED_IDS = ["java.util.Arrays$ArrayList", "java.util.BitSet", "java.util.PriorityQueue", "java.util.regex.Pattern",
                    "java.sql.Date", "java.sql.Time", "java.sql.Timestamp", "java.net.URI", "java.net.InetSocketAddress",
                    "java.util.UUID", "java.util.Locale", "java.text.SimpleDateFormat"]
_PRIMITIVE_BOX = {"int": "java.lang.Integer", "long": "java.lang.Long", "boolean": "java.lang.Boolean",
                  "byte": "java.lang.Byte", "short": "java.lang.Short", "char": "java.lang.Character",
                  "float": "java.lang.Float", "double": "java.lang.Double"}
_WRAPPERS = frozenset(_PRIMITIVE_BOX.values())
#: JDK classes that are final (Kryo then writes a field or generic element of that type without its class)
_JDK_FINAL = _WRAPPERS | {"java.lang.String", "java.util.Optional", "java.util.UUID", "java.time.Instant",
                          "java.time.LocalDate", "java.time.LocalDateTime", "java.time.LocalTime", "java.time.Duration"}
#: Kryo 2 has no java.time serializers: its FieldSerializer writes these JDK classes' private fields
_JDK_FIELDS_KRYO2 = {
    "java.time.LocalDate": {"year": "int", "month": "short", "day": "short"},
    "java.time.LocalTime": {"hour": "byte", "minute": "byte", "second": "byte", "nano": "int"},
    "java.time.LocalDateTime": {"date": "java.time.LocalDate", "time": "java.time.LocalTime"},
    "java.time.Instant": {"seconds": "long", "nanos": "int"},
    "java.time.Duration": {"seconds": "long", "nanos": "int"},
}
_PRIMITIVE_ARRAYS = {"int[]": "int", "long[]": "long", "short[]": "short", "char[]": "char", "float[]": "float",
                     "double[]": "double", "boolean[]": "boolean"}
_EPOCH = pd.Timestamp(0, tz="UTC")
_HIGH_BIT = re.compile(rb"[\x80-\xff]")
_LISTS = {"java.util.ArrayList", "java.util.LinkedList", "java.util.Arrays$ArrayList", "java.util.Vector",
          "java.util.concurrent.CopyOnWriteArrayList", "java.util.ArrayDeque"}
_SETS = {"java.util.HashSet", "java.util.LinkedHashSet"}
_SORTED_SETS = {"java.util.TreeSet"}
_MAPS = {"java.util.HashMap", "java.util.LinkedHashMap", "java.util.concurrent.ConcurrentHashMap", "java.util.Hashtable"}
_SORTED_MAPS = {"java.util.TreeMap"}
_SHORT_NAMES = {"String": "java.lang.String", "Integer": "java.lang.Integer", "Long": "java.lang.Long",
                "Boolean": "java.lang.Boolean", "Double": "java.lang.Double", "Float": "java.lang.Float",
                "Short": "java.lang.Short", "Byte": "java.lang.Byte", "Character": "java.lang.Character",
                "ArrayList": "java.util.ArrayList", "List": "java.util.List", "HashMap": "java.util.HashMap",
                "Map": "java.util.Map", "HashSet": "java.util.HashSet", "Set": "java.util.Set",
                "LinkedList": "java.util.LinkedList", "TreeMap": "java.util.TreeMap", "Optional": "java.util.Optional",
                "Object": "java.lang.Object"}


def open_hint(jars: Any) -> str:
    return 'explorer.open(path, jars=["job.jar"])' if not jars else "a jar that holds the class (jars=[...])"


@dataclass
class KryoConfig:
    """What a ``KryoSerializerSnapshot`` says: the type and the classes registered with ids."""

    type_name: str
    registrations: list[tuple[str, bool]]  # (class name, registered with a serializer of the user's)
    custom_defaults: set[str] = field(default_factory=set)

    def ids(self, kryo_version: int) -> dict[int, tuple[str, bool]]:
        table = {i: (c, False) for i, c in enumerate(_KRYO_DEFAULT_IDS)}
        if kryo_version == 2:
            table[9] = ("void", False)
        table.update({73 + i: (c, False) for i, c in enumerate(_FLINK_FIXED_IDS)})
        table.update({FIRST_USER_ID + i: r for i, r in enumerate(self.registrations)})
        return table


def _optional_map(inp: DataInput, what: str) -> list[tuple[str, bytes | None, bytes | None]]:
    header = inp.read_long()
    if header != POJO_MAP_HEADER:
        raise UnknownSnapshot(SNAPSHOT_CLASS, inp.pos)
    out = []
    for _ in range(inp.read_count("POJO fields", 4)):  # a name's length and two flags at least
        name = inp.read_utf()
        parts = []
        for _part in range(2):
            parts.append(inp.read_bytes(inp.read_int()) if inp.read_bool() else None)
        out.append((name, parts[0], parts[1]))
    return out


def read_kryo_snapshot(inp: DataInput, version: int) -> KryoConfig:
    if version != 2:
        raise UnknownSnapshot(SNAPSHOT_CLASS, inp.pos)
    type_name = inp.read_utf()
    regs = []
    for name, _cls, reg in _optional_map(inp, "registrations"):
        custom = False
        if reg is not None:
            r = DataInput(reg)
            r.read_utf()
            kind = r.read_int() if r.remaining() >= 4 else 0
            custom = kind != 0
        regs.append((name, custom))
    defaults = {n for n, _c, _s in _optional_map(inp, "default serializers")}
    defaults |= {n for n, _c, _s in _optional_map(inp, "default serializer classes")}
    return KryoConfig(type_name, regs, defaults)


def _parse_hint_type(text: str) -> JType:
    """``"java.util.ArrayList<String>"``, ``"int"``, ``"Map<String, Long>"`` into a :class:`JType`."""
    text = text.strip()
    if "<" in text:
        base, rest = text.split("<", 1)
        inner = rest.rsplit(">", 1)[0]
        args, depth, cur = [], 0, ""
        for ch in inner:
            if ch == "," and depth == 0:
                args.append(cur)
                cur = ""
                continue
            depth += ch == "<"
            depth -= ch == ">"
            cur += ch
        args.append(cur)
        return JType(_SHORT_NAMES.get(base.strip(), base.strip()), tuple(_parse_hint_type(a) for a in args))
    return JType(_SHORT_NAMES.get(text, text))


class Layouts:
    """Class layouts from type hints (first) and jars."""

    def __init__(self, jars: Any = None, type_hints: Mapping[str, Any] | None = None) -> None:
        self.jars = list(jars or [])
        self.jar = JarClasses(self.jars)
        self.hints = dict(type_hints or {})

    def layout(self, name: str) -> ClassLayout | None:
        hint = self.hints.get(name)
        if isinstance(hint, Mapping):
            fields = [FieldInfo(f, _parse_hint_type(t) if isinstance(t, str) else t, 0) for f, t in hint.items()]
            return ClassLayout(name, None, 0, fields)
        if isinstance(hint, (list, tuple)):  # enum constants
            return ClassLayout(name, "java.lang.Enum", 0x4010, [FieldInfo(c, JType(name), 0x4019) for c in hint])
        return self.jar.layout(name) if self.jars else None


class _Value:
    """One Kryo value being read: the class-name and reference tables live for one top-level value."""

    __slots__ = ("inp", "dec", "names", "refs", "v5", "depth")

    def __init__(self, inp: DataInput, dec: "KryoDecoder") -> None:
        self.inp, self.dec, self.names, self.refs, self.v5 = inp, dec, {}, [], dec.kryo_version >= 5
        self.depth = 0

    # --- primitives
    def varint(self, positive: bool = True) -> int:
        r = self.inp.read_varint()
        if r >= 1 << 35:
            raise UnknownLayout("Kryo variable-length int longer than 5 bytes")
        r &= 0xFFFFFFFF
        if positive:
            return r - (1 << 32) if r >= 1 << 31 else r
        return (r >> 1) ^ -(r & 1)

    def varlong(self, positive: bool = True) -> int:
        inp = self.inp
        result = shift = 0
        for i in range(9):
            b = inp.read_ubyte()
            if i == 8:
                result |= b << 56
                break
            result |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                break
        result &= (1 << 64) - 1
        if positive:
            return result - (1 << 64) if result >= 1 << 63 else result
        return (result >> 1) ^ -(result & 1)

    def varint_flag(self) -> tuple[bool, int]:
        b = self.inp.read_ubyte()
        flag = bool(b & 0x80)
        result = b & 0x3F
        if b & 0x40:
            shift = 6
            for _ in range(4):
                b = self.inp.read_ubyte()
                result |= (b & 0x7F) << shift
                shift += 7
                if b < 0x80:
                    break
        return flag, result

    def fixed(self, fmt: str, n: int) -> Any:
        return struct.unpack(("<" if self.v5 else ">") + fmt, self.inp.read_bytes(n))[0]

    def string(self) -> str | None:
        inp = self.inp
        if inp.pos >= inp.end:
            raise EOFError(f"Kryo string at offset {inp.pos}: the value ends")
        first = inp.buf[inp.pos]
        if not first & 0x80:  # an ASCII run, last byte marked
            start = inp.pos
            m = _HIGH_BIT.search(inp.buf, start, inp.end)
            if m is None:
                raise UnknownLayout("Kryo ASCII string runs past the value")
            p = m.start()
            inp.pos = p + 1
            return bytes(inp.buf[start:p]).decode("ascii") + chr(inp.buf[p] & 0x7F)
        _flag, n = self.varint_flag()
        if n == 0:
            return None
        if n == 1:
            return ""
        units = []
        self.inp.check_count(n - 1, "string chars")
        for _ in range(n - 1):
            b = inp.read_ubyte()
            top = b >> 4
            if top < 8:
                units.append(b)
            elif top in (12, 13):
                units.append((b & 0x1F) << 6 | inp.read_ubyte() & 0x3F)
            elif top == 14:
                b2, b3 = inp.read_ubyte(), inp.read_ubyte()
                units.append((b & 0x0F) << 12 | (b2 & 0x3F) << 6 | b3 & 0x3F)
            else:
                raise UnknownLayout(f"Kryo string: byte {b:#x} starts no character")
        return struct.pack(f"<{len(units)}H", *units).decode("utf-16-le", "replace")

    # --- classes and references
    def read_class(self) -> str | None:
        cid = self.varint()
        if cid == 0:
            return None
        if cid == 1:
            name_id = self.varint()
            if name_id not in self.names:
                self.names[name_id] = self.string()
            return self.names[name_id]
        reg = self.dec.ids.get(cid - 2)
        if reg is None:
            raise UnknownLayout(f"Kryo class id {cid - 2} is not among the registrations in the serializer snapshot")
        name, custom = reg
        if custom:
            raise UnknownLayout(f"{name} is registered with a Kryo serializer of the job's own")
        return name

    def uses_refs(self, cls: str) -> bool:
        if cls in _WRAPPERS or cls in _PRIMITIVE_BOX:
            return False
        if self.v5 and self.dec.is_enum(cls):
            return False
        return True

    def obj(self, cls: str, jt: JType | None, may_be_null: bool) -> Any:
        if not self.uses_refs(cls):
            if may_be_null and self.varint() == 0:
                return None
            return self.body(cls, jt)
        rid = self.varint()
        if rid == 0 and may_be_null:
            return None
        if rid != 1:
            if not 0 <= rid - 2 < len(self.refs):
                raise UnknownLayout(f"Kryo reference {rid - 2} points to no object read before")
            return self.refs[rid - 2]
        slot = len(self.refs)
        self.refs.append(None)
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise UnknownLayout(f"Kryo value nests deeper than {MAX_DEPTH} objects")
        v = self.body(cls, jt)
        self.depth -= 1
        self.refs[slot] = v
        return v

    def class_and_object(self) -> Any:
        cls = self.read_class()
        return None if cls is None else self.obj(cls, None, False)

    def typed(self, jt: JType | None) -> Any:
        """A value whose declared type is ``jt``: without its class if final, else with it."""
        if jt is not None and self.dec.is_final(jt.name):
            return self.obj(_PRIMITIVE_BOX.get(jt.name, jt.name), jt, True)
        cls = self.read_class()
        return None if cls is None else self.obj(cls, jt, False)

    # --- bodies
    def body(self, cls: str, jt: JType | None) -> Any:
        if cls in self.dec.config.custom_defaults:
            raise UnknownLayout(f"{cls} has a default Kryo serializer of the job's own")
        if cls == "java.lang.String":
            return self.string()
        if cls in ("java.lang.Integer", "int"):
            return self.varint(False)
        if cls in ("java.lang.Long", "long"):
            return self.varlong(False)
        if cls in ("java.lang.Boolean", "boolean"):
            return self.inp.read_ubyte() != 0
        if cls in ("java.lang.Byte", "byte"):
            return self.inp.read_byte()
        if cls in ("java.lang.Short", "short"):
            return self.fixed("h", 2)
        if cls in ("java.lang.Character", "char"):
            return chr(self.fixed("H", 2))
        if cls in ("java.lang.Float", "float"):
            return self.fixed("f", 4)
        if cls in ("java.lang.Double", "double"):
            return self.fixed("d", 8)
        if cls == "java.util.Optional":
            v = self.class_and_object()
            return {"present": v is not None, "value": v}
        if cls in _LISTS or cls in _SETS or cls in _SORTED_SETS:
            vals = self.collection(cls, jt)
            return vals if vals is None or cls not in _SETS | _SORTED_SETS else _as_set(vals)
        if cls in _MAPS or cls in _SORTED_MAPS:
            return self.map(cls, jt)
        if cls == "byte[]":
            n = self.varint()
            return None if n == 0 else self.inp.read_bytes(n - 1)
        if cls in _PRIMITIVE_ARRAYS:
            n = self.varint()
            return None if n == 0 else [self.body(_PRIMITIVE_ARRAYS[cls], None)
                                        for _ in range(self.inp.check_count(n - 1, f"{cls} elements"))]
        if cls == "java.lang.String[]":
            n = self.varint()
            return None if n == 0 else [self.obj("java.lang.String", None, True)
                                        for _ in range(self.inp.check_count(n - 1, "String[] elements"))]
        if cls.endswith("[]"):  # ObjectArraySerializer: elements of a final component type without their class
            n = self.varint()
            comp = cls[:-2]
            if n == 0:
                return None
            self.inp.check_count(n - 1, f"{cls} elements")
            if self.dec.is_final(comp):
                return [self.obj(comp, None, True) for _ in range(n - 1)]
            return [self.class_and_object() for _ in range(n - 1)]
        if cls == "java.util.UUID" and self.v5:
            hi, lo = self.fixed("q", 8), self.fixed("q", 8)
            return str(uuid.UUID(int=((hi & (2**64 - 1)) << 64) | (lo & (2**64 - 1))))
        if cls in ("java.util.Date", "java.sql.Date", "java.sql.Time"):
            return _EPOCH + pd.Timedelta(milliseconds=self.varlong())
        if cls == "java.math.BigInteger":
            n = self.varint()
            return None if n == 0 else int.from_bytes(self.inp.read_bytes(n - 1), "big", signed=True)
        if cls == "java.math.BigDecimal":
            n = self.varint()
            if n == 0:
                return None
            unscaled = int.from_bytes(self.inp.read_bytes(n - 1), "big", signed=True)
            return Decimal(unscaled).scaleb(-self.varint(False))
        if cls.startswith("java.time."):
            return self.java_time(cls)
        layout = self.dec.layout(cls)
        if layout is None:
            raise UnknownLayout(f"no class layout for {cls}; pass {open_hint(self.dec.layouts.jars)} or "
                                f"type_hints={{{cls!r}: {{field: type}}}}")
        if layout.is_enum or layout.super_name == "java.lang.Enum":
            n = self.varint()
            if n == 0:
                return None
            names = layout.enum_constants
            if not 0 < n <= len(names):
                raise UnknownLayout(f"enum {cls}: ordinal {n - 1}, the class has {len(names)} constants")
            return names[n - 1]
        return self.fields(cls, layout)

    def java_time(self, cls: str) -> Any:
        if not self.v5:  # FieldSerializer over the JDK class's fields
            return _time_value(cls, self._kryo2_fields(cls))
        if cls == "java.time.LocalDate":
            return _time_value(cls, {"year": self.varint(), "month": self.inp.read_byte(), "day": self.inp.read_byte()})
        if cls == "java.time.LocalTime":
            return _time_value(cls, self._local_time5())
        if cls == "java.time.LocalDateTime":
            d = {"year": self.varint(), "month": self.inp.read_byte(), "day": self.inp.read_byte()}
            return _time_value(cls, {"date": d, "time": self._local_time5()})
        if cls == "java.time.Instant":
            return _time_value(cls, {"seconds": self.varlong(), "nanos": self.varint()})
        if cls == "java.time.Duration":
            return _time_value(cls, {"seconds": self.fixed("q", 8), "nanos": self.varint()})
        raise UnknownLayout(f"{cls} (Kryo 5's time serializers) is not one State Explorer reads")

    def _kryo2_fields(self, cls: str) -> dict | None:
        """The private fields of a JDK time class as Kryo 2's FieldSerializer wrote them (sorted by name);
        nested ones (LocalDateTime's date and time: final classes) after their reference marker."""
        spec = _JDK_FIELDS_KRYO2.get(cls)
        if spec is None:
            raise UnknownLayout(f"{cls} written by Kryo 2's FieldSerializer is not one State Explorer reads")
        out: dict[str, Any] = {}
        for name, t in sorted(spec.items()):
            if t in _PRIMITIVE_BOX:
                out[name] = self.body(t, None)
                continue
            rid = self.varint()
            if rid == 0:
                out[name] = None
            elif rid == 1:
                self.refs.append(None)
                out[name] = self._kryo2_fields(t)
            else:
                raise UnknownLayout(f"{cls}.{name} refers back to an earlier object, which State Explorer does not follow here")
        return out

    def _local_time5(self) -> dict:
        inp = self.inp
        h = inp.read_byte()
        if h < 0:
            return {"hour": ~h, "minute": 0, "second": 0, "nano": 0}
        m = inp.read_byte()
        if m < 0:
            return {"hour": h, "minute": ~m, "second": 0, "nano": 0}
        sec = inp.read_byte()
        if sec < 0:
            return {"hour": h, "minute": m, "second": ~sec, "nano": 0}
        return {"hour": h, "minute": m, "second": sec, "nano": self.varint()}

    def fields(self, cls: str, layout: ClassLayout) -> dict:
        out: dict[str, Any] = {}
        for f in self.dec.field_order(cls, layout):
            t = f.type
            if t.is_primitive:
                out[f.name] = self.body(t.name, t)
            else:
                out[f.name] = self.typed(t)
        return out

    def _elem_type(self, jt: JType | None, i: int) -> JType | None:
        if jt is None or len(jt.args) <= i:
            return None
        a = jt.args[i]
        return a if a is not None and self.dec.is_final(a.name) else None

    def collection(self, cls: str, jt: JType | None) -> list | None:
        elem = self._elem_type(jt, 0)
        if self.v5:
            if elem is not None:
                can_null, n1 = self.varint_flag()
            else:
                same, n1 = self.varint_flag()
            if n1 == 0:
                return None
            n = self.inp.check_count(n1 - 1, f"{cls} elements", 0)  # all null: no bytes each
            if cls in _SORTED_SETS:
                self.class_and_object()  # the comparator
            if n == 0:
                return []
            if elem is None and same:
                ecls = self.read_class()
                if ecls is None:
                    return [None] * n
                can_null = self.inp.read_ubyte() != 0
                return [self.obj(ecls, None, can_null) for _ in range(n)]
            if elem is not None:
                ecls = _PRIMITIVE_BOX.get(elem.name, elem.name)
                return [self.obj(ecls, elem, can_null) for _ in range(n)]
            return [self.class_and_object() for _ in range(n)]
        if cls in _SORTED_SETS:
            self.class_and_object()
        n = self.inp.check_count(self.varint(), f"{cls} elements")  # a null flag or class id each at least
        if elem is not None:
            ecls = _PRIMITIVE_BOX.get(elem.name, elem.name)
            return [self.obj(ecls, elem, True) for _ in range(n)]
        return [self.class_and_object() for _ in range(n)]

    def map(self, cls: str, jt: JType | None) -> dict | None:
        kt, vt = self._elem_type(jt, 0), self._elem_type(jt, 1)
        if self.v5:
            n1 = self.varint()
            if n1 == 0:
                return None
            n = n1 - 1
            if cls in _SORTED_MAPS:
                self.class_and_object()
        else:
            if cls in _SORTED_MAPS:
                self.class_and_object()
            n = self.varint()
        self.inp.check_count(n, f"{cls} entries")
        out = {}
        for _ in range(n):
            k = self.obj(_PRIMITIVE_BOX.get(kt.name, kt.name), kt, True) if kt else self.class_and_object()
            v = self.obj(_PRIMITIVE_BOX.get(vt.name, vt.name), vt, True) if vt else self.class_and_object()
            out[_hashable(k)] = v
        return out


def _time_value(cls: str, f: dict) -> Any:
    """java.time values as the rest of the reader gives them (``datetime.date``/``time``, ``pd.Timestamp``)."""
    if cls == "java.time.LocalDate":
        return dt.date(f["year"], f["month"], f["day"])
    if cls == "java.time.LocalTime":
        if f["nano"] % 1000:  # finer than datetime.time holds: the time since midnight, as valuetypes does
            return pd.Timedelta(hours=f["hour"], minutes=f["minute"], seconds=f["second"]) \
                + pd.Timedelta(nanoseconds=f["nano"])
        return dt.time(f["hour"], f["minute"], f["second"], f["nano"] // 1000)
    if cls == "java.time.LocalDateTime":
        d, t = f["date"], f["time"]
        if d is None or t is None:
            return None
        return pd.Timestamp(dt.datetime(d["year"], d["month"], d["day"], t["hour"], t["minute"], t["second"])) \
            + pd.Timedelta(nanoseconds=t["nano"])
    if cls == "java.time.Instant":
        return _EPOCH + pd.Timedelta(seconds=f["seconds"]) + pd.Timedelta(nanoseconds=f["nanos"])
    if cls == "java.time.Duration":
        return pd.Timedelta(seconds=f["seconds"]) + pd.Timedelta(nanoseconds=f["nanos"])
    raise UnknownLayout(f"{cls} is not a java.time class State Explorer reads")


def _hashable(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(_hashable(x) for x in v)
    if isinstance(v, dict):
        return tuple((k, _hashable(x)) for k, x in v.items())
    return v


def _as_set(vals: list) -> set | list:
    try:
        return set(vals)
    except TypeError:
        return vals


class KryoDecoder(Decoder):
    """Reads one ``writeClassAndObject`` value of a Flink ``KryoSerializer``."""

    def __init__(self, config: KryoConfig, layouts: Layouts, kryo_version: int) -> None:
        self.config, self.layouts, self.kryo_version = config, layouts, kryo_version
        self.ids = config.ids(kryo_version)
        self.name = f"Kryo {kryo_version} ({config.type_name})"
        self._orders: dict[str, list[FieldInfo]] = {}
        self._layouts: dict[str, ClassLayout | None] = {}
        self._enum: dict[str, bool] = {}
        self._final: dict[str, bool] = {}

    def layout(self, cls: str) -> ClassLayout | None:
        try:
            return self._layouts[cls]
        except KeyError:
            lay = self._layouts[cls] = self.layouts.layout(cls)
            return lay

    def is_enum(self, cls: str) -> bool:
        try:
            return self._enum[cls]
        except KeyError:
            pass
        lay = None if cls.startswith("java.") else self.layout(cls)
        r = self._enum[cls] = lay is not None and (lay.is_enum or lay.super_name == "java.lang.Enum")
        return r

    def is_final(self, cls: str) -> bool:
        try:
            return self._final[cls]
        except KeyError:
            pass
        if cls in _PRIMITIVE_BOX or cls in _JDK_FINAL:
            r = True
        elif cls.endswith("[]"):
            r = self.is_final(cls[:-2])
        elif cls.startswith("java."):
            r = False
        else:
            lay = self.layout(cls)
            r = lay is not None and lay.is_final
        self._final[cls] = r
        return r

    def field_order(self, cls: str, layout: ClassLayout) -> list[FieldInfo]:
        if cls not in self._orders:
            fields: list[FieldInfo] = []
            lay: ClassLayout | None = layout
            seen = set()
            while lay is not None and lay.name not in seen:
                seen.add(lay.name)
                fields.extend(f for f in lay.fields if f.serialized)
                sup = lay.super_name
                if not sup or sup == "java.lang.Object":
                    break
                lay = self.layout(sup)
                if lay is None:
                    raise UnknownLayout(f"no class layout for {sup}, the superclass of {cls}; pass "
                                        f"{open_hint(self.layouts.jars)}")
            # Kryo sorts by name with String.compareTo: UTF-16 code unit order
            fields.sort(key=lambda f: f.name.encode("utf-16-be"))
            self._orders[cls] = fields
        return self._orders[cls]

    def read(self, inp: DataInput) -> Any:
        return _Value(inp, self).class_and_object()

    def skip(self, inp: DataInput) -> None:
        self.read(inp)


#: the JDK list classes Kryo's CollectionSerializer writes; the boxes of Java's primitives; the boxed classes
LIST_CLASSES, PRIMITIVE_BOX, WRAPPER_CLASSES = _LISTS, _PRIMITIVE_BOX, _WRAPPERS


def read_string(inp: DataInput, dec: "KryoDecoder") -> str | None:
    """One Kryo string, as a value of ``dec`` reads it (:mod:`.kryocolumns` reads the rare ones so)."""
    return _Value(inp, dec).string()


def kryo_version_for(options: Mapping[str, Any]) -> int:
    """Kryo 5 from Flink 2.0 on (metadata version 5+), Kryo 2 before; ``kryo_version=`` wins."""
    v = options.get("kryo_version")
    if v in (2, 5):
        return int(v)
    meta = options.get("flink_metadata_version")
    return 5 if isinstance(meta, int) and meta >= 5 else 2


def _factory(inp: DataInput, ctx: SnapshotContext) -> Decoder:
    config = read_kryo_snapshot(inp, ctx.version)
    layouts = Layouts(ctx.options.get("jars"), ctx.options.get("type_hints"))
    return KryoDecoder(config, layouts, kryo_version_for(ctx.options))


register_snapshot_decoder(SNAPSHOT_CLASS, _factory)

__all__ = ["LIST_CLASSES", "PRIMITIVE_BOX", "SNAPSHOT_CLASS", "WRAPPER_CLASSES", "KryoConfig", "KryoDecoder",
           "Layouts", "kryo_version_for", "parse_type_descriptor", "read_kryo_snapshot", "read_string"]
