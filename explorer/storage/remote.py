"""Remote stores behind :mod:`pyarrow.fs`: one :class:`Store` per opened URL, and
:class:`StoragePath`, the part of :class:`pathlib.Path` the readers use, over it.

Why pyarrow's filesystems and not fsspec: pyarrow is already a dependency and its S3, GCS,
HDFS and Azure filesystems are C++ (no event loop, no extra packages per store), their
``RandomAccessFile`` is what ``pyarrow.parquet`` reads row groups from by range, and
listing gives sizes and modification times in one call. fsspec would add s3fs, gcsfs and
adlfs with their own dependency trees for the same reads. What pyarrow does not give is an
object's ETag, so the cache is validated against size and modification time (plus the
format's own checksums on the cached bytes).

How a :class:`StoragePath` reads:

* ``read_bytes()``, ``read_text()`` and ``os.fspath()`` (so ``open(path)``, ``os.link``,
  ``pq.ParquetFile(path)``) fetch the whole file into the :class:`~.cache.FileCache` at
  first use and read the cached copy (a local file: what rocksdict and Spark's JVM need);
* ``open("rb")`` reads a cached copy when there is a valid one, else by range from the
  store (a header, a segment of a shared file): bytes not asked for are never fetched, and the
  ranges fetched are kept in the cache (:meth:`FileCache.read_range`), so a second question
  over the same ranges fetches nothing;
* ``open_input()`` is the same as a pyarrow ``RandomAccessFile`` (Parquet row groups by range).

A :class:`Store` lists each folder at most once per ``explorer.open`` and answers
``exists``, ``is_file``, ``stat`` from that listing; every fetched byte, request and cache
hit is counted in its :class:`FetchStats` and in the process-wide totals
(:func:`fetch_stats`).
"""

from __future__ import annotations

import atexit
import fnmatch
import io
import os
import posixpath
import shutil
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path, PurePath, PurePosixPath
from typing import Any, Callable, Iterator

import pyarrow as pa
import pyarrow.fs as pafs
from tqdm.auto import tqdm

from ..errors import SnapshotNotFoundError, StateExplorerError, StorageError, UnsafePathError
from .cache import FILE_MODE, FileCache, private_dir

_CHUNK = 4 << 20
#: files at least this large show a progress bar while they are fetched
PROGRESS_BYTES = 64 << 20


@dataclass
class FetchStats:
    """What reading from a remote store cost: payload bytes fetched, requests, cache use."""

    bytes_fetched: int = 0
    requests: int = 0
    files_fetched: int = 0
    ranged_reads: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    #: bytes of ranged reads served by the cache (its byte ranges or a whole cached copy)
    bytes_from_cache: int = 0
    #: ranged reads the cache served without a fetch
    range_hits: int = 0

    def add(self, **kw: int) -> None:
        with _STATS_LOCK:
            for k, v in kw.items():
                setattr(self, k, getattr(self, k) + v)
                if self is not TOTALS:
                    setattr(TOTALS, k, getattr(TOTALS, k) + v)

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


_STATS_LOCK = threading.Lock()
#: every fetch of this process
TOTALS = FetchStats()


def fetch_stats() -> dict[str, int]:
    """Bytes fetched, requests and cache hits of this process so far (all stores)."""
    with _STATS_LOCK:
        return TOTALS.as_dict()


def reset_fetch_stats() -> None:
    with _STATS_LOCK:
        for k in TOTALS.as_dict():
            setattr(TOTALS, k, 0)


# --- errors -------------------------------------------------------------------------------

_DENIED = ("access_denied", "accessdenied", "access denied", "invalidaccesskeyid", "invalid_access_key_id",
           "signaturedoesnotmatch", "signature_does_not_match", "forbidden", "invalid_token", "expired_token",
           "http response code: 403", "expiredtoken", "credentials", "unauthorized", "http response code: 401")
_MISSING = ("nosuchbucket", "bucket does not exist", "nosuchkey", "not found", "no such", "does not exist",
            "http response code: 404")
_CLIENT = ("libjvm", "libhdfs", "java_home", "hadoop_home", "unable to load lib")
_UNREACHABLE = ("couldn't connect", "could not connect", "connection refused", "curl error", "timed out",
                "network", "resolve host", "unreachable")


def storage_error(exc: BaseException, url: str, what: str = "reading", hint: str | None = None) -> StateExplorerError:
    """The :class:`StateExplorerError` a store's failure becomes, naming the URL (``hint``: what else to
    say about a failure of no known kind, e.g. that no credentials were found)."""
    if isinstance(exc, StateExplorerError):
        return exc
    text = str(exc).strip()
    low = text.lower()
    found = f"{type(exc).__name__}: {text[:300]}"
    if any(s in low for s in _CLIENT):
        err: StateExplorerError = StorageError(
            f"{url}: the store's client library could not be loaded while {what} ({found}); expected, for "
            "hdfs://, libhdfs and a JVM (JAVA_HOME, HADOOP_HOME, CLASSPATH as `hadoop classpath --glob` prints it)")
    elif any(s in low for s in _DENIED):
        err = StorageError(
            f"{url}: the store refused access while {what} ({found}); expected credentials that may read it "
            "(AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE and ~/.aws/credentials, or storage_options=)")
    elif isinstance(exc, FileNotFoundError) or any(s in low for s in _MISSING):
        err = SnapshotNotFoundError(f"{url}: no such bucket, container or object ({found}) while {what}; expected "
                                    "a checkpoint or savepoint folder")
    elif any(s in low for s in _UNREACHABLE):
        err = StorageError(f"{url}: cannot reach the store while {what} ({found}); expected a reachable endpoint "
                           "(AWS_ENDPOINT_URL / AWS_ENDPOINT_URL_S3, AWS_REGION, or storage_options=)")
    else:
        err = StorageError(f"{url}: the store failed while {what} ({found})" + (f"; {hint}" if hint else ""))
    err.__cause__ = exc
    return err


# --- stores -------------------------------------------------------------------------------

class Store:
    """One remote root as opened by one ``explorer.open``: its filesystem, what its folders
    hold (listed once), the cache it fetches into, and what fetching cost."""

    def __init__(self, fs: pafs.FileSystem, store_id: str, url_of: Callable[[str], str],
                 cache: FileCache | None = None, hint: str | None = None) -> None:
        self.fs = fs
        self.hint = hint
        self.store_id = store_id
        self.url_of = url_of
        self._cache = cache
        self.stats = FetchStats()
        self._infos: dict[str, pafs.FileInfo] = {}
        self._listed: set[str] = set()
        self._lock = threading.RLock()

    @property
    def cache(self) -> FileCache:
        if self._cache is None:
            self._cache = FileCache()
        return self._cache

    def _call(self, key: str, what: str, fn: Callable[[], Any]) -> Any:
        try:
            self.stats.add(requests=1)
            return fn()
        except StateExplorerError:
            raise
        except (OSError, pa.ArrowException) as exc:
            raise storage_error(exc, self.url_of(key), what, self.hint) from exc

    # -- listing ----------------------------------------------------------------------------
    def list(self, key: str, asked: str | None = None) -> list[pafs.FileInfo]:
        """What the folder ``key`` holds (once per store; [] when there is no such folder). Errors name
        ``asked`` (the path a caller asked about) when given."""
        with self._lock:
            if key not in self._listed:
                sel = pafs.FileSelector(key, allow_not_found=True, recursive=False)
                infos = self._call(asked or key, "listing", lambda: self.fs.get_file_info(sel))
                for i in infos:
                    self._infos[i.path.rstrip("/")] = i
                if infos and key not in self._infos:
                    self._infos[key] = pafs.FileInfo(key, pafs.FileType.Directory)
                self._listed.add(key)
            prefix = key + "/"
            return sorted((i for p, i in self._infos.items() if p.startswith(prefix) and "/" not in p[len(prefix):]),
                          key=lambda i: i.path)

    def info(self, key: str) -> pafs.FileInfo:
        with self._lock:
            if key in self._infos:
                return self._infos[key]
            parent = posixpath.dirname(key)
            if parent and parent != key and "/" in key:
                self.list(parent, asked=key)
                if key in self._infos:
                    return self._infos[key]
                if parent in self._listed:
                    return pafs.FileInfo(key, pafs.FileType.NotFound)
            info = self._call(key, "looking at", lambda: self.fs.get_file_info(key))
            self._infos[key] = info
            return info

    def walk(self, key: str) -> list[pafs.FileInfo]:
        """Every file under the folder ``key`` (one recursive listing)."""
        sel = pafs.FileSelector(key, allow_not_found=True, recursive=True)
        infos = self._call(key, "listing", lambda: self.fs.get_file_info(sel))
        with self._lock:
            for i in infos:
                self._infos.setdefault(i.path.rstrip("/"), i)
        return [i for i in infos if i.type == pafs.FileType.File]

    # -- reading ----------------------------------------------------------------------------
    def _file_info(self, key: str) -> pafs.FileInfo:
        info = self.info(key)
        if info.type != pafs.FileType.File:
            raise SnapshotNotFoundError(f"{self.url_of(key)}: no such file (found {info.type.name}); "
                                        "expected a file of the snapshot")
        return info

    def cached(self, key: str) -> Path | None:
        """The valid cached copy of ``key``, or None (no fetch)."""
        info = self._file_info(key)
        return self.cache.lookup(FileCache.key(self.store_id, self.url_of(key)), info.size, info.mtime_ns)

    def local(self, key: str) -> Path:
        """A local copy of the file ``key``: the cached one when it still matches the store, else fetched."""
        info = self._file_info(key)
        url = self.url_of(key)
        ckey = FileCache.key(self.store_id, url)
        hit = self.cache.lookup(ckey, info.size, info.mtime_ns)
        if hit is not None:
            self.stats.add(cache_hits=1)
            return hit

        def write(out) -> None:
            stream = self._call(key, "fetching", lambda: self.fs.open_input_stream(key))
            with stream, tqdm(total=info.size, unit="B", unit_scale=True, desc=f"fetching {posixpath.basename(key)}",
                              disable=info.size < PROGRESS_BYTES, leave=False) as bar:
                while True:
                    try:
                        chunk = stream.read(_CHUNK)
                    except (OSError, pa.ArrowException) as exc:
                        raise storage_error(exc, url, "fetching") from exc
                    if not chunk:
                        break
                    out.write(chunk)
                    self.stats.add(bytes_fetched=len(chunk))
                    bar.update(len(chunk))

        path, fetched = self.cache.store(ckey, url, info.size, info.mtime_ns, write)
        self.stats.add(**({"cache_misses": 1, "files_fetched": 1} if fetched else {"cache_hits": 1}))
        return path

    def prefetch(self, keys: list[str], workers: int = 4) -> None:
        """Start fetching the files ``keys`` into the cache, ``workers`` at a time, in the background (a
        reader about to read them in turn then finds each cached, or waits for its fetch under the cache
        entry's lock). At most half the cache's bound is fetched ahead; failures are left for the
        reader's own fetch to raise."""
        budget = self.cache.max_bytes // 2
        todo = []
        for k in keys:
            try:
                size = self._file_info(k).size
            except StateExplorerError:
                continue
            if size > budget:
                break
            budget -= size
            todo.append(k)
        if len(todo) < 2:
            return
        pool = _prefetch_pool(workers)
        for k in todo:
            pool.submit(_quietly, self.local, k)

    def open_ranged(self, key: str) -> "RangedFile":
        info = self._file_info(key)
        return RangedFile(self, key, info)

    def read_range(self, key: str, info: pafs.FileInfo, offset: int, n: int,
                   fetch: Callable[[int, int], bytes]) -> bytes:
        """``n`` bytes of the file ``key`` at ``offset``: from its whole cached copy when there is one, else
        through the cache's byte ranges (:meth:`FileCache.read_range`: what is held is read locally, the
        gaps fetched with ``fetch`` and kept)."""
        url = self.url_of(key)
        ckey = FileCache.key(self.store_id, url)
        whole = self.cache.lookup(ckey, info.size, info.mtime_ns)
        if whole is not None:
            with open(whole, "rb") as f:
                data = os.pread(f.fileno(), max(0, min(n, info.size - offset)), offset)
            self.stats.add(bytes_from_cache=len(data))
            return data
        data, fetched = self.cache.read_range(ckey, url, info.size, info.mtime_ns, offset, n, fetch)
        self.stats.add(bytes_from_cache=len(data) - fetched, **({"range_hits": 1} if not fetched else {}))
        return data

    def read_range_into(self, key: str, info: pafs.FileInfo, offset: int, out: memoryview,
                        fetch: Callable[[int, int], bytes]) -> int:
        """:meth:`read_range` into ``out`` (the bytes copied once); returns how many were read."""
        url = self.url_of(key)
        ckey = FileCache.key(self.store_id, url)
        whole = self.cache.lookup(ckey, info.size, info.mtime_ns)
        if whole is not None:
            with open(whole, "rb") as f:
                f.seek(offset)
                got = f.readinto(out[: max(0, min(len(out), info.size - offset))])
            self.stats.add(bytes_from_cache=got)
            return got
        got, fetched = self.cache.read_range_into(ckey, url, info.size, info.mtime_ns, offset, out, fetch)
        self.stats.add(bytes_from_cache=got - fetched, **({"range_hits": 1} if not fetched else {}))
        return got


_POOLS: dict[int, ThreadPoolExecutor] = {}


def _prefetch_pool(workers: int) -> ThreadPoolExecutor:
    with _STATS_LOCK:
        if workers not in _POOLS:
            _POOLS[workers] = ThreadPoolExecutor(workers, thread_name_prefix="storage-prefetch")
        return _POOLS[workers]


def _quietly(fn: Callable[..., Any], *args: Any) -> None:
    try:
        fn(*args)
    except Exception:  # noqa: BLE001 - a prefetch; the reader's own fetch raises the error
        pass


class RangedFile(io.RawIOBase):
    """A remote file read by range: each ``read`` serves what the cache's byte ranges hold and fetches the
    rest (one ranged request per gap), counted in its store's stats. The store's file is opened at the
    first fetch, so a read the cache serves whole sends no request."""

    def __init__(self, store: Store, key: str, info: pafs.FileInfo) -> None:
        super().__init__()
        self._store, self._key, self._info = store, key, info
        self.name = store.url_of(key)
        self._nf: pa.NativeFile | None = None
        self._pos = 0
        self._size = int(info.size or 0)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self._size}.get(whence)
        if base is None or base + offset < 0:
            raise OSError(22, f"{self.name}: invalid seek ({offset}, {whence})")
        self._pos = base + offset
        return self._pos

    def tell(self) -> int:
        return self._pos

    def size(self) -> int:
        return self._size

    def _fetch(self, start: int, n: int) -> bytes:
        if self._nf is None:
            self._nf = self._store._call(self._key, "opening", lambda: self._store.fs.open_input_file(self._key))
        try:
            data = self._nf.read_at(n, start)
        except (OSError, pa.ArrowException) as exc:
            raise storage_error(exc, self.name, "reading") from exc
        self._store.stats.add(bytes_fetched=len(data), requests=1, ranged_reads=1)
        return data

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            n = self._size - self._pos
        n = max(0, min(n, self._size - self._pos))
        if n == 0:
            return b""
        data = self._store.read_range(self._key, self._info, self._pos, n, self._fetch)
        self._pos += len(data)
        return data

    def readinto(self, b) -> int:
        view = memoryview(b).cast("B")
        n = max(0, min(len(view), self._size - self._pos))
        if n == 0:
            return 0
        got = self._store.read_range_into(self._key, self._info, self._pos, view[:n], self._fetch)
        self._pos += got
        return got

    def readall(self) -> bytes:
        return self.read(-1)

    def close(self) -> None:
        if not self.closed and self._nf is not None:
            self._nf.close()
        super().close()


# --- paths --------------------------------------------------------------------------------

class _Stat:
    def __init__(self, info: pafs.FileInfo) -> None:
        self.st_size = int(info.size or 0)
        self.st_mtime_ns = int(info.mtime_ns or 0)
        self.st_mtime = self.st_mtime_ns / 1e9
        self.st_mode = 0o100444 if info.type == pafs.FileType.File else 0o040555


def _norm(key: str) -> str:
    parts = [p for p in key.split("/") if p not in ("", ".")]
    return "/".join(parts)


class StoragePath:
    """A file or folder on a remote store, with the part of :class:`pathlib.Path` readers use
    (see module doc). ``str()`` is its URL."""

    remote = True

    def __init__(self, store: Store, key: str) -> None:
        self.store = store
        self.key = _norm(key) if not key.startswith("/") else "/" + _norm(key)

    # -- pure path --------------------------------------------------------------------------
    def __str__(self) -> str:
        return self.store.url_of(self.key)

    def __repr__(self) -> str:
        return f"StoragePath({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StoragePath) and other.store.store_id == self.store.store_id and other.key == self.key

    def __hash__(self) -> int:
        return hash((self.store.store_id, self.key))

    def __lt__(self, other: "StoragePath") -> bool:
        return self.key < other.key

    def __truediv__(self, other: str | PurePath) -> "StoragePath":
        other = str(PurePosixPath(other)) if isinstance(other, PurePath) else str(other)
        if other.startswith("/"):
            raise StorageError(f"{self}: cannot join the absolute path {other!r}")
        return StoragePath(self.store, f"{self.key}/{other}")

    def joinpath(self, *others: str | PurePath) -> "StoragePath":
        p = self
        for o in others:
            p = p / o
        return p

    @property
    def name(self) -> str:
        return posixpath.basename(self.key)

    @property
    def suffix(self) -> str:
        return PurePosixPath(self.name).suffix

    @property
    def stem(self) -> str:
        return PurePosixPath(self.name).stem

    @property
    def parent(self) -> "StoragePath":
        head = posixpath.dirname(self.key)
        return StoragePath(self.store, head) if head else self

    @property
    def parents(self) -> list["StoragePath"]:
        out, p = [], self
        while p.parent.key != p.key:
            p = p.parent
            out.append(p)
        return out

    @property
    def parts(self) -> tuple[str, ...]:
        return tuple(p for p in self.key.split("/") if p)

    def with_name(self, name: str) -> "StoragePath":
        return self.parent / name

    def resolve(self, strict: bool = False) -> "StoragePath":
        """The path with ``..`` taken out (a store has no symlinks)."""
        out: list[str] = []
        for p in self.key.split("/"):
            if p == "..":
                if out:
                    out.pop()
            elif p:
                out.append(p)
        return StoragePath(self.store, ("/" if self.key.startswith("/") else "") + "/".join(out))

    def absolute(self) -> "StoragePath":
        return self

    def expanduser(self) -> "StoragePath":
        return self

    def relative_to(self, other: "StoragePath") -> PurePosixPath:
        return PurePosixPath(self.key).relative_to(other.key)

    # -- what is there ----------------------------------------------------------------------
    def _type(self) -> pafs.FileType:
        return self.store.info(self.key).type

    def exists(self) -> bool:
        return self._type() != pafs.FileType.NotFound

    def is_file(self) -> bool:
        return self._type() == pafs.FileType.File

    def is_dir(self) -> bool:
        return self._type() == pafs.FileType.Directory

    def is_symlink(self) -> bool:
        return False

    def stat(self) -> _Stat:
        info = self.store.info(self.key)
        if info.type == pafs.FileType.NotFound:
            raise FileNotFoundError(2, "no such file", str(self))
        return _Stat(info)

    def iterdir(self) -> Iterator["StoragePath"]:
        for i in self.store.list(self.key):
            yield StoragePath(self.store, i.path)

    def glob(self, pattern: str) -> Iterator["StoragePath"]:
        """Segment-wise ``fnmatch`` (``*``, ``?``, ``[..]``; no ``**``)."""
        level = [self]
        for seg in pattern.split("/"):
            nxt = []
            for d in level:
                if d.is_dir():
                    nxt.extend(c for c in d.iterdir() if fnmatch.fnmatchcase(c.name, seg))
            level = nxt
        yield from sorted(level)

    def walk_files(self) -> list[tuple["StoragePath", int]]:
        """Every file under this folder with its size (one recursive listing)."""
        return [(StoragePath(self.store, i.path), int(i.size)) for i in self.store.walk(self.key)]

    # -- reading ----------------------------------------------------------------------------
    def local(self) -> Path:
        """A local copy (fetched into the cache at first use)."""
        return self.store.local(self.key)

    def __fspath__(self) -> str:
        if not self.is_file():
            raise StorageError(f"{self}: a remote folder (or nothing) has no local path; expected a file")
        return str(self.local())

    def read_bytes(self) -> bytes:
        return self.local().read_bytes()

    def read_text(self, encoding: str | None = "utf-8", errors: str | None = None) -> str:
        return self.local().read_text(encoding=encoding, errors=errors)

    def open(self, mode: str = "rb", *args: Any, **kwargs: Any):
        """Read only: the cached copy when valid, else (binary) by range from the store."""
        if any(c in mode for c in "wax+"):
            raise StorageError(f"{self}: remote snapshots are read only (asked to open with mode {mode!r})")
        cached = self.store.cached(self.key)
        if cached is not None:
            self.store.stats.add(cache_hits=1)
            return open(cached, mode, *args, **kwargs)
        if "b" not in mode:
            return open(self.local(), mode, *args, **kwargs)
        return self.store.open_ranged(self.key)  # unbuffered: read(n) fetches n bytes, no read-ahead

    def open_input(self) -> pa.NativeFile:
        """A pyarrow ``RandomAccessFile``: the cached copy when valid, else ranged reads of the store."""
        cached = self.store.cached(self.key)
        if cached is not None:
            self.store.stats.add(cache_hits=1)
            return pa.OSFile(str(cached), "rb")
        return pa.PythonFile(self.store.open_ranged(self.key), mode="r")

    def mirror(self, select: Callable[[str], bool] | None = None, into: Path | None = None,
               files: list[tuple["StoragePath", int]] | None = None) -> Path:
        """A local folder holding the files under this one (each fetched into the cache, hard-linked
        or copied here), for readers that need a folder on disk (Spark's JVM); removed at exit.

        ``select(relative path)`` keeps only the files a reader needs (default: all); ``into`` adds them to a
        folder an earlier call returned (files already there are kept); ``files`` is this folder's listing
        (:meth:`walk_files`) when the caller has it."""
        files = self.walk_files() if files is None else files
        rels = [(f, size, f.relative_to(self).as_posix()) for f, size in files]
        if select is not None:
            rels = [r for r in rels if select(r[2])]
        for f, _, rel in rels:  # every key checked before anything is fetched or written
            plain_relative(rel, str(f))
        if into is None:
            root = self.store.cache.root / "trees"
            private_dir(root)
            into = private_dir(Path(tempfile.mkdtemp(prefix="tree-", dir=root)))
            _TREES.append(into)
        rels = [r for r in rels if not confined(into, r[2], str(r[0])).exists()]
        total = sum(size for _, size, _ in rels)
        with tqdm(total=total, unit="B", unit_scale=True, desc=f"mirroring {self.name}",
                  disable=total < PROGRESS_BYTES, leave=False) as bar:
            for f, size, rel in rels:
                dst = confined(into, rel, str(f))
                private_dir(dst.parent)
                src = f.local()
                try:
                    os.link(src, dst)  # (the cache's file: 0600)
                except OSError:
                    shutil.copyfile(src, dst)
                    os.chmod(dst, FILE_MODE)
                bar.update(size)
        return into


def plain_relative(rel: str, source: str) -> str:
    """``rel`` (a path from a remote object key; ``source``, its URL, is named in the error) when it is a
    relative path of plain names: not absolute, no empty, ``.``, ``..`` or NUL component. Raises
    :class:`~explorer.errors.UnsafePathError` otherwise."""
    parts = rel.split("/")
    bad = next((p for p in parts if p in ("", ".", "..") or "\0" in p), None)
    if rel.startswith("/") or bad is not None:
        found = "an absolute path" if rel.startswith("/") else f"the component {bad!r}"
        raise UnsafePathError(f"{source}: object key names {rel!r} ({found}) under the mirrored folder; expected "
                              "a relative path of plain names inside it (refused before anything was fetched or "
                              "written)")
    return rel


def confined(root: Path, rel: str, source: str) -> Path:
    """``root / rel`` for a path ``rel`` that came from a snapshot or a remote object key (``source``, named
    in the error: the object's URL), after checking that it stays inside ``root``: :func:`plain_relative`, and
    once resolved (symlinks followed) still under ``root``. Raises :class:`~explorer.errors.UnsafePathError`
    otherwise. Every file :meth:`StoragePath.mirror` writes goes through it."""
    plain_relative(rel, source)
    base = root.resolve()
    target = (root / rel).resolve()
    if not target.is_relative_to(base):
        raise UnsafePathError(f"{source}: object key names {rel!r}, which resolves to {target}, outside the mirror "
                              f"{base}; expected a path inside it")
    return target


_TREES: list[Path] = []


@atexit.register
def _remove_trees() -> None:
    for t in _TREES:
        shutil.rmtree(t, ignore_errors=True)
