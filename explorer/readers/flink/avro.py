"""Avro values (Flink's ``AvroSerializer``: ``GenericRecord``, specific and reflect records), decoded from the
writer schema that Flink's serializer snapshot carries.

``AvroSerializerSnapshot`` (version 2) holds ``utf`` the runtime class name then ``utf`` the writer schema
as JSON (version 1: only the schema). Values are written by Avro's datum writers through Flink's own
``DataOutputEncoder``, which is *not* Avro's binary encoding: over Java ``DataOutput``

* ``int``/``long``/``float``/``double``: fixed width, big-endian; ``boolean`` one byte; ``null`` nothing;
* ``enum`` symbol index and ``union`` branch index: ``int``;
* ``bytes``/``string``: ``int`` length then the bytes (UTF-8); ``fixed``: its ``size`` bytes;
* ``array``/``map``: blocks, each an item count as an unsigned 7-bit varint (low group first) and that many
  items (a map item: ``string`` key then value), ended by a count of ``0`` (an empty one is just ``0``);
* ``record``: its fields in schema order.

Logical types come back as their underlying values (``timestamp-millis`` as the ``long``, ``decimal`` as
bytes and scale: :class:`decimal.Decimal`).
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from ...errors import FlinkFormatError
from .datainput import DataInput
from .serializers import Decoder, SnapshotContext, UnknownLayout, UnknownSnapshot, register_snapshot_decoder

SNAPSHOT_CLASSES = (
    "org.apache.flink.formats.avro.typeutils.AvroSerializerSnapshot",
    "org.apache.flink.formats.avro.typeutils.AvroSerializer$AvroSchemaSerializerConfigSnapshot",
)
_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}
MAX_DEPTH = 200


class AvroSchema:
    """A parsed writer schema: named types resolved, every node a dict with ``type``."""

    def __init__(self, schema: Any) -> None:
        self.named: dict[str, dict] = {}
        self.source = json.dumps(schema, sort_keys=True)  # (two schemas are the same when this is)
        self.root = self._norm(schema, None)

    def _norm(self, s: Any, ns: str | None) -> Any:
        if isinstance(s, str):
            if s in _PRIMITIVES:
                return {"type": s}
            full = s if "." in s or ns is None else f"{ns}.{s}"
            return {"type": "ref", "name": full, "short": s}
        if isinstance(s, list):
            return {"type": "union", "branches": [self._norm(b, ns) for b in s]}
        if not isinstance(s, dict) or "type" not in s:
            raise FlinkFormatError(f"Avro schema: found {s!r}, expected a type name, a union list or an object")
        t = s["type"]
        if t in ("record", "error", "enum", "fixed"):
            name = s["name"]
            space = s.get("namespace", ns)
            full = name if "." in name or not space else f"{space}.{name}"
            node: dict[str, Any] = {"type": t, "name": full, "logical": s.get("logicalType"),
                                    "scale": s.get("scale", 0), "aliases": list(s.get("aliases", ())),
                                    "default": s.get("default")}
            self.named[full] = node
            self.named.setdefault(name, node)
            if t in ("record", "error"):
                inner_ns = full.rsplit(".", 1)[0] if "." in full else None
                node["fields"] = [(f["name"], self._norm(f["type"], inner_ns)) for f in s["fields"]]
                node["defaults"] = {f["name"] for f in s["fields"] if "default" in f}
                node["field_aliases"] = {a: f["name"] for f in s["fields"] for a in f.get("aliases", ())}
            elif t == "enum":
                node["symbols"] = list(s["symbols"])
            else:
                node["size"] = int(s["size"])
            return node
        if t == "array":
            return {"type": "array", "items": self._norm(s["items"], ns)}
        if t == "map":
            return {"type": "map", "values": self._norm(s["values"], ns)}
        if isinstance(t, (dict, list)) or t in _PRIMITIVES:
            node = self._norm(t, ns)
            if isinstance(node, dict) and s.get("logicalType"):
                node = dict(node, logical=s["logicalType"], scale=s.get("scale", 0))
            return node
        return self._norm(t, ns)  # a named type by reference

    def describe(self) -> str:
        r = self.root
        return r.get("name") or r["type"]


class AvroDecoder(Decoder):
    """Reads one value Flink's ``AvroSerializer`` wrote (see the module doc)."""

    def __init__(self, schema: AvroSchema, runtime_class: str | None = None) -> None:
        self.schema = schema
        self.runtime_class = runtime_class
        self.name = f"Avro {schema.describe()}"

    def read(self, inp: DataInput) -> Any:
        return self._read(self.schema.root, inp, 0)

    def _count(self, inp: DataInput) -> int:
        return inp.read_varint()

    def _read(self, node: dict, inp: DataInput, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise UnknownLayout(f"Avro value nests deeper than {MAX_DEPTH}")
        t = node["type"]
        if t == "ref":
            target = self.schema.named.get(node["name"]) or self.schema.named.get(node["short"])
            if target is None:
                raise UnknownLayout(f"Avro schema names {node['name']!r}, which it does not define")
            return self._read(target, inp, depth + 1)
        if t == "null":
            return None
        if t == "boolean":
            return inp.read_bool()
        if t == "int":
            return inp.read_int()
        if t == "long":
            return inp.read_long()
        if t == "float":
            return inp.read_float()
        if t == "double":
            return inp.read_double()
        if t in ("bytes", "string"):
            raw = inp.read_bytes(inp.read_int())
            if t == "string":
                return raw.decode("utf-8", "replace")
            if node.get("logical") == "decimal":
                return Decimal(int.from_bytes(raw, "big", signed=True)).scaleb(-int(node.get("scale") or 0))
            return raw
        if t == "fixed":
            raw = inp.read_bytes(node["size"])
            if node.get("logical") == "decimal":
                return Decimal(int.from_bytes(raw, "big", signed=True)).scaleb(-int(node.get("scale") or 0))
            return raw
        if t == "enum":
            i = inp.read_int()
            syms = node["symbols"]
            if not 0 <= i < len(syms):
                raise UnknownLayout(f"Avro enum {node['name']}: index {i}, the schema has {len(syms)} symbols")
            return syms[i]
        if t == "union":
            i = inp.read_int()
            br = node["branches"]
            if not 0 <= i < len(br):
                raise UnknownLayout(f"Avro union: branch {i}, the schema has {len(br)}")
            return self._read(br[i], inp, depth + 1)
        if t in ("record", "error"):
            return {name: self._read(f, inp, depth + 1) for name, f in node["fields"]}
        if t == "array":
            out = []
            while (n := self._count(inp)) > 0:  # Avro's null takes no bytes
                inp.check_count(n, "Avro array items", 0 if node["items"].get("type") == "null" else 1)
                out.extend(self._read(node["items"], inp, depth + 1) for _ in range(n))
            return out
        if t == "map":
            m = {}
            while (n := self._count(inp)) > 0:
                for _ in range(inp.check_count(n, "Avro map entries")):  # a key's length at least
                    k = inp.read_bytes(inp.read_int()).decode("utf-8", "replace")
                    m[k] = self._read(node["values"], inp, depth + 1)
            return m
        raise UnknownLayout(f"Avro type {t!r} is not one State Explorer reads")


# -- schema resolution (Avro's SchemaCompatibility: can a reader schema read what a writer schema wrote) -------
_PROMOTIONS = {"int": ("long", "float", "double"), "long": ("float", "double"), "float": ("double",),
               "string": ("bytes",), "bytes": ("string",)}


def avro_resolution(writer: AvroSchema, reader: AvroSchema) -> str | None:
    """None when ``reader`` reads every value ``writer`` wrote by Avro's resolution rules (the check Flink's
    ``AvroSerializerSnapshot`` makes on restore), else the first reason it cannot: a record field the reader adds
    needs a default (fields the writer had and the reader drops are skipped); primitives promote int -> long ->
    float -> double and string <-> bytes; every enum symbol written must be the reader's (or it has a default);
    fixed sizes and record, enum and fixed names (or the reader's aliases) must match; every branch of a written
    union must resolve against the reader's type (or one of its union's branches)."""
    return _resolve(writer, writer.root, reader, reader.root, "value", set())


def _deref(schema: AvroSchema, node: dict) -> dict | None:
    seen = 0
    while node is not None and node["type"] == "ref" and seen <= MAX_DEPTH:
        node = schema.named.get(node["name"]) or schema.named.get(node["short"])
        seen += 1
    return node


def _label(node: dict) -> str:
    return node.get("name") or node["type"]


def _names_match(w: dict, r: dict) -> bool:
    short = w["name"].rsplit(".", 1)[-1]
    return short == r["name"].rsplit(".", 1)[-1] or w["name"] in r["aliases"] or short in r["aliases"]


def _resolve(ws: AvroSchema, w: dict, rs: AvroSchema, r: dict, where: str, seen: set) -> str | None:
    w, r = _deref(ws, w), _deref(rs, r)
    if w is None or r is None:
        return f"{where}: a named type the schema does not define"
    wt, rt = w["type"], r["type"]
    if wt == "union":
        for i, b in enumerate(w["branches"]):
            problem = _resolve(ws, b, rs, r, f"{where} (branch {i} of the old union)", seen)
            if problem:
                return problem
        return None
    if rt == "union":
        if any(_resolve(ws, w, rs, b, where, seen) is None for b in r["branches"]):
            return None
        return f"{where}: the new union has no branch that reads the old {_label(w)}"
    if wt in _PRIMITIVES and rt in _PRIMITIVES:
        return None if wt == rt or rt in _PROMOTIONS.get(wt, ()) else f"{where}: {wt} cannot be read as {rt}"
    records = ("record", "error")
    if wt != rt and not (wt in records and rt in records):
        return f"{where}: {_label(w)} ({wt}) cannot be read as {_label(r)} ({rt})"
    if wt in ("record", "error", "enum", "fixed") and not _names_match(w, r):
        return f"{where}: {wt} {w['name']} cannot be read as {r['name']} (names differ, no alias)"
    if wt in records:
        if (w["name"], r["name"]) in seen:  # a recursive type: assumed to resolve while it is being resolved
            return None
        seen.add((w["name"], r["name"]))
        written = dict(w["fields"])
        for name, f in r["fields"]:
            old = name if name in written else next((a for a, n in r["field_aliases"].items()
                                                     if n == name and a in written), None)
            if old is not None:
                problem = _resolve(ws, written[old], rs, f, f"{where}.{name}", seen)
                if problem:
                    return problem
            elif name not in r["defaults"]:
                return f"{where}.{name}: a field the new schema adds without a default"
        return None
    if wt == "enum":
        missing = [x for x in w["symbols"] if x not in r["symbols"]]
        if missing and r.get("default") is None:
            return f"{where}: enum {r['name']} lacks the old symbols {missing} and has no default"
        return None
    if wt == "fixed":
        return None if w["size"] == r["size"] else f"{where}: fixed {r['name']} of {w['size']} bytes read as {r['size']}"
    if wt == "array":
        return _resolve(ws, w["items"], rs, r["items"], f"{where}[]", seen)
    if wt == "map":
        return _resolve(ws, w["values"], rs, r["values"], f"{where}{{}}", seen)
    return f"{where}: Avro type {wt!r} is not one State Explorer resolves"


def read_avro_snapshot(inp: DataInput, version: int, class_name: str = SNAPSHOT_CLASSES[0]) -> AvroDecoder:
    if version not in (1, 2):
        raise UnknownSnapshot(class_name, inp.pos)
    runtime = inp.read_utf() if version == 2 else None
    text = inp.read_utf()
    try:
        schema = AvroSchema(json.loads(text))
    except (ValueError, KeyError, TypeError) as exc:
        raise FlinkFormatError(f"Avro serializer snapshot: the writer schema does not parse ({exc}); "
                               f"found {text[:80]!r}") from exc
    return AvroDecoder(schema, runtime)


def _factory(inp: DataInput, ctx: SnapshotContext) -> Decoder:
    return read_avro_snapshot(inp, ctx.version, ctx.class_name)


for _cls in SNAPSHOT_CLASSES:
    register_snapshot_decoder(_cls, _factory)

__all__ = ["AvroDecoder", "AvroSchema", "SNAPSHOT_CLASSES", "avro_resolution", "read_avro_snapshot"]

