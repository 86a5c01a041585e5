"""Declared types of state values: Arrow schemas and a compact binary encoding.

A state descriptor declares the type of what it stores (``int``, ``str``, a
dataclass, ``list[Event]``, ``dict[str, int]``, ``tuple[str, int]`` ...).
:func:`type_info` turns that declaration into a :class:`TypeInfo` which knows

* its Arrow type (how savepoints and checkpoints store it in Parquet:
  dataclasses as structs, primitives as primitives, lists as lists);
* a JSON description (written into snapshot metadata, read back with
  :func:`type_from_description` without importing any user code);
* a binary encoding (the RocksDB backend stores values as these bytes);
* conversion to and from plain Arrow-friendly Python values.

Nothing here pickles, and nothing read back is ever executed: a dataclass
named in a snapshot is rebuilt as a plain ``dict`` unless the job restoring
it supplies the class.

Binary encoding (all integers big-endian):

==========  ==========================================================
type        bytes
==========  ==========================================================
int         8-byte signed
float       8-byte IEEE double
bool        1 byte
str         varint length, UTF-8 bytes
bytes       varint length, raw bytes
list[T]     varint count, then each element
dict[K,V]   varint count, then key, value pairs
tuple/dc    each field in declared order
Optional    1 byte null flag (0 null, 1 present), then the value
==========  ==========================================================
"""

from __future__ import annotations

import dataclasses
import inspect
import operator
import struct
import types
import typing
from itertools import repeat
from operator import is_
from typing import Any, Callable

import pyarrow as pa

from ..errors import SerializationError

__all__ = [
    "TypeInfo",
    "encode_varint",
    "decode_varint",
    "describe_type",
    "type_from_description",
    "type_info",
]

_I64 = struct.Struct(">q")
_F64 = struct.Struct(">d")


def encode_varint(n: int, out: bytearray) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def decode_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    shift = 0
    result = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


class TypeInfo:
    """A declared type. Subclasses per kind; build them with :func:`type_info`."""

    name: str = "?"
    #: the exact Python type of a valid value, when one type covers all (a fast path for checks)
    exact: type | None = None
    arrow_type: pa.DataType
    nullable: bool = False
    #: whether a valid value cannot change once made (a number, a string, a frozen dataclass of
    #: such): the same object always converts to the same Arrow value, so a writer may reuse what
    #: it converted before for the very same objects
    immutable: bool = False

    def describe(self) -> dict[str, Any]:
        raise NotImplementedError

    def check(self, value: Any, where: str) -> None:
        """Raise :class:`SerializationError` unless ``value`` fits this type."""

    def to_arrow(self, value: Any) -> Any:
        """A Python value Arrow can store under :attr:`arrow_type`."""
        return value

    def from_arrow(self, value: Any) -> Any:
        """The inverse of :meth:`to_arrow`."""
        return value

    def to_arrow_array(self, values: list[Any]) -> pa.Array:
        """``values`` (None: null) as one Arrow array of :attr:`arrow_type`: the array of
        :meth:`to_arrow` of each, built without a Python call per value where the type allows."""
        if type(self).to_arrow is TypeInfo.to_arrow:  # stored as it is
            return pa.array(values, type=self.arrow_type)
        f = self.to_arrow
        return pa.array([None if v is None else f(v) for v in values], type=self.arrow_type)

    def encode(self, value: Any, out: bytearray) -> None:
        raise NotImplementedError

    def decode(self, buf: bytes | memoryview, pos: int) -> tuple[Any, int]:
        raise NotImplementedError

    def to_bytes(self, value: Any) -> bytes:
        out = bytearray()
        self.encode(value, out)
        return bytes(out)

    def from_bytes(self, buf: bytes | memoryview) -> Any:
        value, _ = self.decode(buf, 0)
        return value

    def __repr__(self) -> str:
        return f"TypeInfo({self.name})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TypeInfo) and self.describe() == other.describe()

    def __hash__(self) -> int:
        return hash(self.name)


def _bad(where: str, expected: str, value: Any) -> SerializationError:
    return SerializationError(f"{where}: expected {expected}, found {type(value).__name__} {value!r:.80}")


class _Int(TypeInfo):
    name = "int"
    exact = int
    immutable = True
    arrow_type = pa.int64()

    def describe(self):
        return {"type": "int"}

    def check(self, value, where):
        if type(value) is not int and not (isinstance(value, int) and not isinstance(value, bool)):
            raise _bad(where, "int", value)

    def encode(self, value, out):
        out += _I64.pack(value)

    def decode(self, buf, pos):
        return _I64.unpack_from(buf, pos)[0], pos + 8


class _Float(TypeInfo):
    name = "float"
    exact = float
    immutable = True
    arrow_type = pa.float64()

    def describe(self):
        return {"type": "float"}

    def check(self, value, where):
        if not isinstance(value, (float, int)) or isinstance(value, bool):
            raise _bad(where, "float", value)

    def encode(self, value, out):
        out += _F64.pack(value)

    def decode(self, buf, pos):
        return _F64.unpack_from(buf, pos)[0], pos + 8


class _Bool(TypeInfo):
    name = "bool"
    exact = bool
    immutable = True
    arrow_type = pa.bool_()

    def describe(self):
        return {"type": "bool"}

    def check(self, value, where):
        if not isinstance(value, bool):
            raise _bad(where, "bool", value)

    def encode(self, value, out):
        out.append(1 if value else 0)

    def decode(self, buf, pos):
        return buf[pos] != 0, pos + 1


class _Str(TypeInfo):
    name = "str"
    exact = str
    immutable = True
    arrow_type = pa.string()

    def describe(self):
        return {"type": "str"}

    def check(self, value, where):
        if not isinstance(value, str):
            raise _bad(where, "str", value)

    def encode(self, value, out):
        b = value.encode("utf-8")
        n = len(b)
        if n < 0x80:
            out.append(n)
        else:
            encode_varint(n, out)
        out += b

    def decode(self, buf, pos):
        n = buf[pos]
        if n < 0x80:
            pos += 1
        else:
            n, pos = decode_varint(buf, pos)
        if buf.__class__ is memoryview:
            return str(buf[pos : pos + n], "utf-8"), pos + n
        return buf[pos : pos + n].decode("utf-8"), pos + n


class _Bytes(TypeInfo):
    name = "bytes"
    exact = bytes
    immutable = True
    arrow_type = pa.binary()

    def describe(self):
        return {"type": "bytes"}

    def check(self, value, where):
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise _bad(where, "bytes", value)

    def encode(self, value, out):
        encode_varint(len(value), out)
        out += value

    def decode(self, buf, pos):
        n, pos = decode_varint(buf, pos)
        return bytes(buf[pos : pos + n]), pos + n


class _Optional(TypeInfo):
    nullable = True

    def __init__(self, inner: TypeInfo) -> None:
        self.inner = inner
        self.immutable = inner.immutable
        self.name = f"Optional[{inner.name}]"
        self.arrow_type = inner.arrow_type

    def describe(self):
        return {"type": "optional", "of": self.inner.describe()}

    def check(self, value, where):
        if value is not None:
            self.inner.check(value, where)

    def to_arrow(self, value):
        return None if value is None else self.inner.to_arrow(value)

    def from_arrow(self, value):
        return None if value is None else self.inner.from_arrow(value)

    def encode(self, value, out):
        if value is None:
            out.append(0)
        else:
            out.append(1)
            self.inner.encode(value, out)

    def decode(self, buf, pos):
        if buf[pos] == 0:
            return None, pos + 1
        return self.inner.decode(buf, pos + 1)


class _List(TypeInfo):
    def __init__(self, element: TypeInfo) -> None:
        self.element = element
        self.name = f"list[{element.name}]"
        self.arrow_type = pa.list_(element.arrow_type)

    def describe(self):
        return {"type": "list", "of": self.element.describe()}

    def check(self, value, where):
        if not isinstance(value, list):
            raise _bad(where, "list", value)
        for v in value[:3]:
            self.element.check(v, where + "[]")

    def to_arrow(self, value):
        f = self.element.to_arrow
        return [f(v) for v in value]

    def from_arrow(self, value):
        if value is None:
            return None
        f = self.element.from_arrow
        return [f(v) for v in value]

    def encode(self, value, out):
        encode_varint(len(value), out)
        enc = self.element.encode
        for v in value:
            enc(v, out)

    def decode(self, buf, pos):
        n, pos = decode_varint(buf, pos)
        dec = self.element.decode
        items = []
        for _ in range(n):
            v, pos = dec(buf, pos)
            items.append(v)
        return items, pos


class _Dict(TypeInfo):
    def __init__(self, key: TypeInfo, value: TypeInfo) -> None:
        self.key = key
        self.value = value
        self.name = f"dict[{key.name}, {value.name}]"
        self.arrow_type = pa.map_(key.arrow_type, value.arrow_type)

    def describe(self):
        return {"type": "dict", "key": self.key.describe(), "value": self.value.describe()}

    def check(self, value, where):
        if not isinstance(value, dict):
            raise _bad(where, "dict", value)

    def to_arrow(self, value):
        fk, fv = self.key.to_arrow, self.value.to_arrow
        return [(fk(k), fv(v)) for k, v in value.items()]

    def from_arrow(self, value):
        if value is None:
            return None
        fk, fv = self.key.from_arrow, self.value.from_arrow
        return {fk(k): fv(v) for k, v in value}

    def encode(self, value, out):
        encode_varint(len(value), out)
        for k, v in value.items():
            self.key.encode(k, out)
            self.value.encode(v, out)

    def decode(self, buf, pos):
        n, pos = decode_varint(buf, pos)
        d = {}
        for _ in range(n):
            k, pos = self.key.decode(buf, pos)
            v, pos = self.value.decode(buf, pos)
            d[k] = v
        return d, pos


class _Tuple(TypeInfo):
    def __init__(self, fields: list[TypeInfo]) -> None:
        self.fields = fields
        self.immutable = all(f.immutable for f in fields)
        self.name = "tuple[" + ", ".join(f.name for f in fields) + "]"
        self.arrow_type = pa.struct([pa.field(f"f{i}", f.arrow_type, nullable=f.nullable) for i, f in enumerate(fields)])

    def describe(self):
        return {"type": "tuple", "fields": [f.describe() for f in self.fields]}

    def check(self, value, where):
        if not isinstance(value, tuple) or len(value) != len(self.fields):
            raise _bad(where, f"tuple of {len(self.fields)}", value)

    def to_arrow(self, value):
        return {f"f{i}": t.to_arrow(v) for i, (t, v) in enumerate(zip(self.fields, value))}

    def from_arrow(self, value):
        if value is None:
            return None
        return tuple(t.from_arrow(value.get(f"f{i}")) for i, t in enumerate(self.fields))

    def encode(self, value, out):
        for t, v in zip(self.fields, value):
            t.encode(v, out)

    def decode(self, buf, pos):
        vals = []
        for t in self.fields:
            v, pos = t.decode(buf, pos)
            vals.append(v)
        return tuple(vals), pos


class _Struct(TypeInfo):
    """A dataclass (or, read back without its class, a named record as a dict)."""

    def __init__(self, name: str, fields: list[tuple[str, TypeInfo, Any]], cls: type | None) -> None:
        self.struct_name = name
        self.fields = fields  # (name, type, default-or-MISSING)
        self.cls = cls
        self.exact = cls
        params = getattr(cls, "__dataclass_params__", None)  # a dataclass's own flags (frozen=True)
        self.immutable = bool(params is not None and params.frozen and all(t.immutable for _, t, _ in fields))
        self.name = name
        self.arrow_type = pa.struct([pa.field(n, t.arrow_type, nullable=t.nullable) for n, t, _ in fields])
        self._prepare()

    def describe(self):
        return {
            "type": "struct",
            "name": self.struct_name,
            "fields": [{"name": n, "type": t.describe()} for n, t, _ in self.fields],
        }

    def check(self, value, where):
        if self.cls is not None:
            if not isinstance(value, self.cls):
                raise _bad(where, self.struct_name, value)
        elif not isinstance(value, dict):
            raise _bad(where, f"{self.struct_name} (as dict)", value)

    def _get(self, value, name):
        return value[name] if isinstance(value, dict) else getattr(value, name)

    def to_arrow(self, value):
        if self._plain_arrow:  # every field a str/int/float/bool, stored as it is: one getter call
            return dict(zip(self._names, self._items(value) if isinstance(value, dict) else self._attrs(value)))
        return {n: t.to_arrow(self._get(value, n)) for n, t, _ in self.fields}

    def to_arrow_array(self, values):
        cls = self.cls
        if (self._plain_arrow and cls is not None and self.fields and values
                and all(map(is_, map(type, values), repeat(cls)))):
            # every value an instance of the class itself and every field stored as it is: one column
            # per field straight from the attributes (what to_arrow's dicts would hold, field by field)
            cols = [pa.array(list(map(operator.attrgetter(n), values)), type=t.arrow_type) for n, t, _ in self.fields]
            return pa.StructArray.from_arrays(cols, fields=list(self.arrow_type))
        return super().to_arrow_array(values)

    def from_arrow(self, value):
        if value is None:
            return None
        d = {n: t.from_arrow(value.get(n)) for n, t, _ in self.fields}
        return self.cls(**d) if self.cls is not None else d

    def _prepare(self) -> None:
        """Precompute what encode/decode need per value: one getter for all fields, a
        (kind, codec) plan whose common primitives are handled inline, and whether the
        class can be called with the decoded fields positionally."""
        names = tuple(n for n, _, _ in self.fields)
        self._names = names
        if len(names) > 1:
            attrs, items = operator.attrgetter(*names), operator.itemgetter(*names)
        elif names:
            a1, i1 = operator.attrgetter(names[0]), operator.itemgetter(names[0])
            attrs, items = (lambda v: (a1(v),)), (lambda v: (i1(v),))
        else:
            attrs = items = lambda v: ()
        self._attrs, self._items = attrs, items
        self._enc_plan = tuple((_KIND.get(type(t), _OTHER), t.encode) for _, t, _ in self.fields)
        self._dec_plan = tuple((_KIND.get(type(t), _OTHER), t.decode) for _, t, _ in self.fields)
        self._positional = self.cls is not None and _takes_fields_in_order(self.cls, names)
        self._plain_arrow = all(kind is not _OTHER for kind, _ in self._enc_plan)

    def encode(self, value, out):
        # same bytes and same errors as each field type's own encode, minus a call per primitive
        vals = self._items(value) if isinstance(value, dict) else self._attrs(value)
        for (kind, enc), v in zip(self._enc_plan, vals):
            if kind is _STR:
                b = v.encode("utf-8")
                n = len(b)
                if n < 0x80:
                    out.append(n)
                else:
                    encode_varint(n, out)
                out += b
            elif kind is _INT:
                out += _I64.pack(v)
            elif kind is _FLOAT:
                out += _F64.pack(v)
            elif kind is _BOOL:
                out.append(1 if v else 0)
            else:
                enc(v, out)

    def decode(self, buf, pos):
        vals = []
        add = vals.append
        view = buf.__class__ is memoryview  # bytes and bytearray slices decode themselves
        for kind, dec in self._dec_plan:
            if kind is _STR:
                n = buf[pos]
                if n < 0x80:
                    pos += 1
                else:
                    n, pos = decode_varint(buf, pos)
                end = pos + n
                add(str(buf[pos:end], "utf-8") if view else buf[pos:end].decode("utf-8"))
                pos = end
            elif kind is _INT:
                add(_I64.unpack_from(buf, pos)[0])
                pos += 8
            elif kind is _FLOAT:
                add(_F64.unpack_from(buf, pos)[0])
                pos += 8
            elif kind is _BOOL:
                add(buf[pos] != 0)
                pos += 1
            else:
                v, pos = dec(buf, pos)
                add(v)
        if self._positional:
            return self.cls(*vals), pos
        d = dict(zip(self._names, vals))
        return (self.cls(**d) if self.cls is not None else d), pos


def _takes_fields_in_order(cls: type, names: tuple[str, ...]) -> bool:
    """Whether ``cls(*values)`` means ``cls(**dict(zip(names, values)))``: its constructor's
    parameters are exactly ``names``, in order, each positional-or-keyword."""
    try:
        params = list(inspect.signature(cls).parameters.values())
    except (TypeError, ValueError):
        return False
    return tuple(p.name for p in params) == names and all(
        p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in params
    )


# field kinds a struct encodes/decodes inline (identity-compared small ints)
_OTHER, _STR, _INT, _FLOAT, _BOOL = 0, 1, 2, 3, 4
_KIND = {_Str: _STR, _Int: _INT, _Float: _FLOAT, _Bool: _BOOL}


_PRIMS: dict[Any, TypeInfo] = {int: _Int(), float: _Float(), bool: _Bool(), str: _Str(), bytes: _Bytes()}
_CACHE: dict[Any, TypeInfo] = {}


def type_info(declared: Any) -> TypeInfo:
    """The :class:`TypeInfo` of a declared Python type (cached)."""
    if isinstance(declared, TypeInfo):
        return declared
    try:
        return _CACHE[declared]
    except (KeyError, TypeError):
        pass
    info = _build(declared)
    try:
        _CACHE[declared] = info
    except TypeError:
        pass
    return info


def _build(t: Any) -> TypeInfo:
    if t in _PRIMS:
        return _PRIMS[t]
    origin = typing.get_origin(t)
    args = typing.get_args(t)
    if origin in (typing.Union, types.UnionType):
        non_none = [a for a in args if a is not type(None)]
        if len(non_none) == 1 and len(args) == 2:
            return _Optional(type_info(non_none[0]))
        raise SerializationError(f"declared type {t!r}: only Optional[X] unions are supported")
    if origin is list:
        if len(args) != 1:
            raise SerializationError(f"declared type {t!r}: write list[ElementType]")
        return _List(type_info(args[0]))
    if origin is dict:
        if len(args) != 2:
            raise SerializationError(f"declared type {t!r}: write dict[KeyType, ValueType]")
        return _Dict(type_info(args[0]), type_info(args[1]))
    if origin is tuple:
        if not args or Ellipsis in args:
            raise SerializationError(f"declared type {t!r}: write tuple[T1, T2, ...] with fixed fields")
        return _Tuple([type_info(a) for a in args])
    if isinstance(t, type) and dataclasses.is_dataclass(t):
        hints = typing.get_type_hints(t)
        fields = []
        for f in dataclasses.fields(t):
            if f.default is not dataclasses.MISSING:
                default = f.default
            elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
                default = f.default_factory  # type: ignore[misc]
            else:
                default = dataclasses.MISSING
            fields.append((f.name, type_info(hints[f.name]), default))
        return _Struct(t.__qualname__, fields, t)
    if t in (list, dict, tuple):
        raise SerializationError(f"declared type {t.__name__}: give its element types, e.g. list[int]")
    raise SerializationError(
        f"cannot store values of declared type {t!r}: expected int, float, bool, str, bytes, "
        "a dataclass, list[T], dict[K, V], tuple[...] or Optional[T]"
    )


def type_from_description(desc: dict[str, Any], classes: dict[str, type] | None = None) -> TypeInfo:
    """Rebuild a :class:`TypeInfo` from :meth:`TypeInfo.describe` output.

    Structs come back as dicts unless ``classes`` maps their name to a dataclass;
    no code named in ``desc`` is ever imported or run.
    """
    classes = classes or {}
    kind = desc.get("type")
    simple = {"int": int, "float": float, "bool": bool, "str": str, "bytes": bytes}
    if kind in simple:
        return _PRIMS[simple[kind]]
    if kind == "optional":
        return _Optional(type_from_description(desc["of"], classes))
    if kind == "list":
        return _List(type_from_description(desc["of"], classes))
    if kind == "dict":
        return _Dict(type_from_description(desc["key"], classes), type_from_description(desc["value"], classes))
    if kind == "tuple":
        return _Tuple([type_from_description(f, classes) for f in desc["fields"]])
    if kind == "struct":
        fields = [(f["name"], type_from_description(f["type"], classes), dataclasses.MISSING) for f in desc["fields"]]
        return _Struct(desc["name"], fields, None)
    raise SerializationError(f"unknown type description {desc!r}")


def describe_type(desc: dict[str, Any], with_fields: bool = True) -> str:
    """A type description (:meth:`TypeInfo.describe`) as text: ``list[Order(id: int, items: list[str])]``.

    ``with_fields=False`` names a struct without its fields (``list[Order]``).
    """
    t = desc.get("type")
    if t == "struct":
        if not with_fields:
            return desc["name"]
        return f"{desc['name']}({', '.join(f['name'] + ': ' + describe_type(f['type']) for f in desc['fields'])})"
    if t in ("list", "optional"):
        return f"{t}[{describe_type(desc['of'], with_fields)}]"
    if t == "dict":
        return f"dict[{describe_type(desc['key'], with_fields)}, {describe_type(desc['value'], with_fields)}]"
    if t == "tuple":
        return "tuple[" + ", ".join(describe_type(f, with_fields) for f in desc["fields"]) + "]"
    return str(t)


def struct_fields(info: TypeInfo) -> list[tuple[str, TypeInfo, Any]] | None:
    """Fields of a struct type (for schema evolution), else None."""
    return info.fields if isinstance(info, _Struct) else None


def is_struct(info: TypeInfo) -> bool:
    return isinstance(info, _Struct)


Encoder = Callable[[Any, bytearray], None]
