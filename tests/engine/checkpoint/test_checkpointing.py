"""Checkpoints: barriers and alignment, atomic completion, retention, exactly-once recovery.

Two source subtasks feed each keyed subtask, so after a restore the records of different
channels may interleave differently than in the failure-free run (as in Flink). The job's
outputs are therefore built to depend on each record and on per-key counts only; exactly-once
means the same multiset of outputs.
"""

import random
import shutil

import pytest

from explorer.engine import (
    CollectSink,
    KeyedBroadcastProcessFunction,
    KeyedProcessFunction,
    ManualClock,
    MapStateDescriptor,
    StreamEnvironment,
    ValueStateDescriptor,
    WatermarkStrategy,
)
from explorer.engine.checkpoint.config import CheckpointingMode
from explorer.engine.checkpoint.job import CRASH_POINTS, CrashInjector, run_with_recovery
from explorer.engine.checkpoint.storage import CheckpointStorage
from explorer.format.snapshot import MAGIC, read_metadata, verify_snapshot

DATA = [(f"k{(i * 7919) % 53}", i) for i in range(6000)]
TS = WatermarkStrategy.for_bounded_out_of_orderness(3).with_timestamp_assigner(lambda r: r[1])


class Counting(KeyedProcessFunction):
    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", int))
        self.by_mod = ctx.get_state(MapStateDescriptor("by_mod", int, int))

    def process_element(self, value, ctx, out):
        n = self.count.value(0) + 1
        self.count.update(n)
        m = value[1] % 4
        self.by_mod[m] = self.by_mod.get(m, 0) + 1
        if value[1] % 10 == 0:  # depends on the record, not on how two input channels interleave
            ctx.timer_service().register_event_time_timer(value[1] + 50)
        out.collect((ctx.get_current_key(), n))

    def on_timer(self, timestamp, ctx, out):
        out.collect(("timer", ctx.get_current_key(), timestamp))


def make_env(chk_dir, sink, parallelism=2, mode=CheckpointingMode.EXACTLY_ONCE, unaligned=False, every=900,
             backend="heap", asynchronous=True):
    env = StreamEnvironment(parallelism=parallelism, batch_size=97, clock=ManualClock(1_000), state_backend=backend)
    if chk_dir is not None:
        env.enable_checkpointing(chk_dir, interval_records=every, retained=3, mode=mode, unaligned=unaligned,
                                 asynchronous=asynchronous)
    env.from_collection(DATA, TS, name="src", num_splits=2, parallelism=2).key_by(0).process(
        Counting(), name="counting").sink_to(sink, name="sink")
    return env


def failure_free_output():
    sink = CollectSink("out")
    make_env(None, sink).execute()
    return sorted(map(repr, sink.results))


@pytest.fixture(scope="module")
def reference():
    return failure_free_output()


def test_checkpoints_complete_atomically_and_are_retained(tmp_path, reference):
    sink = CollectSink("out")
    # synchronous snapshots: every trigger completes before the next, so the count is exact
    result = make_env(tmp_path / "chk", sink, asynchronous=False).execute("job")
    assert sorted(map(repr, sink.results)) == reference
    done = [h for h in result.checkpoints if h["status"] == "completed"]
    assert len(done) == len(DATA) // 900
    storage = CheckpointStorage(tmp_path / "chk")
    assert storage.completed_ids() == [h["checkpoint_id"] for h in done][-3:]  # retained=3
    meta = verify_snapshot(storage.folder_for(storage.completed_ids()[-1]))
    assert (storage.folder_for(storage.completed_ids()[-1]) / "_metadata").read_bytes().startswith(MAGIC)
    assert meta["kind"] == "checkpoint" and meta["mode"] == "EXACTLY_ONCE"
    counting = next(o for o in meta["operators"] if o["uid"] == "counting")
    assert [s["key_group_range"] for s in counting["subtasks"]] == [[0, 63], [64, 127]]
    assert {s["name"] for s in counting["states"]} == {"count", "by_mod"}
    assert meta["timing"]["bytes"] == sum(f["bytes"] for f in meta["files"].values()) > 0
    src = next(o for o in meta["operators"] if o["uid"] == "src")
    assert all(sub["source_positions"] for sub in src["subtasks"])


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_recovery_after_a_crash_is_exactly_once(tmp_path, reference, point):
    sink = CollectSink("out")
    # synchronous snapshots: how many checkpoints complete before the crash must not depend on thread timing
    result, restarts = run_with_recovery(lambda: make_env(tmp_path / "chk", sink, asynchronous=False), "job",
                                         CrashInjector(point, 2))
    assert restarts == 1
    assert sorted(map(repr, sink.results)) == reference


def test_a_seeded_sample_of_crash_points_loses_and_duplicates_nothing(tmp_path, reference):
    rng = random.Random(20261122)
    for trial in range(6):
        point = rng.choice(CRASH_POINTS)
        after = rng.randint(1, 12 if point == "round" else 4)
        d = tmp_path / f"chk-{trial}"
        sink = CollectSink("out")
        run_with_recovery(lambda: make_env(d, sink, every=rng.choice([300, 700, 1500])), "job",
                          CrashInjector(point, after))
        assert sorted(map(repr, sink.results)) == reference, (point, after)


def test_at_least_once_may_duplicate_but_never_loses(tmp_path, reference):
    sink = CollectSink("out")
    run_with_recovery(lambda: make_env(tmp_path / "chk", sink, mode=CheckpointingMode.AT_LEAST_ONCE), "job",
                      CrashInjector("round", 40))
    got = sorted(map(repr, sink.results))
    assert set(got) >= set(reference)


def test_a_torn_checkpoint_is_never_offered_and_recovery_falls_back(tmp_path):
    sink = CollectSink("out")
    make_env(tmp_path / "chk", sink, asynchronous=False).execute("job")
    storage = CheckpointStorage(tmp_path / "chk")
    ids = storage.completed_ids()
    assert len(ids) == 3
    newest = storage.folder_for(ids[-1])
    # corrupt one data file of the newest checkpoint: recovery must use the one before
    victim = next(newest.glob("keyed/**/*.parquet"))
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    assert storage.latest_valid() == storage.folder_for(ids[-2])
    # a checkpoint whose _metadata never got renamed into place is not complete
    (storage.folder_for(ids[-2]) / "_metadata").rename(storage.folder_for(ids[-2]) / "_metadata.inprogress")
    assert storage.latest_valid() == storage.folder_for(ids[-3])
    assert ids[-2] not in storage.completed_ids()


class Rules(KeyedBroadcastProcessFunction):
    RULES = MapStateDescriptor("rules", str, int)

    def process_element(self, value, ctx, out):
        out.collect((value[0], ctx.get_broadcast_state(self.RULES).get("x", 0)))

    def process_broadcast_element(self, value, ctx, out):
        ctx.get_broadcast_state(self.RULES).put("x", value)


def _two_input_job(chk, mode, unaligned=False):
    env = StreamEnvironment(parallelism=2, batch_size=10, trace=True, channel_capacity=64)
    env.enable_checkpointing(chk, interval_records=200, mode=mode, unaligned=unaligned)
    rules = env.from_collection(list(range(300)), name="rules").broadcast(Rules.RULES)
    env.from_collection(DATA[:1500], name="data").key_by(0).connect(rules).process(Rules(), name="join").collect("o")
    return env


def test_exactly_once_aligns_barriers_and_at_least_once_does_not(tmp_path):
    aligned = _two_input_job(tmp_path / "a", CheckpointingMode.EXACTLY_ONCE).execute()
    received = [e for e in aligned.trace.of_kind("barrier_received") if e.task == "join"]
    assert received, "the two-input operator saw barriers"
    # with alignment, the operator only snapshots once every input delivered the barrier
    snaps = {(e.subtask, e.detail["checkpoint"]) for e in aligned.trace.of_kind("snapshot") if e.task == "join"}
    for e in received:
        if e.detail["aligned"] < e.detail["of"]:
            assert (e.subtask, e.detail["checkpoint"]) in snaps  # it did snapshot, later
    loose = _two_input_job(tmp_path / "b", CheckpointingMode.AT_LEAST_ONCE).execute()
    assert len(loose.output("o")) == len(aligned.output("o")) == 1500


def test_unaligned_checkpoints_store_in_flight_records(tmp_path):
    env = _two_input_job(tmp_path / "u", CheckpointingMode.EXACTLY_ONCE, unaligned=True)
    result = env.execute()
    assert len(result.output("o")) == 1500
    storage = CheckpointStorage(tmp_path / "u")
    meta = read_metadata(storage.folder_for(storage.completed_ids()[-1]))
    assert meta["unaligned"] is True


def test_rocksdb_backend_checkpoints_and_recovers_exactly_once(tmp_path, reference):
    sink = CollectSink("out")
    run_with_recovery(lambda: make_env(tmp_path / "chk", sink, backend="rocksdb"), "job",
                      CrashInjector("snapshot_write", 2))
    assert sorted(map(repr, sink.results)) == reference
    shutil.rmtree(tmp_path / "chk")


from dataclasses import dataclass


@dataclass(frozen=True)
class Click:
    user: str
    n: int


class CountClicks(KeyedProcessFunction):
    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", int))

    def process_element(self, value, ctx, out):
        n = self.count.value(0) + 1
        self.count.update(n)
        out.collect((value.user, value.n, n))


CLICKS = [Click(f"u{i % 11}", i) for i in range(1500)]


def _unaligned_clicks(chk, sink, register=True):
    env = StreamEnvironment(parallelism=2, batch_size=20, channel_capacity=16)
    if register:
        env.register_record_type(Click)
    env.enable_checkpointing(chk, interval_records=200, unaligned=True, retained=2)
    env.from_collection(CLICKS, name="src", num_splits=2, parallelism=2).key_by("user").process(
        CountClicks(), name="count").sink_to(sink, name="sink")
    return env


def test_unaligned_recovery_replays_in_flight_dataclass_records_exactly_once(tmp_path):
    ref = CollectSink("ref")
    env = StreamEnvironment(parallelism=2)
    env.from_collection(CLICKS, name="src").key_by("user").process(CountClicks(), name="count").sink_to(ref)
    env.execute()
    sink = CollectSink("out")
    run_with_recovery(lambda: _unaligned_clicks(tmp_path / "chk", sink), "job", CrashInjector("round", 25))
    # per key the counts 1..n each appear once, and every click is counted exactly once
    assert sorted((u, c) for u, _, c in sink.results) == sorted((u, c) for u, _, c in ref.results)
    assert sorted(n for _, n, _ in sink.results) == list(range(len(CLICKS)))


def test_unaligned_checkpoints_refuse_unregistered_record_types(tmp_path):
    with pytest.raises(Exception, match=r"register_record_type\(Click\)"):
        _unaligned_clicks(tmp_path / "chk", CollectSink("x"), register=False).execute()


def _count_digest_checks(monkeypatch):
    """Count every SHA-256 check of a snapshot file (``verify_file`` and the background checks), by path."""
    from collections import Counter

    import explorer.format.snapshot as snapshot

    counts = Counter()
    real = snapshot.check_file_digest

    def counting(path, entry):
        counts[str(path)] += 1
        return real(path, entry)

    monkeypatch.setattr(snapshot, "check_file_digest", counting)
    return counts


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_a_restart_hashes_each_file_of_its_checkpoint_once(tmp_path, reference, monkeypatch, backend):
    counts = _count_digest_checks(monkeypatch)
    sink = CollectSink("out")
    _, restarts = run_with_recovery(lambda: make_env(tmp_path / "chk", sink, asynchronous=False, backend=backend),
                                    "job", CrashInjector("round", 30))
    assert restarts == 1
    assert sorted(map(repr, sink.results)) == reference
    assert counts and set(counts.values()) == {1}, counts  # was 2: latest_valid(), then the restore again


def test_a_checkpoint_damaged_after_the_crash_is_skipped_for_the_one_before(tmp_path, monkeypatch, caplog):
    counts = _count_digest_checks(monkeypatch)
    sink = CollectSink("out")
    calls = []
    damaged = []

    def make():
        calls.append(1)
        if len(calls) == 2:  # the restart: damage the newest checkpoint first
            storage = CheckpointStorage(tmp_path / "chk")
            newest = storage.folder_for(storage.completed_ids()[-1])
            victim = next(newest.glob("keyed/**/*.parquet"))
            data = bytearray(victim.read_bytes())
            data[len(data) // 2] ^= 0xFF
            victim.write_bytes(bytes(data))
            damaged.append((newest, victim))
        return make_env(tmp_path / "chk", sink, asynchronous=False)

    _, restarts = run_with_recovery(make, "job", CrashInjector("round", 40))
    assert restarts == 1 and len(damaged) == 1
    newest, victim = damaged[0]
    assert any(str(newest) in r.getMessage() and "XXH3-128" in r.getMessage() and r.levelname == "WARNING"
               for r in caplog.records)
    assert counts[str(victim.resolve())] == 1
    assert len(calls) == 3  # the failed attempt's environment was not reused
    assert set(map(repr, sink.results)) >= set(failure_free_output())  # nothing lost
