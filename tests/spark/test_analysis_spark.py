"""The analyses on Spark (explorer.distributed.analysis, through the state-explorer data source) give the local
explorer's answers on sample snapshots of every format, on local[2]."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import explorer
from explorer import analysis as local
from explorer.errors import AnalysisError
from explorer.distributed import analysis as on_spark

pytestmark = pytest.mark.spark

ENGINE = "sample_data/url_counts/savepoint-rocksdb"  # with the engine's per-key-group counts and traffic sketch
ENGINE_TTL = "sample_data/dedup/savepoint-heap"  # a ValueState with a 24 h TTL
FLINK_HEAP = "sample_data/flink/heap-canonical-savepoint"  # Long and String keys, TTL states, timers, windows
FLINK_ROCKSDB = "sample_data/flink/rocksdb-native-savepoint"
SPARK = "sample_data/spark/agg-hdfs"  # a Spark checkpoint read from its files (HDFS-backed store)
FORMATS = [ENGINE, FLINK_HEAP, FLINK_ROCKSDB, SPARK]
FLINK_TTL = {"last_seen": pd.Timedelta(hours=1).to_pytimedelta(),
             "recent_amounts": pd.Timedelta(hours=2).to_pytimedelta(),
             "per_category": pd.Timedelta(hours=3).to_pytimedelta()}


def _sorted(df: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    return df.sort_values(by, kind="stable").reset_index(drop=True)


@pytest.mark.parametrize("path", FORMATS)
def test_distribution_totals_and_hot_keys_equal_local(spark, path):
    snap = explorer.open(path)
    expected = local.key_group_distribution(snap)
    got = on_spark.key_group_distribution(path, spark=spark)
    assert expected["entries"].sum() > 0
    pd.testing.assert_frame_equal(got, expected, check_dtype=False)
    pd.testing.assert_frame_equal(on_spark.state_sizes(path, spark=spark),
                                  _sorted(local.state_sizes(snap), ["operator", "state"]), check_dtype=False)
    for by in ("bytes", "entries", "auto") if path == ENGINE else ("bytes", "entries"):  # auto: traffic where sketched
        expected = local.hot_keys(snap, n=7, by=by)
        got = on_spark.hot_keys(path, n=7, by=by, spark=spark)
        assert len(expected)
        pd.testing.assert_frame_equal(got, expected, check_dtype=False)


def test_hot_keys_of_another_parallelism_and_one_operator(spark):
    snap = explorer.open(FLINK_HEAP)
    expected = local.hot_keys(snap, n=5, by="bytes", operator="user-state", parallelism=3)
    got = on_spark.hot_keys(FLINK_HEAP, n=5, by="bytes", operator="user-state", parallelism=3, spark=spark)
    pd.testing.assert_frame_equal(got, expected, check_dtype=False)
    assert set(got["subtask"]) <= {0, 1, 2}


@pytest.mark.parametrize("path,options", [(ENGINE_TTL, {}), (FLINK_HEAP, {"ttl": FLINK_TTL})])
def test_ttl_answers_equal_local(spark, path, options):
    snap = explorer.open(path, **options)
    now = snap.created_at or pd.Timestamp("2026-01-01", tz="UTC")
    for at in (now, now + pd.Timedelta(hours=2)):
        expected = local.ttl_expiry(snap, now=at, freq="30min")
        got = on_spark.ttl_expiry(path, now=at, freq="30min", spark=spark, **options)
        assert len(expected)
        pd.testing.assert_frame_equal(got, _sorted(expected, ["operator", "state", "window"]), check_dtype=False)
        expected = local.expired_not_cleaned(snap, now=at)
        got = on_spark.expired_not_cleaned(path, now=at, spark=spark, **options)
        pd.testing.assert_frame_equal(got, _sorted(expected, ["operator", "state"]), check_dtype=False)


def test_diff_equals_local(spark):
    a, b = "sample_data/url_counts/checkpoints/chk-2", "sample_data/url_counts/checkpoints/chk-5"
    d = local.diff(explorer.open(a), explorer.open(b))
    expected = _sorted(local.diff_summary(d), ["operator", "state"])
    sd = on_spark.diff(a, b, spark=spark).cache()
    got = on_spark.diff_summary(sd)
    assert expected[["keys_added", "keys_changed"]].to_numpy().sum() > 0
    pd.testing.assert_frame_equal(got, expected, check_dtype=False)
    grown = on_spark.growth_by_key(sd, n=5)
    want = local.growth_by_key(d, n=None)
    for row in grown.itertuples(index=False):  # each key's growth is the local one (ties may be ordered otherwise)
        match = want[(want["operator"] == row.operator) & (want["key"] == row.key)]
        assert match["bytes_delta"].tolist() == [row.bytes_delta]
    assert grown["bytes_delta"].tolist() == want["bytes_delta"].head(5).tolist()
    assert sd.where("status = 'changed'").count() == int((d["status"] == "changed").sum())
    sd.unpersist()


def test_dataframe_source_needs_max_parallelism(spark):
    df = explorer.spark.read_state(spark, ENGINE, operator="url-count")
    with pytest.raises(AnalysisError, match="max_parallelism"):
        on_spark.key_group_aggregates(df, spark=spark)
    got = on_spark.key_group_aggregates(df, max_parallelism=128, spark=spark)
    expected = local.key_group_aggregates(explorer.open(ENGINE), operator="url-count")
    pd.testing.assert_frame_equal(got[["operator", "key_group", "entries", "bytes", "keys"]],
                                  expected[["operator", "key_group", "entries", "bytes", "keys"]], check_dtype=False)
    assert np.all(got["records"] == 0)  # traffic counts are the snapshot's metadata, not rows


def _diff_rows(df: pd.DataFrame, json_keys: bool) -> list[tuple]:
    """A diff's rows as comparable tuples, keys as the data source's JSON text."""
    from explorer.distributed.datasource import to_json

    return sorted((r.operator, r.state, r.key if json_keys else to_json(r.key), str(r.status), int(r.entries_a),
                   int(r.entries_b), int(r.entries_delta), int(r.bytes_a), int(r.bytes_b), int(r.bytes_delta))
                  for r in df.itertuples(index=False))


@pytest.mark.parametrize("a,b", [
    ("sample_data/url_counts/checkpoints/chk-2", "sample_data/url_counts/checkpoints/chk-5"),  # added, changed
    (FLINK_HEAP, "sample_data/flink/heap-checkpoint-compressed"),  # the same state, another Flink format
    ("sample_data/flink/production/plain-rocksdb-canonical-savepoint", FLINK_HEAP),  # another job: added, removed
    (FLINK_HEAP, "sample_data/flink/flink-1.20-heap-canonical-savepoint"),  # operators of one side only
])
def test_diff_by_key_group_ranges_equals_the_local_diff(spark, a, b):
    """Each partition diffs one key-group range of both snapshots (small partitions: several per subtask): the
    rows and the summary are the local diff's."""
    from explorer.spark import read_state

    d = local.diff(explorer.open(a), explorer.open(b))
    assert len(d)
    keyed = [explorer.open(p).subtasks.dropna(subset=["key_group_start"]) for p in (a, b)]
    options = {"partition_bytes": max(int(k["bytes"].max()) for k in keyed) // 2}  # the largest subtask cut in two
    assert read_state(spark, a, aggregate="diff", other=b, **options).rdd.getNumPartitions() > max(map(len, keyed))
    got = on_spark.diff_summary(a, b, spark=spark, **options)
    pd.testing.assert_frame_equal(got, _sorted(local.diff_summary(d), ["operator", "state"]), check_dtype=False)
    assert _diff_rows(on_spark.diff(a, b, spark=spark, **options).toPandas(), True) == _diff_rows(d, False)
    changes = on_spark.diff(a, b, unchanged=False, spark=spark, **options).toPandas()
    assert _diff_rows(changes, True) == _diff_rows(d[d["status"] != "unchanged"], False)


def _by_key(df: pd.DataFrame) -> pd.DataFrame:
    """A diff's rows in one order whatever its keys' types (by operator, state and the key's JSON text)."""
    from explorer.distributed.datasource import to_json

    order = pd.DataFrame({"operator": df["operator"], "state": df["state"], "k": [to_json(k) for k in df["key"]]})
    return df.iloc[order.sort_values(["operator", "state", "k"], kind="stable").index].reset_index(drop=True)


@pytest.mark.parametrize("a,b,unchanged", [
    ("sample_data/url_counts/checkpoints/chk-2", "sample_data/url_counts/checkpoints/chk-5", False),  # str keys
    (FLINK_HEAP, "sample_data/flink/heap-checkpoint-compressed", True),  # int and str keys: objects
    (FLINK_HEAP, "sample_data/flink/maxp1000-heap-canonical-savepoint", True),  # the keys joined in Spark
])
def test_collected_diff_is_the_local_diff(spark, a, b, unchanged):
    """collect_diff: the Spark diff on the driver is the local diff's frame: the same columns and dtypes (status
    a Categorical, str keys Arrow-backed, others Python values), the same rows, sorted as the local one is."""
    d = local.diff(explorer.open(a), explorer.open(b), unchanged=unchanged)
    got = on_spark.collect_diff(on_spark.diff(a, b, unchanged=unchanged, spark=spark))
    assert len(got) and len(got) == len(d)
    assert list(got.columns) == list(d.columns)
    assert got.dtypes.to_dict() == d.dtypes.to_dict()
    pd.testing.assert_frame_equal(_by_key(got), _by_key(d))
    resorted = got.sort_values(["operator", "state", "bytes_delta"], ascending=[True, True, False], kind="stable")
    assert resorted.index.tolist() == list(range(len(got)))


def test_collected_diff_keys_and_empty_diff():
    """Keys that are not plain JSON strings come back as Python values (escapes undone, lists as tuples); no
    changed key gives an empty frame of the local diff's columns."""
    import pyarrow as pa

    from explorer.analysis.diff import KEY_STRINGS

    def table(keys):
        n = len(keys)
        return pa.table({"operator": ["op"] * n, "state": ["s"] * n, "key": keys,
                         "status": pa.array([2] * n, pa.int8()),
                         **{c: pa.array(range(n), pa.int64()) for c in ("entries_a", "entries_b", "bytes_a", "bytes_b")}})

    got = on_spark.diff_frame([table(['"a\\"b"', '"x"'])])
    assert got["key"].dtype == KEY_STRINGS and got["key"].tolist() == ['a"b', "x"]
    got = on_spark.diff_frame([table(['[1,"x"]', "7"])])
    assert got["key"].dtype == object and got["key"].tolist() == [(1, "x"), 7]
    assert got["status"].tolist() == ["changed", "changed"] and got["entries_delta"].tolist() == [0, 0]
    empty = on_spark.diff_frame([table([]).cast(table(["1"]).schema)])
    assert list(empty.columns) == on_spark.DIFF_COLUMNS and not len(empty)
    assert str(empty["status"].dtype) == "category" and empty["bytes_delta"].dtype == np.int64


def test_diff_of_another_max_parallelism_joins_the_keys(spark):
    """A key's key group differs between the sides: no range-by-range diff, the keys are joined in Spark."""
    a, b = FLINK_HEAP, "sample_data/flink/maxp1000-heap-canonical-savepoint"
    d = local.diff(explorer.open(a), explorer.open(b))
    got = on_spark.diff_summary(a, b, spark=spark)
    pd.testing.assert_frame_equal(got, _sorted(local.diff_summary(d), ["operator", "state"]), check_dtype=False)


@pytest.mark.parametrize("a,b", [
    ("sample_data/url_counts/checkpoints/chk-2", "sample_data/url_counts/checkpoints/chk-5"),  # engine row groups
    (FLINK_HEAP, "sample_data/flink/heap-checkpoint-compressed"),  # Flink key-group offsets
])
def test_a_task_reads_its_range_in_pieces_within_its_memory_budget(spark, a, b):
    """memory_budget: a partition reads, aggregates and diffs its key groups piece by piece (a tiny budget here:
    a few key groups per piece, or one); the pieces tile its range, and every answer stays the local one."""
    from pathlib import Path

    from explorer.distributed.datasource import StateExplorerDataSource
    from explorer.errors import ReaderError
    from explorer.spark import read_state

    tiny = "64KB"
    schema = read_state(spark, a).schema
    parts = StateExplorerDataSource({"path": str(Path(a).absolute()), "memory_budget": tiny}).reader(schema).partitions()
    assert any(p.pieces is not None and len(p.pieces) > 1 for p in parts)
    for p in parts:
        pieces = p.pieces or (p.key_groups,)
        assert pieces[0][0] == p.key_groups[0] and pieces[-1][1] == p.key_groups[1]
        assert all(x[1] + 1 == y[0] for x, y in zip(pieces, pieces[1:]))
    whole = StateExplorerDataSource({"path": str(Path(a).absolute())}).reader(schema).partitions()
    assert [p.key_groups for p in whole] == [p.key_groups for p in parts]  # the budget cuts tasks, not partitions
    assert all(p.pieces is None for p in whole)  # the default budget holds these small snapshots whole
    snap = explorer.open(a)
    assert read_state(spark, a, memory_budget=tiny).count() == len(snap.keyed_state())
    pd.testing.assert_frame_equal(on_spark.key_group_distribution(a, spark=spark, memory_budget=tiny),
                                  local.key_group_distribution(snap), check_dtype=False)
    for by in ("bytes", "entries"):
        pd.testing.assert_frame_equal(on_spark.hot_keys(a, n=7, by=by, spark=spark, memory_budget=tiny),
                                      local.hot_keys(snap, n=7, by=by), check_dtype=False)
    d = local.diff(snap, explorer.open(b))
    got = on_spark.diff_summary(a, b, spark=spark, memory_budget=tiny)
    pd.testing.assert_frame_equal(got, _sorted(local.diff_summary(d), ["operator", "state"]), check_dtype=False)
    changes = on_spark.diff(a, b, unchanged=False, spark=spark, memory_budget=tiny).toPandas()
    assert _diff_rows(changes, True) == _diff_rows(d[d["status"] != "unchanged"], False)
    with pytest.raises(ReaderError, match="memory_budget='lots'"):
        read_state(spark, a, memory_budget="lots")
