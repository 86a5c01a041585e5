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
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator

from ..errors import StorageError
from . import sizes

DEFAULT_MAX_BYTES = 10 << 30


def parse_size(text: str | int) -> int:
    """Bytes from ``123``, ``"123"``, ``"20GB"``, ``"500 MiB"`` (:func:`explorer.storage.sizes.parse_size`: GB means
    GiB)."""
    return sizes.parse_size(text, what="cache size", error=StorageError)


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
            self.objects.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"{self.root}: cannot create the cache folder ({exc}); expected a writable folder "
                               "(set STATE_EXPLORER_CACHE_DIR or cache_dir=)") from exc
        self._evict_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"FileCache({str(self.root)!r}, max_bytes={self.max_bytes})"

    # -- entries ----------------------------------------------------------------------------
    @staticmethod
    def key(store_id: str, url: str) -> str:
        return hashlib.sha256(f"{store_id}\0{url}".encode()).hexdigest()

    def _paths(self, key: str) -> tuple[Path, Path, Path]:
        d = self.objects / key[:2]
        return d / key, d / f"{key}.json", d / f"{key}.lock"

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
        lock.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
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
            side.write_text(json.dumps({"url": url, "size": size, "mtime_ns": mtime_ns, "etag": etag,
                                        "fetched_at": time.time()}))
        self.evict(keep=key)
        return data, True

    # -- bounds -----------------------------------------------------------------------------
    def entries(self) -> list[tuple[float, int, str]]:
        """``(last use, bytes, key)`` of every entry."""
        out = []
        for sub in self.objects.iterdir() if self.objects.is_dir() else ():
            for f in sub.iterdir():
                if f.suffix or f.name.startswith("."):
                    continue
                with contextlib.suppress(OSError):
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
            for _, nbytes, key in entries:
                if total <= self.max_bytes:
                    break
                if key == keep:
                    continue
                with self._locked(key, blocking=False) as got:
                    if not got:
                        continue  # being written or read into the cache by someone else
                    data, side, _ = self._paths(key)
                    for p in (side, data):
                        with contextlib.suppress(FileNotFoundError):
                            p.unlink()
                total -= nbytes
                freed += nbytes
            return freed

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
