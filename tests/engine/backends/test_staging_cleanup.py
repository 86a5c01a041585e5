"""Staging folders next to a RocksDB directory: a process killed mid-way leaves them behind
(hard links to SST files: disk never freed); the next backend that opens the directory
removes those whose owner is provably gone, and nothing else: not a folder a live capture
(in this or another process) still holds, not any other name.

Killed processes are real: a child Python process is stopped with SIGKILL, so no
``finally`` block and no finalizer runs.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from explorer.engine.backends.rocksdb import RocksDBStateBackend, StagingDir, sweep_staging
from explorer.engine.checkpoint.capture import PinnedView
from explorer.engine.clock import ManualClock
from explorer.engine.state import ValueStateDescriptor
from explorer.keygroups import KeyGroupRange, assign_to_key_group

MAXP = 128
N = 500
ROOT = Path(__file__).resolve().parents[2]

_PLANT = """
import os, signal, sys
from pathlib import Path
from explorer.engine.backends.rocksdb import RocksDBStateBackend
from explorer.engine.clock import ManualClock
from explorer.engine.state import ValueStateDescriptor
from explorer.keygroups import KeyGroupRange, assign_to_key_group
db = Path(sys.argv[1])
b = RocksDBStateBackend(128, KeyGroupRange(0, 127), ManualClock(0), db)
t = b.register(ValueStateDescriptor("v", int))
t.load_rows((assign_to_key_group(f"k{i}", 128), f"k{i}", None, None, i, None) for i in range(500))
b.flush()
"""


def _child(body: str, db: Path, *args: str) -> subprocess.Popen:
    code = _PLANT + textwrap.dedent(body)
    return subprocess.Popen([sys.executable, "-c", code, str(db), *args], cwd=ROOT, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _staging(db: Path, kind: str) -> list[Path]:
    return sorted(db.parent.glob(f".{db.name}-{kind}-*"))


def _backend(db: Path, **kw) -> RocksDBStateBackend:
    return RocksDBStateBackend(MAXP, KeyGroupRange(0, MAXP - 1), ManualClock(0), db, **kw)


def _plant(db: Path) -> RocksDBStateBackend:
    b = _backend(db)
    t = b.register(ValueStateDescriptor("v", int))
    t.load_rows((assign_to_key_group(f"k{i}", MAXP), f"k{i}", None, None, i, None) for i in range(N))
    b.flush()
    return b


def _killed(body: str, db: Path) -> None:
    """Run ``body`` in a child that then kills itself with SIGKILL."""
    p = _child(textwrap.dedent(body) + "\nos.kill(os.getpid(), signal.SIGKILL)\n", db)
    out, err = p.communicate(timeout=120)
    assert p.returncode == -signal.SIGKILL, err


@pytest.mark.parametrize("kind", ["full", "chk"])
def test_a_killed_capture_leaves_a_folder_the_next_open_removes(tmp_path, caplog, kind):
    db = tmp_path / "state" / "db"
    _killed("""
        from explorer.engine.checkpoint.capture import PinnedView
        from explorer.engine.checkpoint.incremental import capture_native
        from explorer.engine.checkpoint.storage import CheckpointStorage
        keep = PinnedView(b) if "%s" == "full" else capture_native(b, None, CheckpointStorage(db.parent / "chk"), 1)
    """ % kind, db)
    left = _staging(db, kind)
    assert len(left) == 1 and list(left[0].rglob("*.sst"))  # hard links to SST files, never freed so far
    with caplog.at_level(logging.INFO, logger="explorer.engine.backends.rocksdb"):
        b = _backend(db)
    b.close()
    assert _staging(db, kind) == []
    assert any(str(left[0]) in r.getMessage() and "removed abandoned staging folder" in r.getMessage()
               for r in caplog.records)


def test_a_bulk_load_killed_mid_way_leaves_a_folder_the_next_open_removes(tmp_path):
    db = tmp_path / "db"
    _killed("""
        import pyarrow as pa
        from explorer.engine.checkpoint.restore import RestoredChunk
        b2 = RocksDBStateBackend(128, KeyGroupRange(0, 127), ManualClock(0), db.parent / "other")
        t2 = b2.register(ValueStateDescriptor("v", int))
        def chunks():
            keys = sorted(k for k, _ in t._scan(b"", None))
            yield RestoredChunk((pa.array(keys, pa.binary()), pa.array([b"x" * 9] * len(keys), pa.binary())),
                                len(keys), lambda: iter(()))
            os.kill(os.getpid(), signal.SIGKILL)  # killed while the first SST file is being written
        b2.ingest_sorted(t2, chunks())
    """, db)
    other = db.parent / "other"
    assert len(_staging(other, "ingest")) == 1
    _backend(other).close()
    assert _staging(other, "ingest") == []


def test_a_folder_a_live_process_holds_is_kept_until_that_process_dies(tmp_path):
    db = tmp_path / "db"
    p = _child("""
        from explorer.engine.checkpoint.capture import PinnedView
        view = PinnedView(b)
        b.close()  # the backend is gone, its pinned view is still being read (an async phase)
        print(view.staging, flush=True)
        sys.stdin.readline()
        cf = view.column_family("v")
        print(sum(1 for _ in cf.keys()), flush=True)
        cf.close()
        view.release()
    """, db)
    try:
        staging = Path(p.stdout.readline().strip())
        assert staging.is_dir(), p.stderr.read() if p.poll() is not None else ""
        b = _backend(db)  # opens the same directory while the other process reads its view
        b.close()
        assert staging.is_dir()
        assert sweep_staging(db) == []
        p.stdin.write("\n")
        p.stdin.flush()
        assert int(p.stdout.readline()) == N  # the view was intact
        assert p.wait(timeout=60) == 0
    finally:
        p.kill()
        p.communicate()
    assert not staging.parent.exists()  # released by its owner


def test_a_view_of_this_process_survives_a_new_backend_on_the_same_directory(tmp_path):
    b = _plant(tmp_path / "db")
    view = PinnedView(b)
    b.close()
    again = _backend(tmp_path / "db")  # e.g. a restarted job while the old one's async phase still runs
    cf = view.column_family("v")
    assert sum(1 for _ in cf.keys()) == N
    cf.close()
    view.release()
    again.close()
    assert _staging(tmp_path / "db", "full") == []


def test_only_staging_folders_of_this_database_are_removed(tmp_path):
    db = tmp_path / "db"
    legacy = tmp_path / ".db-full-0123456789ab"  # the exact pattern, no lock file: an older version's leftover
    legacy.mkdir()
    (legacy / "000012.sst").write_bytes(b"x" * 100)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    others = [tmp_path / ".db-full-notes", tmp_path / ".db-full-0123456789ab-x", tmp_path / ".dbx-full-0123456789ab",
              tmp_path / ".other-ingest-0123456789ab", tmp_path / "db-full-0123456789ab",
              tmp_path / ".db-spill-0123456789ab"]
    for d in others:
        d.mkdir()
        (d / "f").write_text("keep")
    (tmp_path / ".db-chk-aaaaaaaaaaaa").write_text("a file, not a folder")
    os.symlink(outside, tmp_path / ".db-ingest-bbbbbbbbbbbb")
    _backend(db).close()
    assert not legacy.exists()
    assert all((d / "f").read_text() == "keep" for d in others)
    assert (tmp_path / ".db-chk-aaaaaaaaaaaa").read_text() == "a file, not a folder"
    assert (tmp_path / ".db-ingest-bbbbbbbbbbbb").is_symlink() and (outside / "keep.txt").exists()


def test_a_staging_folder_taken_by_a_sweep_before_its_lock_gets_a_new_name(tmp_path, monkeypatch):
    """The instant between creating a folder and locking it: a sweep that claims the folder first
    makes the owner take another name, never share a folder that is being removed."""
    import explorer.engine.backends.rocksdb.staging as rdb

    db = tmp_path / "db"
    real_open = os.open
    swept: list[Path] = []
    raced = []

    def racing_open(path, flags, *a, **kw):
        if str(path).endswith(".owner.lock") and flags & os.O_EXCL and not raced:
            raced.append(path)
            swept.extend(sweep_staging(db))  # runs between the owner's mkdir and its lock file
        return real_open(path, flags, *a, **kw)

    monkeypatch.setattr(rdb.os, "open", racing_open)
    owned = StagingDir(db, "ingest")
    monkeypatch.undo()
    assert len(swept) == 1 and swept[0] != owned.path and not swept[0].exists()
    assert sweep_staging(db) == [] and owned.path.is_dir()  # held: kept
    owned.release()
    assert not owned.path.exists()


def test_a_native_restore_killed_mid_copy_does_not_block_the_next_one(tmp_path):
    db = tmp_path / "db"
    target = tmp_path / "restored"
    _killed("""
        import shutil
        import explorer.engine.backends.rocksdb.staging as rdb
        b.native_checkpoint(db.parent / "ck")
        b.close()
        real_copy = shutil.copy2
        def dying_copy(src, dst, **kw):  # the SSTs and the log are there, CURRENT is not
            if Path(src).name == "CURRENT":
                os.kill(os.getpid(), signal.SIGKILL)
            return real_copy(src, dst, **kw)
        rdb.shutil.copy2 = dying_copy
        RocksDBStateBackend.restore_native(db.parent / "ck", 128, KeyGroupRange(0, 127), ManualClock(0),
                                           db.parent / "restored")
    """, db)
    assert not (target.exists() and any(target.iterdir()) and not (target / "CURRENT").exists())
    restored = RocksDBStateBackend.restore_native(tmp_path / "ck", MAXP, KeyGroupRange(0, MAXP - 1), ManualClock(0),
                                                  target)
    try:
        restored.register(ValueStateDescriptor("v", int))
        t = restored.tables["v"]
        assert t.get(assign_to_key_group("k7", MAXP), "k7", None) == 7
    finally:
        restored.close()
    assert _staging(target, "restore") == []
