"""The adapter's bucket layout without a JVM: one state read and write per bucket, timers, TTL, stored format."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pyarrow as pa
import pytest

from explorer.engine import (
    KeyedProcessFunction,
    ListStateDescriptor,
    MapStateDescriptor,
    StateTtlConfig,
    StateVisibility,
    ValueStateDescriptor,
)
from explorer.errors import JobError, SnapshotFormatError
from explorer.format import spark_buckets as codec
from explorer.spark_engine import buckets as bk

pytestmark = pytest.mark.spark


class FakeStore:
    """A Spark handle and the bucket's ValueState in one: logs every round trip."""

    def __init__(self):
        self.log, self.values, self.bucket = [], {}, 0

    def getValueState(self, name, schema, ttl=None):
        assert name == codec.STATE_NAME and ttl is None
        return self

    def get(self):
        self.log.append("get")
        return self.values.get(self.bucket)

    def update(self, row):
        self.log.append("update")
        self.values[self.bucket] = row

    def clear(self):
        self.log.append("clear")
        self.values.pop(self.bucket, None)

    def registerTimer(self, ts):
        self.log.append(("registerTimer", ts))

    def deleteTimer(self, ts):
        self.log.append(("deleteTimer", ts))


@dataclasses.dataclass
class TV:
    now: int = 1_000
    watermark: int = -1

    def getCurrentProcessingTimeInMs(self):
        return self.now

    def getCurrentWatermarkInMs(self):
        return self.watermark


@dataclasses.dataclass
class Expired:
    ts: int

    def getExpiryTimeInMs(self):
        return self.ts


@dataclasses.dataclass
class Visit:
    user: str
    page: str
    ts: int


class Pages(KeyedProcessFunction):
    """Count, pages seen (list), per-page counts (map), and an event-time timer 100 ms after each visit."""

    COUNT = ValueStateDescriptor("count", int)
    SEEN = ListStateDescriptor("seen", str)
    PER_PAGE = MapStateDescriptor("per_page", str, int)

    def open(self, ctx):
        self.count = ctx.get_state(self.COUNT)
        self.seen = ctx.get_state(self.SEEN)
        self.per_page = ctx.get_state(self.PER_PAGE)

    def process_element(self, v, ctx, out):
        n = self.count.value(0) + 1
        self.count.update(n)
        self.seen.add(v.page)
        self.per_page[v.page] = self.per_page.get(v.page, 0) + 1
        ctx.timer_service().register_event_time_timer(v.ts + 100)
        out.collect((ctx.get_current_key(), n, "data"))

    def on_timer(self, ts, ctx, out):
        out.collect((ctx.get_current_key(), ts, "timer"))


def _processor(fn, *, time_mode="event", key_columns=("user",), columns=("user", "page", "ts"), record=Visit,
               event_time_column="ts", key_type=pa.string(), variant="pandas"):
    p = bk.make_processor(variant, function=fn, time_mode=time_mode, key_columns=list(key_columns),
                          input_columns=list(columns), output_columns=["k", "n", "what"], record=record,
                          event_time_column=event_time_column, num_partitions=4, name="test",
                          key_arrow_type=key_type, buckets=8)
    store = FakeStore()
    p.init(store)
    return p, store


def _feed(p, rows, columns=("user", "page", "ts"), tv=None):
    pdf = pd.DataFrame(rows, columns=bk.data_columns(len(columns)))
    pdf.insert(0, "_1", 0)  # the bucket, as PySpark names it; not read by name
    out = list(p.handleInputRows((0,), iter([pdf]), tv or TV()))
    return [] if not out else sorted(map(tuple, out[0].itertuples(index=False, name=None)))


def test_a_bucket_is_read_once_and_written_once_whatever_its_keys():
    p, store = _processor(Pages())
    rows = [("a", "/x", 1), ("b", "/x", 2), ("a", "/y", 3), ("c", "/x", 4), ("a", "/x", 5)]
    out = _feed(p, rows)
    assert out == [("a", 1, "data"), ("a", 2, "data"), ("a", 3, "data"), ("b", 1, "data"), ("c", 1, "data")]
    assert store.log == ["get", "update", ("registerTimer", 101)]  # one Spark timer: the earliest per-key one
    store.log.clear()
    out = _feed(p, [("b", "/z", 7)])
    assert out == [("b", 2, "data")]
    assert store.log == ["get", "update"]  # the earliest timer is still 101: no timer calls
    tables = codec.decode_tables(store.values[0], "test")
    counts = dict(zip(*(tables["count"][2].column(c).to_pylist() for c in ("key", "value"))))
    assert counts == {"a": 3, "b": 2, "c": 1}
    seen = tables["seen"][2]
    assert [v for k, v in zip(seen.column("key").to_pylist(), seen.column("value").to_pylist()) if k == "a"] == \
        ["/x", "/y", "/x"]  # list order kept per key
    per_page = tables["per_page"][2].to_pylist()
    assert {"key": "a", "user_key": "/x", "value": 2} in per_page
    timers = tables[codec.TIMERS]
    assert timers[0] == "event_timer"
    assert timers[2].column("timestamp").to_pylist() == sorted(timers[2].column("timestamp").to_pylist())


def test_a_bucket_only_read_is_not_written():
    class ReadOnly(KeyedProcessFunction):
        def open(self, ctx):
            self.count = ctx.get_state(ValueStateDescriptor("count", int))

        def process_element(self, v, ctx, out):
            out.collect((ctx.get_current_key(), self.count.value(0), "read"))

    p, store = _processor(ReadOnly(), time_mode="none", event_time_column=None)
    assert _feed(p, [("a", "/x", 1)]) == [("a", 0, "read")]
    assert store.log == ["get"]


def test_the_bucket_timer_fires_every_due_per_key_timer_in_timestamp_order():
    p, store = _processor(Pages())
    _feed(p, [("a", "/x", 50), ("b", "/x", 10), ("c", "/x", 400)])
    assert store.log[-1] == ("registerTimer", 110)
    store.log.clear()
    fired = list(p.handleExpiredTimer((0,), TV(watermark=160), Expired(110)))
    got = list(fired[0].itertuples(index=False, name=None))
    assert got == [("b", 110, "timer"), ("a", 150, "timer")]  # both due by the watermark, earliest first
    # the fired Spark timer is deleted by Spark itself; the next earliest (c at 500) is registered
    assert store.log == ["get", "update", ("registerTimer", 500)]
    store.log.clear()
    _feed(p, [("d", "/x", 5)], tv=TV(watermark=160))  # an earlier timer moves the bucket's Spark timer
    assert store.log == ["get", "update", ("deleteTimer", 500), ("registerTimer", 105)]


def test_timers_of_the_other_time_domain_are_refused():
    p, _ = _processor(Pages(), time_mode="processing", event_time_column=None)
    with pytest.raises(JobError, match="time_mode='event'"):
        _feed(p, [("a", "/x", 1)])


class Remember(KeyedProcessFunction):
    """Says whether the key was seen within the TTL."""

    def __init__(self, ttl):
        self.ttl = ttl

    def open(self, ctx):
        self.seen = ctx.get_state(ValueStateDescriptor("seen", int, ttl=self.ttl))

    def process_element(self, v, ctx, out):
        out.collect((ctx.get_current_key(), self.seen.value(-1), "seen"))
        self.seen.update(ctx.timer_service().current_processing_time())


def test_ttl_follows_the_engine_rule_on_the_batch_timestamp():
    p, store = _processor(Remember(StateTtlConfig(100)), time_mode="processing", event_time_column=None)
    assert _feed(p, [("a", "/", 0)], tv=TV(now=1_000)) == [("a", -1, "seen")]
    assert _feed(p, [("a", "/", 0)], tv=TV(now=1_099)) == [("a", 1_000, "seen")]  # alive until last + ttl - 1
    assert _feed(p, [("a", "/", 0)], tv=TV(now=1_199)) == [("a", -1, "seen")]  # expired at last + ttl
    table = codec.decode_tables(store.values[0], "test")["seen"]
    assert table[1] == 100 and table[2].column("last_access").to_pylist() == [1_199]


def test_expired_entries_are_dropped_when_the_bucket_is_written():
    ttl = StateTtlConfig(100, visibility=StateVisibility.RETURN_EXPIRED_IF_NOT_CLEANED_UP)
    p, store = _processor(Remember(ttl), time_mode="processing", event_time_column=None)
    _feed(p, [("a", "/", 0)], tv=TV(now=1_000))
    _feed(p, [("b", "/", 0)], tv=TV(now=1_150))  # a expired at 1_100: left out when the bucket is written
    assert codec.decode_tables(store.values[0], "test")["seen"][2].column("key").to_pylist() == ["b"]


def test_multi_column_keys_round_trip_as_structs():
    class CountPair(KeyedProcessFunction):
        def open(self, ctx):
            self.count = ctx.get_state(ValueStateDescriptor("count", int))

        def process_element(self, v, ctx, out):
            self.count.update(self.count.value(0) + 1)
            out.collect((str(ctx.get_current_key()), self.count.value(), "pair"))

    kt = pa.struct([("user", pa.string()), ("page", pa.string())])
    p, store = _processor(CountPair(), time_mode="none", key_columns=("user", "page"), event_time_column=None,
                          record=tuple, key_type=kt)
    _feed(p, [("a", "/x", 1), ("a", "/y", 1), ("a", "/x", 1)])
    assert _feed(p, [("a", "/x", 1)]) == [(str(("a", "/x")), 3, "pair")]
    keys = codec.decode_tables(store.values[0], "test")["count"][2].column("key").to_pylist()
    assert {"user": "a", "page": "/x"} in keys


def test_row_variant_runs_the_same_function():
    from pyspark.sql import Row

    p, store = _processor(Pages(), variant="row")
    R = Row(bk.BUCKET_COLUMN, "c2", "c0", "c1")  # PySpark's own column order: found by name
    rows = [R(0, 1, "a", "/x"), R(0, 2, "a", "/y")]
    out = p.handleInputRows((0,), iter(rows), TV())
    assert [tuple(r) for r in out] == [("a", 1, "data"), ("a", 2, "data")]
    assert store.log == ["get", "update", ("registerTimer", 101)]


def test_stored_values_name_their_format_and_version():
    with pytest.raises(SnapshotFormatError, match="format 'explorer-spark-buckets'"):
        codec.decode_tables(("something-else", 1, 8, []), "ckpt/state")
    with pytest.raises(SnapshotFormatError, match="unknown bucket format version 7"):
        codec.decode_tables((codec.FORMAT, 7, 8, []), "ckpt/state")
    with pytest.raises(SnapshotFormatError, match="not a readable Arrow IPC stream"):
        codec.decode_tables((codec.FORMAT, codec.VERSION, 8, [("count", "value", None, b"garbage")]), "ckpt/state")


def test_a_different_bucket_count_is_refused():
    p, store = _processor(Pages())
    _feed(p, [("a", "/x", 1)])
    q, store2 = _processor(Pages())
    q._buckets = 16
    store2.values = store.values
    with pytest.raises(JobError, match="buckets=8, this query runs with buckets=16"):
        _feed(q, [("a", "/x", 1)])


def test_a_stored_state_the_function_does_not_declare_is_reported():
    p, store = _processor(Pages())
    _feed(p, [("a", "/x", 1)])
    q, store2 = _processor(Remember(StateTtlConfig(100)), time_mode="processing", event_time_column=None)
    store2.values = store.values
    with pytest.raises(JobError, match="not declared by the function"):
        _feed(q, [("a", "/x", 1)])


def test_the_timer_table_name_is_reserved():
    class Bad(KeyedProcessFunction):
        def open(self, ctx):
            ctx.get_state(ValueStateDescriptor(codec.TIMERS, int))

    with pytest.raises(JobError, match="reserved"):
        _processor(Bad())


def test_packing_keeps_each_buckets_rows_in_input_order():
    batch = pa.record_batch({"c0": ["a", "b", "c", "d", "e"], "c1": [1, 2, 3, 4, 5],
                             bk.BUCKET_COLUMN: pa.array([3, 1, 3, 1, 0], pa.int32())})
    packed = list(bk.pack_batches([batch, batch.slice(0, 0)]))
    assert len(packed) == 1
    out = packed[0]
    assert out.schema.names == [bk.BUCKET_COLUMN, bk.PACKED_COLUMN]
    rows = {b: bk.unpack([blob]).to_pylist() for b, blob in zip(out.column(0).to_pylist(), out.column(1).to_pylist())}
    assert rows == {0: [{"c0": "e", "c1": 5}], 1: [{"c0": "b", "c1": 2}, {"c0": "d", "c1": 4}],
                    3: [{"c0": "a", "c1": 1}, {"c0": "c", "c1": 3}]}
    # several packed rows of one bucket are concatenated in order
    assert bk.unpack([out.column(1)[2].as_py(), out.column(1)[1].as_py()]).column("c0").to_pylist() == ["a", "c", "b", "d"]


def test_the_processor_reads_packed_rows():
    class Count(KeyedProcessFunction):
        def open(self, ctx):
            self.count = ctx.get_state(ValueStateDescriptor("count", int))

        def process_element(self, v, ctx, out):
            self.count.update(self.count.value(0) + 1)
            out.collect((ctx.get_current_key(), self.count.value(), v.page))

    p, store = _processor(Count(), time_mode="none", event_time_column=None)
    p._packed = True
    batch = pa.record_batch({"c0": ["a", "b", "a"], "c1": ["/x", "/y", "/z"], "c2": [1, 2, 3],
                             bk.BUCKET_COLUMN: pa.array([0, 0, 0], pa.int32())})
    packed = next(bk.pack_batches([batch]))
    out = list(p.handleInputRows((0,), iter([packed.to_pandas()]), TV()))
    assert list(out[0].itertuples(index=False, name=None)) == [("a", 1, "/x"), ("a", 2, "/z"), ("b", 1, "/y")]
    assert store.log == ["get", "update"]
