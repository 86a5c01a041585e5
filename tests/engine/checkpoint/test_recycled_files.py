"""Canonical checkpoints write over the large files of checkpoints that retention dropped.

:meth:`explorer.engine.checkpoint.storage.CheckpointStorage.retain` keeps a dropped
checkpoint's large Parquet files in ``.recycle/`` and the next canonical checkpoint
writes over one of them (:class:`explorer.format.keyed.KeyGroupParquetWriter` with a
spare): each checkpoint must hold exactly its own state (the spare longer or shorter
than the new file), with its checksum, restore as written, and leave nothing behind.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from explorer.engine import KeyedProcessFunction, ManualClock, StreamEnvironment, ValueStateDescriptor
from explorer.engine.checkpoint import storage as storage_module
from explorer.engine.checkpoint.job import JobClient
from explorer.format.keyed import CHECKPOINT, KeyGroupParquetWriter, write_parquet_by_key_group
from explorer.format.snapshot import read_metadata, verify_snapshot, xxh3_128_file
from explorer.keygroups import assign_key_groups

MAX_PARALLELISM = 128


class Payload(KeyedProcessFunction):
    def open(self, ctx):
        self.payload = ctx.get_state(ValueStateDescriptor("payload", bytes))

    def process_element(self, value, ctx, out):  # pragma: no cover - the state is loaded directly
        self.payload.update(value[1])


def _client(chk, state, restore_from=None):
    env = StreamEnvironment(parallelism=1, max_parallelism=MAX_PARALLELISM, clock=ManualClock(1_000),
                            state_backend="rocksdb", state_dir=state)
    env.enable_checkpointing(chk, interval_records=10**12, incremental=False, retained=1)
    env.from_collection([], name="src").key_by(0).process(Payload(), name="payload", uid="payload")
    client = JobClient(env, "job", restore_from=restore_from)
    client.runtime.hold_sources_open = True
    return client


def _table(client):
    return client.runtime.subtasks_of("payload")[0].operator.backend.tables["payload"]


def _state_file(folder):
    (path,) = (folder / "keyed").rglob("*.parquet")
    return path


def test_checkpoints_written_over_dropped_ones_hold_their_own_state(tmp_path, monkeypatch):
    monkeypatch.setattr(storage_module, "RECYCLE_MIN_BYTES", 1)
    rng = np.random.default_rng(5)
    keys = [f"key-{i}" for i in range(3000)]
    kgs = assign_key_groups(keys, MAX_PARALLELISM)
    client = _client(tmp_path / "chk", tmp_path / "state")
    folders, wanted, inodes = [], [], []
    try:
        # values of 300, then 40 (the spare longer than the new file), then 700 bytes (shorter)
        for round_, size in enumerate((300, 40, 700, 90)):
            values = [rng.bytes(size) for _ in keys]
            _table(client).load_rows((int(kgs[j]), keys[j], None, None, values[j], None) for j in range(len(keys)))
            folder = client.trigger_checkpoint()
            verify_snapshot(folder)  # sizes and XXH3-128 of every file
            path = _state_file(folder)
            assert read_metadata(folder)["files"][str(path.relative_to(folder))]["xxh3_128"] == xxh3_128_file(path)
            folders.append(folder)
            wanted.append(dict(zip(keys, values)))
            inodes.append(path.stat().st_ino)
            # a restore of the newest checkpoint gives this round's values, and only them
            r = _client(tmp_path / f"rchk-{round_}", tmp_path / f"rstate-{round_}", restore_from=folder)
            try:
                got = {row[1]: row[4] for row in _table(r).rows()}
            finally:
                r.close()
            assert got == wanted[-1]
        # retained=1: each checkpoint from the third on wrote over the file of the one before the last
        assert inodes[2] == inodes[0] and inodes[3] == inodes[1]
        assert not folders[0].exists() and sorted((tmp_path / "chk" / ".recycle").glob("*.spare"))
    finally:
        client.close()
    assert not (tmp_path / "chk" / ".recycle").exists()  # what was kept to be written over is gone


def test_spares_are_kept_only_for_large_files_and_only_a_few(tmp_path):
    s = storage_module.CheckpointStorage(tmp_path / "chk")
    folder = tmp_path / "chk" / "chk-1" / "keyed" / "op" / "state"
    folder.mkdir(parents=True)
    big = storage_module.RECYCLE_MIN_BYTES
    for i, size in enumerate((big, big + 1, big + 2, 10)):
        with open(folder / f"{i}.parquet", "wb") as f:
            f.truncate(size)
    linked = folder / "4.parquet"
    with open(linked, "wb") as f:
        f.truncate(big * 2)
    (tmp_path / "copy.parquet").hardlink_to(linked)  # another name for it: never written over
    s._recycle(tmp_path / "chk" / "chk-1")
    assert [p.stat().st_size for _, p in s._spares] == [big + 1, big + 2]
    assert s.take_spare(big - 1) is None  # too small to be worth it
    assert s.take_spare(big).stat().st_size == big + 2
    s.close()
    assert not (tmp_path / "chk" / ".recycle").exists()
    assert (tmp_path / "copy.parquet").stat().st_size == big * 2


@pytest.mark.parametrize("spare_bytes", [0, 100, 1 << 20])
def test_a_file_written_over_a_spare_is_the_new_file(tmp_path, spare_bytes):
    n = 5000
    kgs = np.sort(np.random.default_rng(2).integers(0, 30, n)).astype(np.int32)
    table = pa.table({"key_group": pa.array(kgs), "key": pa.array([f"k{i}" for i in range(n)]),
                      "value": pa.array([b"v" * (i % 50) for i in range(n)])})
    want = write_parquet_by_key_group(table, tmp_path / "whole.parquet", profile=CHECKPOINT)
    spare = tmp_path / "spare"
    spare.write_bytes(b"\xff" * spare_bytes)
    w = KeyGroupParquetWriter(tmp_path / "over.parquet", table.schema, profile=CHECKPOINT, size_hint=1,
                              spare=lambda size: spare)
    w.write(table)
    assert w.close() == want
    assert not spare.exists()
    assert (tmp_path / "over.parquet").read_bytes() == (tmp_path / "whole.parquet").read_bytes()
    assert w.checksum == {"xxh3_128": xxh3_128_file(tmp_path / "over.parquet")}
