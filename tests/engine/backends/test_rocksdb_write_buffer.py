"""The RocksDB backend's per-batch write buffer: reads see the batch's writes, RocksDB sees
them at the end of the batch or before anything reads it directly (scans, checkpoints,
TTL sweeps), and a job gives the same results and recovers exactly once.
"""

from __future__ import annotations

import pytest

from explorer.engine import (
    CollectSink,
    KeyedProcessFunction,
    ListStateDescriptor,
    ManualClock,
    MapStateDescriptor,
    StreamEnvironment,
    ValueStateDescriptor,
    WatermarkStrategy,
)
from explorer.engine.backends.rocksdb import table as rocksdb_module
from explorer.engine.backends.rocksdb import RocksDBStateBackend
from explorer.engine.checkpoint.job import CrashInjector, run_with_recovery
from explorer.engine.ttl import StateTtlConfig
from explorer.format.types import type_info
from explorer.keygroups import KeyGroupRange, assign_to_key_group


def at(b, key, ns=None):
    b.set_current_key(key, assign_to_key_group(key, b.max_parallelism), ns)


def stored(b, name, key, ns=None):
    """What RocksDB itself holds for ``key`` (bypassing the buffer), or None."""
    t = b.tables[name]
    return t._raw.get(t._address(assign_to_key_group(key, b.max_parallelism), key, ns))


def test_reads_see_the_batch_writes_and_rocksdb_sees_them_at_the_end_of_the_batch(make_backend):
    b = make_backend("rocksdb")
    v = b.get_state(ValueStateDescriptor("v", int))
    at(b, "a")
    v.update(1)
    assert v.value() == 1 and stored(b, "v", "a") is None  # buffered, not yet in RocksDB
    v.update(v.value() + 1)
    assert v.value() == 2
    b.end_batch()
    assert stored(b, "v", "a") == type_info(int).to_bytes(2)
    assert not b.tables["v"]._w and not b.tables["v"]._r
    at(b, "a")
    v.clear()
    assert v.value() is None and stored(b, "v", "a") is not None  # the delete is buffered too
    b.end_batch()
    assert stored(b, "v", "a") is None


def test_list_appends_in_a_batch_extend_one_buffered_value(make_backend):
    b = make_backend("rocksdb")
    lst = b.get_state(ListStateDescriptor("l", bytes))
    at(b, "k")
    lst.add(b"x")
    b.end_batch()  # one element already in RocksDB
    at(b, "k")
    for i in range(5):
        lst.add(bytes([i]) * 3)
    got = lst.get()
    assert got == [b"x"] + [bytes([i]) * 3 for i in range(5)]
    assert all(type(e) is bytes for e in got)  # not slices of the buffer's bytearray
    lst.add(b"y")  # reading did not end the appending
    b.end_batch()
    at(b, "k")
    assert lst.get() == got + [b"y"]
    assert type(stored(b, "l", "k")) is bytes


def test_scans_and_iteration_see_buffered_writes_and_removes(make_backend):
    b = make_backend("rocksdb")
    v = b.get_state(ValueStateDescriptor("v", int))
    m = b.get_state(MapStateDescriptor("m", str, int))
    for i in range(4):
        at(b, f"k{i}")
        v.update(i)
        m["a"] = i
        m["b"] = -i
    b.end_batch()
    at(b, "k0")
    v.clear()
    at(b, "k1")
    del m["a"]
    m["c"] = 7
    v.update(10)
    assert sorted(m.items()) == [("b", -1), ("c", 7)]
    assert "a" not in m and "c" in m
    rows = {(r[1], r[3], r[4]) for r in b.tables["m"].rows()}
    assert ("k1", "a", 1) not in rows and ("k1", "c", 7) in rows
    assert sorted((r[1], r[4]) for r in b.tables["v"].rows()) == [("k1", 10), ("k2", 2), ("k3", 3)]
    assert sorted(k for _, k, _ in b.tables["v"].addresses()) == ["k1", "k2", "k3"]


def test_a_native_checkpoint_taken_mid_batch_holds_the_buffered_writes(make_backend, tmp_path, clock):
    b = make_backend("rocksdb", path=tmp_path / "live")
    v = b.get_state(ValueStateDescriptor("v", int))
    lst = b.get_state(ListStateDescriptor("l", str))
    at(b, "a")
    v.update(5)
    lst.add("one")
    lst.add("two")
    assert b.tables["v"]._w  # still buffered when the checkpoint is taken
    b.native_checkpoint(tmp_path / "chk")
    r = RocksDBStateBackend.restore_native(tmp_path / "chk", 128, KeyGroupRange(0, 127), clock, tmp_path / "restored")
    try:
        rv = r.get_state(ValueStateDescriptor("v", int))
        rl = r.get_state(ListStateDescriptor("l", str))
        at(r, "a")
        assert rv.value() == 5 and rl.get() == ["one", "two"]
    finally:
        r.close()


def test_the_ttl_sweep_sees_buffered_refreshes_and_writes(make_backend, clock):
    b = make_backend("rocksdb")
    v = b.get_state(ValueStateDescriptor("v", int, ttl=StateTtlConfig(100)))
    for k in ("old", "refreshed"):
        at(b, k)
        v.update(1)
    b.end_batch()
    clock.advance(60)
    at(b, "refreshed")
    v.update(2)  # buffered, with a new last-access time
    at(b, "new")
    v.update(3)
    clock.advance(60)  # "old" has expired; the others have not
    assert b.background_cleanup() == 1
    assert sorted((r[1], r[4]) for r in b.tables["v"].rows()) == [("new", 3), ("refreshed", 2)]


def test_a_full_buffer_is_applied_early(make_backend, monkeypatch):
    monkeypatch.setattr(rocksdb_module, "BUFFER_ENTRIES", 4)
    b = make_backend("rocksdb")
    v = b.get_state(ValueStateDescriptor("v", int))
    for i in range(11):
        at(b, f"k{i}")
        v.update(i)
        assert len(b.tables["v"]._w) <= 4
    for i in range(11):
        at(b, f"k{i}")
        assert v.value() == i
        assert len(b.tables["v"]._r) <= 4
    assert sum(stored(b, "v", f"k{i}") is not None for i in range(11)) >= 8  # the early flushes
    b.end_batch()
    assert all(stored(b, "v", f"k{i}") is not None for i in range(11))


def test_close_applies_the_buffer(make_backend, tmp_path):
    b = make_backend("rocksdb", path=tmp_path / "db")
    v = b.get_state(ValueStateDescriptor("v", int))
    at(b, "a")
    v.update(9)
    b.close()
    at(b, "a")
    assert v.value() == 9  # reopened read-only from what close() wrote


# --- jobs ------------------------------------------------------------------------------------------
DATA = [(f"u{(i * 7919) % 41}", i * 1_000) for i in range(4000)]
TS = WatermarkStrategy.for_bounded_out_of_orderness(2_000).with_timestamp_assigner(lambda r: r[1])


class Sessions(KeyedProcessFunction):
    """List + value state and event-time timers, like the session pipeline (gap 20 s)."""

    def open(self, ctx):
        self.events = ctx.get_list_state(ListStateDescriptor("events", int))
        self.end = ctx.get_state(ValueStateDescriptor("end", int))
        self.seen = ctx.get_state(MapStateDescriptor("seen", int, int))

    def process_element(self, value, ctx, out):
        end = self.end.value()
        self.events.add(value[1])
        m = value[1] % 5
        self.seen[m] = self.seen.get(m, 0) + 1
        if end is not None:
            ctx.timer_service().delete_event_time_timer(end)
        new_end = max(end or 0, value[1] + 20_000)
        ctx.timer_service().register_event_time_timer(new_end)
        self.end.update(new_end)

    def on_timer(self, timestamp, ctx, out):
        out.collect((ctx.get_current_key(), sorted(self.events.get()), sorted(self.seen.items())))
        self.events.clear()
        self.end.clear()
        self.seen.clear()


def session_env(backend, sink, chk_dir=None, batch_size=37):
    env = StreamEnvironment(parallelism=2, batch_size=batch_size, clock=ManualClock(1_000), state_backend=backend)
    if chk_dir is not None:
        env.enable_checkpointing(chk_dir, interval_records=700, retained=2, asynchronous=False)
    env.from_collection(DATA, TS, name="src").key_by(0).process(Sessions(), name="s").sink_to(sink, name="sink")
    return env


def results(backend, batch_size=37):
    sink = CollectSink("out")
    session_env(backend, sink, batch_size=batch_size).execute()
    return sorted(map(repr, sink.results))


@pytest.fixture(scope="module")
def heap_sessions():
    return results("heap")


@pytest.mark.parametrize("batch_size", [1, 37, 5000])
def test_a_job_on_rocksdb_gives_the_heap_results(batch_size):
    assert results("rocksdb", batch_size) == results("heap", batch_size)


@pytest.mark.parametrize("point,after", [("round", 30), ("alignment", 2), ("snapshot_write", 2), ("metadata_commit", 2)])
def test_a_crash_between_batches_loses_and_duplicates_nothing(tmp_path, heap_sessions, point, after):
    sink = CollectSink("out")
    _, restarts = run_with_recovery(lambda: session_env("rocksdb", sink, tmp_path / "chk"), "job",
                                    CrashInjector(point, after))
    assert restarts == 1
    assert sorted(map(repr, sink.results)) == heap_sessions
