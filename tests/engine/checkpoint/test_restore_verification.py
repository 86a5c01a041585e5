"""Restoring a full checkpoint while its data files' checksums (XXH3-128) are checked in a thread.

A damaged keyed-state file must still fail the restore with the checksum error
(naming the file, found vs recorded), leave no RocksDB directory and no ingest
staging folder, and never hand the job partially checked state; a good
checkpoint restores the same entries as before.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from explorer.engine import KeyedProcessFunction, ManualClock, StreamEnvironment, ValueStateDescriptor
from explorer.engine.checkpoint.job import JobClient
from explorer.errors import SnapshotCorruptError, StateMigrationError
from explorer.format.snapshot import read_metadata, resolve
from explorer.keygroups import assign_to_key_group

MAXP = 128


class Payload(KeyedProcessFunction):
    def open(self, ctx):
        self.payload = ctx.get_state(ValueStateDescriptor("payload", bytes))

    def process_element(self, value, ctx, out):  # pragma: no cover - the state is loaded directly
        self.payload.update(value[1])


class PayloadAsInt(Payload):
    """Declares the state with another type: the restore must fail with a StateMigrationError."""

    def open(self, ctx):
        self.payload = ctx.get_state(ValueStateDescriptor("payload", int))


def _env(tmp: Path, backend: str, state: str, incremental: bool = False, fn=None) -> StreamEnvironment:
    kw = {"state_backend": backend}
    if backend == "rocksdb":
        kw["state_dir"] = tmp / state
    env = StreamEnvironment(parallelism=1, max_parallelism=MAXP, clock=ManualClock(1_000), **kw)
    env.enable_checkpointing(tmp / "chk", interval_records=10**12, incremental=incremental, retained=2)
    env.from_collection([], name="src").key_by(0).process(fn or Payload(), name="payload", uid="payload")
    return env


def _table(client: JobClient):
    return client.runtime.subtasks_of("payload")[0].operator.backend.tables["payload"]


def _snapshot(tmp: Path, backend: str, n: int = 3000, incremental: bool = False) -> tuple[Path, dict]:
    client = JobClient(_env(tmp, backend, "state-a", incremental), "job")
    client.runtime.hold_sources_open = True
    keys = [f"key-{i}" for i in range(n)]
    _table(client).load_rows(
        (assign_to_key_group(k, MAXP), k, None, None, (f"v{i}-".encode() * 30)[: 40 + i % 50], None)
        for i, k in enumerate(keys))
    folder = client.trigger_checkpoint()
    before = {k: _get(client, k) for k in keys}
    client.close()
    return folder, before


def _get(client: JobClient, key: str):
    return _table(client).get(assign_to_key_group(key, MAXP), key, None)


def _damage(folder: Path) -> Path:
    meta = read_metadata(folder)
    rel = next(s["file"] for o in meta["operators"] if o["keyed"] for sub in o["subtasks"] for s in sub["states"])
    victim = folder / rel
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size: only the checksum (checked in the background) can tell
    victim.write_bytes(bytes(data))
    return victim


def _no_state_left(state_dir: Path) -> None:
    """No RocksDB directory of the subtask, no ingest staging folder, no file at all; and no
    ``rocksdb/`` folder (the restore created it: the state directory is left as it was found)."""
    assert not (state_dir / "rocksdb" / "payload-0").exists()
    assert not [p for p in state_dir.rglob("*") if p.is_file() or "-ingest-" in p.name]
    assert not (state_dir / "rocksdb").exists()


@pytest.mark.parametrize("backend", ["rocksdb", "heap"])
def test_a_good_checkpoint_restores_the_same_state(tmp_path, backend):
    folder, before = _snapshot(tmp_path, backend)
    client = JobClient(_env(tmp_path, backend, "state-b"), "job", restore_from=folder)
    try:
        assert client.runtime.restore_verification is not None  # the checks ran beside the load
        assert {k: _get(client, k) for k in before} == before
    finally:
        client.close()


@pytest.mark.parametrize("backend", ["rocksdb", "heap"])
def test_a_damaged_file_found_during_the_load_aborts_the_restore(tmp_path, backend):
    folder, _ = _snapshot(tmp_path, backend)
    victim = _damage(folder)
    with pytest.raises(SnapshotCorruptError, match="XXH3-128") as err:
        JobClient(_env(tmp_path, backend, "state-b"), "job", restore_from=folder)
    assert str(victim.resolve()) in str(err.value) and "does not match the recorded" in str(err.value)
    _no_state_left(tmp_path / "state-b")  # no ingest staging folder left


def test_a_truncated_file_fails_before_anything_is_loaded(tmp_path):
    folder, _ = _snapshot(tmp_path, "rocksdb")
    meta = read_metadata(folder)
    rel = next(s["file"] for o in meta["operators"] if o["keyed"] for sub in o["subtasks"] for s in sub["states"])
    victim = folder / rel
    size = victim.stat().st_size
    victim.write_bytes(victim.read_bytes()[: size // 2])
    with pytest.raises(SnapshotCorruptError, match=f"found {size // 2} bytes, expected {size}"):
        JobClient(_env(tmp_path, "rocksdb", "state-b"), "job", restore_from=folder)
    _no_state_left(tmp_path / "state-b")


@pytest.mark.parametrize("incremental", [False, True])
def test_a_restore_that_does_not_fit_the_job_leaves_nothing_and_the_next_attempt_works(tmp_path, incremental):
    """Before: the restored databases stayed open (their LOCK held) and on disk, so a second attempt
    in the same process failed with RocksDB's 'lock hold by current process'."""
    folder, before = _snapshot(tmp_path, "rocksdb", n=300, incremental=incremental)
    state = tmp_path / "state-b"
    state.mkdir()
    (state / "notes.txt").write_text("the user's file")
    with pytest.raises(StateMigrationError, match="incompatible type change"):
        JobClient(_env(tmp_path, "rocksdb", "state-b", incremental, fn=PayloadAsInt()), "job", restore_from=folder)
    assert sorted(p.name for p in state.iterdir()) == ["notes.txt"]  # as the restore found it
    client = JobClient(_env(tmp_path, "rocksdb", "state-b", incremental), "job", restore_from=folder)
    try:
        assert {k: _get(client, k) for k in before} == before
    finally:
        client.close()


class FailsToOpen(Payload):
    def open(self, ctx):
        super().open(ctx)
        raise RuntimeError("the user's open() failed")


def test_a_job_that_fails_to_start_releases_its_databases(tmp_path):
    """Not a restore: the databases stay (a fresh start wipes them anyway) but are closed, so a
    second attempt in the same process can open them (before: 'lock hold by current process')."""
    with pytest.raises(RuntimeError, match="open"):
        JobClient(_env(tmp_path, "rocksdb", "state", fn=FailsToOpen()), "job")
    client = JobClient(_env(tmp_path, "rocksdb", "state"), "job")
    client.close()


def test_a_damaged_sst_of_an_incremental_checkpoint_fails_the_parallel_check(tmp_path, monkeypatch):
    """The SST files of an incremental checkpoint are hashed by several threads at once
    (``VERIFY_PARALLEL_BYTES`` lowered so these small files take that path): a good one restores,
    a damaged one fails with the checksum error naming the file, and no state is left behind."""
    from explorer.engine.checkpoint import restore as restore_mod

    monkeypatch.setattr(restore_mod, "VERIFY_PARALLEL_BYTES", 0)
    folder, before = _snapshot(tmp_path, "rocksdb", n=3000, incremental=True)
    client = JobClient(_env(tmp_path, "rocksdb", "state-b", True), "job", restore_from=folder)
    try:
        assert {k: _get(client, k) for k in before} == before
    finally:
        client.close()
    meta = read_metadata(folder)
    ssts = sorted(rel for rel in meta["files"] if rel.endswith(".sst"))
    assert ssts
    victim = resolve(folder, ssts[-1]).resolve()  # shared/ files are named from the checkpoints' folder
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    with pytest.raises(SnapshotCorruptError, match="does not match the recorded") as err:
        JobClient(_env(tmp_path, "rocksdb", "state-c", True), "job", restore_from=folder)
    assert str(victim) in str(err.value)
    _no_state_left(tmp_path / "state-c")


@pytest.mark.parametrize("backend", ["rocksdb", "heap"])
def test_checkpoints_and_savepoints_are_written_with_their_own_profiles(tmp_path, backend):
    """A canonical checkpoint's Parquet files: uncompressed, XXH3-128; a savepoint's (the portable
    archive): zstd, SHA-256. Both restore the same entries, and the explorer reads both."""
    import explorer
    import pyarrow.parquet as pq

    folder, before = _snapshot(tmp_path, backend)
    client = JobClient(_env(tmp_path, backend, "state-b"), "job", restore_from=folder)
    client.runtime.hold_sources_open = True
    savepoint = client.trigger_savepoint(tmp_path / "sp")
    client.close()
    for snap, digest, codec in ((folder, "xxh3_128", "UNCOMPRESSED"), (savepoint, "sha256", "ZSTD")):
        meta = read_metadata(snap)
        keyed = {rel: e for rel, e in meta["files"].items() if rel.startswith("keyed/")}
        assert keyed and all(set(e) == {"bytes", digest} for e in keyed.values()), snap
        for rel in keyed:
            md = pq.ParquetFile(resolve(snap, rel)).metadata
            names = md.schema.to_arrow_schema().names
            col = md.row_group(0).column(names.index("value"))
            assert col.compression == codec, (snap, rel)
        df = explorer.open(snap).keyed_state()
        assert dict(zip(df["key"], df["value"])) == before
        restored = JobClient(_env(tmp_path, backend, f"state-{digest}"), "job", restore_from=snap)
        try:
            assert {k: _get(restored, k) for k in before} == before
        finally:
            restored.close()
