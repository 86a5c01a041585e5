"""Value-heavy Flink state decoded column-wise (``valuecolumns``, ``kryocolumns``) equals the row-by-row path.

Two kinds of check:

* every state of the production fixtures written by real Flink jobs (POJOs with nested collections, Rows,
  tuples, Kryo, java.time, BigDecimal...) read column-wise and again with the row path forced: the same
  pieces, value for value and type for type;
* values written by hand for what the fixtures do not reach (null POJOs and fields, empty collections, a
  subclass instance, an undecodable field, repeated or null map keys, hostile counts, bytes past the entry,
  invalid dates, Kryo back-references, long lists): the same Arrow column as the row path
  (``rows.to_arrow`` over the decoders' values), or :class:`~explorer.readers.flink.columnar.Fallback`
  where the state must go row by row.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from explorer.readers.base import KeyedStateQuery
from explorer.readers.flink import FlinkSnapshotReader, buffers, columnar, valuecolumns
from explorer.readers.flink.columnar import Buf, Fallback
from explorer.readers.flink.datainput import DataInput
from explorer.readers.flink.kryo import KryoConfig, KryoDecoder, Layouts
from explorer.readers.flink.rows import to_arrow
from explorer.readers.flink.serializers import (
    PRIMITIVES,
    SNAPSHOT_DECODERS,
    ListDecoder,
    MapDecoder,
    NullableDecoder,
    PojoDecoder,
    TtlDecoder,
    TupleDecoder,
)
from explorer.readers.flink.valuetypes import ArrayDecoder, EitherDecoder, EnumDecoder, RowDecoder

PROD = Path(__file__).resolve().parents[2] / "sample_data" / "flink" / "production"
BASE = "org.apache.flink.api.common.typeutils.base."
LEGACY_HINTS = {"ProductionFixtures$LegacyThing": {"score": "int", "label": "String",
                                                   "history": "java.util.ArrayList<String>"}}
#: fixtures whose keyed state is in the key/value layout (the heap checkpoints' own layout is read row by row;
#: the source-splits job keeps operator state only)
KV_FIXTURES = sorted(p.name for p in PROD.iterdir() if (p / "EXPECTED.json").is_file()
                     and ("savepoint" in p.name or "rocksdb" in p.name or "forst" in p.name)
                     and "changelog" not in p.name and "source-splits" not in p.name)

S, L, I, D, B = (PRIMITIVES[k] for k in ("StringSerializer", "LongSerializer", "IntSerializer", "DoubleSerializer",
                                        "BooleanSerializer"))


def _fixed(name: str):
    return SNAPSHOT_DECODERS[f"{BASE}{name}${name}Snapshot"](None, None)


INSTANT, LOCAL_DATE, LOCAL_TIME, LOCAL_DT, BIG_DEC = (_fixed(n) for n in (
    "InstantSerializer", "LocalDateSerializer", "LocalTimeSerializer", "LocalDateTimeSerializer", "BigDecSerializer"))


def _pieces(path: Path, options: dict, rows: bool, monkeypatch) -> list[pa.Table]:
    with monkeypatch.context() as m:
        if rows:
            def row_by_row(*args, **kwargs):
                raise Fallback("the row path, for comparison")
            m.setattr(columnar, "decode_state", row_by_row)
        reader = FlinkSnapshotReader(path, **options)
        reader.workers = 1
        return list(reader.keyed_pieces(KeyedStateQuery()))


@pytest.mark.parametrize("name", KV_FIXTURES)
def test_every_state_of_the_production_fixtures_equals_the_row_path(name, monkeypatch):
    exp = json.loads((PROD / name / "EXPECTED.json").read_text())
    options = {"type_hints": LEGACY_HINTS, **exp.get("open_options", {})}
    options.pop("ttl", None)
    got = _pieces(PROD / name, options, False, monkeypatch)
    want = _pieces(PROD / name, options, True, monkeypatch)
    assert len(got) == len(want)
    compared = 0
    for a, b in zip(got, want):
        if not b.num_rows:  # (an empty state's columns are typed by the column path, null by the row path)
            continue
        state = b.column("state")[0].as_py()
        for col in b.column_names:
            assert a.column(col).equals(b.column(col)), (name, state, col, a.column(col).type, b.column(col).type)
        compared += 1
    assert compared


# --- values written by hand -------------------------------------------------------------------------------

def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def fstr(s: str | None) -> bytes:
    if s is None:
        return b"\x00"
    assert s.isascii() and len(s) < 127
    return bytes([len(s) + 1]) + s.encode()


def _both(dec, values: list[bytes]) -> pa.Array:
    """The column-wise column of ``values`` (one entry each), asserted equal to the row path's; returned."""
    data = b"".join(values)
    ends = np.cumsum([len(v) for v in values]).astype(np.int64)
    pos = ends - np.array([len(v) for v in values], dtype=np.int64)
    col, ttl, got_ends = valuecolumns.values(dec, Buf(data), pos, ends)
    inner = dec.value if isinstance(dec, TtlDecoder) else dec
    rows = []
    for p, e in zip(pos.tolist(), ends.tolist()):
        v = dec.read(DataInput(data, p, e, bounded=True))
        rows.append(v.value if isinstance(dec, TtlDecoder) else v)
    want = to_arrow(rows, inner.arrow_type())
    assert col.type == want.type and col.equals(want), (col, want)
    assert got_ends.tolist() == ends.tolist()
    return col


def _falls_back(dec, values: list[bytes]) -> None:
    data = b"".join(values)
    ends = np.cumsum([len(v) for v in values]).astype(np.int64)
    pos = ends - np.array([len(v) for v in values], dtype=np.int64)
    with pytest.raises(Fallback):
        valuecolumns.values(dec, Buf(data), pos, ends)


ADDRESS = PojoDecoder("p.Address", [("city", S), ("zip", I)])


def pojo(*fields: bytes | None) -> bytes:
    """A POJO value (flags 2) whose fields are given (None: a null field)."""
    return b"\x02" + b"".join(b"\x01" if f is None else b"\x00" + f for f in fields)


def address(city: str, zip_: int) -> bytes:
    return pojo(fstr(city), i32(zip_))


def test_pojos_with_null_values_null_fields_nested_pojos_and_empty_collections():
    dec = PojoDecoder("p.Basket", [("id", S), ("items", ListDecoder(L)), ("counts", MapDecoder(S, I)),
                                   ("address", ADDRESS)])
    items = lambda *xs: i32(len(xs)) + b"".join(i64(x) for x in xs)  # noqa: E731
    counts = lambda **kv: i32(len(kv)) + b"".join(fstr(k) + b"\x00" + i32(v) for k, v in kv.items())  # noqa: E731
    col = _both(dec, [
        pojo(fstr("a"), items(1, 2), counts(x=1, y=2), address("Oslo", 1)),
        b"\x01",  # a null POJO
        pojo(None, items(), counts(), None),  # null fields, empty collections
        pojo(fstr("b"), None, counts(z=3), address("", 0)),
    ])
    assert pa.types.is_struct(col.type) and col.null_count == 1
    assert col.to_pylist()[2]["items"] == [] and col.to_pylist()[2]["address"] is None


def test_a_pojo_typed_by_inference_when_a_field_has_no_arrow_type():
    # BigDecimal has no Arrow type of its own: the row path infers the whole value's type from the values
    # (ints as int64, an all-null field as null, the decimal's precision from the values)
    dec = PojoDecoder("p.Profile", [("visits", I), ("spend", BIG_DEC), ("note", S), ("address", ADDRESS)])
    big = lambda unscaled, scale: i32(4 + 8) + i64(unscaled) + i32(scale)  # noqa: E731
    col = _both(dec, [pojo(i32(3), big(1234, 2), None, address("x", 1)),
                      pojo(i32(-1), i32(2), None, None),  # BigDecimal 1 (length code 2), no scale
                      b"\x01"])
    assert col.type.field("visits").type == pa.int64() and col.type.field("note").type == pa.null()


def test_subclass_pojos_and_undecodable_fields_go_row_by_row():
    dec = PojoDecoder("p.A", [("x", L)])
    _falls_back(dec, [pojo(i64(1)), b"\x00" + b"\x00" + i64(2)])  # flags 0: a subclass instance
    _falls_back(PojoDecoder("p.B", [("x", L), ("y", None)]), [pojo(i64(1), b"??")])


def test_rows_either_tuples_and_nullables():
    row = RowDecoder([S, L, D], row_kind=True)
    # Row: 2 row-kind bits then one null bit per field, most significant first
    _both(row, [b"\x00" + fstr("a") + i64(1) + struct.pack(">d", 1.5), bytes([0b00100000]) + i64(2) + struct.pack(">d", 2.0),
                bytes([0b00111000])])
    _both(EitherDecoder(S, L), [b"\x01" + fstr("left"), b"\x00" + i64(7)])
    _both(TupleDecoder("Tuple2", [I, B]), [i32(1) + b"\x01", i32(-5) + b"\x00"])
    _both(NullableDecoder(L), [b"\x01", b"\x00" + i64(9)])


def test_maps_lists_and_arrays():
    _both(MapDecoder(S, L), [i32(2) + fstr("a") + b"\x00" + i64(1) + fstr("b") + b"\x01", i32(0)])
    # every map with the same string keys in the same order: the row path's dicts become a struct
    _both(PojoDecoder("p.M", [("m", MapDecoder(S, BIG_DEC))]),
          [pojo(i32(1) + fstr("k") + b"\x00" + i32(1)), pojo(i32(1) + fstr("k") + b"\x00" + i32(3))])
    _both(ListDecoder(S), [i32(3) + fstr("a") + fstr(None) + fstr("ccc"), i32(0), i32(1) + fstr("")])
    _both(ArrayDecoder(S, "String", nullable=True), [i32(2) + b"\x01" + fstr("a") + b"\x00", i32(-1)])
    _both(ArrayDecoder(L, "long"), [i32(2) + i64(1) + i64(2), i32(-1), i32(0)])


def test_repeated_or_null_map_keys_and_hostile_counts_go_row_by_row():
    _falls_back(MapDecoder(S, L), [i32(2) + fstr("a") + b"\x00" + i64(1) + fstr("a") + b"\x00" + i64(2)])
    _falls_back(MapDecoder(NullableDecoder(S), L), [i32(1) + b"\x01" + b"\x00" + i64(1)])
    _falls_back(ListDecoder(L), [i32(1 << 30) + i64(1)])
    _falls_back(ListDecoder(S), [i32(-1)])
    _falls_back(PojoDecoder("p.A", [("x", L)]), [pojo(i64(1))[:-3]])  # runs past its entry


def test_java_time_values_and_their_limits():
    _both(INSTANT, [i64(1_700_000_000) + i32(123), i64(-(1 << 63)) + i32(-(1 << 31)), i64(-5) + i32(999_999_999)])
    _both(LOCAL_DATE, [i32(2024) + bytes([2, 29]), i32(-(1 << 31)) + b"\x80\x00" + b"", i32(1) + bytes([1, 1])])
    _both(LOCAL_DT, [i32(2024) + bytes([12, 31, 23, 59, 59]) + i32(999_999_999)])
    _both(LOCAL_TIME, [bytes([1, 2, 3]) + i32(4000), bytes([0x80, 0, 0]) + i32(0)])
    _falls_back(LOCAL_DATE, [i32(2023) + bytes([2, 29])])  # no such day: the row path reports it
    _falls_back(LOCAL_TIME, [bytes([1, 2, 3]) + i32(4001)])  # nanoseconds: the row path gives a Timedelta
    _falls_back(INSTANT, [i64(10**12) + i32(0)])  # past what pandas holds: the row path's ConversionFailure


def test_enums_big_integers_and_ttl_values():
    _both(EnumDecoder("p.Tier", ["LOW", "HIGH"]), [i32(1), i32(0), i32(7)])
    big = PRIMITIVES["BigIntSerializer"]
    _both(big, [i32(0), i32(1), i32(3), i32(4 + 2) + b"\xff\x00", i32(4 + 9) + b"\x01" + bytes(8)])  # the last > 64 bits
    col = _both(TtlDecoder(S), [i64(5) + fstr("a"), i64(6) + fstr("b")])
    assert col.to_pylist() == ["a", "b"]


def _kryo(cls: str, layout: dict) -> KryoDecoder:
    return KryoDecoder(KryoConfig(cls, [(cls, False)]), Layouts(type_hints=layout), 5)


def _ascii(text: str) -> bytes:
    return text[:-1].encode() + bytes([ord(text[-1]) | 0x80])


@pytest.fixture(params=["python", "kernel"])
def strings_by(request, monkeypatch):
    """Strings decoded one by one in Python (a process's first few, ``buffers.PYTHON_STRINGS``) or by the kernels."""
    if request.param == "kernel":
        monkeypatch.setattr(buffers, "_python_strings", [0])
    return request.param


def test_kryo_values_column_wise_and_value_by_value(strings_by):
    hints = {"p.Thing": {"label": "String", "score": "int", "history": "java.util.ArrayList<String>"}}
    dec = _kryo("p.Thing", hints)
    # class 85 + 2, new (1); history: ArrayList by name (1, name id 0, name), new, Kryo 5 size + 1 with the
    # "may be null" bit, elements (new + ascii); label (new + ascii); score (zig-zag)
    arraylist = bytes([1, 0]) + _ascii("java.util.ArrayList") + b"\x01"
    one = bytes([87, 1]) + arraylist + bytes([0x80 | 3]) + b"\x01" + _ascii("ab") + b"\x00" + b"\x01" + _ascii("L1") + bytes([20])
    two = bytes([87, 1]) + arraylist + bytes([0x80 | 1]) + b"\x01" + _ascii("L2") + bytes([3])
    col = _both(dec, [one, two, b"\x00"])  # (the last: a null value)
    assert col.to_pylist()[0] == {"history": ["ab", None], "label": "L1", "score": 10}
    # a back-reference (the label is the history's string again) cannot be column-wise: value by value, same result
    back = bytes([87, 1]) + arraylist + bytes([0x80 | 2]) + b"\x01" + _ascii("ab") + b"\x03" + bytes([20])
    _both(dec, [one, back])
    # Optional<String>: present, empty
    opt = KryoDecoder(KryoConfig("java.util.Optional", [("java.util.Optional", False)]), Layouts(), 5)
    _both(opt, [bytes([87, 1]) + b"\x03\x01" + _ascii("xy"), bytes([87, 1]) + b"\x00"])


def test_kryo_strings_of_every_encoding(strings_by):
    # ASCII runs (last byte marked), the length form for one char, empty and null, a non-ASCII one (read by Kryo's
    # own reader), and one that runs past its entry (the row path's error: the column falls back)
    dec = _kryo("java.lang.String", {})
    reg = bytes([87])  # String registered as the state's class (id 85 + 2); each value then a reference marker (new: 1)
    vals = [reg + b"\x01" + _ascii("hello"), reg + b"\x01" + b"\x82z", reg + b"\x01" + b"\x81", reg + b"\x01" + b"\x80",
            reg + b"\x01" + b"\x82\xc3\xa9"]
    assert _both(dec, vals).to_pylist() == ["hello", "z", "", None, "\u00e9"]
    _falls_back(dec, [reg + b"\x01" + b"abc"])


def test_long_list_states_finish_element_by_element():
    # a list state's value: elements joined by ","; one entry far longer than the waves go
    long_one = b",".join(i64(7) + fstr(f"v{i}") for i in range(200))
    entries = [long_one, i64(1) + fstr("a"), b""]
    data = b"".join(entries)
    ends = np.cumsum([len(e) for e in entries]).astype(np.int64)
    starts = ends - np.array([len(e) for e in entries], dtype=np.int64)
    values, ttl, rows, within, sizes = valuecolumns.elements(TtlDecoder(S), Buf(data), starts, ends)
    assert values.to_pylist() == [f"v{i}" for i in range(200)] + ["a"]
    assert rows.tolist() == [0] * 200 + [1] and within.tolist() == list(range(200)) + [0]
    assert ttl.tolist() == [7] * 200 + [1] and sizes.tolist() == [8 + len(fstr(f"v{i}")) for i in range(200)] + [10]
    with pytest.raises(Fallback):  # a delimiter that is not ","
        valuecolumns.elements(S, Buf(fstr("a") + b";" + fstr("b")), np.array([0]), np.array([5]))


@pytest.mark.parametrize("name", ["types-heap-canonical-savepoint", "types-rocksdb-native-savepoint"])
def test_every_state_of_the_types_job_is_decoded_column_wise(name, monkeypatch):
    """No state of the value-heavy job (Kryo too, with its layout hinted) falls back to the row path."""
    fell: list[str] = []
    decode_state = columnar.decode_state

    def spy(meta, *args, **kwargs):
        try:
            return decode_state(meta, *args, **kwargs)
        except Fallback as exc:
            fell.append(f"{meta.name}: {exc}")
            raise

    monkeypatch.setattr(columnar, "decode_state", spy)
    reader = FlinkSnapshotReader(PROD / name, type_hints=LEGACY_HINTS)
    rows = sum(p.num_rows for p in reader.keyed_pieces(KeyedStateQuery()))
    assert rows and fell == []
