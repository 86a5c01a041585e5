"""The embedded RocksDB backend: keyed state as bytes in a real RocksDB, through ``rocksdict``.

Like Flink's ``EmbeddedRocksDBStateBackend``: one column family per state
(a :class:`~.table.RocksDBStateTable`), raw byte keys laid out so that a key
group is one contiguous byte range, and values stored as bytes in the state's
declared schema, never pickled; the layout, format version
:data:`FORMAT_VERSION`, is :mod:`explorer.format.rocksdb.layout`. The default
column family holds the format and each state's descriptor, so that a native
checkpoint describes itself. Bulk loads, checkpoints and native restores work
in staging folders next to the database (:mod:`.staging`).

Writes skip the write-ahead log (as Flink does: checkpoints, not the WAL,
make state durable); :meth:`~RocksDBStateBackend.flush`,
:meth:`~RocksDBStateBackend.close` and
:meth:`~RocksDBStateBackend.native_checkpoint` flush memtables to SST files
first. After :meth:`~RocksDBStateBackend.close` the database is closed; the
first read afterwards reopens it read-only, so ``JobResult.state()`` still
works once a job has finished (call ``close`` again to release it).

What rocksdict (0.3.29) can and cannot do -- verified against the installed wheel
==================================================================================

* **Raw bytes**: ``Options(raw_mode=True)`` stores ``bytes -> bytes`` with no
  Python pickling; str keys are refused. The mode is remembered in
  ``rocksdict-config.json`` next to the database.
* **Column families**: ``create_column_family(name, Options(raw_mode=True))``
  returns an ``Rdict`` bound to that family; reopening a database opens
  every existing family automatically. Each family handle keeps the database
  open: ``db.close()`` alone leaves the LOCK held, so :meth:`~RocksDBStateBackend.close`
  closes every family handle too. Live iterators also keep it open, so every
  scan reads in bounded chunks and drops its iterator before yielding
  (:func:`explorer.format.rocksdb.layout.scan`).
* **Iteration**: ``items(from_key=..., read_opt=...)`` with
  ``ReadOptions.set_iterate_upper_bound`` gives bounded range scans.
  ``set_iterate_lower_bound`` did *not* bound ``seek_to_first()`` in a test,
  so scans always ``seek``/``from_key`` explicitly.
* **Write batches**: ``WriteBatch(raw_mode=True)`` with per-family handles
  (``get_column_family_handle``), applied atomically with ``db.write``.
* **Delete range**: ``delete_range(begin, end)`` on a family works; used for
  clearing whole key-group ranges (clip on restore,
  :meth:`.table.RocksDBStateTable.clear_all`). Map ``clear()`` deletes entry by entry, as Flink does, instead of piling up
  range tombstones.
* **Checkpoints**: ``Checkpoint(db).create_checkpoint(dir)`` is RocksDB's own
  checkpoint: SST files are hard links (link count 2 observed), plus
  MANIFEST, CURRENT, OPTIONS. ``live_files()`` lists SSTs per family.
  The checkpoint opens as a normal database.
* **Bulk load**: ``ingest_external_file(paths, opts)`` (with
  ``IngestExternalFileOptions.set_move_files(True)``) on a family handle adds
  SST files of sorted raw entries to the database (into the bottom level when
  the family is empty). A canonical restore loads its rows this way
  (:meth:`RocksDBStateBackend.ingest_sorted`), the state landing as one sorted
  run instead of memtables waiting for flushes and compactions. The files are
  written by :mod:`explorer.format.sst.writer` (a batch at a time, outside the
  GIL), not by rocksdict's ``SstFileWriter``, whose one Python call per entry
  took 2.4 s for 1 M entries of 1 KB.
* **Merge operators: not available.** No ``set_merge_operator`` on ``Options``
  and no ``merge`` on ``Rdict``/``WriteBatch`` (the C++ library has them,
  the binding does not expose them). So list ``add`` is a read-modify-write,
  but at the byte level: the stored bytes are read and the new encoded
  elements concatenated, without decoding the existing list.
* **Compaction filters: not available** (no Python hook, and RocksDB's
  built-in ``TtlCompactionFilter`` works on RocksDB's own TTL format, not
  Flink's). TTL "compaction cleanup" is therefore a sweeper:
  :meth:`RocksDBStateBackend.background_cleanup` scans each TTL state once
  and deletes expired entries (expired list elements are cut out of the
  list bytes), re-reading the clock every ``query_time_after_num_entries``
  entries as Flink's compaction filter does. Cleanup on read is the shared
  logic in :mod:`explorer.engine.state`.
"""

from __future__ import annotations

import ctypes
import itertools
import json
import os
import shutil
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa

from rocksdict import (
    AccessType,
    Checkpoint,
    IngestExternalFileOptions,
    Options,
    ReadOptions,
    Rdict,
    WriteBatch,
    WriteOptions,
)

from ....errors import RestoreError, SnapshotFormatError, StateMigrationError
from ....format.keycodec import prefix_successor
from ....format.parquet_pages import ByteSpans
from ....format.rocksdb.layout import (
    FORMAT_NAME,
    FORMAT_VERSION,
    META_FORMAT,
    META_STATE,
    SCAN_CHUNK,
    key_group_bounds,
    key_group_prefix_bytes,
    scan,
)
from ....format.types import type_from_description
from ....keygroups import KeyGroupRange
from ...state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    StateKind,
    ValueStateDescriptor,
)
from ...ttl import StateTtlConfig
from ..base import KeyedStateBackend, StateTable
from .staging import StagingDir, missing_dirs, sweep_staging, wipe_rocksdb_dir
from .table import CACHE_ENTRIES, KeyCache, RocksDBStateTable

__all__ = ["FORMAT_VERSION", "INGEST_FILE_BYTES", "RocksDBStateBackend", "warm_kernels_in_background"]

#: size at which a restore's bulk load starts a new SST file (RocksDB's default target file size)
INGEST_FILE_BYTES = 64 << 20
#: SST files a restore's bulk load builds and writes at once (a thread and a buffer of a file's size each)
INGEST_WRITERS = 2

#: :func:`warm_kernels_in_background` loads the numba kernels of canonical snapshots and restores (off: each
#: is loaded at its first use)
WARM_KERNELS = True
_warming: list[threading.Thread] = []  # the one warm-up thread of this process, once started
_warm_lock = threading.Lock()


def _warm_kernels() -> None:
    try:
        from ....format.sst.writer import warm_kernels  # numba: loaded where used

        warm_kernels()
    except Exception:  # noqa: BLE001 - only an optimisation: the first real call loads (or reports) them
        pass


#: turn transparent huge pages off for this process when the first writable backend opens (Linux)
NO_HUGE_PAGES = True
_PR_SET_THP_DISABLE = 41


def _no_huge_pages() -> None:
    """``prctl(PR_SET_THP_DISABLE)``: fresh anonymous memory faulted in 4 KiB pages, not 2 MiB ones.

    A full snapshot or restore of 1 GB allocates some 500 MB of buffers (Arrow's pool, NumPy);
    Arrow's mimalloc and NumPy ask for transparent huge pages for them, and each first touch
    then zeroes a 2 MiB page (or waits for compaction to make one): on the benchmark machine
    that was 40-57 % of a canonical checkpoint's and recovery's CPU samples (``perf``:
    ``clear_page_erms`` under ``do_huge_pmd_anonymous_page``), 1.0-1.6 s of system time per
    GB against 0.6 s with small pages. Applies to the whole process from here on (faults
    already served keep their pages); off with ``NO_HUGE_PAGES = False`` before the first backend opens.
    """
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_THP_DISABLE, 1, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux, or no prctl: nothing to turn off
        pass


_huge_pages_off: list[bool] = []


def _huge_pages_off_once() -> None:
    with _warm_lock:
        if not _huge_pages_off and NO_HUGE_PAGES and sys.platform.startswith("linux"):
            _no_huge_pages()
            _huge_pages_off.append(True)


def warm_kernels_in_background() -> threading.Thread | None:
    """Start (once per process) a daemon thread loading the kernels of canonical snapshots and restores
    (:func:`explorer.format.sst.writer.warm_kernels`); the thread, or None when off.

    For a job whose checkpoints are canonical, when its RocksDB backends open: the first use of numba
    in a process sets numba up (0.5-0.8 s: its typing registries) and loads each kernel from the cache,
    which the first checkpoint would otherwise wait for. A job with incremental checkpoints does not
    start it (its first seconds would share the GIL with it for nothing but a later savepoint)."""
    with _warm_lock:
        if not WARM_KERNELS:
            return None
        if not _warming:
            t = threading.Thread(target=_warm_kernels, name="warm-sst-kernels", daemon=True)
            t.start()
            _warming.append(t)
        return _warming[0]


def _shape(values: Any) -> Any:
    """What batches of restored values must share to be joined into one SST file: one array; two parts
    (heads, bodies) of Arrow arrays; two parts whose bodies lie in one mapped file (``ByteSpans``)."""
    if not isinstance(values, tuple):
        return "array"
    bodies = values[1]
    return ("spans", id(bodies.data)) if isinstance(bodies, ByteSpans) else "parts"


class _Closed:
    """Stands in for a closed column family: the first use reopens the database read-only."""

    __slots__ = ("_backend", "_name")

    def __init__(self, backend: "RocksDBStateBackend", name: str) -> None:
        self._backend = backend
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        self._backend._reopen_read_only()
        return getattr(self._backend._cfs[self._name], attr)


_DESCRIPTOR_TYPE_FIELD = {
    StateKind.VALUE: (ValueStateDescriptor, "type"),
    StateKind.LIST: (ListStateDescriptor, "element_type"),
    StateKind.MAP: (MapStateDescriptor, "value_type"),
    StateKind.REDUCING: (ReducingStateDescriptor, "type"),
    StateKind.AGGREGATING: (AggregatingStateDescriptor, "accumulator_type"),
}


def _descriptor_from_json(d: dict) -> StateDescriptor:
    """A descriptor rebuilt from stored metadata (types without user classes, no functions)."""
    kind = StateKind(d["kind"])
    cls, field = _DESCRIPTOR_TYPE_FIELD[kind]
    kw: dict[str, Any] = {field: type_from_description(d["value_type"]), "ttl": StateTtlConfig.from_json(d.get("ttl"))}
    if kind is StateKind.MAP:
        kw["key_type"] = type_from_description(d["user_key_type"])
    return cls(d["name"], **kw)


class RocksDBStateBackend(KeyedStateBackend):
    """Keyed state of one subtask in an embedded RocksDB at ``path``.

    ``path`` is this backend's working directory. It is created if missing; an
    existing RocksDB there is wiped first unless ``fresh=False`` (then it is
    opened and its states are adopted, which is what :meth:`restore_native`
    does after copying a checkpoint in). A directory that holds other files
    is never wiped.
    """

    name = "rocksdb"

    def __init__(self, max_parallelism: int, key_groups: KeyGroupRange, clock, path: str | os.PathLike,
                 *, fresh: bool = True) -> None:
        super().__init__(max_parallelism, key_groups, clock)
        self.path = Path(path)
        self._kg_bytes = key_group_prefix_bytes(max_parallelism)
        self._key_cache = KeyCache(self._kg_bytes)
        #: tables holding buffered writes or cached reads (see :meth:`flush_buffers`)
        self._buffered: set[RocksDBStateTable] = set()
        self._cfs: dict[str, Rdict] = {}
        self._read_only = False
        self._closed = False
        sweep_staging(self.path)  # scratch folders of runs that died mid-way (not live ones)
        if fresh:
            wipe_rocksdb_dir(self.path)
        #: the folders this backend created for its directory (``path`` and missing parents, deepest
        #: first): a failed restore removes them again when empty (:func:`remove_created_dirs`)
        self.created_dirs = missing_dirs(self.path)
        self.path.mkdir(parents=True, exist_ok=True)
        self._write_opts = WriteOptions()
        self._write_opts.disable_wal = True
        self._families = set(Rdict.list_cf(str(self.path), self._options())) if (self.path / "CURRENT").exists() else set()
        self._db = self._open(read_only=False)
        _huge_pages_off_once()
        self._check_or_write_format()
        self._adopt_existing_states()
        #: SST files of this instance already in a checkpoint's shared area: file name ->
        #: {"path": "../shared/...", "bytes": n, "xxh3_128": hex} ("sha256" before issue 31); SSTs are immutable and this
        #: instance never reuses a file number, so a name here needs no second upload
        #: (filled by incremental checkpoints and by a restore from one)
        self.uploaded: dict[str, dict[str, Any]] = {}
        #: XXH3-128 of this instance's SST files hashed for a full native checkpoint: file name ->
        #: {"bytes": n, "xxh3_128": hex} (immutable files, never a reused number: hashed once)
        self.sst_digests: dict[str, dict[str, Any]] = {}

    # --- opening -------------------------------------------------------------------------------
    @staticmethod
    def _options() -> Options:
        opts = Options(raw_mode=True)
        opts.create_if_missing(True)
        opts.create_missing_column_families(True)
        return opts

    def _open(self, read_only: bool) -> Rdict:
        access = AccessType.read_only() if read_only else AccessType.read_write()
        db = Rdict(str(self.path), self._options(), access_type=access)
        if not read_only:
            db.set_write_options(self._write_opts)
        return db

    def _check_or_write_format(self) -> None:
        raw = self._db.get(META_FORMAT)
        if raw is None:
            meta = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "max_parallelism": self.max_parallelism,
                    "key_group_prefix_bytes": self._kg_bytes}
            self._db.put(META_FORMAT, json.dumps(meta, sort_keys=True).encode())
            return
        meta = json.loads(raw)
        if meta.get("format") != FORMAT_NAME or meta.get("version") != FORMAT_VERSION:
            raise SnapshotFormatError(
                f"{self.path}: RocksDB state format {meta.get('format')!r} version {meta.get('version')!r}; "
                f"expected {FORMAT_NAME!r} version {FORMAT_VERSION}"
            )
        if meta.get("max_parallelism") != self.max_parallelism:
            raise RestoreError(
                f"{self.path}: RocksDB state was written with max parallelism {meta.get('max_parallelism')}, "
                f"the job has max parallelism {self.max_parallelism}; key groups would not match"
            )

    def _stored_descriptors(self) -> dict[str, dict]:
        out = {}
        n = len(META_STATE)
        ro = ReadOptions()
        ro.set_iterate_upper_bound(prefix_successor(META_STATE))
        for k, v in list(self._db.items(from_key=META_STATE, read_opt=ro)):
            out[k[n:].decode("utf-8")] = json.loads(v)
        return out

    def _adopt_existing_states(self) -> None:
        """Create tables for states already in the database (a restore), from their metadata."""
        for name, d in self._stored_descriptors().items():
            if name not in self.tables:
                self.tables[name] = self._make_table(_descriptor_from_json(d), create=False)

    # --- tables --------------------------------------------------------------------------------
    def _make_table(self, descriptor: StateDescriptor, create: bool) -> RocksDBStateTable:
        name = descriptor.name
        cf = self._cfs.get(name)
        if cf is None:
            if name in self._families:
                cf = self._db.get_column_family(name)
            elif create:
                cf = self._db.create_column_family(name, Options(raw_mode=True))
                self._families.add(name)
                self._db.put(META_STATE + name.encode("utf-8"), json.dumps(descriptor.describe(), sort_keys=True).encode())
            else:
                raise RestoreError(f"{self.path}: state {name!r} is in the metadata but has no column family")
            if not self._read_only:
                cf.set_write_options(self._write_opts)
            self._cfs[name] = cf
        return RocksDBStateTable(descriptor, self.key_groups, self, cf)

    def _create_table(self, descriptor: StateDescriptor) -> StateTable:
        stored = self._stored_descriptors().get(descriptor.name)
        if stored is not None:
            new = descriptor.describe()
            if stored["kind"] != new["kind"]:
                raise StateMigrationError(
                    f"state {descriptor.name!r} is stored as {stored['kind']} state in {self.path}, "
                    f"the job declares {new['kind']} state"
                )
        return self._make_table(descriptor, create=True)

    def register(self, descriptor: StateDescriptor, columnar: Any = None) -> StateTable:
        table = super().register(descriptor, columnar)  # no columnar tables here: values live in RocksDB
        table._bind(descriptor)  # decode with the job's own dataclasses from now on
        return table

    def _drop_read_cache(self) -> None:
        """Forget cached reads (a read-only or closed database has no buffered writes)."""
        for t in self._buffered:
            t._r = {}
        self._buffered = set()
        for t in self.tables.values():
            t._c = {}

    def _reopen_read_only(self) -> None:
        """After close(): reopen read-only so the state can still be read."""
        self._db = self._open(read_only=True)
        self._read_only = True
        self._closed = False
        self._cfs = {}
        for name, table in self.tables.items():
            cf = self._db.get_column_family(name)
            self._cfs[name] = cf
            table._cf = cf

    # --- the per-batch write buffer --------------------------------------------------------------
    def flush_buffers(self) -> None:
        """Apply every table's buffered writes to RocksDB in one atomic ``WriteBatch`` and
        drop the cached reads. Called at the end of each batch (:meth:`end_batch`), before
        anything reads or writes RocksDB directly, and when a buffer is full."""
        tables = self._buffered
        if not tables:
            return
        self._buffered = set()
        wb = None
        seen = []  # per table: its reads and writes of this batch, for its write-through cache
        for t in tables:
            w = t._w
            if w:
                if wb is None:
                    wb = WriteBatch(raw_mode=True)
                handle = self._db.get_column_family_handle(t.name)
                for k, v in w.items():
                    if v is None:
                        wb.delete(k, handle)
                    else:
                        if v.__class__ is not bytes:
                            v = w[k] = bytes(v)
                        wb.put(k, v, handle)
                t._w = {}
            seen.append((t, t._r, w))
            t._r = {}
        if wb is not None:
            self._db.write(wb, self._write_opts)
        for t, r, w in seen:  # RocksDB now holds these: remembered until something bypasses the buffer
            c = t._c
            if len(c) + len(r) + len(w) > CACHE_ENTRIES:
                c = t._c = {}
            c.update(r)
            c.update(w)

    def end_batch(self) -> None:
        """The operator finished a batch (records, a watermark's timers, processing-time
        timers): apply its writes, so no more than one batch's touched keys wait in memory."""
        if self._buffered:
            self.flush_buffers()

    def _delete_keys(self, table: RocksDBStateTable, keys: list[bytes]) -> None:
        self._write(table, [], keys)

    def _write(self, table: RocksDBStateTable, puts: list[tuple[bytes, bytes]], deletes: list[bytes]) -> None:
        self.flush_buffers()  # earlier buffered writes first, and no cached read outlives this write
        table._c = {}
        handle = self._db.get_column_family_handle(table.name)
        wb = WriteBatch(raw_mode=True)
        for k, v in puts:
            wb.put(k, v, handle)
        for k in deletes:
            wb.delete(k, handle)
        self._db.write(wb, self._write_opts)

    def ingest_sorted(self, table: RocksDBStateTable, chunks: Iterator[Any]) -> int:
        """Bulk-load batches of a restored state into ``table`` (empty) through SST files.

        Each batch has ``raw`` (``(keys, values)`` binary arrays, keys strictly
        ascending, or None), ``num_rows`` and ``rows()``. Raw batches whose keys
        ascend from one batch to the next are written as SST files by
        :func:`explorer.format.sst.writer.write_sst` (whole batches at once, outside
        the GIL, two files at a time in threads while the next batches are read;
        a file holds batches up to :data:`INGEST_FILE_BYTES`) in a folder
        next to the database and ingested in one ``IngestExternalFile`` call (moved,
        not copied; they land in the bottom level as one sorted run). From the first
        other batch on, the files written so far are ingested and the rest is loaded
        with :meth:`RocksDBStateTable.load_rows`. Returns the rows loaded.
        """
        from ....format.sst.writer import write_sst  # numba: loaded where used

        staging: StagingDir | None = None
        files: list[str] = []
        writing: list[Any] = []  # futures of the files being written
        pending: list[tuple[Any, Any]] = []
        pending_bytes = 0
        last: bytes | None = None
        by_rows = False
        shape: Any = None  # the pending batches' values: one array, or two parts (bodies of one buffer)
        n = 0
        # files are built and written (numba, file writes: outside the GIL) by two threads while the
        # next batches are read and encoded
        pool = ThreadPoolExecutor(INGEST_WRITERS, thread_name_prefix="restore-sst")
        scratch = threading.local()  # one reused file buffer per writing thread, dropped with this call

        def write_pending() -> None:
            nonlocal staging, pending_bytes
            if not pending:
                return
            if staging is None:
                staging = StagingDir(self.path, "ingest")
            keys = pending[0][0] if len(pending) == 1 else pa.concat_arrays([k for k, _ in pending])
            if len(pending) == 1:
                values = pending[0][1]
            elif isinstance(pending[0][1], tuple):  # (heads, bodies) each
                bodies = [v[1] for _, v in pending]
                values = (pa.concat_arrays([v[0] for _, v in pending]),
                          ByteSpans.concat(bodies) if isinstance(bodies[0], ByteSpans) else pa.concat_arrays(bodies))
            else:
                values = pa.concat_arrays([v for _, v in pending])
            files.append(str(staging.path / f"{len(files):06d}.sst"))
            writing.append(pool.submit(write_sst, Path(files[-1]), keys, values, scratch))
            while len(writing) > INGEST_WRITERS:  # at most this many files in memory at once
                writing.pop(0).result()
            pending.clear()
            pending_bytes = 0

        def ingest() -> None:
            write_pending()
            while writing:
                writing.pop(0).result()
            if files:
                opts = IngestExternalFileOptions()
                opts.set_move_files(True)
                table._cf.ingest_external_file(list(files), opts)
                files.clear()

        try:
            for chunk in chunks:
                raw = None if by_rows else chunk.raw
                if raw is not None and last is not None and raw[0][0].as_py() <= last:
                    raw = None  # not after the previous batch: cannot extend the sorted run
                if raw is None:
                    if not by_rows:
                        ingest()
                        by_rows = True
                    n += table.load_rows(chunk.rows())
                    continue
                keys, values = raw
                if _shape(values) != shape:  # batches of other shapes: each file one shape
                    write_pending()
                    shape = _shape(values)
                if staging is None:  # from the first batch on: a load killed before its first file is written
                    staging = StagingDir(self.path, "ingest")  # still leaves a folder the next open removes
                pending.append((keys, values))
                pending_bytes += keys.nbytes + (sum(v.nbytes for v in values) if shape != "array" else values.nbytes)
                last = keys[-1].as_py()
                n += chunk.num_rows
                if pending_bytes >= INGEST_FILE_BYTES:
                    write_pending()
            ingest()
        finally:
            for f in writing:
                f.cancel()
            pool.shutdown(wait=True)
            if staging is not None:
                staging.release()
        return n

    # --- TTL -----------------------------------------------------------------------------------
    def background_cleanup(self, now_ms: int | None = None) -> int:
        """Sweep every TTL state whose cleanup includes RocksDB compaction cleanup (the
        default) and delete the expired entries; the stand-in for Flink's TTL compaction
        filter, which rocksdict cannot install. Returns how many entries were removed."""
        n = 0
        for table in list(self.tables.values()):
            ttl = getattr(table.descriptor, "ttl", None)
            if ttl is None:
                continue
            rc = ttl.cleanup.rocksdb_cleanup()
            if rc is None:
                continue
            if now_ms is None:
                n += table.drop_expired(self.clock.now_ms(), ttl.ttl_ms, self.clock, rc.query_time_after_num_entries)
            else:
                n += table.drop_expired(now_ms, ttl.ttl_ms)
        return n

    # --- files ---------------------------------------------------------------------------------
    def flush(self) -> None:
        """Apply the write buffer, then write every memtable to SST files (state is otherwise
        not in files: the WAL is off)."""
        if self._closed or self._read_only:
            self._drop_read_cache()
            return
        self.flush_buffers()
        self._db.flush(True)
        for cf in self._cfs.values():
            cf.flush(True)

    def compact(self) -> None:
        """A full manual compaction of every state (RocksDB's ``CompactRange``): the LSM tree of a
        long-running job in its settled shape, e.g. after a bulk load."""
        if self._closed or self._read_only:
            return
        self.flush()
        for cf in self._cfs.values():
            cf.compact_range(None, None)

    def live_sst_files(self) -> list[dict]:
        """RocksDB's ``live_files()``: name, column family, level, size, key range per SST."""
        self.flush_buffers()
        return list(self._db.live_files())

    def native_checkpoint(self, target_dir: str | os.PathLike) -> list[str]:
        """A RocksDB checkpoint of the whole database in ``target_dir`` (which must not exist).

        SST files are hard-linked where possible (immutable, so an incremental
        checkpoint copies only SST names it has not uploaded before); MANIFEST,
        CURRENT and OPTIONS are copied. Returns the file names, sorted.
        """
        target = Path(target_dir)
        if target.exists():
            raise FileExistsError(f"checkpoint target {target} already exists")
        target.parent.mkdir(parents=True, exist_ok=True)
        self.flush()
        Checkpoint(self._db).create_checkpoint(str(target))
        return sorted(os.listdir(target))

    @classmethod
    def restore_native(cls, checkpoint_dir: str | os.PathLike, max_parallelism: int, key_groups: KeyGroupRange,
                       clock, path: str | os.PathLike) -> "RocksDBStateBackend":
        """Open a backend at ``path`` from a :meth:`native_checkpoint` directory.

        The checkpoint is not modified: its files are hard-linked (SSTs) or
        copied into ``path`` first. Key groups outside ``key_groups`` are
        deleted (Flink clips a restored instance the same way), so a subtask
        can restore from a checkpoint of a wider range after rescaling. States
        come back as tables right away, decoded without user classes until the
        job registers its descriptors again.
        """
        src = Path(checkpoint_dir)
        if not (src / "CURRENT").is_file():
            raise RestoreError(f"{src} is not a RocksDB checkpoint (no CURRENT file)")
        dst = Path(path)
        sweep_staging(dst)
        wipe_rocksdb_dir(dst)
        created = missing_dirs(dst)
        # the files are gathered in a staging folder and renamed into place once all are there: a
        # process killed mid-copy leaves a staging folder (swept later), never a half-filled ``dst``
        # that the next attempt would refuse to overwrite (it has no CURRENT file)
        staging = StagingDir(dst, "restore")
        try:
            work = staging.path / "db"
            work.mkdir()
            for f in sorted(src.iterdir()):
                if f.suffix == ".sst":
                    try:
                        os.link(f, work / f.name)
                        continue
                    except OSError:
                        pass
                shutil.copy2(f, work / f.name)
            if dst.is_dir():
                dst.rmdir()  # left empty by wipe_rocksdb_dir; rename needs the name free
            os.rename(work, dst)
        finally:
            staging.release()
        backend = cls(max_parallelism, key_groups, clock, dst, fresh=False)
        backend.created_dirs = created
        try:
            backend._clip(key_groups)
        except BaseException:
            backend.close()
            raise
        return backend

    @property
    def key_group_prefix_bytes(self) -> int:
        return self._kg_bytes

    def estimated_entries(self, name: str) -> int:
        """RocksDB's estimate of the number of keys of state ``name`` (no scan)."""
        self.flush_buffers()
        try:
            return int(self._cfs[name].property_int_value("rocksdb.estimate-num-keys") or 0)
        except Exception:  # noqa: BLE001 - an estimate only
            return 0

    def sst_bytes(self, name: str) -> int:
        """Bytes of the live SST files of state ``name`` (its column family)."""
        self.flush_buffers()
        try:
            return int(self._cfs[name].property_int_value("rocksdb.live-sst-files-size") or 0)
        except Exception:  # noqa: BLE001 - a size report only
            return 0

    def store_descriptor(self, descriptor: StateDescriptor) -> None:
        """Record ``descriptor`` as the state's stored description (after a state migration)."""
        self._db.put(META_STATE + descriptor.name.encode("utf-8"),
                     json.dumps(descriptor.describe(), sort_keys=True).encode())

    def drop_state(self, name: str) -> None:
        """Delete a state entirely: its table, column family and stored description
        (restored state the job does not declare, dropped with ``allow_non_restored_state``)."""
        self.flush_buffers()
        self.tables.pop(name, None)
        self._states.pop(name, None)
        cf = self._cfs.pop(name, None)
        if cf is not None:
            cf.close()
        if name in self._families:
            self._db.drop_column_family(name)
            self._families.discard(name)
        self._db.delete(META_STATE + name.encode("utf-8"))

    def import_key_groups(self, source: str | os.PathLike) -> int:
        """Copy the raw entries of this backend's key groups from another native database
        (read-only, not modified): how a rescaled subtask merges a second restored instance
        into its first. States only ``source`` has are created. Returns the entries copied."""
        self.flush_buffers()
        src = Rdict(str(source), self._options(), access_type=AccessType.read_only())
        n = 0
        try:
            ro = ReadOptions()
            ro.set_iterate_upper_bound(prefix_successor(META_STATE))
            stored = {k[len(META_STATE):].decode("utf-8"): json.loads(v)
                      for k, v in list(src.items(from_key=META_STATE, read_opt=ro))}
            kg = self.key_groups
            lo, hi = key_group_bounds(kg.start, kg.end, self._kg_bytes)
            for name, d in stored.items():
                if name not in self.tables:
                    self.tables[name] = self._make_table(_descriptor_from_json(d), create=True)
                table = self.tables[name]
                scf = src.get_column_family(name)
                try:
                    entries = scan(lambda: scf, lo, hi)
                    while chunk := list(itertools.islice(entries, SCAN_CHUNK)):
                        self._write(table, chunk, [])
                        n += len(chunk)
                finally:
                    scf.close()
        finally:
            src.close()
        return n

    def _clip(self, key_groups: KeyGroupRange) -> None:
        n = self._kg_bytes
        lo, hi = key_group_bounds(key_groups.start, key_groups.end, n)
        zero, top = bytes(n), self.max_parallelism.to_bytes(n, "big")
        for table in self.tables.values():
            if lo > zero:
                table._cf.delete_range(zero, lo)
            if top > hi:
                table._cf.delete_range(hi, top)

    def close(self) -> None:
        """Flush and close the database (every column family handle, then the database)."""
        if self._closed:
            return
        self.flush()
        for cf in self._cfs.values():
            cf.close()
        self._db.close()
        self._cfs = {}
        self._closed = True
        for table in self.tables.values():
            table._cf = _Closed(self, table.name)

