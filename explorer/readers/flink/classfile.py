"""Class layouts read from Java ``.class`` files as data (never loaded, never run).

Kryo writes no schema: to decode a value that Flink handed to Kryo's
``FieldSerializer`` we need the class's fields, their declared types (with
generic arguments, which decide how Kryo writes a collection's elements) and
its superclass. A ``.class`` file holds exactly that (JVM specification,
chapter 4 "The class File Format")::

    u4 magic 0xCAFEBABE, u2 minor, u2 major
    u2 constant_pool_count, constant_pool[count - 1]   (Long and Double take two slots)
    u2 access_flags, u2 this_class, u2 super_class
    u2 interfaces_count, u2 interfaces[...]
    u2 fields_count, fields[...]: u2 access, u2 name, u2 descriptor, u2 attributes_count, attributes
    (methods and class attributes follow; not needed)

An attribute is ``u2 name, u4 length, bytes``; a field's ``Signature``
attribute (``u2`` index of a UTF-8 constant) carries its generic type, e.g.
``Ljava/util/ArrayList<Ljava/lang/String;>;``. Enum constants are the
``ACC_ENUM`` fields in declaration order, which is their ordinal order.

:class:`JarClasses` looks classes up in the user's jars (zip files read with
:mod:`zipfile`) by binary name (``pkg.Outer$Inner``).
"""

from __future__ import annotations

import struct
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import FlinkFormatError

ACC_FINAL, ACC_STATIC, ACC_TRANSIENT, ACC_INTERFACE, ACC_ENUM = 0x0010, 0x0008, 0x0080, 0x0200, 0x4000

_PRIMITIVE_DESCRIPTORS = {
    "I": "int", "J": "long", "Z": "boolean", "B": "byte", "S": "short", "C": "char", "F": "float", "D": "double",
    "V": "void",
}


@dataclass(frozen=True)
class JType:
    """A Java type: ``name`` as Kryo names classes (``int``, ``java.lang.String``, ``pkg.Outer$Inner``,
    arrays as ``elem[]``), with generic arguments (``None`` for a wildcard or type variable)."""

    name: str
    args: tuple["JType | None", ...] = ()

    @property
    def is_primitive(self) -> bool:
        return self.name in _PRIMITIVE_DESCRIPTORS.values()

    def __str__(self) -> str:
        if not self.args:
            return self.name
        return f"{self.name}<{', '.join(str(a) if a else '?' for a in self.args)}>"


@dataclass(frozen=True)
class FieldInfo:
    name: str
    type: JType
    access: int

    @property
    def serialized(self) -> bool:
        """Kryo's FieldSerializer skips static and (by default) transient fields."""
        return not self.access & (ACC_STATIC | ACC_TRANSIENT)


@dataclass
class ClassLayout:
    name: str
    super_name: str | None
    access: int
    fields: list[FieldInfo] = field(default_factory=list)

    @property
    def is_final(self) -> bool:
        return bool(self.access & ACC_FINAL)

    @property
    def is_enum(self) -> bool:
        return bool(self.access & ACC_ENUM)

    @property
    def enum_constants(self) -> list[str]:
        return [f.name for f in self.fields if f.access & ACC_ENUM]


class _SigParser:
    """Field descriptors and generic signatures (JVMS 4.3.2, 4.7.9.1) into :class:`JType`."""

    def __init__(self, text: str) -> None:
        self.s, self.i = text, 0

    def parse(self) -> JType | None:
        c = self.s[self.i]
        self.i += 1
        if c in _PRIMITIVE_DESCRIPTORS:
            return JType(_PRIMITIVE_DESCRIPTORS[c])
        if c == "[":
            elem = self.parse()
            return JType(f"{elem.name if elem else 'java.lang.Object'}[]", (elem,) if elem and elem.args else ())
        if c == "T":  # a type variable: unknown here
            self.i = self.s.index(";", self.i) + 1
            return None
        if c == "L":
            parts: list[str] = []
            name = []
            args: tuple = ()
            while True:
                c = self.s[self.i]
                self.i += 1
                if c == ";":
                    break
                if c == "<":
                    args = self._args()
                elif c == ".":  # inner class of a generic outer class
                    parts.append("".join(name))
                    name = []
                    args = ()
                else:
                    name.append(c)
            parts.append("".join(name))
            return JType("$".join(parts).replace("/", "."), args)
        raise FlinkFormatError(f"class file signature {self.s!r}: found {c!r} at {self.i - 1}, expected a type")

    def _args(self) -> tuple:
        out = []
        while self.s[self.i] != ">":
            c = self.s[self.i]
            if c == "*":
                self.i += 1
                out.append(None)
                continue
            if c in "+-":
                self.i += 1
                t = self.parse()
                out.append(t if c == "+" else None)
                continue
            out.append(self.parse())
        self.i += 1
        return tuple(out)


def parse_type_descriptor(text: str) -> JType | None:
    return _SigParser(text).parse()


def parse_class(data: bytes, where: str = "class file") -> ClassLayout:
    """The name, superclass, access flags and fields of one ``.class`` file."""
    try:
        if data[:4] != b"\xca\xfe\xba\xbe":
            raise FlinkFormatError(f"{where}: found magic {data[:4].hex()}, expected cafebabe (a Java class file)")
        pos = 8
        (count,) = struct.unpack_from(">H", data, pos)
        pos += 2
        utf8: dict[int, str] = {}
        class_ref: dict[int, int] = {}
        i = 1
        while i < count:
            tag = data[pos]
            pos += 1
            if tag == 1:
                (n,) = struct.unpack_from(">H", data, pos)
                raw = data[pos + 2 : pos + 2 + n]
                utf8[i] = raw.decode("utf-8", "surrogatepass") if b"\xc0\x80" not in raw else raw.replace(b"\xc0\x80", b"\0").decode("utf-8", "replace")
                pos += 2 + n
            elif tag == 7:
                class_ref[i] = struct.unpack_from(">H", data, pos)[0]
                pos += 2
            elif tag in (8, 16, 19, 20):
                pos += 2
            elif tag == 15:
                pos += 3
            elif tag in (3, 4, 9, 10, 11, 12, 17, 18):
                pos += 4
            elif tag in (5, 6):
                pos += 8
                i += 1
            else:
                raise FlinkFormatError(f"{where}: found constant pool tag {tag} at byte {pos - 1}, expected 1..20")
            i += 1
        access, this_i, super_i, n_ifaces = struct.unpack_from(">HHHH", data, pos)
        pos += 8 + 2 * n_ifaces
        name = utf8[class_ref[this_i]].replace("/", ".")
        super_name = utf8[class_ref[super_i]].replace("/", ".") if super_i else None
        (n_fields,) = struct.unpack_from(">H", data, pos)
        pos += 2
        fields = []
        for _ in range(n_fields):
            f_access, f_name, f_desc, n_attr = struct.unpack_from(">HHHH", data, pos)
            pos += 8
            sig = None
            for _ in range(n_attr):
                a_name, a_len = struct.unpack_from(">HI", data, pos)
                if utf8.get(a_name) == "Signature":
                    sig = utf8[struct.unpack_from(">H", data, pos + 6)[0]]
                pos += 6 + a_len
            jt = parse_type_descriptor(sig or utf8[f_desc]) or parse_type_descriptor(utf8[f_desc])
            fields.append(FieldInfo(utf8[f_name], jt, f_access))
        return ClassLayout(name, super_name, access, fields)
    except (struct.error, IndexError, KeyError) as exc:
        raise FlinkFormatError(f"{where}: class file ends early or is malformed ({exc!r})") from exc


class JarClasses:
    """Class layouts from the user's jars, looked up by binary name, parsed once."""

    def __init__(self, jars: list[str | Path] | tuple = ()) -> None:
        self.jars = [Path(j) for j in jars]
        self._cache: dict[str, ClassLayout | None] = {}
        self._zips: list[zipfile.ZipFile] | None = None

    def _open(self) -> list[zipfile.ZipFile]:
        if self._zips is None:
            zips = []
            for j in self.jars:
                try:
                    zips.append(zipfile.ZipFile(j))
                except (OSError, zipfile.BadZipFile) as exc:
                    raise FlinkFormatError(f"{j}: cannot read as a jar ({exc}); expected a zip of .class files") from exc
            self._zips = zips
        return self._zips

    def layout(self, class_name: str) -> ClassLayout | None:
        if class_name not in self._cache:
            entry = class_name.replace(".", "/") + ".class"
            found = None
            for z in self._open():
                try:
                    data = z.read(entry)
                except KeyError:
                    continue
                found = parse_class(data, f"{z.filename}!{entry}")
                break
            self._cache[class_name] = found
        return self._cache[class_name]
