"""Avro state values from the writer schema in Flink's ``AvroSerializerSnapshot``.

No fixture job could write Avro state here (flink-avro and the Avro library are in no PyPI wheel of Flink,
see tools/flink/README.md), so these bytes are built in the test from the published formats: the snapshot as
Flink's ``AvroSerializerSnapshot`` v2 writes it (``utf`` class, ``utf`` schema JSON) and values as Avro's datum
writer emits them through Flink's ``DataOutputEncoder`` (fixed-width big-endian ints and longs, ``int``
lengths, ``int`` union and enum indexes, varint block counts ended by 0). A *constructed* fixture, not a job's.
"""

from __future__ import annotations

import json
import struct
from decimal import Decimal

import pytest

from explorer.errors import FlinkFormatError
from explorer.readers.flink.avro import AvroDecoder
from explorer.readers.flink.datainput import DataInput
from explorer.readers.flink.serializers import UnknownLayout, UnknownSnapshot, read_versioned_snapshot

SCHEMA = {
    "type": "record", "name": "Order", "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "customer", "type": {"type": "record", "name": "Customer",
                                      "fields": [{"name": "name", "type": "string"}, {"name": "vip", "type": "boolean"}]}},
        {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID", "SHIPPED"]}},
        {"name": "note", "type": ["null", "string"]},
        {"name": "items", "type": {"type": "array", "items": "int"}},
        {"name": "prices", "type": {"type": "map", "values": "double"}},
        {"name": "total", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
        {"name": "tag", "type": {"type": "fixed", "name": "Tag", "size": 2}},
        {"name": "previous", "type": ["null", "Customer"]},
        {"name": "weight", "type": "float"},
    ],
}


def _utf(s: str) -> bytes:
    b = s.encode("utf-8")
    return struct.pack(">H", len(b)) + b


def _snapshot(schema: dict, version: int = 2) -> bytes:
    body = (_utf("shop.Order") if version == 2 else b"") + _utf(json.dumps(schema))
    return _utf("org.apache.flink.formats.avro.typeutils.AvroSerializerSnapshot") + struct.pack(">i", version) + body


def _str(s: str) -> bytes:
    b = s.encode("utf-8")
    return struct.pack(">i", len(b)) + b


def _order(i: int, note: str | None, items: list[int], prices: dict, previous: bool) -> bytes:
    out = struct.pack(">q", i) + _str("Zoë") + b"\x01" + struct.pack(">i", 1)
    out += struct.pack(">i", 0) if note is None else struct.pack(">i", 1) + _str(note)
    out += (bytes([len(items)]) + b"".join(struct.pack(">i", x) for x in items) if items else b"") + b"\x00"
    out += (bytes([len(prices)]) + b"".join(_str(k) + struct.pack(">d", v) for k, v in prices.items()) if prices else b"") + b"\x00"
    out += struct.pack(">i", 2) + (12345).to_bytes(2, "big", signed=True)
    out += b"ab"
    out += struct.pack(">i", 1) + _str("Ann") + b"\x00" if previous else struct.pack(">i", 0)
    return out + struct.pack(">f", 1.5)


@pytest.fixture()
def decoder() -> AvroDecoder:
    inp = DataInput(_snapshot(SCHEMA))
    dec = read_versioned_snapshot(inp)
    assert inp.at_end() and isinstance(dec, AvroDecoder) and dec.describe() == "Avro shop.Order"
    return dec


def test_generic_record_values_from_the_writer_schema(decoder):
    data = _order(7, "gift", [3, -4], {"a": 0.25, "b": 2.0}, True) + _order(8, None, [], {}, False)
    inp = DataInput(data)
    first, second = decoder.read(inp), decoder.read(inp)
    assert inp.at_end()  # each read consumes exactly one value: unprefixed heap streams stay in step
    assert first == {"id": 7, "customer": {"name": "Zoë", "vip": True}, "status": "PAID", "note": "gift",
                     "items": [3, -4], "prices": {"a": 0.25, "b": 2.0}, "total": Decimal("123.45"), "tag": b"ab",
                     "previous": {"name": "Ann", "vip": False}, "weight": 1.5}
    assert second["note"] is None and second["items"] == [] and second["prices"] == {} and second["previous"] is None


def test_arrays_in_several_blocks():
    schema = {"type": "array", "items": "long"}
    dec = read_versioned_snapshot(DataInput(_snapshot(schema, version=1)))
    data = b"\x02" + struct.pack(">qq", 1, 2) + b"\x01" + struct.pack(">q", 3) + b"\x00"
    assert dec.read(DataInput(data)) == [1, 2, 3]


def test_bad_indexes_and_schemas_fail_clearly():
    enum_dec = read_versioned_snapshot(DataInput(_snapshot({"type": "enum", "name": "E", "symbols": ["A"]})))
    with pytest.raises(UnknownLayout, match="index 3"):
        enum_dec.read(DataInput(struct.pack(">i", 3)))
    with pytest.raises(FlinkFormatError, match="does not parse"):
        read_versioned_snapshot(DataInput(_utf("org.apache.flink.formats.avro.typeutils.AvroSerializerSnapshot")
                                          + struct.pack(">i", 2) + _utf("X") + _utf("{not json")))
    with pytest.raises(UnknownSnapshot):
        read_versioned_snapshot(DataInput(_utf("org.apache.flink.formats.avro.typeutils.AvroSerializerSnapshot")
                                          + struct.pack(">i", 9)))
