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
                                    "scale": s.get("scale", 0)}
            self.named[full] = node
            self.named.setdefault(name, node)
            if t in ("record", "error"):
                inner_ns = full.rsplit(".", 1)[0] if "." in full else None
                node["fields"] = [(f["name"], self._norm(f["type"], inner_ns)) for f in s["fields"]]
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

__all__ = ["AvroDecoder", "AvroSchema", "SNAPSHOT_CLASSES", "read_avro_snapshot"]

