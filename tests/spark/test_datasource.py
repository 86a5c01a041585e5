"""The state-explorer Spark data source: every format's keyed state read by the executors, the same rows as
explorer.open, one partition per (operator, subtask, key-group range), options, and errors naming the file."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import explorer
from explorer.errors import ReaderError, SnapshotCorruptError, StateExplorerError
from explorer.readers.base import CONTRACT_COLUMNS, KeyedStateQuery
from explorer.spark import read_state
from explorer.distributed.analysis import collect
from explorer.distributed.datasource import NAME, from_json, to_json

pytestmark = pytest.mark.spark

FORMATS = ["sample_data/sessions/savepoint-rocksdb", "sample_data/flink/heap-canonical-savepoint",
           "sample_data/flink/rocksdb-incremental-checkpoint", "sample_data/spark/multi-operator-hdfs"]


def _rows(df: pd.DataFrame) -> list[tuple]:
    """Rows as comparable tuples: the free-typed columns as the data source's JSON text."""
    out = []
    for r in df.itertuples(index=False):
        d = r._asdict()
        out.append(tuple(to_json(d[c]) if c in ("key", "namespace", "user_key", "value") and d[c] is not None
                         else (None if pd.isna(d[c]) else d[c]) if not isinstance(d[c], (list, dict, tuple)) else d[c]
                         for c in CONTRACT_COLUMNS))
    return sorted(out, key=repr)


@pytest.mark.parametrize("path", FORMATS)
def test_rows_equal_explorer_open(spark, path):
    snap = explorer.open(path)
    expected = snap.keyed_state()
    df = read_state(spark, path)
    assert df.columns == list(CONTRACT_COLUMNS)
    keyed = snap.subtasks.dropna(subset=["key_group_start"])
    keyed = keyed[keyed["operator"].isin(set(snap.states["operator"]))]
    assert df.rdd.getNumPartitions() == len(keyed)  # one per (operator, subtask)
    got = collect(df)
    assert len(got) == len(expected) > 0
    for c in ("last_access", "expires_at"):
        got[c] = pd.to_datetime(got[c], utc=True)
        expected[c] = pd.to_datetime(expected[c], utc=True)
    exp = expected.assign(**{c: [None if v is None or (not isinstance(v, (list, dict, tuple)) and pd.isna(v))
                                 else to_json(v) for v in expected[c]]
                             for c in ("key", "namespace", "user_key", "value")})
    assert _rows(got) == _rows(exp)
    key = expected["key"].iloc[0]
    assert from_json(to_json(key)) == key


def test_options_select_what_is_read(spark):
    path = "sample_data/flink/heap-canonical-savepoint"
    snap = explorer.open(path)
    df = read_state(spark, path, operator="user-state", state=["amounts", "stats"], key_groups="0-9,100",
                    columns=["operator", "state", "key", "key_group", "size_bytes"], splits=2)
    assert df.columns == ["operator", "state", "key", "key_group", "size_bytes"]
    # the subtasks' halves 0-31, 32-63, 64-95, 96-127: only those holding asked-for key groups are read
    assert df.rdd.getNumPartitions() == 2
    got = collect(df)
    expected = snap.keyed_state(operator="user-state", state=["amounts", "stats"], key_groups=[*range(10), 100])
    assert len(got) == len(expected) > 0
    assert set(got["key_group"]) == set(expected["key_group"])
    assert sorted(map(from_json, got["key"])) == sorted(expected["key"])


def test_a_user_schema_reads_keys_in_their_own_type(spark):
    from explorer.spark import register_datasource

    register_datasource(spark)
    path = "sample_data/flink/heap-canonical-savepoint"
    df = (spark.read.format(NAME).schema("operator string, key bigint, value bigint, size_bytes bigint")
          .option("operator", "bucket-state").option("state", "amount_sum").load(path))
    got = collect(df)
    expected = explorer.open(path).keyed_state(operator="bucket-state", state="amount_sum")
    assert sorted(got["key"].tolist()) == sorted(expected["key"].tolist())
    assert sorted(got["value"].tolist()) == sorted(expected["value"].tolist())


def test_a_checkpoint_directory_is_read_as_its_newest_checkpoint(spark):
    path = "sample_data/url_counts/checkpoints"
    got = read_state(spark, path).count()
    assert got == len(explorer.open(path).keyed_state())
    assert got != len(explorer.open(f"{path}/chk-1").keyed_state())


def test_a_damaged_file_fails_with_the_projects_error_naming_it(spark, tmp_path):
    snap = tmp_path / "savepoint"
    shutil.copytree("sample_data/url_counts/savepoint-heap", snap)
    damaged = snap / "keyed" / "url-stats" / "count" / "1.parquet"
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size: found when the executor reads it (SHA-256), not at open
    damaged.write_bytes(bytes(data))
    df = read_state(spark, snap)
    with pytest.raises(SnapshotCorruptError, match="1.parquet"):
        collect(df)
    with pytest.raises(Exception) as raw:  # what Spark itself shows names the class and the file too
        df.count()
    assert "SnapshotCorruptError" in str(raw.value) and "1.parquet" in str(raw.value)


def test_bad_options_and_paths_are_refused_clearly(spark, tmp_path):
    with pytest.raises(ReaderError, match="unknown option 'color'"):
        read_state(spark, "sample_data/flink/heap-canonical-savepoint", color="blue")
    with pytest.raises(ReaderError, match="takes none of the options \\['jars'\\]"):
        read_state(spark, "sample_data/sessions/savepoint-heap", jars=["x.jar"])
    with pytest.raises(StateExplorerError, match="no such file"):
        read_state(spark, tmp_path / "missing")
    with pytest.raises(ReaderError, match="Spark's own state data source"):
        read_state(spark, "sample_data/spark/tws-rows")  # transformWithState: RocksDB stores, read with a JVM


@pytest.mark.parametrize("path", FORMATS)
def test_partitions_aggregate_to_the_local_key_group_figures(spark, path):
    """aggregate=key_groups: each partition sends its per-key-group sums; summed they are the local answer."""
    from explorer import analysis as local

    expected = local.key_group_aggregates(explorer.open(path))
    got = collect(read_state(spark, path, aggregate="key_groups"))
    assert set(got["row"]) == {"key_group"} and got["key"].isna().all()
    sums = got.groupby(["operator", "key_group"], as_index=False)[["entries", "bytes", "keys"]].sum()
    exp = expected[expected["entries"] > 0][["operator", "key_group", "entries", "bytes", "keys"]]
    pd.testing.assert_frame_equal(sums.sort_values(["operator", "key_group"], ignore_index=True),
                                  exp.sort_values(["operator", "key_group"], ignore_index=True), check_dtype=False)


def test_engine_partitions_are_sized_by_bytes(spark):
    path = "sample_data/url_counts/savepoint-heap"
    snap = explorer.open(path)
    keyed = snap.subtasks.dropna(subset=["key_group_start"])
    half = int(keyed["bytes"].max()) // 2 + 1
    df = read_state(spark, path, partition_bytes=half)
    assert df.rdd.getNumPartitions() == sum(2 if b >= half else 1 for b in keyed["bytes"]) > len(keyed)
    assert df.count() == len(snap.keyed_state())
    assert read_state(spark, path, partition_bytes=0).rdd.getNumPartitions() == len(keyed)
    with pytest.raises(ReaderError, match="partition_bytes"):
        read_state(spark, path, partition_bytes="lots")
    with pytest.raises(ReaderError, match="aggregate='everything'"):
        read_state(spark, path, aggregate="everything")


def _piece(keys, kgs, sizes, kind="value"):
    import pyarrow as pa

    n = len(keys)
    return pa.table({"operator": ["op"] * n, "state": ["s"] * n, "kind": [kind] * n, "key": keys,
                     "key_group": pa.array(kgs, pa.int32()), "size_bytes": pa.array(sizes, pa.int64())})


def test_a_partitions_top_keys_keep_every_candidate_and_cut_long_ties_in_key_order(monkeypatch):
    """Without Spark: the partition's candidates for the top n hold the global order's top n (ties past the
    cap are cut by the key order the final ranking uses: numbers by value, then text)."""
    from explorer.distributed import datasource as ds

    keys = [f"k{i:03d}" for i in range(50)]
    sizes = [100] * 50
    sizes[7] = 500  # one clear winner, then 49 tied keys
    pieces = [_piece(keys, [i % 4 for i in range(50)], sizes),
              _piece(["k001", "k001"], [1, 1], [0, 0], kind="event_timer")]  # timers are left out
    t = ds.aggregate_partition(pieces, "op", "hot_keys", top=3, by=["bytes"], keys=[to_json("k010"), '"zz"'])
    rows = t.to_pandas()
    kg = rows[rows["row"] == "key_group"].sort_values("key_group")
    assert kg["entries"].tolist() == [13, 13, 12, 12] and kg["keys"].sum() == 50
    top = rows[rows["row"] == "top:bytes"]
    assert len(top) == 50  # few ties: every tied key goes, the final ranking orders them
    ranked = ds.rank_hot_keys(top[["operator", "key", "key_group", "entries", "bytes"]], "bytes", 3)
    assert [from_json(k) for k in ranked["key"]] == ["k007", "k000", "k001"]
    assert rows[rows["row"] == "key"]["key"].tolist() == [to_json("k010")]
    monkeypatch.setattr(ds, "_TIE_ROWS", 5)
    t = ds.aggregate_partition(pieces, "op", "hot_keys", top=3, by=["bytes"]).to_pandas()
    assert [from_json(k) for k in t[t["row"] == "top:bytes"]["key"]] == ["k007", "k000", "k001"]


def test_number_keys_order_by_value_and_tuple_keys_group_by_their_text():
    import pyarrow as pa

    from explorer.distributed import datasource as ds

    t = ds.aggregate_partition([_piece([10, 9, 100, 9], [0, 0, 1, 0], [5, 5, 5, 0])], "op", "hot_keys", top=2,
                               by=["bytes", "entries"]).to_pandas()
    by_bytes = ds.rank_hot_keys(t[t["row"] == "top:bytes"][["operator", "key", "key_group", "entries", "bytes"]],
                                "bytes", 2)
    assert by_bytes["key"].tolist() == ["9", "10"]  # 9 has 2 entries; then 10 before 100 (by value)
    struct = pa.array([{"f0": "a", "f1": 1}, {"f0": "a", "f1": 1}, {"f0": "b", "f1": 2}])
    t = ds.aggregate_partition([_piece(struct, [3, 3, 4], [1, 2, 3])], "op", "key_groups").to_pandas()
    assert t.sort_values("key_group")[["key_group", "entries", "bytes", "keys"]].values.tolist() == \
        [[3, 2, 3, 1], [4, 1, 3, 1]]


@pytest.mark.parametrize("path", ["sample_data/flink/heap-canonical-savepoint",
                                  "sample_data/flink/rocksdb-canonical-savepoint-compressed"])
def test_flink_key_group_streams_are_cut_into_partitions_by_their_offsets(spark, path):
    """A Flink subtask's key-group stream is read by range (its key-group offsets), so its partitions are sized by
    bytes like the engine's: several per subtask, each within one subtask, together every key group once."""
    from explorer import analysis as local
    from explorer.distributed.datasource import StateExplorerDataSource

    snap = explorer.open(path)
    keyed = snap.subtasks.dropna(subset=["key_group_start"])
    keyed = keyed[keyed["operator"].isin(set(snap.states["operator"]))]
    per_part = int(keyed["bytes"].max()) // 4
    source = StateExplorerDataSource({"path": str(Path(path).absolute()), "partition_bytes": str(per_part)})
    parts = source.reader(read_state(spark, path).schema).partitions()
    assert len(parts) > len(keyed)
    bytes_per_kg = snap.reader.key_group_rows(KeyedStateQuery()) * snap.reader.MIN_ROW_BYTES  # from the offsets
    for row in keyed.itertuples(index=False):
        mine = sorted(p.key_groups for p in parts if p.operator == row.operator and p.subtask == row.subtask)
        assert mine[0][0] == row.key_group_start and mine[-1][1] == row.key_group_end
        assert all(a[1] + 1 == b[0] for a, b in zip(mine, mine[1:]))  # the subtask's range tiled, in order
        if row.bytes > per_part:
            assert len(mine) > 1
    got = collect(read_state(spark, path, aggregate="key_groups", partition_bytes=per_part))
    sums = got.groupby(["operator", "key_group"], as_index=False)[["entries", "bytes", "keys"]].sum()
    expected = local.key_group_aggregates(snap)
    exp = expected[expected["entries"] > 0][["operator", "key_group", "entries", "bytes", "keys"]]
    pd.testing.assert_frame_equal(sums.sort_values(["operator", "key_group"], ignore_index=True),
                                  exp.sort_values(["operator", "key_group"], ignore_index=True), check_dtype=False)
    assert read_state(spark, path, partition_bytes=per_part).count() == len(snap.keyed_state())
    assert bytes_per_kg.sum() > 0


def test_ranges_are_cut_by_bytes_within_whole_key_groups():
    from explorer.distributed.datasource import _cut

    assert _cut(0, 3, np.ones(4), 2) == [(0, 1), (2, 3)]
    assert _cut(10, 13, np.r_[np.zeros(10), [1, 1, 1, 1]], 2) == [(10, 11), (12, 13)]
    assert _cut(0, 3, np.array([100.0, 1, 1, 1]), 3) == [(0, 0), (1, 3)]  # a key group is never split
    assert _cut(0, 7, None, 3) == [(0, 2), (3, 5), (6, 7)]  # no bytes known: equal key-group counts
    assert _cut(0, 7, np.zeros(8), 1) == [(0, 7)]


def test_diff_aggregate_options_are_checked(spark):
    flink = "sample_data/flink/heap-canonical-savepoint"
    with pytest.raises(ReaderError, match="other=PATH"):
        read_state(spark, flink, aggregate="diff")
    with pytest.raises(ReaderError, match="diff_keys='some'"):
        read_state(spark, flink, aggregate="diff", other=flink, diff_keys="some")
    with pytest.raises(ReaderError, match="max parallelism 128 in the first snapshot and 1000"):
        read_state(spark, flink, aggregate="diff", other="sample_data/flink/maxp1000-heap-canonical-savepoint")
    with pytest.raises(ReaderError, match="expected aggregate='diff' with it"):
        read_state(spark, flink, other=flink)


def test_a_partitions_pieces_merge_to_the_same_top_candidates(monkeypatch):
    """Without Spark: a partition read in pieces (memory_budget) sends its key-group rows as they are and its top
    candidates chosen again over the pieces' (a piece's ties sent whole would otherwise reach the driver once per
    piece): the final ranking is the one of the whole partition."""
    from explorer.distributed import datasource as ds

    keys = [f"k{i:03d}" for i in range(60)]
    sizes = [100] * 60
    sizes[7], sizes[41] = 500, 300
    kgs = [i % 6 for i in range(60)]
    whole = ds.aggregate_partition([_piece(keys, kgs, sizes)], "op", "hot_keys", top=3, by=["bytes", "entries"])
    pieces = [ds.aggregate_partition([_piece([k for k, g in zip(keys, kgs) if g in part],
                                             [g for g in kgs if g in part],
                                             [b for b, g in zip(sizes, kgs) if g in part])],
                                     "op", "hot_keys", top=3, by=["bytes", "entries"]) for part in ((0, 1), (2, 3), (4, 5))]
    monkeypatch.setattr(ds, "_TIE_ROWS", 8)  # the pieces' 18-19 tied keys each sent whole, the partition's 58 cut
    merged = ds.merge_pieces(pieces, top=3).to_pandas()
    assert (merged["row"] == "key_group").sum() == 6
    for by in ("bytes", "entries"):
        rows = merged[merged["row"] == f"top:{by}"]
        assert len(rows) == 3
        cols = ["operator", "key", "key_group", "entries", "bytes"]
        w = whole.to_pandas()
        assert ds.rank_hot_keys(rows[cols], by, 3)["key"].tolist() == \
            ds.rank_hot_keys(w[w["row"] == f"top:{by}"][cols], by, 3)["key"].tolist()
