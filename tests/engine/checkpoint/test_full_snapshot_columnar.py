"""Full snapshots of the RocksDB backend: a pinned view at the barrier, column-wise decoding after.

The column-wise path (:mod:`explorer.format.rocksdb.columns`) must give the very
table the row path gives (:func:`explorer.format.keyed.rows_to_table` of the
backend's rows), for every state kind, with and without TTL, over several key
groups, including the shapes it does not vectorise (those fall back).
"""

from __future__ import annotations

import gc

import pytest

from explorer.engine.checkpoint.capture import PinnedView
from explorer.engine.state import (
    ValueStateDescriptor,
)
from explorer.format.rocksdb import columns as native_columns
from explorer.format.rocksdb import native
from explorer.format.keyed import rows_to_table
from explorer.keygroups import KeyGroupRange, assign_to_key_group
from tests.support.full_snapshot import NOW, TTL, descs as _descs, plant as _plant, user_key as _user_key


def _old_table(table, desc, expire):
    rows = list(table.rows())
    if expire:
        rows = [r for r in rows if r[5] + TTL.ttl_ms > NOW]
    return rows_to_table(rows, desc.value_info, _user_key(desc))


@pytest.mark.parametrize("ttl", [False, True])
@pytest.mark.parametrize("key_kind", ["str", "int", "zero", "tuple"])
@pytest.mark.parametrize("max_parallelism", [128, 300])
def test_columnar_table_equals_the_row_path(make_backend, monkeypatch, ttl, key_kind, max_parallelism):
    monkeypatch.setattr(native, "TABLE_BATCH", 97)  # many batches, cut inside key groups
    b = make_backend("rocksdb", max_parallelism=max_parallelism)
    descs = _descs(ttl)
    tables = {d.name: _plant(b, d, key_kind) for d in descs}
    view = PinnedView(b)
    try:
        for d in descs:
            desc_json = d.describe()
            uk = _user_key(d)
            expire = (TTL.ttl_ms, NOW) if ttl else None
            for runs in ([(0, max_parallelism - 1)], [(3, 40), (77, 90)]):
                cf = view.column_family(d.name)
                fast, fast_kinds = native.native_table(cf, desc_json, b.key_group_prefix_bytes, runs, d.value_info, uk,
                                                       expire=expire)
                slow, slow_kinds = native.native_table(cf, desc_json, b.key_group_prefix_bytes, runs, d.value_info, uk,
                                                       expire=expire, columnar=False)
                cf.close()
                kgr = KeyGroupRange(runs[0][0], runs[-1][1])
                old, old_kinds = _old_table(tables[d.name], d, ttl) if len(runs) == 1 else (slow, slow_kinds)
                assert fast.num_rows > 0 and (not ttl or fast.num_rows < len(list(tables[d.name].rows(kgr))) or len(runs) > 1)
                assert fast.schema == old.schema, d.name
                assert fast.equals(old), d.name
                assert fast_kinds == old_kinds == slow_kinds
                assert slow.equals(old)
    finally:
        view.release()


@pytest.mark.parametrize("ttl", [False, True])
@pytest.mark.parametrize("key_kind", ["str", "int"])
def test_supported_shapes_are_decoded_column_wise(make_backend, ttl, key_kind):
    b = make_backend("rocksdb")
    vectorised = [d for d in _descs(ttl) if "order" not in d.name and d.name != "l_str"]
    for d in vectorised:
        table = _plant(b, d, key_kind, n=50)
        raw = list(table._scan(b"", None))
        keys, values = [k for k, _ in raw], [v for _, v in raw]
        got = native_columns.decode_batch(keys, values, d.kind.value, b.key_group_prefix_bytes, ttl, d.value_info,
                                          _user_key(d))
        assert got is not None, d.name
        assert got[0].equals(_old_table(table, d, False)[0]), d.name


def test_unsupported_bytes_fall_back(make_backend):
    b = make_backend("rocksdb")
    d = ValueStateDescriptor("v", int)
    table = _plant(b, d, "str", n=10)
    raw = list(table._scan(b"", None))
    keys, values = [k for k, _ in raw], [v for _, v in raw]
    assert native_columns.decode_batch(keys, values, "value", 1, False, d.value_info, None) is not None
    values[3] = values[3] + b"\x00"  # one value one byte too long: not the declared shape
    assert native_columns.decode_batch(keys, values, "value", 1, False, d.value_info, None) is None


def test_pinned_view_is_the_state_at_the_barrier_and_is_removed(make_backend):
    b = make_backend("rocksdb")
    d = ValueStateDescriptor("v", int)
    table = _plant(b, d, "str", n=20)
    before = _old_table(table, d, False)[0]
    view = PinnedView(b)
    staging = view.staging
    assert staging.is_dir()
    _plant(b, d, "int", n=20)  # processing goes on after the barrier
    cf = view.column_family("v")
    got, _ = native.native_table(cf, d.describe(), b.key_group_prefix_bytes, [(0, 127)], d.value_info, None)
    cf.close()
    assert got.equals(before)
    view.release()
    assert not staging.exists()
    # a view dropped unreleased (an aborted checkpoint) removes its folder too
    view = PinnedView(b)
    staging = view.staging
    del view
    gc.collect()
    assert not staging.exists()


@pytest.mark.parametrize("ttl", [False, True])
@pytest.mark.parametrize("key_kind", ["str", "tuple"])
def test_written_batch_by_batch_is_the_same_file(make_backend, monkeypatch, tmp_path, ttl, key_kind):
    """write_native_table (each batch written as decoded) = the whole table written at once = the row path's file."""
    from explorer.format.keyed import write_parquet_by_key_group
    from explorer.format.snapshot import sha256_file

    monkeypatch.setattr(native, "TABLE_BATCH", 97)
    b = make_backend("rocksdb")
    descs = _descs(ttl)
    tables = {d.name: _plant(b, d, key_kind) for d in descs}
    view = PinnedView(b)
    expire = (TTL.ttl_ms, NOW) if ttl else None
    try:
        for d in descs:
            cf = view.column_family(d.name)
            groups, rows, kinds, digest = native.write_native_table(cf, d.describe(), 1, [(0, 127)], d.value_info,
                                                                    _user_key(d), tmp_path / "batches.parquet",
                                                                    expire=expire)
            cf.close()
            old, old_kinds = _old_table(tables[d.name], d, ttl)
            want = write_parquet_by_key_group(old, tmp_path / "rows.parquet")
            assert (groups, rows, kinds) == (want, old.num_rows, old_kinds), d.name
            assert rows > 0
            assert (tmp_path / "batches.parquet").read_bytes() == (tmp_path / "rows.parquet").read_bytes(), d.name
            # hashed while written (None: written whole, by the row path, for shapes not decoded column-wise)
            assert digest is None or digest == {"sha256": sha256_file(tmp_path / "batches.parquet")}, d.name
            assert (digest is None) == (not native_columns.supported(d.kind.value, d.value_info, _user_key(d))), d.name
    finally:
        view.release()


def test_keys_of_two_types_fail_as_the_row_path_does(make_backend, monkeypatch, tmp_path):
    from explorer.errors import SnapshotFormatError

    monkeypatch.setattr(native, "TABLE_BATCH", 7)
    b = make_backend("rocksdb")
    d = ValueStateDescriptor("v", int)
    t = b.register(d)
    for k in ["a", "b", "c", 1, 2, 3] * 5:
        t.put(assign_to_key_group(k, 128), k, None, 1)
    view = PinnedView(b)
    try:
        cf = view.column_family("v")
        with pytest.raises(SnapshotFormatError, match="mixed types"):
            native.write_native_table(cf, d.describe(), 1, [(0, 127)], d.value_info, None, tmp_path / "v.parquet")
        cf.close()
    finally:
        view.release()
