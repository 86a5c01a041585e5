"""Unit tests of the Flink value decoders: snapshot bytes and value bytes written by hand, as Flink writes them."""

from __future__ import annotations

import datetime as dt
import struct
from decimal import Decimal

import pandas as pd
import pyarrow as pa
import pytest

from explorer.readers.flink import heapformat
from explorer.readers.flink.datainput import DataInput
from explorer.readers.flink.javaser import parse_java_object
from explorer.readers.flink.rows import RowBuffer, to_arrow
from explorer.readers.flink.serializers import (
    COMPOSITE_MAGIC,
    NESTED_MAGIC,
    PRIMITIVES,
    SNAPSHOT_DECODERS,
    Decoder,
    ListDecoder,
    MapDecoder,
    PojoDecoder,
    RowDataDecoder,
    UnknownLayout,
    UnknownSnapshot,
    read_versioned_snapshot,
    register_snapshot_decoder,
)
from explorer.readers.flink.statemeta import BackendMeta, StateMeta

BASE = "org.apache.flink.api.common.typeutils.base."


def utf(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">H", len(b)) + b


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def fstr(s: str) -> bytes:
    """StringValue: length + 1 as a varint, then the chars (ASCII here)."""
    assert s.isascii() and len(s) < 127
    return bytes([len(s) + 1]) + s.encode()


def snap(cls: str, content: bytes = b"", version: int = 3) -> bytes:
    return utf(cls) + i32(version) + content


def nested(*snaps: bytes) -> bytes:
    return i32(NESTED_MAGIC) + i32(1) + i32(len(snaps)) + b"".join(snaps)


def composite(outer_version: int, outer: bytes, *snaps: bytes) -> bytes:
    return i32(COMPOSITE_MAGIC) + i32(outer_version) + outer + nested(*snaps)


LONG = snap(f"{BASE}LongSerializer$LongSerializerSnapshot")
STRING = snap(f"{BASE}StringSerializer$StringSerializerSnapshot")


def decoder(snapshot: bytes) -> Decoder:
    inp = DataInput(snapshot)
    d = read_versioned_snapshot(inp)
    assert inp.at_end(), "the snapshot was not read to its end"
    return d


def value(d: Decoder, data: bytes):
    inp = DataInput(data)
    v = d.read(inp)
    assert inp.at_end(), "the value was not read to its end"
    return v


def test_enum_names_come_from_the_snapshot():
    d = decoder(snap(f"{BASE}EnumSerializer$EnumSerializerSnapshot",
                     utf("com.example.Tier") + i32(3) + utf("BRONZE") + utf("SILVER") + utf("GOLD")))
    assert d.describe() == "Enum Tier"
    assert value(d, i32(2)) == "GOLD"
    assert value(d, i32(0)) == "BRONZE"


def test_java_time_types():
    inst = decoder(snap(f"{BASE}InstantSerializer$InstantSerializerSnapshot"))
    assert value(inst, i64(1_700_000_000) + i32(123_456_789)) == pd.Timestamp("2023-11-14T22:13:20.123456789Z")
    assert value(inst, i64(-(1 << 63)) + i32(-(1 << 31))) is None
    day = decoder(snap(f"{BASE}LocalDateSerializer$LocalDateSerializerSnapshot"))
    assert value(day, i32(2023) + bytes([11, 14])) == dt.date(2023, 11, 14)
    assert value(day, i32(-(1 << 31)) + struct.pack(">h", -(1 << 15))) is None
    t = decoder(snap(f"{BASE}LocalTimeSerializer$LocalTimeSerializerSnapshot"))
    assert value(t, bytes([22, 21, 5]) + i32(7_000_000)) == dt.time(22, 21, 5, 7000)
    # nanoseconds a datetime.time cannot hold are not cut off: the time since midnight instead
    assert value(t, bytes([22, 21, 5]) + i32(7_000_001)) == pd.Timedelta("22:21:05.007000001")
    ldt = decoder(snap(f"{BASE}LocalDateTimeSerializer$LocalDateTimeSerializerSnapshot"))
    assert value(ldt, i32(2023) + bytes([11, 14, 22, 21, 5]) + i32(123_456_789)) == pd.Timestamp("2023-11-14T22:21:05.123456789")


def test_date_and_sql_types():
    date = decoder(snap(f"{BASE}DateSerializer$DateSerializerSnapshot"))
    assert value(date, i64(1_700_000_000_123)) == pd.Timestamp("2023-11-14T22:13:20.123Z")
    assert value(date, i64(-(1 << 63))) is None
    ts = decoder(snap(f"{BASE}SqlTimestampSerializer$SqlTimestampSerializerSnapshot"))
    # getTime() holds the millis, getNanos() all nanos of the second
    assert value(ts, i64(1_700_000_000_123) + i32(123_456_789)) == pd.Timestamp("2023-11-14T22:13:20.123456789Z")


def test_big_decimal_and_big_integer():
    d = decoder(snap(f"{BASE}BigDecSerializer$BigDecSerializerSnapshot"))
    unscaled = (116_352).to_bytes(3, "big", signed=True)
    assert value(d, i32(len(unscaled) + 4) + unscaled + i32(2)) == Decimal("1163.52")
    neg = (-5).to_bytes(1, "big", signed=True)
    assert value(d, i32(5) + neg + i32(1)) == Decimal("-0.5")
    assert value(d, i32(0)) is None and value(d, i32(3)) == Decimal(10)
    b = decoder(snap(f"{BASE}BigIntSerializer$BigIntSerializerSnapshot"))
    big = (10**30).to_bytes(13, "big", signed=True)
    assert value(b, i32(len(big) + 4) + big) == 10**30


def test_arrays():
    longs = decoder(snap(f"{BASE}array.LongPrimitiveArraySerializer$LongPrimitiveArraySerializerSnapshot"))
    assert value(longs, i32(3) + i64(1) + i64(-2) + i64(3)) == [1, -2, 3]
    assert longs.describe() == "long[]" and longs.arrow_type() == pa.list_(pa.int64())
    names = decoder(snap(f"{BASE}array.StringArraySerializer$StringArraySerializerSnapshot"))
    assert value(names, i32(3) + fstr("food") + b"\x00" + fstr("books")) == ["food", None, "books"]
    generic = decoder(snap(f"{BASE}GenericArraySerializerSnapshot", composite(1, utf("java.lang.Long"), LONG)))
    assert value(generic, i32(2) + b"\x01" + i64(7) + b"\x00") == [7, None]


def test_set_of_flink_2():
    d = decoder(snap(f"{BASE}SetSerializerSnapshot", composite(1, b"", STRING)))
    assert d.describe() == "Set<String>"
    assert value(d, i32(3) + b"\x00" + fstr("a") + b"\x01" + b"\x00" + fstr("b")) == ["a", None, "b"]


def test_row_with_kind_bits_and_nulls():
    d = decoder(snap("org.apache.flink.api.java.typeutils.runtime.RowSerializer$RowSerializerSnapshot",
                     composite(4, b"\x01", STRING, LONG, LONG)))
    # mask: 2 row-kind bits, then one null bit per field, most significant bit first: field 1 is null
    mask = bytes([0b00010000])
    assert value(d, mask + fstr("x") + i64(5)) == {"f0": "x", "f1": None, "f2": 5}
    assert value(d, bytes([0b01000000]) + fstr("y") + i64(1) + i64(2)) == {"f0": "y", "f1": 1, "f2": 2}  # -U row


def test_either():
    d = decoder(snap("org.apache.flink.api.java.typeutils.runtime.JavaEitherSerializerSnapshot",
                     composite(1, b"", STRING, LONG)))
    assert value(d, b"\x01" + fstr("food")) == {"left": "food", "right": None}
    assert value(d, b"\x00" + i64(79)) == {"left": None, "right": 79}


def test_global_window():
    d = decoder(snap("org.apache.flink.streaming.api.windowing.windows.GlobalWindow$Serializer$GlobalWindowSerializerSnapshot"))
    assert value(d, b"\x00") == "GlobalWindow"


def test_list_and_map_as_one_value():
    lst = ListDecoder(PRIMITIVES["LongSerializer"])
    assert value(lst, i32(2) + i64(361) + i64(377)) == [361, 377]
    mp = MapDecoder(PRIMITIVES["StringSerializer"], PRIMITIVES["LongSerializer"])
    assert value(mp, i32(2) + fstr("books") + b"\x00" + i64(200) + fstr("food") + b"\x01") == {"books": 200, "food": None}
    arr = to_arrow([{"books": 200}, None, {}], mp.arrow_type())
    assert arr.type == pa.map_(pa.string(), pa.int64())
    assert pa.table({"v": arr}).to_pandas(maps_as_pydicts="strict")["v"].tolist() == [{"books": 200}, None, {}]


def test_value_state_of_a_list_type_is_one_row():
    meta = StateMeta(0, "list_value", "KEY_VALUE", {"KEYED_STATE_TYPE": "VALUE"},
                     {"VALUE_SERIALIZER": ListDecoder(PRIMITIVES["LongSerializer"])})
    assert isinstance(meta.element_decoder, ListDecoder)
    assert meta.user_key_decoder is None
    as_list_state = StateMeta(0, "l", "KEY_VALUE", {"KEYED_STATE_TYPE": "LIST"}, dict(meta.serializers))
    assert as_list_state.element_decoder is PRIMITIVES["LongSerializer"]


def test_interval_join_buffer_entry_and_cep():
    entry = decoder(snap("org.apache.flink.streaming.api.operators.co.IntervalJoinOperator$BufferEntrySerializerSnapshot",
                         composite(1, b"", STRING)))
    assert value(entry, b"\x01" + fstr("x")) == {"element": "x", "joined": True}
    cep = "org.apache.flink.cep.nfa.sharedbuffer."
    event_id = snap(f"{cep}EventId$EventIdSerializer$EventIdSerializerSnapshot")
    assert value(decoder(event_id), i32(3) + i64(1000)) == {"id": 3, "timestamp": 1000}
    lock = decoder(snap(f"{cep}LockableTypeSerializerSnapshot", composite(1, b"", LONG)))
    assert value(lock, i32(2) + i64(9)) == {"refs": 2, "element": 9}
    node = decoder(snap(f"{cep}NodeId$NodeIdSerializer$NodeIdSerializerSnapshot", composite(1, b"", event_id)))
    assert value(node, b"\x01" + i32(1) + i64(5) + fstr("start")) == {"event": {"id": 1, "timestamp": 5}, "page": "start"}
    dewey = decoder(snap("org.apache.flink.cep.nfa.DeweyNumber$DeweyNumberSerializer$DeweyNumberSerializerSnapshot"))
    assert value(dewey, i32(3) + i32(1) + i32(0) + i32(2)) == "1.0.2"


def test_sql_timestamp_data_by_precision():
    cls = "org.apache.flink.table.runtime.typeutils.TimestampDataSerializer$TimestampDataSerializerSnapshot"
    compact = decoder(snap(cls, i32(3)))
    assert value(compact, i64(1_700_000_000_123)) == pd.Timestamp("2023-11-14T22:13:20.123")
    precise = decoder(snap(cls, i32(9)))
    assert value(precise, i64(1_700_000_000_123) + i32(456_789)) == pd.Timestamp("2023-11-14T22:13:20.123456789")


def test_rowdata_timestamp_in_the_variable_part():
    d = RowDataDecoder(["TIMESTAMP_LTZ", "TIMESTAMP_LTZ"], [9, 3])
    null_bytes = 8
    var = null_bytes + 16
    row = bytearray(null_bytes) + struct.pack("<q", (var << 32) | 456_789) + struct.pack("<q", 1_700_000_000_123)
    row += struct.pack("<q", 1_700_000_000_000)
    got = d.decode_row(bytes(row))
    assert got == {"f0": pd.Timestamp("2023-11-14T22:13:20.000456789"), "f1": pd.Timestamp("2023-11-14T22:13:20.123")}


def test_javaser_reads_class_objects():
    """TC_CLASS (0x76), as in the DataType of a SQL MapView accumulator: a class descriptor, never loaded."""
    desc = b"\x72" + utf("java.lang.Long") + i64(1) + b"\x02" + struct.pack(">h", 0) + b"\x78" + b"\x70"
    stream = b"\xac\xed\x00\x05" + b"\x76" + desc
    assert parse_java_object(DataInput(stream)) == {"@class_object": "java.lang.Long"}


def test_pojo_with_one_unknown_field_decodes_the_others_when_the_length_is_known():
    d = PojoDecoder("com.example.P", [("a", PRIMITIVES["LongSerializer"]), ("odd", None), ("z", PRIMITIVES["StringSerializer"])])
    data = b"\x02" + b"\x00" + i64(4) + b"\x00" + b"KRYO" + b"\x00" + fstr("end")
    assert d.read(DataInput(data, bounded=True)) == {"a": 4, "odd": b"\x00KRYO", "z": "end"}
    with pytest.raises(UnknownLayout, match="'odd'"):
        d.read(DataInput(data))  # not bounded (a heap snapshot): its length cannot be known
    assert "'odd'" in d.raw_note()


def test_registered_factory_wins_and_gets_the_options():
    cls = "com.example.MySerializer$MySnapshot"
    seen = {}

    class Two(Decoder):
        name = "Two"

        def read(self, inp):
            return inp.read_byte() * 2

    def factory(inp, ctx):
        seen["ctx"] = ctx
        inp.read_int()  # this snapshot's content: one int
        return Two()

    with pytest.raises(UnknownSnapshot):
        decoder(snap(cls, i32(0)))
    register_snapshot_decoder(cls, factory)
    try:
        inp = DataInput(snap(cls, i32(0), version=7))
        d = read_versioned_snapshot(inp, {"jars": ["job.jar"]})
        assert inp.at_end() and value(d, b"\x05") == 10
        assert seen["ctx"].version == 7 and seen["ctx"].options == {"jars": ["job.jar"]}
    finally:
        del SNAPSHOT_DECODERS[cls]


def _heap_key_group(kg: int, parts: list[bytes]) -> bytes:
    return i32(kg) + b"".join(parts)


class _Raw(Decoder):
    name = "raw"

    def read(self, inp):
        raise UnknownLayout("com.example.Unknown")


def test_heap_key_group_resyncs_after_an_undecodable_state():
    long_ = PRIMITIVES["LongSerializer"]
    string = PRIMITIVES["StringSerializer"]
    void = PRIMITIVES["VoidNamespaceSerializer"]

    def state(i, name, value_dec):
        return StateMeta(i, name, "KEY_VALUE", {"KEYED_STATE_TYPE": "VALUE"},
                         {"VALUE_SERIALIZER": value_dec, "NAMESPACE_SERIALIZER": void})

    states = [state(0, "a", long_), state(1, "bad", _Raw()), state(2, "c", string)]
    backend = BackendMeta(6, False, string, states, 0)
    entry = lambda key, v: b"\x00" + fstr(key) + v  # noqa: E731  namespace, key, value
    data = _heap_key_group(7, [
        struct.pack(">h", 0) + i32(1) + entry("k1", i64(11)),
        struct.pack(">h", 1) + i32(2) + entry("k1", b"\x09\x09\x09") + entry("k2", b"\x00\x02\x07"),
        struct.pack(">h", 2) + i32(2) + entry("k1", fstr("x")) + entry("k2", fstr("y")),
    ])
    buffers = {i: RowBuffer(s) for i, s in enumerate(states)}
    skipped: dict[int, str] = {}
    heapformat.read_key_group(data, (7, 0, len(data)), backend, buffers.get, skipped)
    assert buffers[0].values == [11]
    assert buffers[2].keys == ["k1", "k2"] and buffers[2].values == ["x", "y"]
    assert list(skipped) == [1] and "com.example.Unknown" in skipped[1]


MIXED = [
    [1, 2.5, None, b"raw bytes the reader could not decode"],  # ints stay ints among floats and bytes
    [None, b"\x00raw", {"city": "Oslo", "zip": 150}, {"city": "Bergen", "zip": 5003}],
    [{"a": 1}, {"b": "x"}, None],  # dicts of different fields: no field added to either
    [(1, "a", 2.5), {1, 2}, frozenset([3]), [1, "x"], None],  # Python containers come back as themselves
    [2 ** 70, 5, None, -(2 ** 300)],  # ints beyond int64
    [True, 1, 0, float("nan")],  # bool is not int; NaN is not null
    [{None: 1, "a": 2}, {}],  # a None key (Arrow's map keys cannot be null)
    [dt.date(2020, 1, 1), "2020-01-01", Decimal("1.50")],
    [[{"a": 1}, {"a": "s"}], []],
]


@pytest.mark.parametrize("values", MIXED, ids=range(len(MIXED)))
def test_mixed_values_keep_their_types(values):
    """Values of mixed Python types (raw bytes among decoded values, pickled Python data) are never
    turned into text: the Arrow column gives back the same values of the same types, sliced or not."""
    from explorer.readers.base import python_values

    arr = to_arrow(values)
    assert not pa.types.is_string(arr.type)
    for lo in range(len(values)):
        back = python_values(arr.slice(lo))
        assert [type(v) for v in back] == [type(v) for v in values[lo:]]
        assert repr(back) == repr(values[lo:])  # repr: NaN == NaN, and 1 == 1.0 == True must not pass


def test_mixed_values_through_keyed_state(tmp_path):
    """Pieces whose value columns differ (one typed, one a union) combine into one DataFrame of the same values."""
    from explorer.readers.base import make_piece
    from explorer.stored.frames import combine as _combine  # the combining step itself, without a snapshot

    typed = make_piece({"operator": ["op"], "state": ["s"], "kind": ["value"], "key": ["k1"], "value": to_arrow([7])})
    mixed = make_piece({"operator": ["op"] * 3, "state": ["s"] * 3, "kind": ["value"] * 3, "key": ["k2", "k3", "k4"],
                        "value": to_arrow([8, b"\x01raw", (1, "x")])})
    df = _combine([typed, mixed], None)
    assert df["value"].tolist() == [7, 8, b"\x01raw", (1, "x")]
    assert [type(v) for v in df["value"]] == [int, int, bytes, tuple]


def test_nanosecond_timestamps_stay_nanoseconds():
    """Instant / LocalDateTime values carry nanoseconds: inside a POJO (a struct) they must reach pandas
    whole, not as microseconds (Arrow's inference) or integers (Arrow's pandas conversion of nested values)."""
    from explorer.readers.base import make_piece
    from explorer.stored.frames import combine as _combine

    ts = pd.Timestamp("2023-11-14T22:13:29.387009007Z")
    local = pd.Timestamp("2023-11-14T22:21:15.047000123")
    vals = [{"at": ts, "local": local, "seen": [ts]}, None]
    df = _combine([make_piece({"operator": ["o"] * 2, "state": ["s"] * 2, "kind": ["value"] * 2, "key": ["a", "b"],
                               "value": to_arrow(vals)})], None)
    got = df["value"][0]
    assert got["at"] == ts and got["at"].nanosecond == 7 and got["local"].nanosecond == 123 and got["seen"] == [ts]
    assert df["value"][1] is None


def test_a_type_arrow_cannot_hold_is_noted():
    class Odd:
        def __repr__(self):
            return "Odd()"

    notes = []
    arr = to_arrow([Odd(), None], note=notes.append)
    assert arr.to_pylist() == ["Odd()", None] and len(notes) == 1 and "Odd" in notes[0]
