"""The same KeyedProcessFunction on our engine and on Spark (transformWithState) gives the same outputs."""

from __future__ import annotations

import dataclasses

import pytest

from explorer.engine import (
    ListStateDescriptor,
    MapStateDescriptor,
    StateTtlConfig,
    UpdateType,
    ValueStateDescriptor,
)
from explorer.errors import JobError, StateNotDeclaredError
from explorer.spark_engine.context import ProcessContext as _ProcessContext, TimerService as _TimerService
from explorer.spark_engine.statemap import StateBinding, state_schema

from tests.support.spark_functions import RemindLater, by_value, one_file_per_batch

pytestmark = pytest.mark.spark


def _rows(df):
    return sorted(map(tuple, df.itertuples(index=False, name=None)))


def test_url_stats_same_output_on_engine_and_spark(url_stats_run):
    engine = sorted(dataclasses.astuple(h) for h in url_stats_run.engine_output)
    spark = _rows(url_stats_run.spark.output())
    assert len(engine) == len(url_stats_run.records) > 1000
    assert spark == engine
    assert url_stats_run.spark.batches == 3


def test_spark_reads_the_input_files_in_order(url_stats_run):
    """The cause of the old flakiness: files written within one millisecond tie on modification
    time, and Spark then took them in directory-listing order; write_input spaces their times."""
    import json

    sources = url_stats_run.spark.checkpoint_dir / "sources" / "0"
    read = [json.loads(sources.joinpath(str(b)).read_text().splitlines()[1])["path"].rsplit("/", 1)[1]
            for b in range(3)]
    assert read == ["part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]


def test_write_input_spaces_modification_times_in_file_order(tmp_path):
    from explorer.spark_engine.adapter import write_input

    src = write_input([{"k": str(i)} for i in range(40)], tmp_path / "in", files=8)
    times = [p.stat().st_mtime_ns for p in sorted(src.glob("*.parquet"))]
    assert len(times) == 8 and all(b - a >= 1_000_000_000 for a, b in zip(times, times[1:]))


def test_dedup_with_ttl_same_output_on_engine_and_spark(dedup_run):
    """The same first occurrences, record for record: the input files are read in order
    (write_input spaces their modification times), so the first of duplicates is the engine's."""
    engine = sorted(dataclasses.astuple(e) for e in dedup_run.engine_output)
    assert _rows(dedup_run.spark.output()) == engine
    assert len(engine) < len(dedup_run.records)  # duplicates were dropped


def test_sessions_event_time_timers_on_spark(sessions_run):
    """Spark's event-time timers close sessions built from real events.

    This run has no end-of-input marker, so the sessions still open when the input ends stay
    open on Spark (the engine's final watermark closes them), and its watermark delay drops
    nothing: the closed sessions are a subset of the engine's. What must hold: each summary
    spans events of that user, starts and ends at their timestamps, and counts at most the
    user's events in that span. (tests/spark/test_pipelines_spark.py compares the whole
    pipeline with the end-of-input marker, record for record.)"""
    from collections import defaultdict

    spark = set(_rows(sessions_run.spark.output()))
    assert spark < {dataclasses.astuple(s) for s in sessions_run.engine_output}
    times = defaultdict(list)
    for e in sessions_run.records:
        times[e.user_id].append(e.ts)
    assert len(spark) > 10
    for user, session_id, start, end, events, _purchases in spark:
        ts = times[user]
        assert start in ts and end in ts and start <= end
        assert session_id == f"{user}@{start}"
        assert 1 <= events <= sum(1 for t in ts if start <= t <= end)


# --- the state proxies, without Spark: read once, write once --------------------------------------------
class FakeValue:
    def __init__(self, log, name, store):
        self.log, self.name, self.store = log, name, store

    def get(self):
        self.log.append(("get", self.name))
        return self.store.get(self.name)

    def update(self, v):
        self.log.append(("update", self.name, v))
        self.store[self.name] = v

    def clear(self):
        self.log.append(("clear", self.name))
        self.store.pop(self.name, None)


class FakeList(FakeValue):
    def get(self):
        self.log.append(("get", self.name))
        return iter(self.store.get(self.name, []))

    def put(self, items):
        self.log.append(("put", self.name, list(items)))
        self.store[self.name] = list(items)

    def appendList(self, items):
        self.log.append(("appendList", self.name, list(items)))
        self.store.setdefault(self.name, []).extend(items)


class FakeMap(FakeValue):
    def _m(self):
        return self.store.setdefault(self.name, {})

    def getValue(self, k):
        self.log.append(("getValue", self.name, k))
        return self._m().get(k)

    def iterator(self):
        self.log.append(("iterator", self.name))
        return iter(list(self._m().items()))

    def updateValue(self, k, v):
        self.log.append(("updateValue", self.name, k, v))
        self._m()[k] = v

    def removeKey(self, k):
        self.log.append(("removeKey", self.name, k))
        self._m().pop(k, None)


class FakeHandle:
    def __init__(self):
        self.log, self.store, self.declared = [], {}, {}

    def getValueState(self, name, schema, ttl=None):
        self.declared[name] = ("value", schema, ttl)
        return FakeValue(self.log, name, self.store)

    def getListState(self, name, schema, ttl=None):
        self.declared[name] = ("list", schema, ttl)
        return FakeList(self.log, name, self.store)

    def getMapState(self, name, kschema, vschema, ttl=None):
        self.declared[name] = ("map", kschema, vschema, ttl)
        return FakeMap(self.log, name, self.store)

    def registerTimer(self, ts):
        self.log.append(("registerTimer", ts))

    def deleteTimer(self, ts):
        self.log.append(("deleteTimer", ts))


@dataclasses.dataclass
class Point:
    x: int
    label: str


def _bind(ttl_allowed=True):
    h = FakeHandle()
    return h, StateBinding(h, ttl_allowed=ttl_allowed)


def test_value_state_is_read_once_and_written_once_per_key():
    h, b = _bind()
    count = b.get_state(ValueStateDescriptor("count", int))
    b.in_key = True
    for _ in range(5):
        count.update(count.value(0) + 1)
    b.flush()
    assert h.log == [("get", "count"), ("update", "count", (5,))]
    h.log.clear()
    for _ in range(3):
        count.update(count.value(0) + 1)
    b.flush()
    assert h.log == [("get", "count"), ("update", "count", (8,))]


def test_value_state_struct_values_round_trip():
    h, b = _bind()
    p = b.get_state(ValueStateDescriptor("p", Point))
    b.in_key = True
    p.update(Point(3, "a"))
    b.flush()
    assert h.store["p"] == ((3, "a"),)
    assert p.value() == Point(3, "a")
    p.clear()
    b.flush()
    assert "p" not in h.store


def test_list_appends_without_reading_become_one_append_list():
    h, b = _bind()
    lst = b.get_state(ListStateDescriptor("events", str))
    b.in_key = True
    lst.add("a")
    lst.add_all(["b", "c"])
    b.flush()
    assert h.log == [("appendList", "events", [("a",), ("b",), ("c",)])]
    h.log.clear()
    assert lst.get() == ["a", "b", "c"]
    lst.add("d")
    assert lst.get() == ["a", "b", "c", "d"]
    b.flush()
    assert h.log == [("get", "events"), ("appendList", "events", [("d",)])]
    h.log.clear()
    lst.update(["z"])
    b.flush()
    lst.clear()
    b.flush()
    assert h.log == [("put", "events", [("z",)]), ("clear", "events")]


def test_map_state_caches_reads_and_writes_changes_once():
    h, b = _bind()
    m = b.get_state(MapStateDescriptor("codes", str, int))
    b.in_key = True
    for code in ["200", "200", "404", "200"]:
        m[code] = m.get(code, 0) + 1
    assert dict(m.items()) == {"200": 3, "404": 1}
    b.flush()
    gets = [e for e in h.log if e[0] == "getValue"]
    assert gets == [("getValue", "codes", ("200",)), ("getValue", "codes", ("404",))]
    assert ("updateValue", "codes", ("200",), (3,)) in h.log
    h.log.clear()
    assert m.contains("404") and "500" not in m
    m.remove("404")
    del m["200"]
    assert m.is_empty()
    b.flush()
    assert ("removeKey", "codes", ("404",)) in h.log and ("removeKey", "codes", ("200",)) in h.log


def test_ttl_maps_to_spark_ttl_and_read_refreshes_when_asked():
    h, b = _bind()
    seen = b.get_state(ValueStateDescriptor("seen", bool, ttl=StateTtlConfig(60_000)))
    touched = b.get_state(ValueStateDescriptor(
        "touched", int, ttl=StateTtlConfig(5_000, update_type=UpdateType.ON_READ_AND_WRITE)))
    assert h.declared["seen"][2] == 60_000 and h.declared["touched"][2] == 5_000
    h.store["touched"] = (7,)
    b.in_key = True
    assert seen.value() is None and touched.value() == 7
    b.flush()
    # ON_READ_AND_WRITE: Spark refreshes TTL on writes only, so a read is written back
    assert ("update", "touched", (7,)) in h.log
    assert not any(e[0] == "update" and e[1] == "seen" for e in h.log)


def test_ttl_needs_a_time_mode():
    _, b = _bind(ttl_allowed=False)
    with pytest.raises(JobError, match="time_mode='processing'"):
        b.get_state(ValueStateDescriptor("seen", bool, ttl=StateTtlConfig(1000)))


def test_state_outside_a_key_raises():
    _, b = _bind()
    v = b.get_state(ValueStateDescriptor("v", int))
    with pytest.raises(StateNotDeclaredError):
        v.value()


def test_timers_are_deduplicated_and_checked_for_their_domain():
    h = FakeHandle()
    t = _TimerService(h, "event")
    t.register_event_time_timer(10)
    t.register_event_time_timer(10)
    t.register_event_time_timer(20)
    t.delete_event_time_timer(20)
    t.flush()
    assert h.log == [("registerTimer", 10), ("deleteTimer", 20)]
    with pytest.raises(JobError, match="time_mode='processing'"):
        t.register_processing_time_timer(5)
    ctx = _ProcessContext(t)
    with pytest.raises(JobError, match="side outputs"):
        ctx.output("late", 1)


def test_state_schemas_follow_declared_types():
    assert state_schema(int).simpleString() == "struct<value:bigint>"
    assert state_schema(Point).simpleString() == "struct<value:struct<x:bigint,label:string>>"
    assert state_schema(dict[str, int], "key").simpleString() == "struct<key:map<string,bigint>>"



def test_processing_time_timers_fire_and_the_query_ends(spark, tmp_path):
    """With processing-time timers an availableNow query of PySpark 4.3 would never end; run_on_spark's does."""
    from explorer.spark_engine.adapter import run_on_spark

    by_value()
    src = one_file_per_batch(tmp_path, [[{"k": "a"}, {"k": "b"}], [{"k": "a"}, {"k": "c"}], [{"k": "d"}]])
    run = run_on_spark(RemindLater(), src, "k", "k string, seen long, domain string", tmp_path / "ckpt",
                       time_mode="processing", record=dict, timeout_s=600)
    assert run.batches == 3
    fired = sorted(map(tuple, run.output().itertuples(index=False, name=None)))
    # Spark handles a micro-batch's rows first, then the timers due by the batch timestamp
    assert [(f[0], f[1]) for f in fired] == [("a", 1), ("a", 2), ("b", 1), ("c", 1), ("d", 1)]
    assert {f[2] for f in fired} == {"processing_time"}
