"""A read-only *parser* for Java Object Serialization streams, used for one thing.

Since metadata version 4, Flink appends ``CheckpointProperties`` to ``_metadata``
with ``java.io.ObjectOutputStream``. That object tells a checkpoint from a
savepoint and a canonical savepoint from a native one, so we want it; but we
never run a Java deserializer or anything like one. This module walks the
stream grammar (object, class descriptor, string, enum, reference, array,
block data, ``null``) and turns it into plain dicts of field values. No class
is looked up, instantiated or called; unknown constructs raise :class:`~explorer.errors.FlinkFormatError` (a ``ValueError``).

Grammar in brief (all big-endian): magic ``AC ED``, version ``00 05``, then
contents. An object is ``73``, a class descriptor, then the field values of
each class from the top superclass down; a class descriptor is ``72``, the
class name (modified UTF-8), serialVersionUID, flags, the field list (type
code, name, and for object fields a type-name string), an annotation ended
by ``78``, then the superclass descriptor (or ``70`` for none). Objects,
strings, class descriptors, enums and arrays receive handles starting at
``0x7E0000`` that ``71`` references point back to.
"""

from __future__ import annotations

from typing import Any

from ...errors import FlinkFormatError
from .datainput import DataInput

TC_NULL, TC_REFERENCE, TC_CLASSDESC, TC_OBJECT, TC_STRING, TC_ARRAY = 0x70, 0x71, 0x72, 0x73, 0x74, 0x75
TC_BLOCKDATA, TC_ENDBLOCKDATA, TC_LONGSTRING, TC_BLOCKDATALONG, TC_ENUM = 0x77, 0x78, 0x7C, 0x7A, 0x7E
TC_CLASS = 0x76  # a java.lang.Class object: its class descriptor, then a new handle
SC_WRITE_METHOD, SC_SERIALIZABLE, SC_EXTERNALIZABLE, SC_BLOCK_DATA = 0x01, 0x02, 0x04, 0x08
BASE_HANDLE = 0x7E0000

_PRIMITIVE_READERS = {
    "B": DataInput.read_byte,
    "C": DataInput.read_char,
    "D": DataInput.read_double,
    "F": DataInput.read_float,
    "I": DataInput.read_int,
    "J": DataInput.read_long,
    "S": DataInput.read_short,
    "Z": DataInput.read_bool,
}


class _ClassDesc:
    __slots__ = ("name", "flags", "fields", "super")

    def __init__(self, name: str, flags: int, fields: list[tuple[str, str]], sup: "_ClassDesc | None") -> None:
        self.name, self.flags, self.fields, self.super = name, flags, fields, sup


class JavaStreamParser:
    """Parse one Java serialization stream into dicts (``{"@class": name, field: value}``)."""

    def __init__(self, inp: DataInput, max_depth: int = 64) -> None:
        self.inp = inp
        self.handles: list[Any] = []
        self.max_depth = max_depth

    def read_stream(self) -> Any:
        magic, version = self.inp.read_ushort(), self.inp.read_ushort()
        if magic != 0xACED or version != 5:
            raise FlinkFormatError(f"not a Java serialization stream (magic {magic:#06x}, version {version})")
        return self.read_content(0)

    def _new_handle(self, value: Any) -> int:
        self.handles.append(value)
        return len(self.handles) - 1

    def read_content(self, depth: int) -> Any:
        if depth > self.max_depth:
            raise FlinkFormatError(f"Java serialization stream nests deeper than {self.max_depth} at offset {self.inp.pos}")
        tc = self.inp.read_ubyte()
        if tc == TC_NULL:
            return None
        if tc == TC_REFERENCE:
            h = self.inp.read_int() - BASE_HANDLE
            if not 0 <= h < len(self.handles):
                raise FlinkFormatError(f"Java serialization reference to unknown handle {h} (offset {self.inp.pos - 4})")
            return self.handles[h]
        if tc == TC_STRING:
            s = self.inp.read_utf()
            self._new_handle(s)
            return s
        if tc == TC_LONGSTRING:
            n = self.inp.read_long()
            s = self.inp.read_bytes(n).decode("utf-8", "replace")
            self._new_handle(s)
            return s
        if tc == TC_CLASSDESC:
            self.inp.pos -= 1
            return self.read_class_desc(depth)
        if tc == TC_CLASS:  # e.g. the element class of a MapView/ListView data type in a SQL accumulator
            desc = self.read_class_desc(depth)
            value = {"@class_object": desc.name if desc else None}
            self._new_handle(value)
            return value
        if tc == TC_ENUM:
            desc = self.read_class_desc(depth)
            h = self._new_handle(None)
            name = self.read_content(depth + 1)
            value = {"@enum": desc.name if desc else None, "name": name}
            self.handles[h] = value
            return value
        if tc == TC_OBJECT:
            desc = self.read_class_desc(depth)
            obj: dict[str, Any] = {"@class": desc.name if desc else None}
            self._new_handle(obj)
            chain = []
            d = desc
            while d is not None:
                chain.append(d)
                d = d.super
            for d in reversed(chain):
                if d.flags & SC_EXTERNALIZABLE:
                    raise FlinkFormatError(f"externalizable class {d.name} cannot be parsed safely")
                for code, fname in d.fields:
                    reader = _PRIMITIVE_READERS.get(code)
                    obj[fname] = reader(self.inp) if reader else self.read_content(depth + 1)
                if d.flags & SC_WRITE_METHOD:  # what a writeObject wrote (e.g. an ArrayList's elements)
                    written = [x for x in self._skip_annotation(depth) if not isinstance(x, bytes)]
                    if written:
                        obj.setdefault("@written", []).extend(written)
            return obj
        if tc == TC_ARRAY:
            desc = self.read_class_desc(depth)
            arr: list[Any] = []
            self._new_handle(arr)
            n = self.inp.read_count("Java array elements")  # a byte each at least (a type code, a primitive)
            elem = desc.name[1:2] if desc else "L"
            reader = _PRIMITIVE_READERS.get(elem)
            for _ in range(n):
                arr.append(reader(self.inp) if reader else self.read_content(depth + 1))
            return arr
        if tc == TC_BLOCKDATA:
            return self.inp.read_bytes(self.inp.read_ubyte())
        if tc == TC_BLOCKDATALONG:
            return self.inp.read_bytes(self.inp.read_int())
        raise FlinkFormatError(f"unsupported Java serialization type code {tc:#04x} at offset {self.inp.pos - 1}")

    def _skip_annotation(self, depth: int) -> list[Any]:
        """The contents up to the end-of-block marker (block data as bytes)."""
        out: list[Any] = []
        while True:
            if self.inp.read_ubyte() == TC_ENDBLOCKDATA:
                return out
            self.inp.pos -= 1
            out.append(self.read_content(depth + 1))

    def read_class_desc(self, depth: int) -> _ClassDesc | None:
        tc = self.inp.read_ubyte()
        if tc == TC_NULL:
            return None
        if tc == TC_REFERENCE:
            h = self.inp.read_int() - BASE_HANDLE
            desc = self.handles[h] if 0 <= h < len(self.handles) else None
            if not isinstance(desc, _ClassDesc):
                raise FlinkFormatError(f"Java serialization reference {h} (offset {self.inp.pos - 4}) is not a class descriptor")
            return desc
        if tc != TC_CLASSDESC:
            raise FlinkFormatError(f"expected a class descriptor at offset {self.inp.pos - 1}, found type code {tc:#04x}")
        name = self.inp.read_utf()
        self.inp.read_long()  # serialVersionUID
        h = self._new_handle(None)
        flags = self.inp.read_ubyte()
        fields = []
        for _ in range(self.inp.read_short()):
            code = chr(self.inp.read_ubyte())
            fname = self.inp.read_utf()
            if code in "L[":
                self.read_content(depth + 1)  # the field's type name
            fields.append((code, fname))
        self._skip_annotation(depth)
        desc = _ClassDesc(name, flags, fields, None)
        self.handles[h] = desc
        desc.super = self.read_class_desc(depth + 1)
        return desc


def parse_java_object(inp: DataInput) -> Any:
    """Parse one serialized Java object from ``inp`` into dicts; never executes anything."""
    return JavaStreamParser(inp).read_stream()
