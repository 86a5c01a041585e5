"""A heap table's column-wise snapshot (what a heap checkpoint copies at the barrier) makes exactly
the Parquet table its rows make: same rows, same order, same types, TTL or not, list or value state."""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass

import pyarrow as pa
import pytest

from explorer.engine.backends.heap import ColumnarValueTable, HeapStateTable
from explorer.engine.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
from explorer.engine.ttl import StateTtlConfig
from explorer.format.keyed import columns_to_table, rows_to_table
from explorer.format.types import type_info
from explorer.keygroups import KeyGroupRange


@dataclass(frozen=True)
class Ev:
    user: str
    ts: int
    score: float
    ok: bool


class EvChild(Ev):
    pass


def _fill(t: HeapStateTable, kind: str, ttl: bool, seed: int, value, keys) -> None:
    r = random.Random(seed)
    for _ in range(500):
        kg, k, ns = r.randrange(64), keys(r), r.choice([None, None, "w1", "w2"])
        v = value(r)
        e = (v, r.randrange(10**12)) if ttl else v
        if kind == "list":
            t.append(kg, k, ns, [e] * r.randrange(1, 4))
        else:
            t.put(kg, k, ns, e)
        if r.random() < 0.1:
            t.remove(kg, k, ns)


def _same(t: HeapStateTable, value_info, user_key) -> pa.Table:
    snap = t.snapshot_columns()
    got, got_kinds = columns_to_table(value_info=value_info, user_key=user_key, **snap.columns())
    want, want_kinds = rows_to_table(list(t.rows()), value_info, user_key)
    assert got.schema == want.schema
    assert got.equals(want)
    assert got_kinds == want_kinds
    return got


VALUES = {
    "int": (int, lambda r: r.randrange(-5, 10**6)),
    "str": (str, lambda r: f"s{r.randrange(100)}"),
    "dataclass": (Ev, lambda r: Ev(f"u{r.randrange(9)}", r.randrange(10**9), r.random(), r.random() < 0.5)),
    # instances of a subclass and None fields: each value through to_arrow, same table
    "dataclass_mixed": (Ev, lambda r: EvChild("x", 1, 0.5, True) if r.random() < 0.2 else Ev(None, 2, 1.0, False)),
    "optional_int": (int | None, lambda r: None if r.random() < 0.3 else r.randrange(100)),
    "list_of_int": (list[int], lambda r: [r.randrange(9) for _ in range(r.randrange(3))]),
    "tuple": (tuple[str, int], lambda r: (f"t{r.randrange(5)}", r.randrange(5))),
}
KEYS = {"str": lambda r: f"k{r.randrange(150)}", "int": lambda r: r.randrange(150),
        "tuple": lambda r: (f"a{r.randrange(9)}", r.randrange(9))}


@pytest.mark.parametrize("ttl", [False, True], ids=["no_ttl", "ttl"])
@pytest.mark.parametrize("kind", ["value", "list"])
@pytest.mark.parametrize("value", sorted(VALUES))
def test_snapshot_columns_make_the_rows_table(kind, ttl, value):
    typ, make = VALUES[value]
    cfg = StateTtlConfig(60_000) if ttl else None
    desc = (ListStateDescriptor if kind == "list" else ValueStateDescriptor)("s", typ, ttl=cfg)
    t = HeapStateTable(desc, KeyGroupRange(0, 63))
    _fill(t, kind, ttl, zlib.crc32(f"{kind}{ttl}{value}".encode()), make, KEYS["str"])
    table = _same(t, desc.value_info, "index" if kind == "list" else None)
    assert table.num_rows > 100


@pytest.mark.parametrize("keys", sorted(KEYS))
def test_snapshot_columns_key_kinds(keys):
    desc = ListStateDescriptor("l", int)
    t = HeapStateTable(desc, KeyGroupRange(0, 63))
    _fill(t, "list", False, 7, lambda r: r.randrange(100), KEYS[keys])
    _same(t, desc.value_info, "index")


def test_snapshot_columns_skip_empty_values_and_lists():
    desc = ValueStateDescriptor("v", int)
    t = HeapStateTable(desc, KeyGroupRange(0, 7))
    t.put(3, "a", None, 1)
    t.put(1, "b", None, None)  # stored but empty: no row
    t.put(1, "c", None, 2)
    assert _same(t, desc.value_info, None).column("key").to_pylist() == ["c", "a"]
    lists = HeapStateTable(ListStateDescriptor("l", str), KeyGroupRange(0, 7))
    lists.put(2, 5, None, [])  # an empty list: no row, and its key does not type the key column
    _same(lists, lists.descriptor.value_info, "index")
    lists.put(4, 6, None, ["x", None])  # a None element is a row
    assert _same(lists, lists.descriptor.value_info, "index").column("value").to_pylist() == ["x", None]


def test_snapshot_columns_is_a_copy():
    """Taken at the barrier: what the job does afterwards does not reach the snapshot."""
    desc = ListStateDescriptor("l", int)
    t = HeapStateTable(desc, KeyGroupRange(0, 7))
    t.append(1, "a", None, [1, 2])
    t.put(2, "b", None, [3])
    snap = t.snapshot_columns()
    t.append(1, "a", None, [9])
    t.remove(2, "b", None)
    t.put(0, "c", None, [4])
    table, _ = columns_to_table(value_info=desc.value_info, user_key="index", **snap.columns())
    assert table.to_pydict()["value"] == [1, 2, 3]
    assert table.to_pydict()["user_key"] == [0, 1, 0]


def test_map_state_has_no_column_snapshot():
    assert HeapStateTable(MapStateDescriptor("m", str, int), KeyGroupRange(0, 7)).snapshot_columns() is None


def test_to_arrow_array_is_the_array_of_to_arrow():
    info = type_info(Ev)
    vals = [Ev("a", 1, 0.5, True), Ev("b", 2, 1.5, False)]
    assert info.to_arrow_array(vals).equals(pa.array([info.to_arrow(v) for v in vals], type=info.arrow_type))
    mixed = vals + [None, {"user": "d", "ts": 3, "score": 0.0, "ok": True}]
    assert info.to_arrow_array(mixed).to_pylist() == [None if v is None else info.to_arrow(v) for v in mixed]
    with pytest.raises((pa.ArrowInvalid, pa.ArrowTypeError, TypeError)):
        info.to_arrow_array([Ev("a", "not an int", 0.5, True)])


@pytest.mark.parametrize("dtype", ["int64", "float64"])
def test_columnar_value_table_snapshot_makes_the_rows_table(dtype):
    """The built-in aggregates' table (count, sum): its column snapshot, taken at the barrier instead
    of a tuple per row, makes the same table as its rows, and later writes do not reach it."""
    desc = ValueStateDescriptor("count", int if dtype == "int64" else float)
    t = ColumnarValueTable(desc, KeyGroupRange(0, 63), dtype)
    r = random.Random(3)
    for _ in range(3000):
        kg = r.randrange(64)
        key = f"k{kg}-{r.randrange(40)}"
        t.put(kg, key, None, r.randrange(10**6) if dtype == "int64" else r.random())
        if r.random() < 0.05:
            t.remove(kg, key, None)
    snap = t.snapshot_columns()
    got = _same(t, desc.value_info, None)
    assert got.num_rows == len(t) > 100
    first = next(t.addresses())
    t.put(first[0], first[1], None, -1)
    t.remove(*next(iter(list(t.addresses())[1:2])))
    again, _ = columns_to_table(value_info=desc.value_info, user_key=None, **snap.columns())
    assert again.equals(got)


def test_columnar_value_table_snapshots_follow_added_and_removed_keys():
    """Snapshots between which keys are only updated share their layout; one taken after a key
    was added or removed has its own, and each makes its own rows' table."""
    desc = ValueStateDescriptor("count", int)
    t = ColumnarValueTable(desc, KeyGroupRange(0, 7), "int64")
    for i in range(20):
        t.put(i % 8, f"k{i}", None, i)
    tables = [_same(t, desc.value_info, None)]
    t.put(3, "k3", None, 99)  # an update only
    tables.append(_same(t, desc.value_info, None))
    t.put(2, "new", None, 5)  # a key added
    tables.append(_same(t, desc.value_info, None))
    t.remove(3, "k3", None)  # a key removed
    tables.append(_same(t, desc.value_info, None))
    assert [x.num_rows for x in tables] == [20, 20, 21, 20]
    assert tables[1].column("value").to_pylist()[tables[1].column("key").to_pylist().index("k3")] == 99
