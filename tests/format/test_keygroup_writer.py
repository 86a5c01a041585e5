"""The batch-by-batch key-group Parquet writer writes the very file the whole-table writer writes."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from explorer.format.keyed import KeyGroupParquetWriter, write_parquet_by_key_group
from explorer.format.snapshot import sha256_file


def _table(kgs):
    n = len(kgs)
    return pa.table({
        "key_group": pa.array(kgs, pa.int32()),
        "key": pa.array([f"k{i}" for i in range(n)]),
        "value": pa.array(np.arange(n, dtype=np.int64) * 3),
    })


@pytest.mark.parametrize("cuts", [[], [1], [5, 6, 7], [13, 40, 41, 99], list(range(0, 120, 9))])
@pytest.mark.parametrize("target", [1, 4, 10, 1000])
def test_same_file_and_row_groups_for_any_batching(tmp_path, cuts, target):
    rng = np.random.default_rng(len(cuts) * 100 + target)
    kgs = np.sort(rng.integers(0, 30, 120)).tolist()  # long and short key groups
    table = _table(kgs)
    want = write_parquet_by_key_group(table, tmp_path / "whole.parquet", target_rows=target)
    w = KeyGroupParquetWriter(tmp_path / "batches.parquet", table.schema, target_rows=target)
    bounds = [0, *cuts, table.num_rows]
    for a, b in zip(bounds, bounds[1:]):
        w.write(table.slice(a, b - a))
    assert w.close() == want
    assert w.rows == table.num_rows
    assert w.checksum == {"sha256": sha256_file(tmp_path / "whole.parquet")}
    assert (tmp_path / "batches.parquet").read_bytes() == (tmp_path / "whole.parquet").read_bytes()


def test_empty(tmp_path):
    table = _table([])
    want = write_parquet_by_key_group(table, tmp_path / "whole.parquet")
    w = KeyGroupParquetWriter(tmp_path / "batches.parquet", table.schema)
    w.write(table)
    assert w.close() == want == []
    assert (tmp_path / "batches.parquet").read_bytes() == (tmp_path / "whole.parquet").read_bytes()


@pytest.mark.parametrize("hint", [1, 4096, 64 << 20])
def test_a_size_hint_leaves_the_file_as_written(tmp_path, hint):
    """Space allocated up front (more or less than is written): the same bytes and size, the rest given back."""
    from explorer.format.keyed import CHECKPOINT
    from explorer.format.snapshot import xxh3_128_file

    table = _table(np.sort(np.random.default_rng(3).integers(0, 30, 5000)).tolist())
    want = write_parquet_by_key_group(table, tmp_path / "whole.parquet", profile=CHECKPOINT)
    w = KeyGroupParquetWriter(tmp_path / "hinted.parquet", table.schema, profile=CHECKPOINT, size_hint=hint)
    w.write(table)
    assert w.close() == want
    path = tmp_path / "hinted.parquet"
    assert path.read_bytes() == (tmp_path / "whole.parquet").read_bytes()
    assert w.checksum == {"xxh3_128": xxh3_128_file(path)}
    assert path.stat().st_blocks * 512 < path.stat().st_size + (1 << 20)  # not the 64 MB asked for


@pytest.mark.parametrize("profile_name", ["SAVEPOINT", "CHECKPOINT"])
@pytest.mark.parametrize("read", [7, 1 << 20])
def test_digest_computed_while_writing_is_the_files(tmp_path, monkeypatch, profile_name, read):
    """The digest hashed behind the writer (a thread reading back each row group as it is written, in
    reads of ``FOLLOW_READ`` bytes) is the digest of the closed file on disk, for either profile; off, the
    closed file is hashed whole, to the same entry."""
    from explorer.format import keyed
    from explorer.format.snapshot import xxh3_128_file

    profile = getattr(keyed, profile_name)
    monkeypatch.setattr(keyed, "FOLLOW_READ", read)
    table = _table(np.sort(np.random.default_rng(5).integers(0, 30, 3000)).tolist())
    got = {}
    for follow in (True, False):
        monkeypatch.setattr(keyed, "FOLLOW_DIGEST", follow)
        path = tmp_path / f"{follow}.parquet"
        w = KeyGroupParquetWriter(path, table.schema, target_rows=100, profile=profile, size_hint=1 << 16)
        assert (w._follow is not None) == follow
        for a in range(0, table.num_rows, 450):
            w.write(table.slice(a, 450))
        w.close()
        on_disk = ({"xxh3_128": xxh3_128_file(path)} if profile.checksum == "xxh3_128"
                   else {"sha256": sha256_file(path)})
        assert w.checksum == on_disk
        got[follow] = w.checksum
    assert got[True] == got[False]


def test_abort_stops_the_following_digest(tmp_path):
    import threading

    from explorer.format.keyed import CHECKPOINT

    table = _table(np.sort(np.random.default_rng(6).integers(0, 30, 2000)).tolist())
    before = {t for t in threading.enumerate() if t.name == "snapshot-digest"}
    w = KeyGroupParquetWriter(tmp_path / "a.parquet", table.schema, target_rows=100, profile=CHECKPOINT)
    w.write(table)
    w.abort()
    assert {t for t in threading.enumerate() if t.name == "snapshot-digest"} == before
    with pytest.raises(ValueError):
        w.checksum
