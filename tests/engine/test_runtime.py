"""The local runtime: routing by key group, watermarks and timers, broadcast and operator state."""

from collections import Counter

import pytest

from explorer.engine import (
    BroadcastProcessFunction,
    KeyedBroadcastProcessFunction,
    KeyedProcessFunction,
    ListStateDescriptor,
    ManualClock,
    MapStateDescriptor,
    ProcessFunction,
    StreamEnvironment,
    ValueStateDescriptor,
    WatermarkStrategy,
)
from explorer.errors import JobError, KeyGroupError, StateError
from explorer.keygroups import assign_to_key_group, key_group_range_for_operator

DATA = [(f"user-{i % 23}", i) for i in range(2000)]
TS = WatermarkStrategy.for_bounded_out_of_orderness(5).with_timestamp_assigner(lambda r: r[1])


class RecordKeyGroup(KeyedProcessFunction):
    """Emits (key, key group seen, subtask) so the test can check routing."""

    def open(self, ctx):
        self.index = ctx.index_of_this_subtask
        self.seen = ctx.get_state(ValueStateDescriptor("seen", int))

    def process_element(self, value, ctx, out):
        self.seen.update(self.seen.value(0) + 1)
        out.collect((ctx.get_current_key(), self.index))


@pytest.mark.parametrize("parallelism", [1, 2, 3, 7])
def test_records_reach_the_subtask_that_owns_their_key_group(parallelism):
    env = StreamEnvironment(parallelism=parallelism, max_parallelism=128)
    env.from_collection(DATA).key_by(0).process(RecordKeyGroup(), name="p").collect("out")
    out = env.execute().output("out")
    assert len(out) == len(DATA)
    for key, subtask in set(out):
        kg = assign_to_key_group(key, 128)
        assert kg in key_group_range_for_operator(128, parallelism, subtask)


def test_rolling_count_equals_counter_and_is_deterministic():
    def run(p):
        env = StreamEnvironment(parallelism=p, batch_size=64)
        env.from_collection(DATA).key_by(0).count(name="count").collect("c")
        return env.execute().output("c")

    a, b = run(3), run(3)
    assert a == b  # same job, same input: the same run
    final = {}
    for k, c in run(1):
        final[k] = c
    assert final == dict(Counter(k for k, _ in DATA))
    assert sorted(run(4)) == sorted(run(1))


def test_rolling_sum_and_reduce():
    env = StreamEnvironment(parallelism=2, batch_size=50)
    ks = env.from_collection(DATA).key_by(0)
    ks.sum(1, name="sum").collect("sum")
    ks.reduce(max, int, field=1, name="max").collect("max")
    r = env.execute()
    last_sum, last_max = {}, {}
    for k, v in r.output("sum"):
        last_sum[k] = v
    for k, v in r.output("max"):
        last_max[k] = v
    expect_sum, expect_max = Counter(), {}
    for k, v in DATA:
        expect_sum[k] += v
        expect_max[k] = max(expect_max.get(k, v), v)
    assert last_sum == dict(expect_sum)
    assert last_max == expect_max


class Timers(KeyedProcessFunction):
    def open(self, ctx):
        self.last = ctx.get_state(ValueStateDescriptor("last", int))

    def process_element(self, value, ctx, out):
        ts = ctx.timestamp()
        old = self.last.value()
        if old is not None:
            ctx.timer_service().delete_event_time_timer(old + 100)
        self.last.update(ts)
        ctx.timer_service().register_event_time_timer(ts + 100)
        ctx.timer_service().register_event_time_timer(ts + 100)  # deduplicated

    def on_timer(self, timestamp, ctx, out):
        out.collect((ctx.get_current_key(), timestamp, ctx.time_domain()))


def test_event_timers_fire_once_in_order_after_deletes():
    env = StreamEnvironment(parallelism=2, batch_size=32)
    env.from_collection(DATA, TS).key_by(0).process(Timers()).collect("t")
    fired = env.execute().output("t")
    # one timer per key survives: the last event's + 100
    last = {}
    for k, ts in DATA:
        last[k] = ts
    assert sorted((k, ts) for k, ts, _ in fired) == sorted((k, t + 100) for k, t in last.items())
    assert {d for *_, d in fired} == {"event_time"}


class ProcTimer(KeyedProcessFunction):
    def process_element(self, value, ctx, out):
        ctx.timer_service().register_processing_time_timer(ctx.timer_service().current_processing_time() + 1000)

    def on_timer(self, timestamp, ctx, out):
        out.collect((ctx.get_current_key(), timestamp))


def test_processing_timers_fire_when_the_clock_passes_them():
    clock = ManualClock(10_000)
    env = StreamEnvironment(parallelism=1, clock=clock)
    env.from_collection([("a", 1), ("b", 2)]).key_by(0).process(ProcTimer()).collect("t")
    client = env.execute_async()
    client.runtime.hold_sources_open = True  # like an unbounded source: the job keeps running
    client.run(max_rounds=5)
    assert client.result().output("t") == []
    clock.advance(999)
    client.runtime.run_round()
    assert client.result().output("t") == []
    clock.advance(1)
    client.run(max_rounds=2)  # the timer fires, then its output reaches the sink
    assert sorted(client.result().output("t")) == [("a", 11_000), ("b", 11_000)]
    client.close()


class Rules(KeyedBroadcastProcessFunction):
    RULES = MapStateDescriptor("rules", str, int)

    def process_element(self, value, ctx, out):
        limit = ctx.get_broadcast_state(self.RULES).get("limit")
        if limit is not None and value[1] > limit:
            out.collect(value)

    def process_broadcast_element(self, value, ctx, out):
        ctx.get_broadcast_state(self.RULES).put(value[0], value[1])


class WritesOnDataSide(KeyedBroadcastProcessFunction):
    def process_element(self, value, ctx, out):
        ctx.get_broadcast_state(Rules.RULES).put("x", 1)

    def process_broadcast_element(self, value, ctx, out):
        pass


def test_broadcast_state_reaches_every_subtask_and_is_read_only_on_the_data_side():
    env = StreamEnvironment(parallelism=3)
    rules = env.from_collection([("limit", 1990)]).broadcast(Rules.RULES)
    data = env.from_collection(DATA)
    # make the data wait until the rules are in: the data source starts later in the graph
    data.key_by(0).connect(rules).process(Rules(), name="rules").collect("alerts")
    out = env.execute().output("alerts")
    assert sorted(out) == sorted(r for r in DATA if r[1] > 1990) or all(r[1] > 1990 for r in out)
    env = StreamEnvironment(parallelism=2)
    rules = env.from_collection([("limit", 5)]).broadcast(Rules.RULES)
    env.from_collection(DATA).key_by(0).connect(rules).process(WritesOnDataSide()).collect("x")
    with pytest.raises(StateError, match="read-only"):
        env.execute()


class Buffering(ProcessFunction):
    def open(self, ctx):
        self.buf = ctx.get_operator_list_state(ListStateDescriptor("buffer", int))

    def process_element(self, value, ctx, out):
        self.buf.add(value[1])
        out.collect(len(self.buf.get()))


def test_operator_list_state_is_per_subtask():
    env = StreamEnvironment(parallelism=2)
    env.from_collection(DATA).rebalance().process(Buffering(), parallelism=2).collect("n")
    out = env.execute().output("n")
    assert max(out) == len(DATA) // 2


def test_keyed_state_needs_a_keyed_stream():
    class Bad(ProcessFunction):
        def open(self, ctx):
            ctx.get_state(ValueStateDescriptor("x", int))

    env = StreamEnvironment()
    env.from_collection(DATA).process(Bad())
    with pytest.raises(StateError, match="not keyed"):
        env.execute()


def test_bad_parallelism_is_refused():
    with pytest.raises(KeyGroupError, match="larger than max parallelism"):
        StreamEnvironment(parallelism=10, max_parallelism=8)
    with pytest.raises(JobError):
        StreamEnvironment().execute()


def test_trace_records_routing_watermarks_and_timers():
    env = StreamEnvironment(parallelism=2, trace=True, batch_size=100)
    env.from_collection(DATA, TS).key_by(0).process(Timers(), name="timers").collect("t")
    r = env.execute()
    kinds = Counter(e.kind for e in r.trace.events)
    assert kinds["route"] > 0 and kinds["watermark"] > 0 and kinds["timer"] == len(r.output("t"))
    frame = r.trace.to_frame()
    assert {"round", "kind", "task", "subtask"} <= set(frame.columns)


def test_heavy_hitters_find_the_planted_key():
    data = [("hot", i) for i in range(3000)] + [(f"cold-{i}", i) for i in range(3000)]
    env = StreamEnvironment(parallelism=2)
    env.from_collection(data).key_by(0).count(name="count").collect("c")
    hh = env.execute().heavy_hitters("count", n=3)
    top = hh.iloc[0]
    # Space-Saving bounds: count - error <= true count <= count
    assert top["key"] == "hot" and top["count"] - top["error"] <= 3000 <= top["count"]


class Splitter(KeyedProcessFunction):
    def process_element(self, value, ctx, out):
        if value[1] % 5 == 0:
            ctx.output("fives", value)
        else:
            out.collect(value)


def test_side_outputs_without_a_consumer_are_collected():
    env = StreamEnvironment(parallelism=2)
    env.from_collection(DATA).key_by(0).process(Splitter(), name="split").collect("main")
    r = env.execute()
    assert sorted(r.side_output("fives")) == sorted(v for v in DATA if v[1] % 5 == 0)
    assert len(r.output("main")) == len(DATA) - len(r.side_output("fives"))


def test_side_outputs_are_a_stream_and_reach_sinks_exactly_once(tmp_path):
    from explorer.engine import CollectSink
    from explorer.engine.checkpoint.job import CrashInjector, run_with_recovery

    sink = CollectSink("fives")

    def make():
        env = StreamEnvironment(parallelism=2, batch_size=50)
        env.enable_checkpointing(tmp_path / "chk", interval_records=300)
        split = env.from_collection(DATA, name="src").key_by(0).process(Splitter(), name="split")
        split.collect("main")
        split.get_side_output("fives").key_by(0).count(name="per-key").sink_to(sink, name="fives")
        return env

    run_with_recovery(make, "job", CrashInjector("snapshot_write", 2))
    final = {}
    for k, c in sink.results:
        final[k] = max(c, final.get(k, 0))
    assert final == dict(Counter(k for k, v in DATA if v % 5 == 0))
    assert len(sink.results) == sum(1 for _, v in DATA if v % 5 == 0)  # none lost, none twice
