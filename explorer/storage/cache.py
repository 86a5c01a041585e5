"""The local cache of files fetched from remote stores.

One entry per remote file: ``objects/<k[:2]>/<k>`` (the bytes) and ``<k>.json`` (the URL,
size and modification time the store reported when it was fetched; the ETag when the store
gives one), ``k`` the SHA-256 of the store's identity and the URL. An entry is used only
while the store still reports the same size and modification time (and ETag), and its
bytes still have that size: a changed remote object is fetched again. The format's own
checksums (the engine's SHA-256 per file, RocksDB's block checksums) are then checked by
the readers on the cached copy as on any local file.

Bounded: after each new entry, the least recently used entries go (a use sets the entry's
modification time) until the cache holds at most ``max_bytes``; an entry being written or
evicted by another process is skipped. Safe under concurrent use: an entry is written to a
temporary name and renamed, under an exclusive ``flock`` on its lock file, so two processes
(or threads) asking for the same file fetch it once; a reader holding a cached file open
keeps its bytes when the entry is evicted (POSIX unlink).

Byte ranges (:meth:`FileCache.read_range`): a reader that wants part of a file (Flink key-group
spans, Parquet row groups, an SST's tail) reads it by range, and the ranges it fetched are kept
so that asking again fetches nothing. One range entry per remote object: ``<k>.part``, a sparse
file of the object's size holding the fetched bytes at their own offsets, ``<k>.part.json`` (URL,
size, modification time, ETag: validated as a whole-file entry is, a changed object drops it)
and ``<k>.pieces``, an append-only log of the pieces held, one ``start end crc32`` line each,
pieces never overlapping. A piece's CRC-32 is checked the first time this cache object reads it
(a torn write, a hole or damaged bytes: that piece is dropped and fetched again). Only the gaps a
read finds are fetched, one request each, so a read costs exactly the bytes not yet held. When the
pieces cover the whole object the entry becomes a whole-file entry (renamed, no copy). Range entries
count against the same bound by the bytes they hold on disk and are evicted with the same LRU
rule (a whole object's ranges at a time); a single read larger than half the bound is not kept.
Why ranges and not whole files for these reads: the reads that go by range are the ones whose
files are larger than what the question needs (a key-group range of a 1 GB Parquet file, a
subtask's stream of a 2 GB savepoint); fetching the whole file would cost the bytes the range
read saves, and the next question usually asks the same ranges (the same operator, budget and
plan). Why a sparse file and not a file per piece: one open file per object, pieces merged for
free, ranges that cover the object become the whole-file entry by a rename.

Location: ``FileCache(root=...)``, else ``$STATE_EXPLORER_CACHE_DIR``, else
``$XDG_CACHE_HOME/state-explorer`` (``~/.cache/state-explorer``). Size: ``max_bytes=``, else
``$STATE_EXPLORER_CACHE_MAX_BYTES`` (bytes, or ``"20GB"``, ``"500MiB"``), else 10 GiB.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import stat
import tempfile
import threading
import time
import zlib
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator

from ..errors import StorageError
from . import sizes

DEFAULT_MAX_BYTES = 10 << 30


def parse_size(text: str | int) -> int:
    """Bytes from ``123``, ``"123"``, ``"20GB"``, ``"500 MiB"`` (:func:`explorer.storage.sizes.parse_size`: GB means
    GiB)."""
    return sizes.parse_size(text, what="cache size", error=StorageError)


#: the modes of everything the cache writes, whatever the umask: the cache holds the bytes of snapshots and the
#: names of buckets and keys (its sidecar JSON), which are nobody else's to read
FILE_MODE = 0o600
DIR_MODE = 0o700


def private_dir(path: Path) -> Path:
    """Make the folder ``path`` (and its missing parents) 0700 whatever the umask; an existing ``path`` is set
    to 0700 too (the cache's own folders only: never called on a folder the user named but the cache root's)."""
    missing = []
    p = path
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        with contextlib.suppress(FileExistsError):
            d.mkdir(mode=DIR_MODE)
        os.chmod(d, DIR_MODE)
    if path not in missing and path.is_dir() and stat.S_IMODE(path.stat().st_mode) != DIR_MODE:
        os.chmod(path, DIR_MODE)
    return path


def open_private(path: Path, flags: int = os.O_WRONLY | os.O_CREAT | os.O_TRUNC) -> int:
    """``os.open(path, flags)`` for a file of the cache, made (or set to) 0600 whatever the umask; returns the fd."""
    fd = os.open(path, flags | os.O_NOFOLLOW, FILE_MODE)
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) != FILE_MODE:
            os.fchmod(fd, FILE_MODE)
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to the cache file ``path`` (0600)."""
    with os.fdopen(open_private(path), "w") as f:
        f.write(text)


def default_root() -> Path:
    if os.environ.get("STATE_EXPLORER_CACHE_DIR"):
        return Path(os.environ["STATE_EXPLORER_CACHE_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "state-explorer"


class FileCache:
    """Fetched files on local disk, validated and bounded (see module doc)."""

    def __init__(self, root: str | Path | None = None, max_bytes: int | str | None = None) -> None:
        self.root = Path(root).expanduser() if root is not None else default_root()
        env = os.environ.get("STATE_EXPLORER_CACHE_MAX_BYTES")
        self.max_bytes = parse_size(max_bytes if max_bytes is not None else (env or DEFAULT_MAX_BYTES))
        self.objects = self.root / "objects"
        try:
            created = not self.root.exists()
            private_dir(self.objects)
            if created:
                os.chmod(self.root, DIR_MODE)
        except OSError as exc:
            raise StorageError(f"{self.root}: cannot create the cache folder ({exc}); expected a writable folder "
                               "(set STATE_EXPLORER_CACHE_DIR or cache_dir=)") from exc
        self._evict_lock = threading.Lock()
        #: per range entry: (log inode, bytes of the log parsed, pieces)
        self._pieces: dict[str, tuple[int, int, list[tuple[int, int, int]]]] = {}
        self._pieces_lock = threading.Lock()
        #: pieces whose CRC-32 this cache object has checked: (key, start, end, crc)
        self._verified: set[tuple[str, int, int, int]] = set()

    def __repr__(self) -> str:
        return f"FileCache({str(self.root)!r}, max_bytes={self.max_bytes})"

    # -- entries ----------------------------------------------------------------------------
    @staticmethod
    def key(store_id: str, url: str) -> str:
        return hashlib.sha256(f"{store_id}\0{url}".encode()).hexdigest()

    def _paths(self, key: str) -> tuple[Path, Path, Path]:
        d = self.objects / key[:2]
        return d / key, d / f"{key}.json", d / f"{key}.lock"

    def _range_paths(self, key: str) -> tuple[Path, Path, Path]:
        d = self.objects / key[:2]
        return d / f"{key}.part", d / f"{key}.part.json", d / f"{key}.pieces"

    def lookup(self, key: str, size: int, mtime_ns: int | None, etag: str | None = None) -> Path | None:
        """The cached file of ``key`` when it still matches the store's ``size``, ``mtime_ns`` (and ``etag``)."""
        data, side, _ = self._paths(key)
        try:
            meta = json.loads(side.read_text())
            st = data.stat()
        except (OSError, ValueError):
            return None
        if st.st_size != size or meta.get("size") != size or meta.get("mtime_ns") != mtime_ns:
            return None
        if etag is not None and meta.get("etag") not in (None, etag):
            return None
        with contextlib.suppress(OSError):
            os.utime(data)  # last use, for LRU eviction
        return data

    @contextlib.contextmanager
    def _locked(self, key: str, blocking: bool = True) -> Iterator[bool]:
        _, _, lock = self._paths(key)
        private_dir(lock.parent)
        fd = open_private(lock, os.O_RDWR | os.O_CREAT)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(fd)  # releases the lock

    def store(self, key: str, url: str, size: int, mtime_ns: int | None, write: Callable[[BinaryIO], None],
              etag: str | None = None) -> tuple[Path, bool]:
        """The cached file of ``key``, written by ``write(file)`` unless a valid entry exists (another
        process may have fetched it while we waited for the lock). Returns ``(path, fetched)``."""
        data, side, _ = self._paths(key)
        with self._locked(key):
            hit = self.lookup(key, size, mtime_ns, etag)
            if hit is not None:
                return hit, False
            fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}-", dir=data.parent)
            try:
                with os.fdopen(fd, "wb") as f:
                    write(f)
                got = os.path.getsize(tmp)
                if got != size:
                    raise StorageError(f"{url}: fetched {got} bytes, the store reported {size} (changed while "
                                       "fetched? try again)")
                os.replace(tmp, data)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
            write_private(side, json.dumps({"url": url, "size": size, "mtime_ns": mtime_ns, "etag": etag,
                                            "fetched_at": time.time()}))
            self._drop_ranges(key)  # (the whole file holds every range)
        self.evict(keep=key)
        return data, True

    # -- bounds -----------------------------------------------------------------------------
    def entries(self) -> list[tuple[float, int, str]]:
        """``(last use, bytes, name)`` of every entry: ``name`` is the key of a whole-file entry,
        ``<key>.part`` of a range entry (its bytes: what its sparse file holds on disk)."""
        out = []
        for sub in self.objects.iterdir() if self.objects.is_dir() else ():
            for f in sub.iterdir():
                if f.name.startswith("."):
                    continue
                with contextlib.suppress(OSError):
                    if f.suffix == ".part":
                        st = f.stat()
                        out.append((st.st_mtime, min(st.st_size, st.st_blocks * 512), f.name))
                    elif not f.suffix:
                        st = f.stat()
                        out.append((st.st_mtime, st.st_size, f.name))
        return out

    def size(self) -> int:
        """Bytes the cache holds."""
        return sum(b for _, b, _ in self.entries())

    def evict(self, keep: str | None = None) -> int:
        """Drop least recently used entries until at most ``max_bytes`` remain; returns bytes freed."""
        with self._evict_lock:
            entries = sorted(self.entries())
            total = sum(b for _, b, _ in entries)
            freed = 0
            for _, nbytes, name in entries:
                if total <= self.max_bytes:
                    break
                key = name.removesuffix(".part")
                if key == keep:
                    continue
                with self._locked(key, blocking=False) as got:
                    if not got:
                        continue  # being written or read into the cache by someone else
                    if name.endswith(".part"):
                        self._drop_ranges(key)
                    else:
                        data, side, _ = self._paths(key)
                        for p in (side, data):
                            with contextlib.suppress(FileNotFoundError):
                                p.unlink()
                total -= nbytes
                freed += nbytes
            return freed

    # -- byte ranges ------------------------------------------------------------------------
    def _drop_ranges(self, key: str) -> None:
        for p in self._range_paths(key):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
        with self._pieces_lock:
            self._pieces.pop(key, None)

    def _range_entry(self, key: str, url: str, size: int, mtime_ns: int | None, etag: str | None,
                     create: bool) -> bool:
        """Whether the range entry of ``key`` is there and matches the object (dropping it when it does
        not); ``create``: make an empty one if it is not. Called under the entry's lock."""
        part, side, log = self._range_paths(key)
        try:
            meta = json.loads(side.read_text())
            ok = (meta.get("size") == size and meta.get("mtime_ns") == mtime_ns
                  and (etag is None or meta.get("etag") in (None, etag)) and part.stat().st_size == size)
        except (OSError, ValueError):
            ok = False
        if ok:
            return True
        self._drop_ranges(key)
        if not create:
            return False
        private_dir(part.parent)
        with os.fdopen(open_private(part), "wb") as f:
            f.truncate(size)  # sparse: holds nothing until pieces are written
        os.close(open_private(log, os.O_WRONLY | os.O_CREAT))
        write_private(side, json.dumps({"url": url, "size": size, "mtime_ns": mtime_ns, "etag": etag,
                                        "created_at": time.time()}))
        return True

    def _read_pieces(self, key: str) -> list[tuple[int, int, int]]:
        """The pieces ``(start, end, crc32)`` of the range entry of ``key``, sorted (the log read from
        where this cache object last stopped; a line that does not parse is skipped)."""
        _, _, log = self._range_paths(key)
        try:
            with open(log, "rb") as f:
                ino = os.fstat(f.fileno()).st_ino
                with self._pieces_lock:
                    known = self._pieces.get(key)
                if known is None or known[0] != ino:
                    known = (ino, 0, [])
                f.seek(known[1])
                tail = f.read()
        except OSError:
            return []
        end = tail.rfind(b"\n") + 1  # (a line being appended: read next time)
        pieces = list(known[2])
        for line in tail[:end].splitlines():
            try:
                a, b, c = (int(x) for x in line.split())
            except ValueError:
                continue
            if 0 <= a < b:
                pieces.append((a, b, c))
        pieces.sort()
        with self._pieces_lock:
            self._pieces[key] = (known[0], known[1] + end, pieces)
        return pieces

    def read_range(self, key: str, url: str, size: int, mtime_ns: int | None, offset: int, n: int,
                   fetch: Callable[[int, int], bytes], etag: str | None = None) -> tuple[bytes, int]:
        """``n`` bytes of the object at ``offset`` (fewer at its end): the pieces held read from the range
        entry, the gaps fetched with ``fetch(start, length)`` (one call per gap) and kept. Returns
        ``(bytes, bytes fetched)``."""
        n = max(0, min(n, size - offset))
        out = bytearray(n)
        got, fetched = self.read_range_into(key, url, size, mtime_ns, offset, memoryview(out), fetch, etag)
        return bytes(out[:got]) if got < n else bytes(out), fetched

    def read_range_into(self, key: str, url: str, size: int, mtime_ns: int | None, offset: int, out: memoryview,
                        fetch: Callable[[int, int], bytes], etag: str | None = None) -> tuple[int, int]:
        """:meth:`read_range` into the caller's buffer ``out`` (as many bytes as it holds, fewer at the object's
        end): no copy of the bytes but the one into ``out``. Returns ``(bytes read, bytes fetched)``."""
        n = max(0, min(len(out), size - offset))
        if n == 0:
            return 0, 0
        if n > self.max_bytes // 2:  # more than the cache should hold at once: read through
            data = fetch(offset, n)
            out[: len(data)] = data
            return len(data), len(data)
        end = offset + n
        with self._locked(key):
            self._range_entry(key, url, size, mtime_ns, etag, create=True)
        part, _, _ = self._range_paths(key)
        bad: list[tuple[int, int, int]] = []
        have = self._serve(key, part, offset, end, out, bad)
        gaps, at = [], offset
        for a, b in have:
            if a > at:
                gaps.append((at, a))
            at = max(at, b)
        if at < end:
            gaps.append((at, end))
        fetched = 0
        for a, b in gaps:
            data = fetch(a, b - a)
            if len(data) != b - a:
                raise StorageError(f"{url}: fetched {len(data)} bytes at offset {a}, expected {b - a} (the "
                                   f"object is {size} bytes; changed while read? try again)")
            out[a - offset:b - offset] = data
            fetched += len(data)
            del data
        if gaps:
            self._keep(key, url, size, mtime_ns, etag, [(a, out[a - offset:b - offset]) for a, b in gaps], bad)
        return n, fetched

    def _serve(self, key: str, part: Path, start: int, end: int, out: "bytearray | memoryview",
               bad: list[tuple[int, int, int]]) -> list[tuple[int, int]]:
        """Copy the held pieces overlapping ``[start, end)`` into ``out``; the intervals served. A piece
        read the first time is checked against its CRC-32 (whole: the parts outside the read too); one
        that fails goes to ``bad``."""
        pieces = [p for p in self._read_pieces(key) if p[1] > start and p[0] < end]
        if not pieces:
            return []
        served = []
        try:
            fd = os.open(part, os.O_RDONLY)
        except OSError:
            return []
        try:
            for a, b, crc in pieces:
                lo, hi = max(a, start), min(b, end)
                if (key, a, b, crc) in self._verified:
                    data = os.pread(fd, hi - lo, lo)
                    if len(data) != hi - lo:
                        continue
                    out[lo - start:hi - start] = data
                else:
                    c, pos, ok = 0, a, True
                    while pos < b:
                        chunk = os.pread(fd, min(b - pos, 8 << 20), pos)
                        if not chunk:
                            ok = False
                            break
                        c = zlib.crc32(chunk, c)
                        cl, ch = max(pos, lo), min(pos + len(chunk), hi)
                        if cl < ch:
                            out[cl - start:ch - start] = chunk[cl - pos:ch - pos]
                        pos += len(chunk)
                    if not ok or c != crc:
                        bad.append((a, b, crc))  # damaged or never written: dropped, fetched again
                        continue
                    self._verified.add((key, a, b, crc))
                served.append((lo, hi))
        finally:
            os.close(fd)
        with contextlib.suppress(OSError):
            os.utime(part)  # last use, for LRU eviction
        return served

    def _keep(self, key: str, url: str, size: int, mtime_ns: int | None, etag: str | None,
              got: "list[tuple[int, bytes | memoryview]]", bad: list[tuple[int, int, int]]) -> None:
        """Write fetched pieces into the range entry (only what no one else wrote meanwhile; pieces that
        failed their check are dropped first), then make a fully covered entry the whole-file entry and
        keep the bound."""
        part, _, log = self._range_paths(key)
        with self._locked(key):
            if not self._range_entry(key, url, size, mtime_ns, etag, create=True):
                return
            held = self._read_pieces(key)
            if bad:
                held = [p for p in held if p not in bad]
                fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}-", dir=log.parent)
                with os.fdopen(fd, "w") as f:
                    f.write("".join(f"{a} {b} {c}\n" for a, b, c in held))
                os.replace(tmp, log)  # a new log (new inode): every reader parses it afresh
            lines = []
            with open(part, "r+b") as f:
                for a, data in got:
                    for lo, hi in _uncovered(held, a, a + len(data)):
                        chunk = memoryview(data)[lo - a:hi - a]
                        os.pwrite(f.fileno(), chunk, lo)
                        crc = zlib.crc32(chunk)
                        lines.append(f"{lo} {hi} {crc}\n")
                        self._verified.add((key, lo, hi, crc))
            if lines:
                fd = os.open(log, os.O_WRONLY | os.O_APPEND)
                try:
                    os.write(fd, "".join(lines).encode())
                finally:
                    os.close(fd)
            pieces = self._read_pieces(key)
            if sum(b - a for a, b, _ in pieces) == size and not _uncovered(pieces, 0, size):
                self._promote(key, url, size, mtime_ns, etag, pieces)
        self.evict(keep=key)

    def _promote(self, key: str, url: str, size: int, mtime_ns: int | None, etag: str | None,
                 pieces: list[tuple[int, int, int]]) -> None:
        """A range entry that holds the whole object becomes its whole-file entry (checked piece by piece
        first; under the entry's lock)."""
        part, _, _ = self._range_paths(key)
        data, side, _ = self._paths(key)
        with open(part, "rb") as f:
            for a, b, crc in pieces:
                if (key, a, b, crc) in self._verified:
                    continue
                c, pos = 0, a
                while pos < b:
                    chunk = os.pread(f.fileno(), min(b - pos, 8 << 20), pos)
                    if not chunk:
                        return
                    c = zlib.crc32(chunk, c)
                    pos += len(chunk)
                if c != crc:
                    return
        os.chmod(part, FILE_MODE)  # (an entry an older version wrote 0644 does not stay so when promoted)
        os.replace(part, data)
        write_private(side, json.dumps({"url": url, "size": size, "mtime_ns": mtime_ns, "etag": etag,
                                        "fetched_at": time.time(), "from_ranges": len(pieces)}))
        self._drop_ranges(key)

    def ranges_held(self, key: str) -> list[tuple[int, int]]:
        """The byte ranges the range entry of ``key`` holds (merged; not checked)."""
        out: list[tuple[int, int]] = []
        for a, b, _ in self._read_pieces(key):
            if out and a <= out[-1][1]:
                out[-1] = (out[-1][0], max(out[-1][1], b))
            else:
                out.append((a, b))
        return out

    def clear(self) -> None:
        """Remove every entry."""
        old, self.max_bytes = self.max_bytes, -1
        try:
            self.evict()
        finally:
            self.max_bytes = old

    def describe(self) -> dict[str, Any]:
        entries = self.entries()
        return {"root": str(self.root), "entries": len(entries), "bytes": sum(b for _, b, _ in entries),
                "max_bytes": self.max_bytes}


def _uncovered(pieces: list[tuple[int, int, int]], start: int, end: int) -> list[tuple[int, int]]:
    """The parts of ``[start, end)`` no piece (sorted by start) covers."""
    out, at = [], start
    for a, b, _ in pieces:
        if b <= at or a >= end:
            if a >= end:
                break
            continue
        if a > at:
            out.append((at, a))
        at = max(at, b)
        if at >= end:
            break
    if at < end:
        out.append((at, end))
    return out
