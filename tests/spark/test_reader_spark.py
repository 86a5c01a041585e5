"""Spark checkpoints made here, read back into the explorer's contract through Spark's state data source."""

from __future__ import annotations

import collections

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from explorer.errors import ReaderError, SnapshotFormatError, SnapshotNotFoundError
from explorer.readers.base import CONTRACT_COLUMNS, KeyedStateQuery
from explorer.readers.spark import SparkCheckpointReader
from explorer.keygroups.spark import partition_ids

pytestmark = pytest.mark.spark


def _df(reader, **query) -> pd.DataFrame:
    pieces = list(reader.keyed_pieces(KeyedStateQuery(**query)))
    for p in pieces:
        assert tuple(p.column_names) == CONTRACT_COLUMNS
    return pd.concat([p.to_pandas() for p in pieces], ignore_index=True)


def test_detect_and_info(url_stats_run, tmp_path):
    ckpt = url_stats_run.spark.checkpoint_dir
    assert SparkCheckpointReader.detect(ckpt)
    assert not SparkCheckpointReader.detect(tmp_path)
    with pytest.raises(SnapshotNotFoundError, match="metadata"):
        SparkCheckpointReader(tmp_path)
    r = SparkCheckpointReader(ckpt)
    info = r.info()
    assert info.format == "spark-checkpoint" and info.checkpoint_id == 2 == r.checkpoint_ids()[-1]
    assert info.extra["shuffle_partitions"] == 4 == r.num_partitions
    assert info.created_at.tz is not None
    ops = r.operators()
    assert ops["max_parallelism"].tolist() == [4] and ops["time_mode"].tolist() == ["NoTime"]
    assert set(r.states()["state"]) == {"count", "status_codes"}
    assert r.subtasks()["key_group_start"].tolist() == [0, 1, 2, 3]
    with pytest.raises(SnapshotFormatError, match="not committed"):
        SparkCheckpointReader(ckpt, batch_id=99)


def test_state_equals_what_the_engine_ended_with(url_stats_run):
    final = {}
    codes = collections.Counter()
    for h in url_stats_run.engine_output:
        final[h.url] = max(final.get(h.url, 0), h.hits)
        codes[(h.url, h.status)] = max(codes[(h.url, h.status)], h.status_hits)
    df = _df(SparkCheckpointReader(url_stats_run.spark.checkpoint_dir))
    count = df[df.state == "count"]
    assert (count.kind == "value").all()
    assert dict(zip(count.key, count.value)) == final
    m = df[df.state == "status_codes"]
    assert (m.kind == "map").all()
    assert {(k, u): v for k, u, v in zip(m.key, m.user_key, m.value)} == dict(codes)
    assert (df.key_group == df.subtask).all() and (df.size_bytes > 0).all()
    # the partition of every key, recomputed with Spark's Murmur3: the rescale/salting what-ifs rely on it
    assert (partition_ids([count.key], 4) == count.key_group.to_numpy()).all()


def test_query_filters_and_history(url_stats_run):
    r = SparkCheckpointReader(url_stats_run.spark.checkpoint_dir)
    df = _df(r, states=frozenset({"count"}), key_groups=frozenset({1}))
    assert set(df.key_group) == {1} and set(df.state) == {"count"}
    some = df.key.iloc[0]
    one = _df(r, states=frozenset({"count"}), keys=(some,))
    assert one.key.tolist() == [some]
    # history: batch 0 is a checkpoint of its own, and the change feed explains the difference
    old = _df(r.at_batch(0), states=frozenset({"count"}))
    new = _df(r, states=frozenset({"count"}))
    assert old.value.sum() < new.value.sum()
    ch = r.changes("count", 1)
    assert set(ch.batch_id) <= {1, 2} and set(ch.change_type) <= {"update", "delete"}
    last = ch.sort_values("batch_id").groupby("key").value.last()
    merged = dict(zip(old.key, old.value)) | last.to_dict()
    assert merged == dict(zip(new.key, new.value))


def test_list_state_timers_and_ttl(sessions_run, dedup_run):
    r = SparkCheckpointReader(sessions_run.spark.checkpoint_dir)
    df = _df(r)
    lst = df[df.state == "session"]
    assert (lst.kind == "list").all() and lst.user_key.min() == 0
    assert set(lst.value.iloc[0]) == {"user_id", "ts", "kind", "page"}
    timers = df[df.kind == "event_timer"]
    ends = df[df.state == "sessionEnd"]
    assert dict(zip(timers.key, timers.value)) == dict(zip(ends.key, ends.value))
    assert len(timers) > 0
    # timers' change feed (Spark's own throws): from the registered timers of consecutive batches
    ch = r.changes("$eventTimers_keyToTimestamp", r.checkpoint_ids()[0])
    live = {}
    for row in ch.itertuples(index=False):
        if row.change_type == "update":
            live[row.key] = row.value
        else:
            assert live.pop(row.key) == row.value
    assert live == dict(zip(timers.key, timers.value))

    d = SparkCheckpointReader(dedup_run.spark.checkpoint_dir)
    seen = _df(d, states=frozenset({"seen"}))
    assert seen.expires_at.notna().all()
    info = d.info()
    first_batch = SparkCheckpointReader(dedup_run.spark.checkpoint_dir, batch_id=0).info().created_at
    ttl = seen.expires_at.min() - first_batch
    assert pd.Timedelta(hours=24) <= ttl < pd.Timedelta(hours=24, minutes=10)
    assert info.extra["watermark_ms"] == 0
    st = d.states().set_index("state")
    assert bool(st.loc["seen", "ttl_enabled"]) and st.loc["$procTimers_keyToTimestamp", "kind"] == "processing_timer"
    with pytest.raises(ReaderError, match="internal column family"):
        d.changes("$ttl_seen", 0)


def test_snapshot_start_batch_needs_a_snapshot(url_stats_run):
    r = SparkCheckpointReader(url_stats_run.spark.checkpoint_dir)
    have = r.snapshot_batches(0, 0)
    assert have == [0]
    t = r.read_snapshot("count", 0, 0)
    assert set(t.column("key_group").to_pylist()) <= {0}
    with pytest.raises(ReaderError, match="no snapshot for batch 1"):
        r.read_snapshot("count", 1, 0)


KEYS = pa.table({
    "s": pa.array(["a", "bb", None, "héllo", "user-1234", "a", "x" * 13, None], pa.string()),
    "i": pa.array([1, -7, None, 2**31 - 1, 0, 1, None, 42], pa.int32()),
    "l": pa.array([2**40, -1, None, 5, 0, 2**40, 9, None], pa.int64()),
})


@pytest.mark.parametrize("cols", [["s"], ["i"], ["l", "s"]], ids=["string", "int", "long+string"])
def test_builtin_aggregation_state_partitions_match_murmur3(spark, tmp_path, cols):
    """groupBy().count() state: Spark's partition_id for string, int, long, null and multi-column keys."""
    src = tmp_path / "in"
    src.mkdir()
    pq.write_table(KEYS, src / "part-0.parquet")
    df = spark.readStream.schema("s string, i int, l long").parquet(str(src))
    q = (df.groupBy(*cols).count().writeStream.format("noop").outputMode("update")
         .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start())
    q.awaitTermination(300)
    assert q.exception() is None
    r = SparkCheckpointReader(tmp_path / "ckpt")
    assert r.operators()["spark_operator"].tolist() == ["stateStoreSave"]
    t = pa.concat_tables(r.keyed_pieces(KeyedStateQuery()))  # one piece per partition without a JVM
    raw = r._read(r._operators[0], r._states_of(r._operators[0])[0], KeyedStateQuery())
    key = raw.column("key").combine_chunks()
    columns = [key.field(c) for c in cols]
    types = [{"s": "string", "i": "int", "l": "long"}[c] for c in cols]
    expected = partition_ids(columns, r.num_partitions, types)
    assert np.array_equal(expected, raw.column("partition_id").to_numpy())
    assert sum(t.column("value").to_pylist()) == KEYS.num_rows  # the one-field {count} struct is unwrapped
    nulls = pa.compute.is_null(key.field(cols[0])).to_numpy(zero_copy_only=False)
    assert nulls.any()  # null keys were part of the check


def test_multi_column_key_filter(spark, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    pq.write_table(KEYS, src / "part-0.parquet")
    df = spark.readStream.schema("s string, i int, l long").parquet(str(src))
    q = (df.groupBy("l", "s").count().writeStream.format("noop").outputMode("update")
         .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start())
    q.awaitTermination(300)
    r = SparkCheckpointReader(tmp_path / "ckpt")
    got = _df(r, keys=((2**40, "a"),))
    assert got.key.tolist() == [{"l": 2**40, "s": "a"}]
    assert got.value.tolist() == [2]
