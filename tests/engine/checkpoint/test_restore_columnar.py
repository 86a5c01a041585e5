"""Restoring canonical (Parquet) keyed state into RocksDB column-wise, through ingested SST files.

The column path (:mod:`explorer.format.rocksdb.encode` +
:meth:`RocksDBStateBackend.ingest_sorted`) must leave exactly the raw entries
the row path (``load_rows``) leaves, for every state kind, with and without
TTL, one or two key-group prefix bytes, a subset of the key groups (rescaling),
rows not in RocksDB order (a heap backend's snapshot), several files (also out
of order) and the shapes it does not encode (they go the row way).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pytest

from explorer.engine.backends.rocksdb import RocksDBStateTable
from explorer.engine.checkpoint.restore import RestoredKeyedState
from explorer.engine.state import (
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateKind,
    ValueStateDescriptor,
)
from explorer.engine.ttl import StateTtlConfig
from explorer.errors import StateMigrationError
from explorer.format import parquet_pages
from explorer.format.keyed import CHECKPOINT, SAVEPOINT, rows_to_table, write_parquet_by_key_group
from explorer.format.rocksdb import encode as native_encode
from explorer.keygroups import KeyGroupRange, assign_to_key_group


@dataclass
class Order:
    item: str
    qty: int


TTL = StateTtlConfig(1000)


def _keys(kind: str, n: int):
    if kind == "str":
        return [f"user-{i}-" + "é" * (i % 3) for i in range(n)]
    if kind == "int":
        return [i * 7919 - 5000 for i in range(n)]
    if kind == "zero":  # zero bytes in the key: escaped
        return [f"k\x00{i}\x00" for i in range(n)]
    return [(f"t{i}", i) for i in range(n)]  # tuple keys: not encoded column-wise


def _value(type_, i):
    if type_ is int:
        return i * 1_000_003 - 2**40
    if type_ is float:
        return i / 3 - 17.5
    if type_ is bool:
        return i % 3 == 0
    if type_ is str:
        return "v" * (i % 300) + str(i) + "\x00é"  # two-byte varints past 127 bytes
    if type_ is bytes:
        return bytes([i % 256, 0]) * (i * 613 % 9000)  # up to 18 KB: three-byte varints
    return Order(f"item{i}", i)


def _descs(ttl):
    t = TTL if ttl else None
    return [
        ValueStateDescriptor("v_int", int, ttl=t),
        ValueStateDescriptor("v_float", float, ttl=t),
        ValueStateDescriptor("v_bool", bool, ttl=t),
        ValueStateDescriptor("v_str", str, ttl=t),
        ValueStateDescriptor("v_bytes", bytes, ttl=t),
        ValueStateDescriptor("v_order", Order, ttl=t),
        ReducingStateDescriptor("r_int", lambda a, b: a + b, int, ttl=t),
        ListStateDescriptor("l_int", int, ttl=t),
        ListStateDescriptor("l_bool", bool, ttl=t),
        ListStateDescriptor("l_str", str, ttl=t),
        ListStateDescriptor("l_bytes", bytes, ttl=t),
        MapStateDescriptor("m_str_int", str, int, ttl=t),
        MapStateDescriptor("m_int_str", int, str, ttl=t),
        MapStateDescriptor("m_str_float", str, float, ttl=t),
        MapStateDescriptor("m_int_bool", int, bool, ttl=t),
        MapStateDescriptor("m_str_order", str, Order, ttl=t),
    ]


_ENCODED = {"v_order", "m_str_order"}  # names whose values are not encoded column-wise


def _plant(backend, desc, key_kind, n=60):
    table = backend.register(desc)
    ttl = desc.ttl is not None
    vt = desc.value_info.describe().get("type")
    py = {"int": int, "float": float, "bool": bool, "str": str, "bytes": bytes}.get(vt, Order)

    def wrap(v, j):
        return (v, 5_000 + j * 37) if ttl else v

    for i, key in enumerate(_keys(key_kind, n)):
        kg = assign_to_key_group(key, backend.max_parallelism)
        if desc.kind is StateKind.LIST:
            table.put(kg, key, None, [wrap(_value(py, i + j), i + j) for j in range(i % 4 + 1)])
        elif desc.kind is StateKind.MAP:
            ukt = desc.user_key_info.describe()["type"]
            entries = {}
            for j in range(i % 3 + 1):
                uk = f"m{j}\x00" if ukt == "str" else j - 1
                entries[uk] = wrap(None if (i + j) % 5 == 0 else _value(py, i + j), i + j)
            table.put(kg, key, None, entries)
        else:
            table.put(kg, key, None, wrap(_value(py, i), i))
    return table


def _user_key(desc):
    if desc.kind is StateKind.MAP:
        return desc.user_key_info
    return "index" if desc.kind is StateKind.LIST else None


def _file(folder, name, rows, desc, target_rows=23, profile=SAVEPOINT):
    """One Parquet file of ``rows`` as a full snapshot writes it; returns (relative path, state metadata)."""
    table, kinds = rows_to_table(rows, desc.value_info, _user_key(desc))
    groups = write_parquet_by_key_group(table, folder / name, target_rows=target_rows, profile=profile)
    return name, {"name": desc.name, "file": name, "rows": table.num_rows, "row_groups": groups, **kinds}


def _raw(table):
    return list(table._scan(b"", None))


def _restore_both(make_backend, desc, pending, max_parallelism, key_groups=None, spans=None):
    """(column path entries, row path entries, whether the row path was used on the column side);
    ``spans`` (a list) gets the number of values each read located in place in the Parquet file."""
    col = make_backend("rocksdb", max_parallelism=max_parallelism, key_groups=key_groups)
    col.restored[desc.name] = pending
    used_rows = []
    orig = RocksDBStateTable.load_rows
    orig_spans = parquet_pages.column_spans

    def spy(self, rows):
        used_rows.append(self.name)
        return orig(self, rows)

    def spy_spans(*a, **k):
        got = orig_spans(*a, **k)
        if spans is not None and got is not None:
            spans.append(len(got))
        return got

    RocksDBStateTable.load_rows = spy
    parquet_pages.column_spans = spy_spans
    try:
        got = _raw(col.register(desc))
    finally:
        RocksDBStateTable.load_rows = orig
        parquet_pages.column_spans = orig_spans
    row = make_backend("rocksdb", max_parallelism=max_parallelism, key_groups=key_groups)
    t = row.register(desc)
    t.load_rows(pending.rows(desc, "op"))
    return got, _raw(t), bool(used_rows)


_IN_PLACE = {"v_str", "v_bytes"}  # names whose values a checkpoint's file gives in place (format.parquet_pages)


@pytest.mark.parametrize("ttl", [False, True])
@pytest.mark.parametrize(("key_kind", "max_parallelism"), [("str", 128), ("int", 300), ("zero", 128), ("tuple", 300)])
@pytest.mark.parametrize("profile", [SAVEPOINT, CHECKPOINT], ids=["savepoint", "checkpoint"])
def test_column_restore_equals_row_restore(make_backend, tmp_path, ttl, key_kind, max_parallelism, profile):
    src = make_backend("rocksdb", max_parallelism=max_parallelism)
    for desc in _descs(ttl):
        table = _plant(src, desc, key_kind)
        rel, smeta = _file(tmp_path, f"{desc.name}.parquet", list(table.rows()), desc, profile=profile)
        for kgs in (range(0, max_parallelism), range(3, 41)):  # all, and a rescaled subtask's part
            pending = RestoredKeyedState(tmp_path, desc.describe(), [(rel, smeta)], kgs)
            kgr = KeyGroupRange(kgs.start, kgs.stop - 1)
            spans: list[int] = []
            got, want, used_rows = _restore_both(make_backend, desc, pending, max_parallelism, kgr, spans)
            assert got == want, (desc.name, kgs)
            lo, hi = kgs.start.to_bytes(src.key_group_prefix_bytes, "big"), kgs.stop.to_bytes(src.key_group_prefix_bytes, "big")
            assert got == [(k, v) for k, v in _raw(table) if lo <= k < hi], desc.name  # the very bytes planted
            assert len(got) > 0
            assert used_rows == (key_kind == "tuple" or desc.name in _ENCODED), desc.name
            # an uncompressed checkpoint's strings and bytes are copied from the file, not read out by Arrow
            assert bool(spans) == (profile is CHECKPOINT and desc.name in _IN_PLACE), desc.name


@pytest.mark.parametrize("ttl", [False, True])
def test_rows_not_in_rocksdb_order_and_files_out_of_order(make_backend, tmp_path, ttl):
    """A heap backend's snapshot (dict order inside a key group) restored at parallelism 1
    from two subtasks' files, listed high key groups first."""
    heap = make_backend("heap")
    for desc in _descs(ttl):
        if desc.name in _ENCODED:
            continue
        rows = list(_plant(heap, desc, "str").rows())
        low = [r for r in rows if r[0] < 64]
        high = [r for r in rows if r[0] >= 64]
        files = [_file(tmp_path, f"{desc.name}-1.parquet", high, desc), _file(tmp_path, f"{desc.name}-0.parquet", low, desc)]
        for order in (files[::-1], files):
            pending = RestoredKeyedState(tmp_path, desc.describe(), order, range(0, 128))
            got, want, used_rows = _restore_both(make_backend, desc, pending, 128)
            assert got == want, desc.name
            assert len(got) > 0
            assert used_rows == (order is files), desc.name  # out of order: the rest goes the row way


def test_encode_batch_sorts_groups_lists_and_keeps_the_last_put():
    t = pa.table({
        "key_group": pa.array([2, 1, 2, 1, 1], pa.int32()),
        "key": pa.array(["b", "a", "b", "a", "c"]),
        "namespace": pa.nulls(5),
        "user_key": pa.array([0, 0, 1, 1, 0], pa.int32()),
        "value": pa.array([10, 20, 30, 40, 50]),
        "last_access": pa.nulls(5, pa.int64()),
    })
    info = {"type": "int"}
    keys, values = native_encode.encode_batch(t, "list", 1, False, info, None, "str", "null")
    be = [v.to_bytes(8, "big", signed=True) for v in (10, 20, 30, 40, 50)]
    assert keys.to_pylist() == [b"\x01\x07a\x00\x01\x01", b"\x01\x07c\x00\x01\x01", b"\x02\x07b\x00\x01\x01"]
    assert values.to_pylist() == [be[1] + b"," + be[3], be[4], be[0] + b"," + be[2]]
    keys, values = native_encode.encode_batch(t, "value", 1, False, info, None, "str", "null")
    assert keys.to_pylist() == [b"\x01\x07a\x00\x01\x01", b"\x01\x07c\x00\x01\x01", b"\x02\x07b\x00\x01\x01"]
    assert values.to_pylist() == [be[3], be[4], be[2]]  # of equal keys the last row wins
    assert native_encode.encode_batch(t, "value", 1, False, {"type": "str"}, None, "str", "null") is None  # int column


def test_encode_batch_split_gives_the_joined_values_in_two_parts():
    t = pa.table({
        "key_group": pa.array([2, 1, 2, 1], pa.int32()),
        "key": pa.array(["b", "a", "b", "c"]),
        "namespace": pa.nulls(4),
        "user_key": pa.nulls(4),
        "value": pa.array(["x", "", "y" * 200, "zz"]),
        "last_access": pa.nulls(4, pa.int64()),
    })
    info = {"type": "str"}
    keys, values = native_encode.encode_batch(t, "value", 1, False, info, None, "str", "null")
    keys2, (heads, bodies) = native_encode.encode_batch(t, "value", 1, False, info, None, "str", "null", split=True)
    assert keys2.equals(keys)
    assert [h + b for h, b in zip(heads.to_pylist(), bodies.to_pylist())] == values.to_pylist()
    assert values.to_pylist()[1] == b"\x02zz" and len(heads.to_pylist()[2]) == 2  # a 2-byte varint length (200)
    keys3, joined = native_encode.encode_batch(t, "list", 1, False, info, None, "str", "null", split=True)
    assert isinstance(joined, pa.Array)  # lists are joined by ",": one array


def test_ttl_state_without_last_access_fails_as_the_row_path_does(make_backend, tmp_path):
    desc = ValueStateDescriptor("v", int, ttl=TTL)
    rows = [(assign_to_key_group(k, 128), k, None, None, i, None) for i, k in enumerate(["a", "b", "c"])]
    rel, smeta = _file(tmp_path, "v.parquet", rows, desc)
    b = make_backend("rocksdb")
    b.restored["v"] = RestoredKeyedState(tmp_path, desc.describe(), [(rel, smeta)], range(0, 128))
    with pytest.raises(StateMigrationError, match="no last-access time"):
        b.register(desc)


def test_a_state_with_entries_is_loaded_the_row_way(make_backend, tmp_path):
    """A list restored into a state that already has entries is appended to, as load_rows does."""
    desc = ListStateDescriptor("l", int)
    src = make_backend("rocksdb")
    rel, smeta = _file(tmp_path, "l.parquet", list(_plant(src, desc, "int", n=30).rows()), desc)
    pending = RestoredKeyedState(tmp_path, desc.describe(), [(rel, smeta)], range(0, 128))
    b = make_backend("rocksdb")
    t = b.register(desc)
    t.put(assign_to_key_group(-5000, 128), -5000, None, [7])
    t.load_restored(pending, desc, "op")
    assert t.get(assign_to_key_group(-5000, 128), -5000, None) == [7, _value(int, 0)]
