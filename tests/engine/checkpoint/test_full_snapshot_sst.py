"""Full snapshots of the RocksDB backend read straight from the pinned view's SST files.

:mod:`explorer.engine.checkpoint.sst_view` must write the very file the
rocksdict path writes, for every state kind, with and without TTL, with keys
overwritten and deleted in several SST files and levels, and must hand back to
the rocksdict path (writing nothing) where the files hold what it does not read.
"""

from __future__ import annotations

import pytest

from explorer.engine.checkpoint import capture, sst_view
from explorer.engine.checkpoint.capture import PinnedView, StateCapture, _write_view_state
from explorer.engine.state import StateKind
from explorer.format.keyed import CHECKPOINT, SAVEPOINT
from explorer.format.rocksdb import columns as native_columns
from explorer.format.rocksdb import native
from explorer.keygroups import assign_to_key_group

from tests.support.full_snapshot import NOW, TTL, descs as _descs, keys as _keys, plant as _plant, user_key as _user_key


def _churn(b, tables, descs, key_kind, n=300):
    """Versions of keys spread over files and levels: compacted, overwritten, deleted, overwritten again."""
    b.compact()
    for d in descs:
        _plant(b, d, key_kind, n=n // 2)  # the first half overwritten (same values: a newer version)
    b.flush()
    for d in descs:
        t = tables[d.name]
        for i, key in enumerate(_keys(key_kind, n)):
            kg = assign_to_key_group(key, b.max_parallelism)
            if i % 7 == 0:
                t.remove(kg, key, None)
            elif d.kind is StateKind.MAP and i % 5 == 1:
                uk = "m0" if d.user_key_info.describe()["type"] == "str" else -1
                t.map_remove(kg, key, None, uk)
    b.flush()
    for d in descs:
        t = tables[d.name]
        for i, key in enumerate(_keys(key_kind, n)):
            if i % 21 == 0:  # deleted above, written again
                kg = assign_to_key_group(key, b.max_parallelism)
                if d.kind is StateKind.VALUE and d.value_info.describe().get("type") == "int":
                    t.put(kg, key, None, ((i * 3, NOW) if d.ttl is not None else i * 3))
    b.flush()


def _both(view, d, tmp_path, ttl, monkeypatch):
    sc = StateCapture(d.describe(), None, d.value_info, _user_key(d), (TTL.ttl_ms, NOW) if ttl else None)
    monkeypatch.setattr(capture, "READ_SST_FILES", True)
    fast = _write_view_state(view, sc, tmp_path / "sst.parquet")
    monkeypatch.setattr(capture, "READ_SST_FILES", False)
    slow = _write_view_state(view, sc, tmp_path / "rocksdict.parquet")
    return fast, slow


@pytest.mark.parametrize("ttl", [False, True])
@pytest.mark.parametrize("key_kind", ["str", "int", "zero", "tuple"])
@pytest.mark.parametrize("max_parallelism", [128, 300])
def test_sst_files_give_the_rocksdict_file(make_backend, monkeypatch, tmp_path, ttl, key_kind, max_parallelism):
    monkeypatch.setattr(native, "TABLE_BATCH", 97)  # many batches, cut inside key groups
    taken = []
    real = sst_view.write_view_state_sst

    def spy(*a, **k):
        got = real(*a, **k)
        taken.append((a[1]["name"], got is not None))
        return got

    monkeypatch.setattr(sst_view, "write_view_state_sst", spy)
    b = make_backend("rocksdb", max_parallelism=max_parallelism)
    descs = _descs(ttl)
    tables = {d.name: _plant(b, d, key_kind) for d in descs}
    _churn(b, tables, descs, key_kind)
    view = PinnedView(b)
    try:
        assert len(list(view.staging.glob("*.sst"))) >= 3 * len(descs)  # several files (levels) per state
        for d in descs:
            taken.clear()
            fast, slow = _both(view, d, tmp_path, ttl, monkeypatch)
            assert fast[:3] == slow[:3], d.name
            assert fast[1] > 0
            assert (tmp_path / "sst.parquet").read_bytes() == (tmp_path / "rocksdict.parquet").read_bytes(), d.name
            vectorised = native_columns.supported(d.kind.value, d.value_info, _user_key(d))
            assert taken == [(d.name, vectorised)], d.name
    finally:
        view.release()


def test_range_deletions_fall_back(make_backend, monkeypatch, tmp_path):
    b = make_backend("rocksdb")
    d = [x for x in _descs(False) if x.name == "v_int"][0]
    t = _plant(b, d, "str")
    b.flush()
    t._cf.delete_range(bytes([10]), bytes([60]))  # key groups 10..59
    b.flush()
    view = PinnedView(b)
    try:
        assert view.sst_files("v_int") is None
        fast, slow = _both(view, d, tmp_path, False, monkeypatch)
        assert fast[:3] == slow[:3] and fast[1] > 0
        assert (tmp_path / "sst.parquet").read_bytes() == (tmp_path / "rocksdict.parquet").read_bytes()
    finally:
        view.release()


def test_unread_files_fall_back(make_backend, tmp_path):
    """A non-empty WAL or an unexpected entry type: not read from the SST files."""
    from explorer.format.sst import columns as sstvec

    b = make_backend("rocksdb")
    d = [x for x in _descs(False) if x.name == "v_int"][0]
    _plant(b, d, "int")
    view = PinnedView(b)
    try:
        files = view.sst_files("v_int")
        assert files
        with pytest.raises(sstvec.Unsupported, match="type 1"):
            sstvec.read_column_family(files, types=(0, 7))  # values not among the accepted types
        assert sst_view.write_view_state_sst(files, d.describe(), 1, (0, 127), d.value_info, None,
                                             tmp_path / "x.parquet") is not None
        (view.staging / "999999.log").write_bytes(b"\x01")
        assert sst_view.column_family_files(view.staging) is None
        (view.staging / "999999.log").unlink()
    finally:
        view.release()


@pytest.mark.parametrize("compression", ["none", "snappy", "lz4", "zstd"])
def test_format_version_6_reads_like_5(tmp_path, compression):
    """RocksDB's format version 6 footer (index handle in the metaindex) gives the same entries as version 5."""
    rocksdict = pytest.importorskip("rocksdict")
    from explorer.format.sst import columns as sstvec
    from explorer.format.sst.file import SstFile

    items = [(bytes([i % 128]) + f"user-{i:06d}".encode(), bytes([i % 251]) * (i % 300)) for i in range(3000)]
    items.sort()
    got = {}
    for version in (5, 6):
        opts = rocksdict.Options(raw_mode=True)
        opts.set_compression_type(getattr(rocksdict.DBCompressionType, compression)())
        table = rocksdict.BlockBasedOptions()
        table.set_format_version(version)
        opts.set_block_based_table_factory(table)
        writer = rocksdict.SstFileWriter(options=opts)
        path = tmp_path / f"v{version}.sst"
        writer.open(str(path))
        for k, v in items:
            writer[k] = v
        writer.finish()
        f = SstFile(path.read_bytes(), path.name)
        assert f.format_version == version
        values, keys, ks, ke, vs, ve, _ = sstvec.read_column_family([f])
        kb, vb = keys.tobytes(), values.tobytes()
        got[version] = [(kb[a:b], vb[c:d]) for a, b, c, d in zip(ks.tolist(), ke.tolist(), vs.tolist(), ve.tolist())]
    assert got[6] == got[5] == items


@pytest.mark.parametrize("max_parallelism", [128, 300])
def test_a_key_group_range_reads_like_rocksdict(make_backend, monkeypatch, tmp_path, max_parallelism):
    """Only the view's key-group range is written, as rocksdict's range scan reads it."""
    monkeypatch.setattr(native, "TABLE_BATCH", 97)
    b = make_backend("rocksdb", max_parallelism=max_parallelism)
    descs = [x for x in _descs(True) if x.name in ("v_str", "l_int", "m_int_str")]
    tables = {d.name: _plant(b, d, "str") for d in descs}
    _churn(b, tables, descs, "str")
    view = PinnedView(b)
    try:
        for d in descs:
            files = view.sst_files(d.name)
            expire = (TTL.ttl_ms, NOW)
            fast = sst_view.write_view_state_sst(files, d.describe(), b.key_group_prefix_bytes, (17, 93), d.value_info,
                                                 _user_key(d), tmp_path / "sst.parquet", expire=expire)
            cf = view.column_family(d.name)
            slow = native.write_native_table(cf, d.describe(), b.key_group_prefix_bytes, [(17, 93)], d.value_info,
                                             _user_key(d), tmp_path / "rocksdict.parquet", expire=expire)
            cf.close()
            assert fast is not None and fast[:3] == slow[:3] and 0 < fast[1], d.name
            assert (tmp_path / "sst.parquet").read_bytes() == (tmp_path / "rocksdict.parquet").read_bytes(), d.name
    finally:
        view.release()


@pytest.mark.parametrize("walkers", [1, 3])
@pytest.mark.parametrize("max_parallelism,profile", [(128, SAVEPOINT), (300, SAVEPOINT), (128, CHECKPOINT)])
def test_key_group_ranges_read_one_after_another_give_the_same_file(make_backend, monkeypatch, tmp_path,
                                                                     max_parallelism, profile, walkers):
    """Read a key-group range at a time (the next ones walked, by ``walkers`` threads at once, while this
    one is written), with batches that span two ranges: the same file as rocksdict's, for the whole range
    and for a part of it."""
    monkeypatch.setattr(sst_view, "WALK_THREADS", walkers)
    monkeypatch.setattr(native, "TABLE_BATCH", 97)
    monkeypatch.setattr(sst_view, "TABLE_BATCH", 97)
    monkeypatch.setattr(sst_view, "CHUNK_BYTES", 1)  # as many ranges as the blocks' key groups allow
    ranges = []
    real = sst_view._ranges
    monkeypatch.setattr(sst_view, "_ranges", lambda *a: ranges.append(real(*a)) or ranges[-1])
    b = make_backend("rocksdb", max_parallelism=max_parallelism)
    descs = [x for x in _descs(True) if x.name in ("v_str", "l_int", "m_int_str")]
    tables = {d.name: _plant(b, d, "str", n=1500) for d in descs}
    _churn(b, tables, descs, "str", n=1500)
    view = PinnedView(b)
    try:
        for d in descs:
            for kgs in ((0, max_parallelism - 1), (17, 93)):
                ranges.clear()
                files = view.sst_files(d.name)
                expire = (TTL.ttl_ms, NOW)
                fast = sst_view.write_view_state_sst(files, d.describe(), b.key_group_prefix_bytes, kgs, d.value_info,
                                                     _user_key(d), tmp_path / "sst.parquet", expire=expire,
                                                     profile=profile)
                cf = view.column_family(d.name)
                slow = native.write_native_table(cf, d.describe(), b.key_group_prefix_bytes, [kgs], d.value_info,
                                                 _user_key(d), tmp_path / "rocksdict.parquet", expire=expire,
                                                 profile=profile)
                cf.close()
                assert len(ranges) == 1 and len(ranges[0]) > 3, (d.name, ranges)
                assert ranges[0][0][0] == kgs[0] and ranges[0][-1][1] == kgs[1]
                assert fast is not None and fast[:3] == slow[:3] and fast[1] > 97, d.name
                assert (tmp_path / "sst.parquet").read_bytes() == (tmp_path / "rocksdict.parquet").read_bytes(), d.name
    finally:
        view.release()


def test_a_damaged_block_found_after_some_ranges_were_written_falls_back(make_backend, monkeypatch, tmp_path):
    """The blocks' checksums are verified while ranges are written: a damaged one gives None (the
    rocksdict path then writes the file) however much was written before it was found."""
    import shutil

    from explorer.format.sst.file import SstFile

    import random

    monkeypatch.setattr(sst_view, "CHUNK_BYTES", 1)
    b = make_backend("rocksdb")
    d = [x for x in _descs(False) if x.name == "v_str"][0]
    t = b.register(d)
    rng = random.Random(7)
    for key in _keys("str", 1500):  # random letters: Snappy leaves the blocks uncompressed (checked later)
        t.put(assign_to_key_group(key, b.max_parallelism), key, None,
              "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(200)))
    b.flush()
    view = PinnedView(b)
    try:
        copy = tmp_path / "db"
        shutil.copytree(view.staging, copy)  # (the view's files are links to the live database's)
    finally:
        view.release()
    files = sst_view.column_family_files(copy)[d.name]
    assert sst_view.write_view_state_sst(files, d.describe(), 1, (0, 127), d.value_info, None,
                                         tmp_path / "good.parquet") is not None
    big = max(files, key=lambda f: len(f.data))
    handles = SstFile(big.path.read_bytes(), big.name).data_handles()
    off, size = handles[-1]  # the last block of the largest file: found after the first ranges
    raw = bytearray(big.path.read_bytes())
    restarts = int.from_bytes(raw[off + size - 4 : off + size], "little")
    at = off + size - 4 - 4 * restarts - 1  # the last byte of the block's last value: the walk reads it well
    assert 0x20 < raw[at] < 0x7F  # (ASCII, in a string value)
    raw[at] = ord("x") if raw[at] != ord("x") else ord("y")
    assert raw[off + size] == 0  # an uncompressed block: its checksum is verified while ranges are written
    big.path.write_bytes(bytes(raw))
    files = sst_view.column_family_files(copy)[d.name]
    assert sst_view.write_view_state_sst(files, d.describe(), 1, (0, 127), d.value_info, None,
                                         tmp_path / "bad.parquet") is None
