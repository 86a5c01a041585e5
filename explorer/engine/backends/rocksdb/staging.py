"""Staging folders next to a RocksDB database: owned scratch space that a dead owner cannot leak.

Bulk loads, full snapshots, incremental checkpoints and native restores
work in scratch folders beside the database directory ``<dir>/<db>``, named
``<dir>/.<db>-<kind>-<12 hex digits>`` (:data:`STAGING_KINDS`; a
:class:`StagingDir`). They hold hard links to SST files, so a process
killed while one exists would otherwise leak that disk for good. Each one
holds a lock file, ``.owner.lock``, that its owner keeps open under an
exclusive ``flock`` for the folder's whole life (the file also names the
owner's host, pid and start time, for people reading it). The kernel drops
the lock when the owner closes it or dies, however it dies, and ``flock``
locks of two open files conflict also within one process, so:

* when a backend opens its directory, :func:`sweep_staging` removes every
  folder of that exact name pattern whose lock it can take without waiting
  (its owner is gone), and leaves the others alone: a full snapshot's
  asynchronous phase, in this process or another, may still be reading
  its pinned view after its backend closed. Nothing else is touched (other
  names, files, symlinks). What is removed is logged (logger
  ``explorer.engine.backends.rocksdb``, level INFO).
* a folder of that pattern with no lock file at all (left by an older
  version, or caught in the instant between its creation and its lock) is
  claimed by creating the lock file exclusively (``O_EXCL``); an owner that
  loses that race, or whose lock file was removed before it could lock it,
  takes a new name (:class:`StagingDir` retries), so a sweep never removes
  a folder someone holds.

``flock`` is reliable on local file systems; on NFS it is emulated with
byte-range locks, which also survive only as long as their owner.

The database folder itself is also managed here: a fresh backend wipes a
previous RocksDB instance at its path, and never anything else
(:func:`wipe_rocksdb_dir`), and a failed restore removes the folders its
backends created (:func:`remove_created_dirs`).
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import re
import shutil
import socket
import uuid
import weakref
from pathlib import Path
from typing import TYPE_CHECKING

from ....errors import RestoreError

if TYPE_CHECKING:
    from .backend import RocksDBStateBackend

__all__ = ["STAGING_KINDS", "StagingDir", "missing_dirs", "remove_created_dirs", "sweep_staging", "wipe_rocksdb_dir"]

#: the package's logger (``explorer.engine.backends.rocksdb``), as documented above
log = logging.getLogger(__package__)

#: what a staging folder next to a database is for (see the module docstring):
#: a bulk load's SST files, a full snapshot's pinned view, an incremental checkpoint's hard-linked
#: RocksDB checkpoint, a native restore's files before they are moved into place
STAGING_KINDS = ("ingest", "full", "chk", "restore")
_LOCK_NAME = ".owner.lock"
_STAGING_TRIES = 100


def _staging_pattern(db_path: Path) -> re.Pattern[str]:
    kinds = "|".join(STAGING_KINDS)
    return re.compile(rf"\.{re.escape(db_path.name)}-(?:{kinds})-[0-9a-f]{{12}}")


def _process_start(pid: int) -> str | None:
    """The start time of ``pid`` in clock ticks since boot (``/proc/<pid>/stat`` field 22), if known."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat[stat.rindex(")") + 2:].split()[19]
    except (OSError, ValueError, IndexError):
        return None


def _remove_owned(path: str, fd: int) -> None:
    """Remove an owned staging folder, then drop its lock (the finalizer of a :class:`StagingDir`)."""
    try:
        shutil.rmtree(path, ignore_errors=True)
    finally:
        os.close(fd)


class StagingDir:
    """A scratch folder ``.<db>-<kind>-<hex>`` next to the database at ``db_path``, owned while alive.

    Holds its lock file under an exclusive ``flock`` until :meth:`release` (which
    removes the folder) or until this object is garbage-collected (same); a
    process that dies leaves a folder :func:`sweep_staging` can prove abandoned.
    """

    def __init__(self, db_path: str | os.PathLike, kind: str) -> None:
        if kind not in STAGING_KINDS:
            raise ValueError(f"unknown staging kind {kind!r}; expected one of {STAGING_KINDS}")
        db_path = Path(db_path)
        db_path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(_STAGING_TRIES):
            path = db_path.parent / f".{db_path.name}-{kind}-{uuid.uuid4().hex[:12]}"
            try:
                path.mkdir()
            except FileExistsError:
                continue
            try:
                fd = os.open(path / _LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            except (FileExistsError, FileNotFoundError):
                continue  # a sweep took the new, still unlocked folder for a leftover: use another name
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)  # waits only while a sweep that got here first removes it
                if os.fstat(fd).st_nlink == 0:  # it did: the folder is gone
                    os.close(fd)
                    continue
                owner = {"host": socket.gethostname(), "pid": os.getpid(), "start": _process_start(os.getpid())}
                os.write(fd, json.dumps(owner).encode())
            except BaseException:
                os.close(fd)
                raise
            self.path = path
            self._finalizer = weakref.finalize(self, _remove_owned, str(path), fd)
            return
        raise OSError(f"{db_path.parent}: could not create a staging folder for {db_path.name} "
                      f"in {_STAGING_TRIES} tries (something keeps removing them)")

    @property
    def alive(self) -> bool:
        return self._finalizer.alive

    def release(self) -> None:
        """Remove the folder and drop the lock (idempotent)."""
        self._finalizer()


def sweep_staging(db_path: str | os.PathLike) -> list[Path]:
    """Remove the staging folders of the database at ``db_path`` that no live owner holds.

    Only directories named ``.<db>-<kind>-<12 hex>`` next to ``db_path`` are
    considered, and one is removed only while this call holds its lock (so its
    owner, in this or any other process, is gone). Returns what was removed.
    """
    db_path = Path(db_path)
    parent = db_path.parent
    pattern = _staging_pattern(db_path)
    try:
        entries = [e for e in os.scandir(parent) if pattern.fullmatch(e.name)]
    except FileNotFoundError:
        return []
    removed = []
    for entry in entries:
        if entry.is_symlink() or not entry.is_dir(follow_symlinks=False):
            continue  # not a folder we make
        folder = Path(entry.path)
        lock = folder / _LOCK_NAME
        try:
            try:
                fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
                owner = "no owner recorded"
            except FileExistsError:
                fd = os.open(lock, os.O_RDWR | os.O_NOFOLLOW)
                owner = None
        except OSError:
            continue  # removed meanwhile, or not a lock file we can open: leave it
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    continue  # a live owner holds it
                raise
            if os.fstat(fd).st_nlink == 0:
                continue  # another sweep removed it while we waited
            if owner is None:
                owner = os.pread(fd, 4096, 0).decode("utf-8", "replace") or "owner not recorded"
            size = 0
            for p in folder.rglob("*"):
                try:
                    if p.is_file() and not p.is_symlink():
                        size += p.stat().st_size
                except OSError:
                    pass
            shutil.rmtree(folder, ignore_errors=True)
            if folder.exists():
                log.warning("could not fully remove abandoned staging folder %s", folder)
            else:
                removed.append(folder)
                log.info("removed abandoned staging folder %s (%d bytes; its owner %s is gone)", folder, size, owner)
        finally:
            os.close(fd)
    return removed


def missing_dirs(path: Path) -> list[Path]:
    """``path`` and those of its parents that do not exist yet, deepest first."""
    out = []
    p = Path(path)
    while not p.exists() and p != p.parent:
        out.append(p)
        p = p.parent
    return out


def remove_created_dirs(backends: list["RocksDBStateBackend"]) -> None:
    """After a failed restore: close each backend, remove its database, then remove the folders
    the backends created for them (``state_dir/rocksdb/`` on a first run) where they are empty
    again, deepest first, so the state directory is left as the restore found it."""
    created: set[Path] = set()
    for backend in backends:
        backend.close()
        wipe_rocksdb_dir(backend.path)
        created.add(backend.path)  # its database is gone: an empty folder of that name is no use either
        created.update(getattr(backend, "created_dirs", ()))
    for d in sorted(created, key=lambda p: len(p.parts), reverse=True):
        try:
            d.rmdir()
        except OSError:
            pass  # not empty (the user's files, another job's databases) or already gone


def wipe_rocksdb_dir(path: Path) -> None:
    """Remove a previous RocksDB instance at ``path``; refuse to touch anything else."""
    if not path.exists():
        return
    entries = list(path.iterdir())
    if not entries:
        return
    if not (path / "CURRENT").is_file():
        raise RestoreError(f"{path} exists and is not a RocksDB directory; refusing to overwrite it")
    shutil.rmtree(path)
