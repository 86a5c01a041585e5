"""The testing kit: TestingSource markers, recovery through a checkpoint, and the one-function harness."""

from __future__ import annotations

import copy
from collections import Counter

import pytest

from explorer.engine import (
    KeyedProcessFunction,
    ListStateDescriptor,
    MapStateDescriptor,
    ProcessFunction,
    StateTtlConfig,
    StreamEnvironment,
    ValueStateDescriptor,
)
from explorer.engine.checkpoint.coordinator import InjectedCrash
from explorer.engine.checkpoint.storage import CheckpointStorage
from explorer.engine.testing import (
    ABORT,
    EOF,
    CollectingSink,
    KeyedProcessFunctionHarness,
    ManualClock,
    PendingTimer,
    TestingAbort,
    TestingSource,
    run_source,
)
from explorer.errors import JobError, StateError
from explorer.keygroups import assign_to_key_group

# --- TestingSource ------------------------------------------------------------------------
def collect(source, parallelism=1, batch_size=1024):
    env = StreamEnvironment(parallelism=parallelism, batch_size=batch_size)
    env.from_source(source).collect("out")
    return env.execute().output("out")


def test_eof_ends_the_input_there():
    assert collect(TestingSource([1, 2, EOF, 3, 4])) == [1, 2]
    assert collect(TestingSource([EOF, 1])) == []
    assert TestingSource.EOF is EOF and TestingSource.ABORT is ABORT


def test_markers_act_on_their_own_split():
    src = TestingSource([1, 2, EOF, 3, 4, 5, 6, 7], num_splits=2)  # splits [1, 2, EOF, 3] and [4, 5, 6, 7]
    assert sorted(collect(src)) == [1, 2, 4, 5, 6, 7]


def test_abort_raises_after_delivering_what_came_before():
    src = TestingSource([0, 1, 2, ABORT, 3])
    env = StreamEnvironment(batch_size=10)
    sink = CollectingSink("out")
    env.from_source(src).sink_to(sink)
    with pytest.raises(TestingAbort, match="position 3 of split 0"):
        env.execute()
    assert sink.results == [0, 1, 2]
    assert isinstance(TestingAbort("x"), InjectedCrash)


def test_a_marker_acts_once_per_source_object():
    src = TestingSource([0, ABORT, 1, EOF, 2])
    with pytest.raises(TestingAbort):
        collect(src)
    assert collect(src) == [0, 1]  # ABORT passed; EOF acts
    assert collect(src) == [0, 1, 2]  # both passed
    src.rearm()
    with pytest.raises(TestingAbort):
        collect(src)


def test_reads_are_replayable_from_any_offset():
    src = TestingSource(list(range(10)))
    assert src.read("0", 3, 4) == ([3, 4, 5, 6], 7, False)
    assert src.read("0", 3, 4) == ([3, 4, 5, 6], 7, False)
    assert src.read("0", 8, 4) == ([8, 9], 10, True)
    assert run_source(TestingSource([1, EOF, 2])) == [1]
    assert src.describe() == {"type": "testing", "records": 10, "markers": 0, "splits": 1}
    with pytest.raises(JobError):
        TestingSource([], num_splits=0)


def test_markers_survive_copies():
    assert copy.deepcopy([EOF, ABORT]) == [EOF, ABORT]
    assert copy.deepcopy(EOF) is EOF and repr(ABORT) == "TestingSource.ABORT"


def test_recovery_abort_mid_stream_and_resume_from_checkpoint(tmp_path, backend_kind):
    items = [(f"k{i % 5}", i) for i in range(400)]
    src = TestingSource(items[:250] + [ABORT] + items[250:])
    sink = CollectingSink("sums")

    def make():
        env = StreamEnvironment(parallelism=2, batch_size=4, state_backend=backend_kind,
                                state_dir=tmp_path / "state")
        env.enable_checkpointing(tmp_path / "chk", interval_records=16, asynchronous=False)
        env.from_source(src, name="src", uid="src").key_by(0).sum(1, name="sum", uid="sum").sink_to(sink)
        return env

    with pytest.raises(TestingAbort):
        make().execute()
    delivered_before = len(sink.results)
    latest = CheckpointStorage(tmp_path / "chk").latest_valid()
    assert latest is not None and 0 < delivered_before < len(items)
    make().execute(restore_from=latest)

    env = StreamEnvironment(parallelism=2)
    env.from_collection(items).key_by(0).sum(1).collect("clean")
    clean = env.execute().output("clean")
    assert Counter(sink.results) == Counter(clean)  # every rolling sum exactly once


# --- the harness ----------------------------------------------------------------------------
class Counting(KeyedProcessFunction):
    """Counts per key, remembers the last value, reminds itself 10 ms (event) / 5 ms (processing) later."""

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", int))
        self.seen = ctx.get_list_state(ListStateDescriptor("seen", str))
        self.tags = ctx.get_map_state(MapStateDescriptor("tags", str, int))

    def process_element(self, value, ctx, out):
        n = self.count.value(0) + 1
        self.count.update(n)
        self.seen.add(value)
        self.tags[value[:1]] = self.tags.get(value[:1], 0) + 1
        out.collect((ctx.get_current_key(), n))
        ts = ctx.timestamp()
        if ts is not None:
            ctx.timer_service().register_event_time_timer(ts + 10)
        ctx.timer_service().register_processing_time_timer(ctx.timer_service().current_processing_time() + 5)
        if value == "bad":
            ctx.output("rejected", value)

    def on_timer(self, timestamp, ctx, out):
        out.collect(("timer", ctx.time_domain(), ctx.get_current_key(), timestamp))


@pytest.fixture
def harness(backend_kind):
    with KeyedProcessFunctionHarness(Counting(), state_backend=backend_kind) as h:
        yield h


def test_harness_output_and_state(harness):
    assert harness.process_element("apple") == [("key", 1)]
    harness.process_element("avocado")
    harness.process_element("bad")
    assert harness.output == [("key", 1), ("key", 2), ("key", 3)]
    assert harness.state("count") == 3
    assert harness.state("seen") == ["apple", "avocado", "bad"]
    assert harness.state("tags") == {"a": 2, "b": 1}
    assert harness.side_output("rejected") == ["bad"]
    assert harness.side_output("nothing") == []
    assert harness.state_names() == ["count", "seen", "tags"]
    rows = harness.state_rows()
    assert sorted(rows.state.unique()) == ["count", "seen", "tags"] and len(rows) == 1 + 3 + 2
    assert harness.extract_output() == [("key", 1), ("key", 2), ("key", 3)] and harness.output == []
    with pytest.raises(StateError, match="no state named 'nope'"):
        harness.state("nope")


def test_harness_event_timers_fire_in_order_on_the_watermark(harness):
    harness.process_element("a", timestamp=100)
    harness.process_element("b", timestamp=130)
    harness.process_element("c", timestamp=100)  # same timer as "a": deduplicated
    assert [(t.domain, t.timestamp) for t in harness.timers("event_time")] == [("event_time", 110), ("event_time", 140)]
    harness.extract_output()
    assert harness.advance_watermark(109) == []
    assert harness.advance_watermark(140) == [("timer", "event_time", "key", 110), ("timer", "event_time", "key", 140)]
    assert harness.output_with_timestamps[-1] == (("timer", "event_time", "key", 140), 140)
    assert harness.timers("event_time") == [] and harness.watermark == 140
    with pytest.raises(ValueError, match="backwards"):
        harness.advance_watermark(10)


def test_harness_processing_timers_follow_the_clock(harness):
    harness.process_element("a")  # at processing time 0: timer at 5
    harness.advance_processing_time(3)
    harness.process_element("b")  # timer at 8
    assert [t.timestamp for t in harness.timers("processing_time")] == [5, 8]
    harness.extract_output()
    assert harness.advance_processing_time(1) == []
    assert harness.advance_processing_time(1) == [("timer", "processing_time", "key", 5)]
    assert harness.set_processing_time(100) == [("timer", "processing_time", "key", 8)]
    assert harness.processing_time == 100 and harness.timers() == []


def test_harness_many_keys_with_a_selector():
    with KeyedProcessFunctionHarness(Counting(), key_selector=lambda v: v.split(":")[0]) as h:
        h.process_elements(["u1:a", "u2:b", "u1:c"], timestamp_of=lambda v: 7)
        assert h.output == [("u1", 1), ("u2", 1), ("u1", 2)]
        assert h.current_key == "u1" and h.state("count") == 2
        assert h.state("count", key="u2") == 1 and h.state("count", key="nobody") is None
        assert h.state("seen", key="u2") == ["u2:b"] and h.state("tags", key="nobody") == {}
        timers = h.timers("event_time")
        assert timers == [PendingTimer("event_time", 17, k, assign_to_key_group(k, 128)) for k in ("u1", "u2")] or \
            timers == [PendingTimer("event_time", 17, k, assign_to_key_group(k, 128)) for k in ("u2", "u1")]
        assert h.process_element("x:y", key="explicit") == [("explicit", 1)]


def test_harness_key_before_any_element():
    with KeyedProcessFunctionHarness(Counting(), key_selector=lambda v: v) as h:
        with pytest.raises(StateError, match="pass key="):
            h.state("count")
    with KeyedProcessFunctionHarness(Counting()) as h:
        assert h.state("count") is None  # the one default key


class Expiring(KeyedProcessFunction):
    def open(self, ctx):
        self.last = ctx.get_state(ValueStateDescriptor("last", str, ttl=StateTtlConfig(1000)))

    def process_element(self, value, ctx, out):
        out.collect(self.last.value())
        self.last.update(value)


def test_harness_ttl_runs_on_its_clock(backend_kind):
    clock = ManualClock(50_000)
    with KeyedProcessFunctionHarness(Expiring(), state_backend=backend_kind, clock=clock) as h:
        h.process_element("a")
        h.advance_processing_time(999)
        assert h.state("last") == "a"
        assert h.process_element("b") == ["a"]  # written again at 50_999
        h.set_processing_time(51_999)
        assert h.state("last") is None  # expired exactly at last write + TTL; peeking changes nothing
        assert len(h.state_rows()) == 1
        assert h.process_element("c") == [None]


def test_harness_rejects_what_it_cannot_run():
    class NotKeyed(ProcessFunction):
        def process_element(self, value, ctx, out):
            pass

    with pytest.raises(JobError, match="not a KeyedProcessFunction"):
        KeyedProcessFunctionHarness(NotKeyed())
    with pytest.raises(JobError, match="unknown state backend"):
        KeyedProcessFunctionHarness(Counting(), state_backend="tape")
    h = KeyedProcessFunctionHarness(Counting())
    with pytest.raises(JobError, match="KeyedBroadcastProcessFunction"):
        h.process_broadcast_element("rule")
    h.close()
    h.close()
    with pytest.raises(JobError, match="closed"):
        h.process_element("a")
    with KeyedProcessFunctionHarness(Counting(), clock=_FixedClock()) as h2:
        with pytest.raises(StateError, match="ManualClock"):
            h2.advance_processing_time(1)


class _FixedClock:
    def now_ms(self):
        return 0


def test_harness_runs_a_copy_of_the_function():
    fn = Counting()
    with KeyedProcessFunctionHarness(fn) as h:
        h.process_element("a")
        assert h.function is not fn and isinstance(h.function, Counting)
        assert not hasattr(fn, "count")


# --- the harness on the example pipelines' functions ------------------------------------------
def test_harness_drives_the_fraud_detector_and_its_broadcast_rules():
    from explorer.pipelines.fraud import Alert, FraudDetector, Rule, Transaction

    with KeyedProcessFunctionHarness(FraudDetector(), key_selector=lambda t: t.account_id) as h:
        h.process_element(Transaction("a", 0, 0.5, "coffee"), timestamp=0)
        assert h.state("flag") is True and h.state("timer") == 60_000
        assert h.timers() == [PendingTimer("event_time", 60_000, "a", assign_to_key_group("a", 128))]
        h.advance_watermark(60_000)  # the flag expires
        assert h.state("flag") is None and h.state("timer") is None
        h.process_broadcast_element(Rule(large_above=100.0, version=2))
        h.process_element(Transaction("a", 70_000, 0.5, "coffee"), timestamp=70_000)
        out = h.process_element(Transaction("a", 80_000, 150.0, "books"), timestamp=80_000)
        assert out == [Alert("a", 80_000, 150.0, "books", "small-then-large", 2)]
        assert h.state("merchants") == {"coffee": 2, "books": 1}
        assert h.timers() == []  # the alerting transaction deleted the flag's timer


def test_harness_side_outputs_of_the_order_state_machine():
    from explorer.pipelines.orders import OrderEvent, OrderStateMachine, StuckOrder

    with KeyedProcessFunctionHarness(OrderStateMachine(), key_selector=lambda e: e.order_id) as h:
        h.process_element(OrderEvent("o1", 0, "PENDING_PAYMENT", 9.5), timestamp=0)
        h.process_element(OrderEvent("o1", 10, "DELIVERED"), timestamp=10)
        assert [(i.from_status, i.to_status) for i in h.side_output("illegal")] == [("PENDING_PAYMENT", "DELIVERED")]
        assert h.state("order").status == "PENDING_PAYMENT"
        h.advance_watermark(30 * 60_000)
        assert h.side_output("stuck") == [StuckOrder("o1", "PENDING_PAYMENT", 0, 30 * 60_000)]
        assert h.state("order").stuck_reported is True


def test_harness_agrees_with_the_job_on_the_sessions_pipeline():
    from explorer.pipelines import sessions, sessions_batch

    events = sessions.generate(1500, keys=15, seed=8)
    with KeyedProcessFunctionHarness(sessions.SessionWindowFunction(), key_selector=lambda e: e.user_id) as h:
        high = None
        for e in events:
            h.process_element(e, timestamp=e.ts)
            high = e.ts if high is None else max(high, e.ts)
            wm = high - sessions.MAX_OUT_OF_ORDERNESS_MS - 1
            if h.watermark is None or wm > h.watermark:
                h.advance_watermark(wm)
        h.advance_watermark(2**62)
        from_harness = Counter(h.output)
    env = StreamEnvironment(parallelism=3)
    sessions_batch.build(env, events)
    assert Counter(env.execute().output("sessions")) == from_harness


def test_a_timer_deleted_and_registered_again_is_listed_once():
    class Rearm(KeyedProcessFunction):
        def process_element(self, value, ctx, out):
            ts = ctx.timer_service()
            ts.register_event_time_timer(100)
            ts.delete_event_time_timer(100)
            ts.register_event_time_timer(100)

        def on_timer(self, timestamp, ctx, out):
            out.collect(timestamp)

    with KeyedProcessFunctionHarness(Rearm()) as h:
        h.process_element("x")
        assert [t.timestamp for t in h.timers()] == [100]
        assert h.advance_watermark(100) == [100]  # and it fires once
        assert h.timers() == []
