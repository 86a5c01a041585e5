"""Incremental checkpoints of the RocksDB backend: shared SST files, reference counting,
native restore at any parallelism, exactly-once recovery, the explorer reading them, and
the background TTL sweeper."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import pytest

import explorer
from explorer.engine import (
    CollectSink,
    KeyedProcessFunction,
    ListStateDescriptor,
    ManualClock,
    MapStateDescriptor,
    StateTtlConfig,
    StreamEnvironment,
    ValueStateDescriptor,
    WatermarkStrategy,
)
from explorer.engine.checkpoint.job import CRASH_POINTS, CrashInjector, JobClient, run_with_recovery
from explorer.engine.checkpoint.storage import CheckpointStorage
from explorer.errors import SnapshotCorruptError, StateMigrationError
from explorer.format.rocksdb.native import NATIVE_FORMAT
from explorer.format.snapshot import read_metadata, verify_snapshot
from explorer.readers.engine import EngineSnapshotReader

DATA = [(f"k{(i * 7919) % 61}", i) for i in range(5000)]
TS = WatermarkStrategy.for_bounded_out_of_orderness(3).with_timestamp_assigner(lambda r: r[1])
NEVER = 10**9  # interval_records that never triggers: checkpoints are taken by hand


@dataclass
class Stats:
    n: int
    last: int


@dataclass
class StatsV2:  # Stats with one more field (schema evolution)
    n: int
    last: int
    note: str = "-"


class Tracking(KeyedProcessFunction):
    """Value (dataclass, with TTL), list and map state; outputs depend on per-key counts only."""

    def __init__(self, value_type=Stats):
        self.value_type = value_type

    def open(self, ctx):
        self.stats = ctx.get_state(ValueStateDescriptor("stats", self.value_type, ttl=StateTtlConfig(10**9)))
        self.recent = ctx.get_state(ListStateDescriptor("recent", int))
        self.by_mod = ctx.get_state(MapStateDescriptor("by_mod", int, int))

    def process_element(self, value, ctx, out):
        s = self.stats.value()
        n = (s.n if s else 0) + 1
        self.stats.update(self.value_type(n, value[1]))
        self.recent.add(value[1] % 1000)
        m = value[1] % 5
        self.by_mod[m] = self.by_mod.get(m, 0) + 1
        if value[1] % 10 == 0:
            ctx.timer_service().register_event_time_timer(value[1] + 50)
        out.collect((ctx.get_current_key(), n))

    def on_timer(self, timestamp, ctx, out):
        out.collect(("timer", ctx.get_current_key(), timestamp))


def make_env(chk_dir, sink, parallelism=2, backend="rocksdb", incremental=True, every=NEVER, retained=3,
             asynchronous=True, fn=None, state_dir=None, max_concurrent=1):
    env = StreamEnvironment(parallelism=parallelism, batch_size=97, clock=ManualClock(1_000), state_backend=backend,
                            state_dir=state_dir)
    if chk_dir is not None:
        env.enable_checkpointing(chk_dir, interval_records=every, retained=retained, incremental=incremental,
                                 asynchronous=asynchronous, max_concurrent=max_concurrent)
    env.from_collection(DATA, TS, name="src", num_splits=2, parallelism=2).key_by(0).process(
        fn or Tracking(), name="tracking", uid="tracking").sink_to(sink, name="sink")
    return env


@pytest.fixture(scope="module")
def reference():
    sink = CollectSink("out")
    make_env(None, sink, backend="heap").execute()
    return sorted(map(repr, sink.results))


def shared_of(folder: Path) -> set[str]:
    return {rel for rel in read_metadata(folder)["files"] if rel.startswith("../shared/")}


def tracking_subtasks(folder: Path) -> list[dict]:
    meta = read_metadata(folder)
    return next(o for o in meta["operators"] if o["uid"] == "tracking")["subtasks"]


def entries(folder: Path):
    """The explorer's keyed-state rows of a snapshot, independent of the parallelism."""
    df = explorer.open(folder).keyed_state(operator="tracking")
    df = df.drop(columns=["subtask"])
    return sorted(map(repr, df.itertuples(index=False)))


def checkpoint_after(client: JobClient, rounds: int) -> Path:
    client.run(max_rounds=rounds)
    return client.trigger_checkpoint()


# --- what an incremental checkpoint writes -------------------------------------------------------------------
def test_consecutive_checkpoints_share_unchanged_sst_files(tmp_path):
    client = JobClient(make_env(tmp_path / "chk", CollectSink("out"), asynchronous=False), "job")
    try:
        first = checkpoint_after(client, 30)
        second = checkpoint_after(client, 2)
        third = checkpoint_after(client, 0)
    finally:
        client.close()
    m1, m2, m3 = (verify_snapshot(f) for f in (first, second, third))
    assert m1["incremental"] and m1["kind"] == "checkpoint"
    subs = tracking_subtasks(second)
    assert all(s["state_format"] == NATIVE_FORMAT for s in subs)
    assert all(s["native"]["key_group_range"] == s["key_group_range"] for s in subs)
    for s in subs:  # every SST in shared/, the small files private to the checkpoint
        for name, rel in s["native"]["files"].items():
            assert rel.startswith("../shared/") == name.endswith(".sst"), (name, rel)
        assert "CURRENT" in s["native"]["files"]
    reused = shared_of(first) & shared_of(second)
    assert reused, "the second checkpoint re-uploaded every SST"
    assert m2["timing"]["bytes_written"] < m2["timing"]["bytes"]
    new_in_third = shared_of(third) - shared_of(second)
    written_ssts = sum(m3["files"][r]["bytes"] for r in new_in_third)
    assert m3["timing"]["bytes_written"] - written_ssts == sum(
        e["bytes"] for rel, e in m3["files"].items() if not rel.startswith("../shared/"))
    # timers and the source positions still take the canonical path
    assert any(s["timers"] for s in subs)


def test_full_checkpoints_and_savepoints_stay_canonical(tmp_path):
    client = JobClient(make_env(tmp_path / "full", CollectSink("out"), incremental=False), "job")
    try:
        full = checkpoint_after(client, 20)
    finally:
        client.close()
    assert not read_metadata(full)["incremental"]
    assert all("state_format" not in s and s["states"][0]["file"] for s in tracking_subtasks(full))
    assert not any((tmp_path / "full" / "shared").iterdir())

    client = JobClient(make_env(tmp_path / "inc", CollectSink("out")), "job")
    try:
        client.run(max_rounds=20)
        sp = client.trigger_savepoint(tmp_path / "sp")
    finally:
        client.close()
    meta = verify_snapshot(sp)
    assert meta["kind"] == "savepoint" and not meta["incremental"]
    assert not shared_of(sp) and all("native" not in s for s in tracking_subtasks(sp))


def test_a_full_checkpoint_of_an_incremental_job_copies_every_file_and_shares_none(tmp_path):
    """CheckpointType.FULL: the native files all in the checkpoint's own folder, checksummed; the incremental
    checkpoints before and after it are unaffected, also once it is retired; the explorer reads it, and a
    restore from it holds the same rows."""
    chk = tmp_path / "chk"
    client = JobClient(make_env(chk, CollectSink("out"), retained=1), "job")
    try:
        first = checkpoint_after(client, 25)  # incremental: uploads everything to shared/
        client.run(max_rounds=5)
        full = client.trigger_checkpoint(full=True)
        meta = verify_snapshot(full)
        assert not meta["incremental"] and meta["checkpoint_type"] == "full"
        assert not shared_of(full) and not first.exists()  # retained=1
        subs = tracking_subtasks(full)
        assert all(s["state_format"] == NATIVE_FORMAT for s in subs)
        ssts = [rel for rel in meta["files"] if rel.endswith(".sst")]
        assert ssts and all(rel.startswith("native/tracking/") for rel in ssts)
        # SST files hard-linked (same file system): only the small files are written; every file carries
        # an XXH3-128 checksum
        assert all(set(e) == {"bytes", "xxh3_128"} for r, e in meta["files"].items() if r.startswith("native/"))
        assert meta["timing"]["bytes_written"] == sum(e["bytes"] for r, e in meta["files"].items()
                                                      if not r.endswith(".sst"))
        assert not any((chk / "shared").rglob("*.sst"))  # nothing of first's is named by a retained checkpoint
        after = checkpoint_after(client, 3)  # incremental again: uploads what it needs, nothing from full/
        m2 = verify_snapshot(after)
        assert m2["incremental"] and m2["checkpoint_type"] == "incremental"
        assert all(rel.startswith("../shared/") for rel in m2["files"] if rel.endswith(".sst"))
    finally:
        client.close()
    assert not full.exists()  # retired with its own files
    # the explorer reads a full native checkpoint like an incremental one; restored into either backend at
    # another parallelism, the canonical savepoint taken at once holds the same rows
    client = JobClient(make_env(tmp_path / "chk2", CollectSink("out"), retained=3), "job")
    try:
        client.run(max_rounds=30)
        full = client.trigger_checkpoint(full=True)
    finally:
        client.close()
    assert not shared_of(full)
    info = EngineSnapshotReader(full).info()
    assert info.extra["checkpoint_type"] == "full" and not info.extra["incremental"]
    want = entries(full)
    assert len(want) > 100
    for backend, p in (("rocksdb", 3), ("heap", 1)):
        assert entries_of_restored(tmp_path, full, p, backend) == want, (backend, p)
    # its SST files are checked before a restore: one flipped byte fails it, naming the file
    sst = next((full / "native").rglob("*.sst"))
    data = bytearray(sst.read_bytes())
    data[len(data) // 2] ^= 1
    sst.write_bytes(bytes(data))
    with pytest.raises(SnapshotCorruptError, match=sst.name):
        JobClient(make_env(tmp_path / "chk4", CollectSink("out")), "job", restore_from=full).close()


# --- reference counting ---------------------------------------------------------------------------------------
def test_retain_deletes_only_shared_files_no_retained_checkpoint_names(tmp_path):
    sink = CollectSink("out")
    shared = tmp_path / "chk" / "shared"
    client = JobClient(make_env(tmp_path / "chk", sink, retained=1, asynchronous=False), "job")
    kept_across = dropped = 0
    try:
        prev = checkpoint_after(client, 30)
        for _ in range(8):  # enough flushes for RocksDB to compact some SSTs away
            before = shared_of(prev)
            cur = checkpoint_after(client, 3)
            now = shared_of(cur)
            assert not prev.exists()  # retained=1
            on_disk = {"../shared/" + p.relative_to(shared).as_posix() for p in shared.rglob("*") if p.is_file()}
            assert on_disk == now  # still-named files of the older checkpoint survive, the others are gone
            kept_across += len(before & now)
            dropped += len(before - now)
            verify_snapshot(cur)
            prev = cur
    finally:
        client.close()
    assert kept_across and dropped


def test_concurrent_checkpoints_with_retained_1_never_lose_a_shared_file(tmp_path, reference):
    sink = CollectSink("out")
    completed = []

    env = make_env(tmp_path / "chk", sink, every=250, retained=1, max_concurrent=2)
    client = JobClient(env, "job")
    # check every checkpoint the moment it completes, while others may still be in flight
    orig = client.coordinator._complete

    def complete(pc):
        # a checkpoint completes only while no newer one has: a newer one would have subsumed it
        assert all(c < pc.id for c in client.coordinator.completed), (pc.id, client.coordinator.completed)
        orig(pc)
        if not pc.savepoint:
            verify_snapshot(pc.folder)
            completed.append(pc.id)

    client.coordinator._complete = complete
    try:
        client.run()
    finally:
        client.close()
    assert len(completed) >= 2  # how many complete depends on how fast the async writes are
    assert sorted(map(repr, sink.results)) == reference
    shared = tmp_path / "chk" / "shared"
    last = CheckpointStorage(tmp_path / "chk").latest_valid()
    on_disk = {"../shared/" + p.relative_to(shared).as_posix() for p in shared.rglob("*") if p.is_file()}
    assert on_disk == shared_of(last)


def test_a_newer_completed_checkpoint_subsumes_an_older_one_still_writing(tmp_path, reference, monkeypatch):
    """Flink's CHECKPOINT_SUBSUMED: checkpoint 1's write of one subtask is held back while
    checkpoint 2 completes; 1 is aborted as subsumed (never completed, never retained), its
    folder goes once its write ends, its shared-file holds are released, and the output it
    staged is committed with 2's, exactly once."""
    import threading

    from explorer.engine.checkpoint import coordinator as coordinator_module

    gate, writing = threading.Event(), threading.Event()
    real_write = coordinator_module.write_capture

    def write(cap, folder, *args, **kwargs):
        if folder.name == "chk-1" and cap.uid == "tracking" and cap.index == 0:
            writing.set()
            assert gate.wait(60)
        return real_write(cap, folder, *args, **kwargs)

    monkeypatch.setattr(coordinator_module, "write_capture", write)
    sink = CollectSink("out")
    env = make_env(tmp_path / "chk", sink, retained=1, max_concurrent=2)
    env.trace = True
    client = JobClient(env, "job")
    coord = client.coordinator
    try:
        client.run(max_rounds=20)
        first = coord.trigger()
        while not writing.is_set():  # checkpoint 1's barriers reach the tracking subtask
            assert client.runtime.run_round()
        client.run(max_rounds=5)
        second = client.trigger_checkpoint()
        assert first.id not in coord.pending and first.id not in coord.completed
        assert coord.completed == [2] and second.name == "chk-2"
        history = {h["checkpoint_id"]: h for h in coord.history}
        assert history[1]["status"] == "aborted" and history[1]["reason"] == "subsumed by checkpoint 2"
        assert [d.id for d in coord.discarding] == [1] and first.folder.is_dir()  # still being written
        assert 1 in coord.storage._holders or not any(  # the write has not reached its shared files yet
            (tmp_path / "chk" / "shared").rglob("*.sst"))
        gate.set()
        client.run()
    finally:
        gate.set()
        client.close()
    assert not first.folder.exists() and coord.discarding == []
    assert 1 not in coord.storage._holders and not coord.storage._held
    assert CheckpointStorage(tmp_path / "chk").completed_ids() == [max(coord.completed)]
    verify_snapshot(second if second.exists() else CheckpointStorage(tmp_path / "chk").latest_valid())
    assert sorted(map(repr, sink.results)) == reference
    trace = client.runtime.trace.to_frame()
    aborted = trace[trace["kind"] == "checkpoint_aborted"]
    assert aborted["checkpoint"].tolist() == [1]
    from widgets import CheckpointStepper  # the teaching view tells the story of checkpoint 1 to its end

    last = CheckpointStepper(client, checkpoint=1).steps[-1]
    assert last.kind == "checkpoint_aborted" and "subsumed by checkpoint 2" in last.caption


def test_a_shared_file_held_by_a_checkpoint_in_flight_is_never_collected(tmp_path):
    storage = CheckpointStorage(tmp_path)
    f = tmp_path / "shared" / "op" / "abc-000012.sst"
    f.parent.mkdir(parents=True)
    f.write_bytes(b"sst")
    assert storage.hold(7, "op/abc-000012.sst")  # exists: checkpoint 7 may reference it
    storage.retain(1)
    assert f.exists()
    storage.release(7)
    storage.retain(1)
    assert not f.exists()
    assert not storage.hold(8, "op/abc-000012.sst")  # gone: checkpoint 8 must upload it again


def test_files_shared_by_several_subtasks_after_a_rescale(tmp_path):
    client = JobClient(make_env(tmp_path / "chk", CollectSink("out"), parallelism=1, asynchronous=False), "job")
    try:
        one = checkpoint_after(client, 30)
    finally:
        client.close()
    client = JobClient(make_env(tmp_path / "chk", CollectSink("out"), parallelism=2, retained=1, asynchronous=False),
                       "job", restore_from=one)
    try:
        two = client.trigger_checkpoint()  # nothing processed yet: both subtasks still hold the old SSTs
    finally:
        client.close()
    subs = tracking_subtasks(two)
    a, b = ({rel for n, rel in s["native"]["files"].items() if n.endswith(".sst")} for s in subs)
    assert a & b, "the two new subtasks should share the SSTs they both restored"
    assert not one.exists()  # retained=1: the old checkpoint is gone, the files its successor names are not
    verify_snapshot(two)
    assert entries(two) == entries_of_restored(tmp_path, two, 3)


# --- restore and recovery ---------------------------------------------------------------------------------------
def entries_of_restored(tmp_path: Path, folder: Path, parallelism: int, backend="rocksdb") -> list[str]:
    """Restore ``folder`` at ``parallelism`` and read back what the restored job holds (a savepoint at once)."""
    target = tmp_path / f"sp-{backend}-{parallelism}-{folder.name}"
    client = JobClient(make_env(tmp_path / f"chk-{backend}-{parallelism}", CollectSink("out"), parallelism=parallelism,
                                backend=backend), "job", restore_from=folder)
    try:
        client.trigger_savepoint(target)
    finally:
        client.close()
    return entries(target)


@pytest.mark.parametrize("backend", ["rocksdb", "heap"])
def test_restore_at_any_parallelism_holds_the_same_entries(tmp_path, backend):
    client = JobClient(make_env(tmp_path / "chk", CollectSink("out"), asynchronous=False), "job")
    try:
        chk = checkpoint_after(client, 30)
    finally:
        client.close()
    want = entries(chk)
    assert len(want) > 100
    for p in (1, 2, 3, 5):
        assert entries_of_restored(tmp_path, chk, p, backend) == want, (backend, p)


def test_a_restored_job_registers_its_states_like_a_canonical_restore(tmp_path):
    client = JobClient(make_env(tmp_path / "chk", CollectSink("out"), asynchronous=False), "job")
    try:
        chk = checkpoint_after(client, 30)
    finally:
        client.close()
    want = entries(chk)

    class Evolved(Tracking):  # the value type gains a field with a default
        def __init__(self):
            super().__init__(StatsV2)

    client = JobClient(make_env(tmp_path / "b", CollectSink("out"), parallelism=3, fn=Evolved()), "job",
                       restore_from=chk)
    try:
        sp = client.trigger_savepoint(tmp_path / "sp")
    finally:
        client.close()
    got = explorer.open(sp).keyed_state(operator="tracking", state="stats")
    assert len(got) == sum(1 for e in want if "'stats'" in e)
    assert all(v["note"] == "-" for v in got["value"])

    class Renamed(KeyedProcessFunction):
        def open(self, ctx):
            self.stats = ctx.get_state(ValueStateDescriptor("stats", Stats))  # TTL dropped
            ctx.get_state(ListStateDescriptor("recent", int))
            ctx.get_state(MapStateDescriptor("by_mod", int, int))

    with pytest.raises(StateMigrationError, match="TTL changed"):
        JobClient(make_env(tmp_path / "c", CollectSink("out"), fn=Renamed()), "job", restore_from=chk).close()


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_recovery_after_a_crash_is_exactly_once(tmp_path, reference, point):
    sink = CollectSink("out")
    # synchronous snapshots: how many checkpoints complete before the crash must not depend on thread timing
    _, restarts = run_with_recovery(lambda: make_env(tmp_path / "chk", sink, every=600, asynchronous=False), "job",
                                    CrashInjector(point, 2))
    assert restarts == 1
    assert sorted(map(repr, sink.results)) == reference
    latest = CheckpointStorage(tmp_path / "chk").latest_valid()
    assert read_metadata(latest)["incremental"]


def test_a_seeded_sample_of_crash_points_loses_and_duplicates_nothing(tmp_path, reference):
    rng = random.Random(20261122)
    for trial in range(4):
        point = rng.choice(CRASH_POINTS)
        after = rng.randint(1, 12 if point == "round" else 4)
        every = rng.choice([300, 700, 1500])
        d = tmp_path / f"chk-{trial}"
        sink = CollectSink("out")
        run_with_recovery(lambda: make_env(d, sink, every=every, retained=1, max_concurrent=2), "job",
                          CrashInjector(point, after))
        assert sorted(map(repr, sink.results)) == reference, (point, after, every)


@pytest.mark.parametrize("parallelism", [1, 3])
def test_recovery_at_another_parallelism_is_exactly_once(tmp_path, reference, parallelism):
    sink = CollectSink("out")
    client = JobClient(make_env(tmp_path / "chk", sink, every=600, asynchronous=False), "job",
                       crash=CrashInjector("round", 45))
    with pytest.raises(Exception, match="injected crash"):
        client.run()
    client.close()
    storage = CheckpointStorage(tmp_path / "chk")
    storage.clean_incomplete()
    latest = storage.latest_valid()
    assert latest is not None and read_metadata(latest)["incremental"]
    client = JobClient(make_env(tmp_path / "chk", sink, every=600, parallelism=parallelism), "job", restore_from=latest)
    try:
        client.run()
    finally:
        client.close()
    assert sorted(map(repr, sink.results)) == reference


# --- the explorer reads incremental checkpoints ---------------------------------------------------------------------
def test_the_explorer_reads_the_same_rows_from_a_full_and_an_incremental_checkpoint(tmp_path):
    folders = {}
    for incremental in (False, True):
        client = JobClient(make_env(tmp_path / f"chk-{incremental}", CollectSink("out"), incremental=incremental,
                                    asynchronous=False), "job")
        try:
            folders[incremental] = checkpoint_after(client, 30)
        finally:
            client.close()
    full, inc = (explorer.open(folders[x]) for x in (False, True))
    a = full.keyed_state().sort_values(["state", "key_group", "key", "user_key"], ignore_index=True, key=_sortable)
    b = inc.keyed_state().sort_values(["state", "key_group", "key", "user_key"], ignore_index=True, key=_sortable)
    assert len(a) > 100 and set(a["kind"]) >= {"value", "list", "map", "event_timer"}
    assert sorted(map(repr, a.itertuples(index=False))) == sorted(map(repr, b.itertuples(index=False)))
    assert b["expires_at"].notna().any()
    # key-group push-down: a range scan per run of wanted key groups
    kgs = [3, 4, 5, 70, 127]
    part = inc.keyed_state(key_groups=kgs)
    assert len(part) and set(part["key_group"]) <= set(kgs)
    assert sorted(map(repr, part.itertuples(index=False))) == sorted(
        map(repr, b[b["key_group"].isin(kgs)].itertuples(index=False)))
    # the explorer never modifies the checkpoint
    verify_snapshot(folders[True])


def _sortable(col):
    return col.map(repr)


# --- background TTL cleanup -------------------------------------------------------------------------------------
class Touch(KeyedProcessFunction):
    def open(self, ctx):
        self.seen = ctx.get_state(ValueStateDescriptor("seen", int, ttl=StateTtlConfig(5_000)))

    def process_element(self, value, ctx, out):
        self.seen.update(value[1])


@pytest.mark.parametrize("rounds", [5, None])
def test_the_background_sweeper_drops_expired_entries_nobody_reads(tmp_path, rounds):
    clock = ManualClock(1_000)
    old = [(f"old-{i}", i) for i in range(300)]
    new = [(f"new-{i % 50}", i) for i in range(3000)]
    env = StreamEnvironment(parallelism=1, batch_size=10, clock=clock, state_backend="rocksdb",
                            background_cleanup_rounds=rounds, state_dir=tmp_path / "state")
    env.from_collection(old + new, name="src").key_by(0).process(Touch(), name="touch")
    client = JobClient(env, "job")

    def stored_keys():
        backend = client.runtime.subtasks_of("touch")[0].operator.backend
        return {row[1] for row in backend.tables["seen"].rows()}  # raw storage, no TTL filtering

    try:
        client.run(until=lambda rt: rt.subtasks_of("touch")[0].operator.records_in >= 400)
        assert sum(k.startswith("old-") for k in stored_keys()) == 300
        clock.advance(10_000)  # the old keys expire; the job never touches them again
        client.run()
        left = stored_keys()
    finally:
        client.close()
    assert {k for k in left if k.startswith("new-")} == {f"new-{i}" for i in range(50)}
    if rounds is None:
        assert sum(k.startswith("old-") for k in left) == 300
    else:
        assert not any(k.startswith("old-") for k in left)


def test_state_dropped_on_restore_is_gone_from_the_next_checkpoint(tmp_path):
    client = JobClient(make_env(tmp_path / "chk", CollectSink("out"), asynchronous=False), "job")
    try:
        chk = checkpoint_after(client, 30)
    finally:
        client.close()

    class Fewer(KeyedProcessFunction):  # no longer declares "by_mod"
        def open(self, ctx):
            ctx.get_state(ValueStateDescriptor("stats", Stats, ttl=StateTtlConfig(10**9)))
            ctx.get_state(ListStateDescriptor("recent", int))

        def process_element(self, value, ctx, out):
            pass

    with pytest.raises(StateMigrationError, match="by_mod"):
        JobClient(make_env(tmp_path / "a", CollectSink("out"), fn=Fewer()), "job", restore_from=chk)
    client = JobClient(make_env(tmp_path / "b", CollectSink("out"), fn=Fewer()), "job", restore_from=chk,
                       allow_non_restored_state=True)
    try:
        backend = client.runtime.subtasks_of("tracking")[0].operator.backend
        assert set(backend.tables) == {"stats", "recent"}
        nxt = client.trigger_checkpoint()
    finally:
        client.close()
    assert {s["name"] for s in tracking_subtasks(nxt)[0]["states"]} == {"stats", "recent"}
    assert set(explorer.open(nxt).keyed_state(operator="tracking")["state"]) == {"stats", "recent", "event_timers"}
    client = JobClient(make_env(tmp_path / "c", CollectSink("out"), fn=Fewer()), "job", restore_from=nxt)
    client.close()  # nothing undeclared left to complain about


def test_history_reports_state_bytes_and_shared_files_of_incremental_checkpoints(tmp_path):
    client = JobClient(make_env(tmp_path / "chk", CollectSink("out"), asynchronous=False), "job")
    try:
        checkpoint_after(client, 20)
        checkpoint_after(client, 2)
    finally:
        client.close()
    hist = explorer.history(tmp_path / "chk")
    per = hist[hist["operator"] == "tracking"]
    assert (per["bytes"] > 0).all()
    by_chk = hist.groupby("checkpoint_id")[["checkpoint_bytes", "incremental_bytes"]].first()
    assert by_chk["incremental_bytes"].iloc[-1] < by_chk["checkpoint_bytes"].iloc[-1]  # shared SSTs not counted again


# --- issue 31: a restore's SST files hashed beside the load, never restored silently when damaged ------------
def test_a_flipped_byte_in_a_shared_sst_fails_the_restore_before_any_output_or_checkpoint(tmp_path, monkeypatch):
    """The shared SST files of an incremental checkpoint carry XXH3-128 and are hashed in threads while
    RocksDB opens them (off the critical path: the native restore starts before the hashes end); one
    flipped byte still fails the restore with the checksum error naming the file, before the restored
    job emits a record or completes a checkpoint, and leaves no state behind."""
    import threading
    import time

    from explorer.engine.checkpoint import restore as restore_mod
    from explorer.format import snapshot as snapshot_mod
    from explorer.format.snapshot import resolve

    client = JobClient(make_env(tmp_path / "chk", CollectSink("out")), "job")
    try:
        checkpoint_after(client, 30)
        folder = checkpoint_after(client, 2)
    finally:
        client.close()
    meta = read_metadata(folder)
    shared = sorted(rel for rel in meta["files"] if rel.startswith("../shared/") and rel.endswith(".sst"))
    assert shared and all(set(meta["files"][rel]) == {"bytes", "xxh3_128"} for rel in shared)

    events: list[tuple[str, float]] = []
    lock = threading.Lock()
    digest, native = snapshot_mod.check_file_digest, restore_mod.restore_native_subtask

    def slow_digest(path, entry):  # a slow disk: the hashes end well after the database is open
        time.sleep(0.2)
        try:
            digest(path, entry)
        finally:
            with lock:
                events.append(("hashed", time.monotonic()))

    def timed_native(*args, **kwargs):
        with lock:
            events.append(("native restore", time.monotonic()))
        return native(*args, **kwargs)

    monkeypatch.setattr(snapshot_mod, "check_file_digest", slow_digest)
    monkeypatch.setattr(restore_mod, "restore_native_subtask", timed_native)
    good = JobClient(make_env(tmp_path / "chk-good", CollectSink("out"), state_dir=tmp_path / "state-good"), "job",
                     restore_from=folder)
    good.close()
    first_restore = min(t for what, t in events if what == "native restore")
    assert first_restore < max(t for what, t in events if what == "hashed")  # verification beside the restore

    victim = resolve(folder, shared[len(shared) // 2])
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x01
    victim.write_bytes(bytes(data))
    sink = CollectSink("out")
    chk = tmp_path / "chk-bad"
    state = tmp_path / "state-bad"
    with pytest.raises(SnapshotCorruptError, match="XXH3-128") as err:
        # checkpoints every 50 records: a job that ran at all would complete one
        JobClient(make_env(chk, sink, every=50, state_dir=state), "job", restore_from=folder).run()
    assert str(victim) in str(err.value) and "does not match the recorded" in str(err.value)
    assert sink.results == []
    assert not list(chk.glob("chk-*"))
    assert not [p for p in state.rglob("*") if p.is_file()]


def test_shared_files_hashed_with_sha256_before_issue_31_still_restore_and_are_reused(tmp_path, monkeypatch):
    """Checkpoints taken before XXH3-128 (their shared SST files recorded with SHA-256) restore, and the
    restored job's next checkpoint references those files with their SHA-256 beside new XXH3-128 ones."""
    from explorer.engine.checkpoint import incremental as incremental_mod

    monkeypatch.setattr(incremental_mod, "xxhash", None)  # as an older version wrote them
    client = JobClient(make_env(tmp_path / "chk", CollectSink("out")), "job")
    try:
        old = checkpoint_after(client, 30)
    finally:
        client.close()
    assert all("sha256" in read_metadata(old)["files"][rel] for rel in shared_of(old))
    monkeypatch.undo()
    client = JobClient(make_env(tmp_path / "chk", CollectSink("out"), state_dir=tmp_path / "state-b"), "job",
                       restore_from=old)
    try:
        new = checkpoint_after(client, 3)
    finally:
        client.close()
    files = verify_snapshot(new)["files"]
    kinds = {next(k for k in ("sha256", "xxh3_128") if k in files[rel]) for rel in shared_of(new)}
    assert kinds == {"sha256", "xxh3_128"}, kinds
    assert shared_of(old) & shared_of(new)  # reused, not uploaded again
