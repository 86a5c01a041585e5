"""State handles named in Flink's ``_metadata`` and how to open them safely.

A *stream state handle* says where bytes live:

* ``bytes``    - inline in ``_metadata`` itself (``ByteStreamStateHandle``,
                 small state below ``state.storage.fs.memory-threshold``);
* ``relative`` - a file next to ``_metadata`` (``RelativeFileStateHandle``,
                 used by savepoints, which is why they can be moved);
* ``file``     - an absolute path or URI (``FileStateHandle``, used by
                 checkpoints: ``.../<job-id>/chk-N/<uuid>`` for exclusive state,
                 ``.../<job-id>/shared/<uuid>`` for incremental RocksDB files,
                 ``.../<job-id>/taskowned/...``);
* ``segment``  - a byte range (``offset``, ``size``) of a file that several
                 handles share (``SegmentFileStateHandle`` of file-merging
                 checkpoints, Flink 1.20+: ``shared/job_<id>_op_<op>_<i>_<n>/<uuid>``
                 or ``taskowned/job_<id>_tm_<tm>/<uuid>``); an empty segment is a
                 ``bytes`` handle of no bytes.

Keyed state is wrapped in a *keyed state handle*: a key-group handle (one
stream plus the offset of every key group in it) or an incremental RocksDB
handle (a meta-data stream plus the SST and other files of one RocksDB
instance, shared and private).

Checkpoints are not relocatable in Flink, but copies of them are common (and
our fixtures are copies), so an absolute path is mapped onto the folder the
snapshot was opened from by its tail (``chk-N/...``, ``shared/...``,
``taskowned/...``). What may be opened is exact (resolved, symlinks followed,
then checked; :class:`~explorer.format.untrusted.Roots`): a savepoint's own
folder; a checkpoint's ``chk-N`` folder and its job folder's ``shared/`` and
``taskowned/`` (and another ``chk-M`` of the job that a handle names), never
the rest of the job folder, which may be a home folder. Folders beyond those
(the changelog backend's ``dstl/``, which Flink's
``state.changelog.dstl.dfs.base-path`` puts anywhere) only when the user names
them: ``allow_roots=[...]``; a handle's absolute path inside one is opened
there, else its tail after the folder's name is mapped onto it. Anything else
raises :class:`~explorer.errors.UnsafePathError`, saying which option allows it.
"""

from __future__ import annotations

import mmap
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from ...errors import FlinkFormatError, SnapshotCorruptError, UnsafePathError
from ...format.checkpoint_dir import checkpoint_id
from ...format.untrusted import ALLOW_OPTION, Roots
from ...storage import StoragePath
from ...format.sst.file import SstError, SstFile
from .fullformat import key_group_spans


@dataclass
class StreamHandle:
    kind: str  # "bytes" | "file" | "relative" | "segment"
    name: str  # handle name, absolute path or relative path
    size: int
    data: bytes | None = None
    offset: int = 0  # where a segment starts in its file


@dataclass
class KeyGroupsHandle:
    start: int
    offsets: list[int]
    stream: StreamHandle | None
    savepoint: bool  # KeyGroupsSavepointStateHandle: canonical savepoint format

    @property
    def end(self) -> int:
        return self.start + len(self.offsets) - 1


@dataclass
class IncrementalHandle:
    checkpoint_id: int
    backend_id: str
    start: int
    count: int
    checkpointed_size: int | None
    meta: StreamHandle | None
    shared: list[tuple[str, StreamHandle]] = field(default_factory=list)
    private: list[tuple[str, StreamHandle]] = field(default_factory=list)

    @property
    def end(self) -> int:
        return self.start + self.count - 1


@dataclass
class ChangelogPart:
    """One piece of a changelog: ``changes`` as (key group, bytes) inline in ``_metadata`` (type 9,
    ``InMemoryChangelogStateHandle``), or ``streams``: (offset, stream handle) of change sets in files
    of the changelog storage (types 10/13, ``ChangelogStateHandleStreamImpl``)."""

    start: int
    count: int
    streams: list[tuple[int, StreamHandle]] = field(default_factory=list)
    changes: list[tuple[int, bytes]] = field(default_factory=list)


@dataclass
class ChangelogHandle:
    """Changelog state backend (types 8/14): the materialized state of the wrapped backend (key-group
    or incremental handles, possibly none) plus the changes logged since, applied on top in order."""

    start: int
    count: int
    checkpointed_size: int
    materialized: list[KeyGroupsHandle | IncrementalHandle]
    changelog: list[ChangelogPart]
    materialization_id: int

    @property
    def end(self) -> int:
        return self.start + self.count - 1


@dataclass
class OperatorStreamHandle:
    states: dict[str, tuple[str, list[int]]]  # name -> (distribution mode, offsets)
    stream: StreamHandle | None


_ANCHORS = ("shared", "taskowned")
#: bytes read from the end of a remote SST file to learn its column family (:meth:`HandleResolver.sst_column_family`)
SST_TAIL = 16 << 10


class HandleResolver:
    """Opens stream handles, confined to the snapshot's folder (see module doc)."""

    def __init__(self, metadata_file: Path, allow_roots: Any = None) -> None:
        self.metadata_file = metadata_file
        self.exclusive_dir = metadata_file.parent
        # a retained checkpoint lives in <job-dir>/chk-N/; its shared files in <job-dir>/shared/
        in_job = checkpoint_id(self.exclusive_dir.name) is not None
        self.job_dir = self.exclusive_dir.parent if in_job else self.exclusive_dir
        #: where state files may be read from: the snapshot's own folders, then the user's ``allow_roots``
        self.roots = Roots([self.exclusive_dir] + ([self.job_dir / a for a in _ANCHORS] if in_job else []),
                           allow_roots)
        #: bytes of keyed-state stream files read so far by :meth:`read_key_groups` (what a key-group range costs)
        self.key_group_bytes_read = 0
        #: bytes of SST files read so far by the sparse files of :meth:`sst_for_key_groups`
        self.sst_bytes_read = 0
        self._count_lock = threading.Lock()  # (subtasks are read by two threads side by side)

    def local_path(self, handle: StreamHandle) -> Path:
        if handle.kind == "relative":
            return self._confine(self.exclusive_dir / handle.name, handle.name)
        if handle.kind not in ("file", "segment"):
            raise FlinkFormatError(f"{self.metadata_file}: a {handle.kind} handle names no file ({handle.name!r})")
        parsed = urlparse(handle.name)
        # a snapshot on a remote store names its files by their URLs (s3://bucket/.../shared/x)
        local_scheme = parsed.scheme in ("", "file") or isinstance(self.exclusive_dir, StoragePath)
        raw = unquote(parsed.path) if local_scheme else None
        if raw is None:
            raise UnsafePathError(
                f"{self.metadata_file}: state file {handle.name!r} is on {parsed.scheme!r} storage; "
                "expected a local file inside the snapshot folder"
            )
        parts = Path(raw).parts
        # map the tail onto our folder: .../chk-N/<file>, .../shared/<file>, .../taskowned/<file>
        for i in range(len(parts) - 1, -1, -1):
            p = parts[i]
            n = checkpoint_id(p)
            if n is not None and p == self.exclusive_dir.name:
                return self._confine(self.exclusive_dir.joinpath(*parts[i + 1 :]), handle.name)
            if n is not None and self.job_dir != self.exclusive_dir:  # another chk-M of the job: that folder
                return self._confine(self.job_dir.joinpath(*parts[i:]), handle.name, also=[self.job_dir / p])
            if p in _ANCHORS:
                return self._confine(self.job_dir.joinpath(*parts[i:]), handle.name)
        allowed = self._in_allowed_root(raw, parts)
        if allowed is not None:
            return self._confine(allowed, handle.name)
        if len(parts) >= 1 and Path(raw).parent.name == self.exclusive_dir.name:
            return self._confine(self.exclusive_dir / parts[-1], handle.name)
        raise UnsafePathError(
            f"{self.metadata_file}: state file {handle.name!r} is outside the snapshot folder "
            f"{self.job_dir}; expected a path under chk-N/, shared/ or taskowned/. A folder kept elsewhere "
            f"(the changelog's dstl/, Flink's state.changelog.dstl.dfs.base-path) is read when named: "
            f"open with {ALLOW_OPTION}=['<the folder holding {Path(raw).parent.name or raw}/>']" + (
                " (a URL of the snapshot's store)" if isinstance(self.exclusive_dir, StoragePath) else "")
        )

    def _in_allowed_root(self, raw: str, parts: tuple[str, ...]) -> Path | None:
        """Where a handle's absolute path lies in a folder the user allowed: the path itself when inside one,
        else its tail after the folder's name mapped onto it (the first such file there, or the first
        mapping when none is there yet: then it is missing)."""
        extra = self.roots.extra
        if not extra:
            return None
        if not isinstance(self.exclusive_dir, StoragePath) and Path(raw).is_absolute() \
                and any(r in Path(raw).parents for r in extra):
            return Path(raw)
        found = [r.joinpath(*parts[i + 1:]) for r in extra for i, p in enumerate(parts) if p == r.name
                 and i + 1 < len(parts)]
        return next((f for f in found if f.exists()), found[0] if found else None)

    def _confine(self, path: Path, original: str, also: list[Path] | tuple = ()) -> Path:
        return self.roots.confine(path, self.metadata_file, original, also)

    def read(self, handle: StreamHandle, limit: int | None = None) -> bytes:
        """All bytes of ``handle``, or its first ``limit`` bytes (a header)."""
        if handle.kind == "bytes":
            return (handle.data or b"")[:limit]
        path = self.local_path(handle)
        if handle.kind == "segment":
            return self._read_segment(handle, path, limit)
        try:
            if limit is not None:
                with path.open("rb") as f:
                    data = f.read(limit)
                if len(data) < limit:
                    raise SnapshotCorruptError(f"{path}: found {len(data)} bytes, expected at least {limit} "
                                               "(file truncated?)")
                return data
            data = path.read_bytes()
        except FileNotFoundError as exc:
            raise SnapshotCorruptError(
                f"{self.metadata_file}: state file {path} named in the metadata is missing "
                f"(expected {handle.size} bytes)"
            ) from exc
        if handle.size >= 0 and len(data) < handle.size:
            raise SnapshotCorruptError(
                f"{path}: found {len(data)} bytes, the metadata expects {handle.size} (file truncated?)"
            )
        return data

    def read_key_groups(self, handle: StreamHandle, offsets: list[int], first_kg: int, header_end: int,
                        key_groups: frozenset[int] | None, head: int | None = None
                        ) -> tuple[bytes, list[tuple[int, int, int]]]:
        """The bytes of a key-groups stream and its spans ``(key group, start, end)`` indexing them.

        ``key_groups`` None: the whole stream (:meth:`read`) and the span of every key group with bytes.
        Else only the bytes of the spans of ``key_groups`` are read, by range (``seek``), joined in file
        order into one buffer that the returned spans index: reading a key-group range of a subtask
        costs that range's bytes, not the stream's, whether the file is local, cached or on a remote
        store (an empty ``key_groups``: no span, no read). A remote file of which more than half is
        wanted is fetched into the local cache first and read from there. ``head``: only the first ``head``
        bytes of each span (a layout trial's look at key-group ids)."""
        if key_groups is None or handle.kind == "bytes":
            data = self.read(handle)
            if handle.kind != "bytes":  # (inline in _metadata: already in memory)
                self._count(len(data))
            spans = key_group_spans(offsets, first_kg, header_end, len(data))
            return data, spans if key_groups is None else [s for s in spans if s[0] in key_groups]
        path = self.local_path(handle)
        size = handle.size
        if size < 0 or handle.kind != "segment":  # (a file's size: the metadata's, checked against the file)
            try:
                found = path.stat().st_size
            except FileNotFoundError as exc:
                raise SnapshotCorruptError(
                    f"{self.metadata_file}: state file {path} named in the metadata is missing "
                    f"(expected {handle.size} bytes)") from exc
            if handle.size >= 0 and found < handle.size:
                raise SnapshotCorruptError(
                    f"{path}: found {found} bytes, the metadata expects {handle.size} (file truncated?)")
            size = found
        spans = [s for s in key_group_spans(offsets, first_kg, header_end, size) if s[0] in key_groups]
        if head is not None:
            spans = [(kg, b, min(e, b + head)) for kg, b, e in spans]
        if not spans:
            return b"", []
        runs: list[list[int]] = []  # adjacent spans read in one go
        for _, b, e in spans:
            if runs and b == runs[-1][1]:
                runs[-1][1] = e
            else:
                runs.append([b, e])
        if isinstance(path, StoragePath) and path.store.cached(path.key) is None \
                and sum(e - b for b, e in runs) > size // 2:
            path.local()  # most of it: fetch it whole into the cache (on disk), then read the spans from there
        base = handle.offset if handle.kind == "segment" else 0
        buf = bytearray(sum(e - b for b, e in runs))
        moved: dict[int, int] = {}  # a run's start in the file -> in buf
        at = 0
        with path.open("rb") as f:
            for b, e in runs:
                _read_exactly(f, path, base + b, memoryview(buf)[at : at + e - b], base + size)
                moved[b] = at
                at += e - b
        out, run = [], 0
        for kg, b, e in spans:
            while runs[run][1] < e:
                run += 1
            shift = moved[runs[run][0]] - runs[run][0]
            out.append((kg, b + shift, e + shift))
        self._count(len(buf))
        return bytes(buf), out

    def _count(self, n: int, sst: bool = False) -> None:
        with self._count_lock:
            if sst:
                self.sst_bytes_read += n
            else:
                self.key_group_bytes_read += n

    def sst_column_family(self, handle: StreamHandle) -> str | None:
        """The column family (Flink: the state) of an SST file on a remote store not in the local cache,
        from its last :data:`SST_TAIL` bytes, fetched by range (RocksDB writes the properties block, the
        metaindex and the footer last); None when that does not tell (a local, cached or inline file, a
        segment, a file under four tails long, a properties block further in): then it is read whole."""
        if handle.kind not in ("file", "relative"):
            return None
        path = self.local_path(handle)
        if not isinstance(path, StoragePath) or path.store.cached(path.key) is not None:
            return None
        size = path.stat().st_size
        n = SST_TAIL
        if size <= 4 * n:
            return None
        with path.open("rb") as f:
            f.seek(size - n)
            data = f.read(n)
        buf = bytearray(size)  # zeros before the tail: a block there fails its checksum, never decodes
        buf[size - n:] = data
        try:
            return SstFile(bytes(buf), str(path)).column_family or "default"
        except (SstError, ValueError, IndexError):
            return None

    def sst_for_key_groups(self, handle: StreamHandle, name: str) -> SstFile:
        """An SST file opened to read only some key groups (the caller sets them, ``only_key_groups``): its
        bytes a sparse buffer of the file's size, of which only what is read is read from the file, local or
        remote (through the cache's byte ranges): the footer and metaindex first, then the properties and
        the index, then only the data blocks the index says may hold a wanted key group."""
        if handle.kind == "bytes":
            return SstFile(handle.data or b"", name)
        path = self.local_path(handle)
        base = handle.offset if handle.kind == "segment" else 0
        size = handle.size
        if size < 0 or handle.kind != "segment":
            try:
                found = path.stat().st_size
            except FileNotFoundError as exc:
                raise SnapshotCorruptError(f"{self.metadata_file}: state file {path} named in the metadata is "
                                           f"missing (expected {handle.size} bytes)") from exc
            if handle.size >= 0 and found < handle.size:
                raise SnapshotCorruptError(
                    f"{path}: found {found} bytes, the metadata expects {handle.size} (file truncated?)")
            size = found
        sparse = _SparseFile(path, base, size, self)
        if isinstance(path, StoragePath) and path.store.cached(path.key) is None:
            # one request for the footer, metaindex, properties and (mostly) the index, RocksDB's last blocks;
            # a local file reads each where SstFile asks (footer first)
            sparse.ensure([(max(0, size - min(size, SST_TAIL)), min(size, SST_TAIL))])
        return SstFile(sparse.data, name, sparse.ensure)

    def _read_segment(self, handle: StreamHandle, path: Path, limit: int | None) -> bytes:
        """The bytes of one segment of a shared file (``limit``: only its first bytes)."""
        want = handle.size if limit is None else min(limit, handle.size)
        try:
            with path.open("rb") as f:
                f.seek(handle.offset)
                data = f.read(want)
        except FileNotFoundError as exc:
            raise SnapshotCorruptError(
                f"{self.metadata_file}: state file {path} named in the metadata is missing "
                f"(expected a segment of {handle.size} bytes at offset {handle.offset})"
            ) from exc
        if len(data) < want:
            raise SnapshotCorruptError(
                f"{path}: found {handle.offset + len(data)} bytes, the metadata expects a segment of "
                f"{handle.size} bytes at offset {handle.offset} (file truncated?)"
            )
        return data


def _read_exactly(f, path, offset: int, view: memoryview, expected_size: int) -> None:
    """Fill ``view`` from ``f`` at ``offset``; a file that ends first is truncated (it should hold
    ``expected_size`` bytes)."""
    f.seek(offset)
    got = 0
    while got < len(view):
        n = f.readinto(view[got:])
        if not n:
            raise SnapshotCorruptError(f"{path}: found {offset + got} bytes, the metadata expects {expected_size} "
                                       "(file truncated?)")
        got += n


class _SparseFile:
    """A file's bytes as an anonymous memory map of its size (pages untouched until written: zeros cost
    nothing), filled range by range from the file as they are asked for (:meth:`ensure`)."""

    def __init__(self, path: Path, base: int, size: int, resolver: HandleResolver) -> None:
        self.path, self.base, self.size, self.resolver = path, base, size, resolver
        self.data = mmap.mmap(-1, max(size, 1))
        if size < len(self.data):  # (an empty file: SstFile says it is too short)
            self.data = memoryview(self.data)[:size]
        self._filled: list[tuple[int, int]] = []

    def ensure(self, ranges: list[tuple[int, int]]) -> None:
        """Read the parts of ``ranges`` (``(offset, length)`` in the file) not read yet: adjacent ones in one
        read, each read where the file is (a ranged read of a remote file, served by the cache when held)."""
        need: list[list[int]] = []
        for off, n in sorted(ranges):
            a, b = max(0, off), min(self.size, off + n)
            for lo, hi in self._filled:
                if lo <= a < hi:
                    a = hi
                if lo < b <= hi:
                    b = lo
            if a >= b:
                continue
            if need and a <= need[-1][1]:
                need[-1][1] = max(need[-1][1], b)
            else:
                need.append([a, b])
        if not need:
            return
        with self.path.open("rb") as f:
            for a, b in need:
                _read_exactly(f, self.path, self.base + a, memoryview(self.data)[a:b], self.base + self.size)
                self._filled.append((a, b))
                self.resolver._count(b - a, sst=True)
        self._filled.sort()
