"""Incremental checkpoints of the RocksDB backend: native files, shared between checkpoints.

With ``CheckpointConfig(incremental=True)`` a checkpoint (never a savepoint:
savepoints stay canonical and self-contained) stores a RocksDB subtask's keyed
state as the database's own files:

* *synchronous phase* (:func:`capture_native`): flush the memtables and take a
  RocksDB checkpoint into a staging folder next to the working directory (SST
  files are hard links, so this costs no copying);
* *asynchronous phase* (:func:`upload_native`): every SST file this backend
  instance has not uploaded before is copied to the checkpoint directory's
  ``shared/<uid>/<xxh3_128>-<sst name>`` (named by content, so a name
  always means the same bytes, and subtasks holding the same file after a
  rescale share one copy); SSTs uploaded before are only referenced. The small
  files (MANIFEST, CURRENT, OPTIONS, the empty WAL) go to the private
  ``chk-N/native/<uid>/<subtask>/``.

A *full* checkpoint taken while incremental checkpoints are on
(``JobClient.trigger_checkpoint(full=True)``, Flink's ``CheckpointType.FULL``)
is captured the same way but shares nothing: every SST file is copied into
the checkpoint's own ``chk-N/native/<uid>/<subtask>/``: hard-linked where the file
system allows (SST files are immutable; RocksDB's own checkpoints and the
restore link them the same way), copied otherwise, and hashed unless this
backend hashed that file for an earlier full checkpoint (an SST name is never reused). None is reused
from or recorded for later checkpoints' ``shared/`` area, so the checkpoint
stands alone and goes with its folder. Its files carry XXH3-128 checksums
(:func:`explorer.format.snapshot.check_file_digest`), which a restore checks at
20+ GB/s where SHA-256 runs at ~1.8. This is the quick full checkpoint of a
RocksDB job (no re-encoding); savepoints and checkpoints with
``incremental=False`` stay canonical Parquet.

The metadata lists every file (shared ones as ``../shared/...``) with size and
checksum, like any other snapshot file (shared SST files: XXH3-128, computed as they are
copied; SHA-256 in checkpoints taken before issue 31, which still restore), and marks the subtask with
``"state_format": "rocksdb-native"`` (see :mod:`explorer.format.rocksdb.native`).
Timers, operator state and metrics still take the canonical path.
:meth:`CheckpointStorage.retain` deletes a shared file once no retained
checkpoint names it; files a checkpoint in flight uses are held meanwhile.

Restore (:func:`restore_native_subtask`): a RocksDB subtask links the files
of the old subtask that overlaps its key groups most into its working
directory, drops foreign key groups, and copies the entries of its key groups
from every other overlapping old subtask (rescaling merges whole key groups).
A heap subtask reads the rows out (:class:`NativeRestoredKeyedState`).

Flink's ``cleanupFullSnapshot`` TTL strategy does not apply to native files
(as in Flink's incremental checkpoints): expired entries stay until read,
swept, or compacted away.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from ...format.rocksdb.native import NATIVE_FORMAT, NativeFiles, materialize, native_rows
from ...format.snapshot import file_entry, read_metadata, xxh3_128_file, xxhash
from ...format.states import StoredState
from ..backends.rocksdb import StagingDir
from .migration import check_declaration, converter

__all__ = ["NATIVE_FORMAT", "NativeCapture", "capture_native", "upload_native", "is_native_backend",
           "restore_native_subtask", "NativeRestoredKeyedState"]

_COPY_CHUNK = 4 << 20


def is_native_backend(backend: Any) -> bool:
    """Whether ``backend`` can take native (incremental) checkpoints."""
    return getattr(backend, "name", None) == "rocksdb" and hasattr(backend, "native_checkpoint")


def _safe(name: str) -> str:
    out = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
    return out or "_"


@dataclass
class NativeCapture:
    """What the synchronous phase leaves for the upload."""

    backend: Any
    staging: Path
    names: list[str]
    states: list[dict[str, Any]]
    reused: dict[str, dict[str, Any]] = field(default_factory=dict)  # sst name -> file entry with "path"
    #: the owned folder ``staging`` lives in (removed by :meth:`release`, or when this capture is collected)
    owned: Any = None
    #: a full checkpoint (CheckpointType.FULL): every file copied into the checkpoint's folder, nothing shared
    full: bool = False

    def release(self) -> None:
        """Remove the staged RocksDB checkpoint (uploaded, or never to be)."""
        if self.owned is not None:
            self.owned.release()
        else:
            shutil.rmtree(self.staging, ignore_errors=True)


def capture_native(backend, staging: Path | None, storage, checkpoint_id: int, full: bool = False) -> NativeCapture:
    """Flush and hard-link a RocksDB checkpoint into a staging folder; hold the shared SSTs to reuse
    (none when ``full``: then every file is copied into the checkpoint's own folder).

    The folder is an owned ``.<db>-chk-<hex>`` next to the database
    (:class:`~explorer.engine.backends.rocksdb.StagingDir`: unique per capture, so an
    upload still running from a crashed attempt is never removed by a new one, and
    one left by a dead process is swept when a backend next opens the directory).
    ``staging`` is ignored (the coordinator's name for it, kept for compatibility).
    """
    owned = StagingDir(backend.path, "chk")
    try:
        staging = owned.path / "db"
        names = backend.native_checkpoint(staging)
        # per state: RocksDB's key estimate (no scan) and the size of its column family's SSTs
        states = [{"name": name, "file": None, "rows": backend.estimated_entries(name), "rows_estimated": True,
                   "bytes": backend.sst_bytes(name)} for name in sorted(backend.tables)]
    except BaseException:
        owned.release()
        raise
    nc = NativeCapture(backend, staging, names, states, owned=owned, full=full)
    for name in (() if full else names):
        entry = backend.uploaded.get(name) if name.endswith(".sst") else None
        # the hold keeps retain() of an older checkpoint from deleting it before our metadata names it;
        # a file that is gone (uploaded for a checkpoint that was then aborted and collected) is uploaded again
        if entry is not None and storage.hold(checkpoint_id, entry["path"][len("../shared/"):]):
            nc.reused[name] = entry
    return nc


def _copy_hashing(src: Path, dst: Path) -> dict[str, str]:
    """Copy ``src`` to ``dst`` through one reused buffer, hashing what is copied; its checksum entry:
    ``{"xxh3_128": hex}`` (SHA-256 only where the xxhash package is missing). XXH3-128 costs a tenth of
    SHA-256's CPU here, and the restore checks every shared file with it (issue 31: SHA-256 of a 1 GB
    incremental checkpoint was 4.9 s of a 5.5 s recovery under load)."""
    h = xxhash.xxh3_128() if xxhash is not None else hashlib.sha256()
    buf = bytearray(_COPY_CHUNK)
    view = memoryview(buf)
    with open(src, "rb", buffering=0) as fi, open(dst, "wb", buffering=0) as fo:
        while True:
            n = fi.readinto(buf)
            if not n:
                break
            h.update(view[:n])  # the hashes and the file calls release the GIL: threads copy side by side
            done = 0
            while done < n:
                done += fo.write(view[done:n])
    return {"xxh3_128" if xxhash is not None else "sha256": h.hexdigest()}


def checksum_of(entry: dict[str, Any]) -> dict[str, Any]:
    """The checksum part of a file entry (``sha256`` of shared files uploaded before issue 31, else ``xxh3_128``)."""
    return {k: entry[k] for k in ("xxh3_128", "sha256") if k in entry}


#: threads hashing (or copying) the files of a full native checkpoint
COPY_THREADS = 4


def _put_private(nc: NativeCapture, src: Path, dst: Path) -> tuple[str, int]:
    """One file of a full checkpoint into its folder: an SST file hard-linked where the file system
    allows (immutable: RocksDB never writes into an existing SST, and deleting it only drops the
    database's link; this is how RocksDB's own checkpoints and the restore place them), anything
    else (or an SST across file systems) copied. Returns the file's XXH3-128 (an SST's computed
    once per backend: a file number is never reused) and the bytes written."""
    cache = getattr(nc.backend, "sst_digests", {})
    if src.suffix == ".sst":
        try:
            os.link(src, dst)
        except OSError:
            pass
        else:
            size = dst.stat().st_size
            known = cache.get(src.name)
            if known is not None and known["bytes"] == size:
                return known["xxh3_128"], 0
            digest = xxh3_128_file(dst)
            cache[src.name] = {"bytes": size, "xxh3_128": digest}
            return digest, 0
    shutil.copyfile(src, dst)
    return xxh3_128_file(dst), dst.stat().st_size


def _copy_private(nc: NativeCapture, folder: Path, uid_dir: str, index: int) -> tuple[dict[str, str], dict, int]:
    """A full checkpoint's native files, all in ``folder/native/<uid>/<index>/`` (:func:`_put_private`),
    the largest first, by up to :data:`COPY_THREADS` threads."""
    base = f"native/{uid_dir}/{index}"
    (folder / base).mkdir(parents=True, exist_ok=True)
    names = sorted(nc.names, key=lambda n: -(nc.staging / n).stat().st_size)
    workers = max(1, min(COPY_THREADS, os.cpu_count() or 1, len(names)))
    with ThreadPoolExecutor(workers, thread_name_prefix="checkpoint-copy") as pool:
        done = dict(zip(names, pool.map(lambda n: _put_private(nc, nc.staging / n, folder / base / n), names)))
    native_files, files, written = {}, {}, 0
    for name in sorted(names):
        rel = f"{base}/{name}"
        digest, wrote = done[name]
        native_files[name] = rel
        files[rel] = {"bytes": (folder / rel).stat().st_size, "xxh3_128": digest}
        written += wrote
    return native_files, files, written


def upload_native(nc: NativeCapture, folder: Path, storage, checkpoint_id: int, uid: str, index: int
                  ) -> tuple[dict[str, Any], dict[str, dict[str, Any]], int]:
    """Copy new SSTs to ``shared/`` and the small files to ``folder``.

    Returns the subtask's ``native`` metadata, the file entries for the
    snapshot's ``files`` and the bytes actually written by this checkpoint.
    """
    shared = storage.directory / "shared"
    uid_dir = _safe(uid)
    files: dict[str, dict[str, Any]] = {}
    native_files: dict[str, str] = {}
    written = 0
    try:
        if nc.full:
            native_files, files, written = _copy_private(nc, folder, uid_dir, index)
        for name in (() if nc.full else nc.names):
            src = nc.staging / name
            if name.endswith(".sst"):
                entry = nc.reused.get(name)
                if entry is None:
                    tmp_rel = f"{uid_dir}/.{uuid.uuid4().hex}.inprogress"
                    storage.hold(checkpoint_id, tmp_rel)
                    (shared / uid_dir).mkdir(parents=True, exist_ok=True)
                    checksum = _copy_hashing(src, shared / tmp_rel)
                    size = (shared / tmp_rel).stat().st_size
                    rel = f"{uid_dir}/{next(iter(checksum.values()))[:32]}-{name}"
                    storage.hold(checkpoint_id, rel)
                    os.replace(shared / tmp_rel, shared / rel)  # same name means same bytes: replacing is harmless
                    written += size
                    entry = {"path": f"../shared/{rel}", "bytes": size, **checksum}
                    nc.backend.uploaded[name] = entry
                native_files[name] = entry["path"]
                files[entry["path"]] = {"bytes": entry["bytes"], **checksum_of(entry)}
            else:
                rel = f"native/{uid_dir}/{index}/{name}"
                dst = folder / rel
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, dst)
                files[rel] = file_entry(folder, dst)
                written += files[rel]["bytes"]
                native_files[name] = rel
    finally:
        nc.release()
    be = nc.backend
    native = {"files": native_files, "max_parallelism": be.max_parallelism,
              "key_group_prefix_bytes": be.key_group_prefix_bytes,
              "key_group_range": [be.key_groups.start, be.key_groups.end]}
    return native, files, written


# --- restore ------------------------------------------------------------------------------------------
def _overlap(sub: dict, start: int, end: int) -> tuple[int, int] | None:
    lo, hi = sub["key_group_range"]
    lo, hi = max(lo, start), min(hi, end)
    return (lo, hi) if lo <= hi else None


class NativeRestoredInPlace:
    """A state already restored into a RocksDB subtask's database, waiting for its descriptor.

    Registration checks the declaration like a canonical restore; if the value
    type changed (schema evolution) the entries are read with the old type,
    converted, and written back in the new encoding.
    """

    def __init__(self, backend, desc: "StoredState | dict") -> None:
        self.backend = backend
        self.desc = StoredState.of(desc)

    def check(self, descriptor, operator: str) -> None:
        check_declaration(self.desc, descriptor, operator)

    def discard(self) -> None:
        """The job does not declare this state (``allow_non_restored_state``): delete its entries."""
        self.backend.drop_state(self.desc.name)

    def rows(self, descriptor, operator: str) -> Iterator[tuple]:
        if descriptor.describe()["value_type"] == self.desc.value_type:
            return iter(())  # the bytes are already in place
        conv = converter(self.desc.value_type, descriptor.value_info, f"operator {operator!r}, state {self.desc.name!r}")
        old = self.desc.value_info
        be = self.backend
        table = be.tables[self.desc.name]
        kgr = be.key_groups
        rows = list(native_rows(table._cf, self.desc, be.key_group_prefix_bytes, [(kgr.start, kgr.end)], old))
        table.clear_all()
        be.store_descriptor(descriptor)
        return iter([(kg, k, ns, uk, None if v is None else conv(old.to_arrow(v)), ts) for kg, k, ns, uk, v, ts in rows])


class NativeRestoredKeyedState:
    """Rows of one state read out of native files, for a backend that is not RocksDB."""

    def __init__(self, folder: Path, desc: "StoredState | dict", subs: list[dict], key_groups: range) -> None:
        self.folder = folder
        self.desc = StoredState.of(desc)
        self.subs = subs
        self.key_groups = key_groups

    def check(self, descriptor, operator: str) -> None:
        check_declaration(self.desc, descriptor, operator)

    def rows(self, descriptor, operator: str) -> Iterator[tuple]:
        conv = converter(self.desc.value_type, descriptor.value_info,
                          f"operator {operator!r}, state {self.desc.name!r}")
        old = self.desc.value_info
        kg = self.key_groups
        for sub in self.subs:
            ov = _overlap(sub, kg.start, kg.stop - 1)
            if ov is None or not any(s["name"] == self.desc.name for s in sub["states"]):
                continue
            with NativeFiles(self.folder, sub["native"]) as nf:
                for g, k, ns, uk, v, ts in nf.rows(self.desc, key_group_range=ov, value_info=old):
                    yield g, k, ns, uk, None if v is None else conv(old.to_arrow(v)), ts


def restore_native_subtask(folder: Path, old: dict, subtask, subs: list[dict]) -> None:
    """Restore the native keyed state of ``subs`` (the old subtasks overlapping this one's key groups)."""
    op = subtask.operator
    kgr = op.key_groups
    descs = {d["name"]: StoredState.of(d) for d in old["states"]}
    wanted = range(kgr.start, kgr.end + 1)
    backend = op.backend
    if not is_native_backend(backend):
        for name, d in descs.items():
            backend.restored[name] = NativeRestoredKeyedState(folder, d, subs, wanted)
        return
    cls = type(backend)
    path, clock, maxp = backend.path, backend.clock, backend.max_parallelism

    def shared_groups(sub: dict) -> int:
        ov = _overlap(sub, kgr.start, kgr.end)
        return ov[1] - ov[0] + 1 if ov else 0

    # the base: the old subtask sharing the most key groups with this one (Flink picks the same)
    base, *others = sorted(subs, key=shared_groups, reverse=True)
    backend.close()
    scratch = StagingDir(path, "restore")  # swept by a later open if this process dies mid-way
    new = None
    try:
        src = materialize(folder, base["native"]["files"], scratch.path / "base")
        new = cls.restore_native(src, maxp, kgr, clock, path)
        # what the first backend created for its directory (``state_dir/rocksdb/``) is what a failed
        # restore removes again (:func:`.restore.abort_restore`)
        new.created_dirs = sorted({*getattr(backend, "created_dirs", ()), *new.created_dirs},
                                  key=lambda p: len(p.parts), reverse=True)
        for i, sub in enumerate(others):
            other = materialize(folder, sub["native"]["files"], scratch.path / f"other-{i}")
            new.import_key_groups(other)
    except BaseException:
        if new is not None:  # not handed to the operator yet: close it here, or its LOCK stays held
            new.close()
            op.backend = new  # so that abort_restore removes its directory
        raise
    finally:
        scratch.release()
    # the base's SSTs are still live, byte for byte (dropping foreign key groups writes range
    # tombstones into new files): the next incremental checkpoint references them, uploading nothing
    recorded = read_metadata(folder).get("files", {})
    for name, rel in base["native"]["files"].items():
        e = recorded.get(rel)
        # only shared files: a full checkpoint's own files go when that checkpoint is retired
        if name.endswith(".sst") and e is not None and rel.startswith("../shared/"):
            new.uploaded[name] = {"path": rel, "bytes": e["bytes"], **checksum_of(e)}
    new.operator_name = backend.operator_name
    # states come back as pending declarations, so registration checks them like a canonical restore
    for name in list(new.tables):
        d = descs.get(name)
        if d is None:  # in the files but not in the snapshot's metadata: dropped before, drop it for good
            new.drop_state(name)
            continue
        del new.tables[name]
        new.restored[name] = NativeRestoredInPlace(new, d)
    for name, d in descs.items():
        if name not in new.restored:  # declared but empty when checkpointed
            new.restored[name] = NativeRestoredInPlace(new, d)
    op.backend = new

