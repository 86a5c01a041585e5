"""The adapter's bucket layout on Spark: the same outputs as the engine, timers, TTL, and the explorer reads it."""

from __future__ import annotations

import collections
import dataclasses
import sys

import pandas as pd
import pytest

from explorer.engine import KeyedProcessFunction, StateTtlConfig, ValueStateDescriptor
from explorer.errors import JobError, ReaderError
from explorer.readers.base import CONTRACT_COLUMNS, KeyedStateQuery
from explorer.readers.spark import SparkCheckpointReader
from explorer.spark_engine import buckets as bk
from explorer.keygroups.spark import partition_ids

from tests.support.spark_functions import RemindLater, by_value, one_file_per_batch

pytestmark = pytest.mark.spark


def _rows(df):
    return sorted(map(tuple, df.itertuples(index=False, name=None)))


def _state(reader, **query):
    pieces = list(reader.keyed_pieces(KeyedStateQuery(**query)))
    for p in pieces:
        assert tuple(p.column_names) == CONTRACT_COLUMNS
    return pd.concat([p.to_pandas() for p in pieces], ignore_index=True)


def test_url_stats_same_output_on_engine_and_bucket_layout(url_stats_bucket_run):
    engine = sorted(dataclasses.astuple(h) for h in url_stats_bucket_run.engine_output)
    spark = _rows(url_stats_bucket_run.spark.output())
    assert len(engine) == len(url_stats_bucket_run.records) > 1000
    assert spark == engine
    assert url_stats_bucket_run.spark.batches == 3


def test_dedup_with_adapter_ttl_same_output_as_the_engine(dedup_bucket_run):
    engine = sorted(dataclasses.astuple(e) for e in dedup_bucket_run.engine_output)
    assert _rows(dedup_bucket_run.spark.output()) == engine
    assert len(engine) < len(dedup_bucket_run.records)


def test_sessions_event_time_timers_in_the_bucket_layout(sessions_bucket_run):
    """Per-key event-time timers kept in buckets close sessions (see the per-key test for why not equality)."""
    spark = set(_rows(sessions_bucket_run.spark.output()))
    times = collections.defaultdict(list)
    for e in sessions_bucket_run.records:
        times[e.user_id].append(e.ts)
    assert len(spark) > 10
    for user, session_id, start, end, events, _purchases in spark:
        ts = times[user]
        assert start in ts and end in ts and start <= end
        assert session_id == f"{user}@{start}"
        assert 1 <= events <= sum(1 for t in ts if start <= t <= end)
    assert {s[0] for s in spark} <= set(times)


def test_explorer_reads_the_bucket_layout_per_key(url_stats_bucket_run):
    final, codes = {}, collections.Counter()
    for h in url_stats_bucket_run.engine_output:
        final[h.url] = max(final.get(h.url, 0), h.hits)
        codes[(h.url, h.status)] = max(codes[(h.url, h.status)], h.status_hits)
    r = SparkCheckpointReader(url_stats_bucket_run.spark.checkpoint_dir)
    states = r.states()
    assert dict(zip(states.state, states.kind)) == {"count": "value", "status_codes": "map"}
    df = _state(r)
    count = df[df.state == "count"]
    assert dict(zip(count.key, count.value)) == final
    m = df[df.state == "status_codes"]
    assert {(k, u): v for k, u, v in zip(m.key, m.user_key, m.value)} == dict(codes)
    # a key's row sits in the partition of its bucket: pmod(hash(pmod(hash(key), 8)), 4)
    bucket = partition_ids([count.key.tolist()], 8)
    assert (partition_ids([bucket], 4, ["int"]) == count.key_group.to_numpy()).all()
    one = count.key.iloc[0]
    assert _state(r, keys=(one,), states=frozenset({"count"})).key.tolist() == [one]
    with pytest.raises(ReaderError, match="bucket layout"):
        r.changes("count", 0)


def test_explorer_reads_adapter_ttl_and_timers(dedup_bucket_run, sessions_bucket_run):
    df = _state(SparkCheckpointReader(dedup_bucket_run.spark.checkpoint_dir))
    assert set(df.state) == {"seen"} and df.value.all()
    assert (df.expires_at - df.last_access == pd.Timedelta(hours=24)).all()
    r = SparkCheckpointReader(sessions_bucket_run.spark.checkpoint_dir)
    df = _state(r)
    timers = df[df.state == "event_timers"]
    assert (timers.kind == "event_timer").all() and len(timers) > 0
    assert timers.value.notna().all()


class ForgetFast(KeyedProcessFunction):
    """Says whether the key is remembered; a 1 ms TTL forgets it by the next micro-batch."""

    def open(self, ctx):
        self.seen = ctx.get_state(ValueStateDescriptor("seen", bool, ttl=StateTtlConfig(1)))
        self.kept = ctx.get_state(ValueStateDescriptor("kept", bool))

    def process_element(self, value, ctx, out):
        out.collect((ctx.get_current_key(), self.seen.value() is not None, self.kept.value() is not None))
        self.seen.update(True)
        self.kept.update(True)


def test_processing_time_timers_and_adapter_ttl_in_the_bucket_layout(spark, tmp_path):
    from pyspark import cloudpickle

    from explorer.spark_engine.adapter import run_on_spark

    by_value()
    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # for ForgetFast: Spark's workers cannot import tests/
    src = one_file_per_batch(tmp_path, [[{"k": "a"}, {"k": "b"}], [{"k": "a"}, {"k": "c"}], [{"k": "d"}]])
    run = run_on_spark(RemindLater(), src, "k", "k string, seen long, domain string", tmp_path / "ckpt",
                       time_mode="processing", record=dict, timeout_s=600, layout="bucket", buckets=4)
    assert run.batches == 3
    fired = _rows(run.output())
    assert [(f[0], f[1]) for f in fired] == [("a", 1), ("a", 2), ("b", 1), ("c", 1), ("d", 1)]
    assert {f[2] for f in fired} == {"processing_time"}

    run = run_on_spark(ForgetFast(), src, "k", "k string, seen boolean, kept boolean", tmp_path / "ckpt-ttl",
                       time_mode="processing", record=dict, timeout_s=600, layout="bucket", buckets=4)
    # "a" comes back a micro-batch later: the TTL state forgot it, the state without TTL did not
    assert _rows(run.output()) == [("a", False, False), ("a", False, True), ("b", False, False),
                                   ("c", False, False), ("d", False, False)]


def test_layout_arguments_are_checked(spark, tmp_path):
    from explorer.spark_engine.adapter import keyed_process

    df = spark.createDataFrame([("a", 1)], "k string, v long")
    with pytest.raises(JobError, match="layout must be"):
        keyed_process(df, RemindLater(), "k", "k string", layout="keygroup")
    with pytest.raises(JobError, match="buckets must be a positive int"):
        keyed_process(df, RemindLater(), "k", "k string", layout="bucket", buckets=0)
    with pytest.raises(JobError, match="layout='bucket' only"):
        keyed_process(df, RemindLater(), "k", "k string", buckets=8)
    clash = spark.createDataFrame([("a", 1)], f"k string, {bk.BUCKET_COLUMN} long")
    with pytest.raises(JobError, match="already has a column"):
        keyed_process(clash, RemindLater(), "k", "k string", layout="bucket")
