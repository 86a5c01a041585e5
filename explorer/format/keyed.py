"""Keyed state and timers as Parquet: the canonical data layout of snapshots.

One file per (operator, state, subtask). Columns:

============  =======================================================
key_group     int32, ascending
key           the key: string / int64 / float64 / bool column, or a
              struct ``f0..fn`` for tuple keys (``key_kind`` in metadata)
namespace     null for the default namespace, else like ``key``
user_key      map state: the declared map-key type; list state: int32
              position in the list; value state: null
value         the declared value type (dataclasses as structs)
last_access   int64 epoch ms, null without TTL
============  =======================================================

Row groups are cut at key-group boundaries; ``write_keyed`` returns, per row
group, the key-group range it covers, so a reader can fetch just the key
groups it needs.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import SnapshotCorruptError, SnapshotFormatError
from . import budget
from .parquet_pages import check_page_sizes, footer_chunks
from .snapshot import sha256_file, xxh3_128_file
from .types import TypeInfo

try:  # XXH3-128 of checkpoints' files (a declared dependency)
    import xxhash
except ImportError:  # pragma: no cover - depends on the environment
    xxhash = None

ROW_GROUP_TARGET = 1 << 16


@dataclass(frozen=True)
class ParquetProfile:
    """How a snapshot's keyed-state and timer files are encoded and hashed (same columns, same row groups).

    ``checksum`` names the file entry's digest in ``_metadata`` (``"sha256"`` or ``"xxh3_128"``,
    both checked by :func:`explorer.format.snapshot.check_file_digest`); ``value_dictionary``
    and ``value_statistics`` say whether the ``value`` column gets Parquet's dictionary
    encoding and min/max statistics (the other columns always get statistics), ``key_dictionary``
    whether the ``key`` column gets dictionary encoding (a reader decodes either encoding).
    """

    compression: str
    checksum: str
    value_dictionary: bool = True
    value_statistics: bool = True
    key_dictionary: bool = True

    def writer_options(self, schema: pa.Schema) -> dict[str, Any]:
        opts: dict[str, Any] = {"compression": self.compression}
        others = [n for n in schema.names if n != "value"]
        plain = {n for n, on in (("value", self.value_dictionary), ("key", self.key_dictionary)) if not on}
        if plain & set(schema.names):
            opts["use_dictionary"] = [n for n in schema.names if n not in plain]
        if not self.value_statistics and "value" in schema.names:
            opts["write_statistics"] = others
        return opts

    def new_hash(self):
        if self.checksum == "xxh3_128" and xxhash is not None:
            return xxhash.xxh3_128()
        return hashlib.sha256()


#: savepoints, the portable archive: zstd, SHA-256 (as every snapshot before checkpoints had their own profile)
SAVEPOINT = ParquetProfile("zstd", "sha256")
#: full canonical checkpoints, written to be restored soon: uncompressed (Flink's full snapshots are too unless
#: snapshot compression is switched on), no dictionary or statistics for values, no dictionary for keys (keys
#: are mostly distinct: Arrow filled a dictionary page of each row group and then fell back to plain, 2-3 % of
#: a 1 GB checkpoint's CPU on the writer's thread), XXH3-128 (20+ GB/s, the native full checkpoint's
#: checksum) instead of SHA-256 (~1.8 GB/s); the same columns and row groups
CHECKPOINT = ParquetProfile("none", "xxh3_128", value_dictionary=False, value_statistics=False, key_dictionary=False)


_KINDS = {bool: "bool", int: "int", float: "float", str: "str", tuple: "tuple"}


def _kind_of(values: Sequence[Any]) -> str:
    types = set(map(type, values))  # one pass in C; the kinds from the few distinct types
    types.discard(type(None))
    kinds = {_KINDS.get(t) or "other:" + t.__name__ for t in types}
    if not kinds:
        return "null"
    if len(kinds) > 1:
        raise SnapshotFormatError(f"keys of mixed types {sorted(kinds)} cannot share one snapshot column")
    (k,) = kinds
    if k.startswith("other:"):
        raise SnapshotFormatError(f"keys of type {k[6:]} cannot be stored; expected str, int, float, bool or tuple")
    return k


def encode_keys(values: Sequence[Any]) -> tuple[pa.Array, str]:
    """Keys (or namespaces) as an Arrow column and the kind needed to decode them."""
    kind = _kind_of(values)
    if kind == "null":
        return pa.nulls(len(values)), kind
    if kind == "tuple":
        return pa.array([None if v is None else {f"f{i}": x for i, x in enumerate(v)} for v in values]), kind
    typ = {"bool": pa.bool_(), "int": pa.int64(), "float": pa.float64(), "str": pa.string()}[kind]
    return pa.array(values, type=typ), kind


def decode_keys(column: pa.Array | pa.ChunkedArray, kind: str) -> list[Any]:
    values = column.to_pylist()
    if kind == "tuple":
        return [None if v is None else tuple(v[f"f{i}"] for i in range(len(v))) for v in values]
    return values


def rows_to_table(rows: list[tuple], value_info: TypeInfo, user_key: str | TypeInfo | None) -> tuple[pa.Table, dict[str, str]]:
    """Rows ``(kg, key, ns, user_key, value, last_access)`` to an Arrow table (sorted by key group, stably):
    :func:`columns_to_table` of the rows' columns, their user keys (list positions, map keys) as given."""
    kgs, keys, nss, uks, vals, tss = (list(c) for c in zip(*rows)) if rows else ([], [], [], [], [], [])
    return columns_to_table(kgs, keys, nss, None, vals, value_info, user_key,
                            user_keys=None if user_key is None else uks, last_access=tss)


def columns_to_table(
    key_groups: Sequence[int],
    keys: Sequence[Any],
    namespaces: Sequence[Any],
    counts: Sequence[int] | None,
    values: list[Any],
    value_info: TypeInfo,
    user_key: str | TypeInfo | None,
    user_keys: list[Any] | None = None,
    last_access: list[Any] | None = None,
) -> tuple[pa.Table, dict[str, str]]:
    """:func:`rows_to_table` of rows given column-wise: the same table, without a Python call per row.

    ``key_groups``, ``keys`` and ``namespaces`` name each address once, ``counts`` says how many
    rows it has (None: one each); ``values`` and ``last_access`` (None: no TTL) hold one item
    per row, address by address (``values`` may be converted already: an Arrow array of
    ``value_info.arrow_type``). User keys are the rows' positions within their address for
    ``user_key == "index"`` (list state), ``user_keys`` (one per row) for a map-key type, null
    for value state.
    """
    n_addr = len(keys)
    kg = np.asarray(key_groups, dtype=np.int32).reshape(-1)
    if counts is None:
        c = np.ones(n_addr, dtype=np.int64)
    else:
        c = np.asarray(counts, dtype=np.int64).reshape(-1)
    if n_addr and not c.all():  # an address without rows has no row (its key must not type the key column)
        keep = np.flatnonzero(c).tolist()
        keys = [keys[i] for i in keep]
        namespaces = [namespaces[i] for i in keep]
        kg, c = kg[keep], c[keep]
        n_addr = len(keep)
    total = int(c.sum())
    if total != len(values) or (last_access is not None and len(last_access) != total) or \
            (user_keys is not None and len(user_keys) != total):
        raise ValueError(f"columns of {total} rows expected, found {len(values)} values")
    take = None if total == n_addr else np.repeat(np.arange(n_addr, dtype=np.int64), c)
    key_col, key_kind = encode_keys(keys)
    ns_col, ns_kind = encode_keys(namespaces)
    kg_rows = kg if take is None else kg[take]
    if take is not None:
        idx = pa.array(take)
        key_col, ns_col = key_col.take(idx), ns_col.take(idx)
    if user_key is None:
        uk_col = pa.nulls(total)
    elif user_key == "index":
        uk_col = pa.array(user_keys if user_keys is not None else
                          np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(c) - c, c), type=pa.int32())
    else:
        uk_col = user_key.to_arrow_array(user_keys)  # type: ignore[union-attr]
    columns = {
        "key_group": pa.array(kg_rows, type=pa.int32()),
        "key": key_col,
        "namespace": ns_col,
        "user_key": uk_col,
        "value": values if isinstance(values, pa.Array) else value_info.to_arrow_array(values),
        "last_access": pa.nulls(total, pa.int64()) if last_access is None else pa.array(last_access, type=pa.int64()),
    }
    table = pa.table(columns)
    if total > 1 and (kg_rows[1:] < kg_rows[:-1]).any():  # rows_to_table's order: by key group, stable
        table = table.take(pa.array(np.argsort(kg_rows, kind="stable")))
    return table, {"key_kind": key_kind, "namespace_kind": ns_kind}


def write_parquet_by_key_group(table: pa.Table, path: Path, target_rows: int = ROW_GROUP_TARGET,
                               profile: ParquetProfile = SAVEPOINT) -> list[list[int]]:
    """Write ``table`` (sorted by key_group) with row groups cut at key-group boundaries.

    Returns ``[[kg_first, kg_last, rows], ...]`` per row group.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    groups: list[list[int]] = []
    kg = table.column("key_group").to_numpy() if table.num_rows else []
    with pq.ParquetWriter(path, table.schema, **profile.writer_options(table.schema)) as w:
        n = table.num_rows
        start = 0
        while start < n:
            end = min(n, start + target_rows)
            # extend to the end of the key group at the cut
            while end < n and kg[end] == kg[end - 1]:
                end += 1
            chunk = table.slice(start, end - start)
            w.write_table(chunk, row_group_size=max(1, end - start))
            groups.append([int(kg[start]), int(kg[end - 1]), int(end - start)])
            start = end
        if n == 0:
            w.write_table(table)
    return groups


class KeyGroupParquetWriter:
    """:func:`write_parquet_by_key_group` for a table that arrives in batches (sorted by key group
    across them): the same row groups, written as soon as each one's end is known.

    >>> w = KeyGroupParquetWriter(path, schema)
    >>> for batch in batches:
    ...     w.write(batch)
    >>> groups = w.close()
    """

    def __init__(self, path: Path, schema: pa.Schema, target_rows: int = ROW_GROUP_TARGET,
                 profile: ParquetProfile = SAVEPOINT, size_hint: int = 0) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.profile = profile
        self.path = path
        self._file = _NativeFile(path, size_hint)
        try:
            self._writer = pq.ParquetWriter(self._file.sink, schema, **profile.writer_options(schema))
        except BaseException:
            self._file.close()
            raise
        self._digest: dict[str, str] | None = None
        #: the file's digest, computed by a thread of its own as the row groups are written (FOLLOW_DIGEST)
        self._follow = _FollowingDigest(path, profile) if FOLLOW_DIGEST else None
        self.schema = schema
        self._target = target_rows
        self._pending: pa.Table = schema.empty_table()
        self._kg = np.zeros(0, dtype=np.int32)
        self.groups: list[list[int]] = []
        self.rows = 0

    def write(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        self._pending = pa.concat_tables([self._pending, table]) if self._pending.num_rows else table
        self._kg = np.concatenate([self._kg, table.column("key_group").to_numpy()])
        self._flush(final=False)

    def _flush(self, final: bool) -> None:
        n = self._pending.num_rows
        start = 0
        while start < n:
            end = min(n, start + self._target)
            if end == n and not final:
                break  # the cut may still move: a full row group, or the end of its key group, is not here yet
            while end < n and self._kg[end] == self._kg[end - 1]:
                end += 1
            if end == n and not final:
                break
            chunk = self._pending.slice(start, end - start)
            self._writer.write_table(chunk, row_group_size=max(1, end - start))
            if self._follow is not None:
                self._follow.advance(self._file.sink.tell())  # (the row group is in the file: hashed behind)
            self.groups.append([int(self._kg[start]), int(self._kg[end - 1]), int(end - start)])
            self.rows += end - start
            start = end
        if start:
            self._pending = self._pending.slice(start)
            self._kg = self._kg[start:]

    def close(self) -> list[list[int]]:
        """Write what is left; returns ``[[kg_first, kg_last, rows], ...]`` per row group."""
        self._flush(final=True)
        if not self.groups:
            self._writer.write_table(self.schema.empty_table())
        self._writer.close()
        size = self._file.sink.tell()
        self._file.close()
        if self._follow is not None:
            self._digest, self._follow = self._follow.finish(size), None
        else:
            self._digest = hash_written(self.path, self.profile)
        return self.groups

    @property
    def checksum(self) -> dict[str, str]:
        """The file's digest as its ``_metadata`` entry records it (after :meth:`close`):
        ``{"xxh3_128": hex}`` for the checkpoint profile (when xxhash is installed), else ``{"sha256": hex}``."""
        if self._digest is None:
            raise ValueError(f"{self.path}: the checksum of a Parquet file is known once it is closed")
        return self._digest

    def abort(self) -> None:
        """Close without writing what is left (the caller replaces the file)."""
        try:
            self._writer.close()
            self._file.close()
        finally:
            if self._follow is not None:
                self._follow.cancel()
                self._follow = None


#: :class:`KeyGroupParquetWriter` hashes its file in a thread of its own as the row groups are written (off:
#: the whole file is hashed once it is closed, by :func:`hash_written`, on the writer's thread)
FOLLOW_DIGEST = True
#: bytes the following digest reads at a time (a buffer it reuses: hashed while in the CPU's cache)
FOLLOW_READ = 1 << 20


class _FollowingDigest:
    """The digest of a file being written, computed by a thread that reads behind the writer.

    The writer (Arrow, a native sink: no Python call per page) only appends; after each row group it
    says how far the file is written (:meth:`advance`), and this thread reads the new bytes back from
    the page cache through one reused buffer and hashes them, in order. So the digest is of the bytes
    in the file, as :func:`hash_written` computes it once the file is closed, but the checkpoint's
    critical path (the writer's thread) does not hash, nor read 1 GB again after its last write
    (1 GB checkpoint: 0.15 s of the writer's thread, in ``py-spy``); the hashing overlaps the writing.
    :meth:`finish` hashes up to the file's final size and returns the entry ``hash_written`` gives."""

    def __init__(self, path: Path, profile: ParquetProfile) -> None:
        if profile.checksum == "xxh3_128" and xxhash is not None:
            self._name, self._hash = "xxh3_128", xxhash.xxh3_128()
        else:
            self._name, self._hash = "sha256", hashlib.sha256()
        self._fd = os.open(path, os.O_RDONLY)
        self._cond = threading.Condition()
        self._target = 0
        self._done = 0
        self._stop = False
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="snapshot-digest", daemon=True)
        self._thread.start()

    def advance(self, upto: int) -> None:
        with self._cond:
            if upto > self._target:
                self._target = upto
                self._cond.notify()

    def _run(self) -> None:
        buf = bytearray(FOLLOW_READ)
        view = memoryview(buf)
        try:
            while True:
                with self._cond:
                    while self._done >= self._target and not self._stop:
                        self._cond.wait()
                    if self._stop and self._done >= self._target:
                        return
                    target = self._target
                while self._done < target:
                    n = os.preadv(self._fd, [view[: min(FOLLOW_READ, target - self._done)]], self._done)
                    if n <= 0:
                        raise OSError(f"the file ends at {self._done} bytes, {target} were written")
                    self._hash.update(view[:n])
                    self._done += n
        except BaseException as exc:  # noqa: BLE001 - handed to finish(), which raises it
            self._error = exc

    def finish(self, size: int) -> dict[str, str]:
        """The digest of the file's ``size`` bytes (its whole length, closed), once they are hashed."""
        self.advance(size)
        self._end()
        if self._error is not None:
            raise self._error
        if self._done != size:  # pragma: no cover - only after an error
            raise OSError(f"hashed {self._done} of {size} bytes")
        return {self._name: self._hash.hexdigest()}

    def cancel(self) -> None:
        with self._cond:
            self._target = self._done  # nothing more to read
        self._end()

    def _end(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify()
        self._thread.join()
        os.close(self._fd)


def hash_written(path: Path, profile: ParquetProfile) -> dict[str, str]:
    """The digest of a file just written with ``profile``, as its ``_metadata`` entry records it.

    Hashed from the file once it is closed, not as the bytes go to it: the writer then writes to a
    native Arrow sink (:class:`_NativeFile`), whereas a Python file object makes Arrow copy every
    page into a new ``bytes`` and take the GIL for it (1 GB: a second copy of the data and ~500
    allocations on the writer's thread); the file, in the page cache, is hashed from its mapped
    pages (XXH3-128: ~50 ms a GB)."""
    if profile.checksum == "xxh3_128" and xxhash is not None:
        return {"xxh3_128": xxh3_128_file(path)}
    return {"sha256": sha256_file(path)}


class _NativeFile:
    """A file opened for writing as an Arrow native sink (``sink``: C++ writes, no Python call per page).

    ``size_hint``: about the bytes that will be written (0: unknown). The file system then allocates
    them at once (Linux ``fallocate``, the file's size unchanged), not page by page as they are
    written (ext4: 0.15 s instead of 0.21 s of the writer's CPU for 1 GB); what is not written is
    given back when the file is closed."""

    def __init__(self, path: Path, size_hint: int = 0) -> None:
        self.path = path
        self.sink = pa.OSFile(str(path), mode="wb")
        try:
            self._allocated = size_hint > 0 and _allocate(self.sink.fileno(), size_hint)
        except BaseException:
            self.sink.close()
            raise

    def close(self) -> None:
        if self.sink.closed:
            return
        size = self.sink.tell()
        self.sink.close()
        if self._allocated:
            os.truncate(self.path, size)  # (gives back the blocks past the end)


_FALLOC_FL_KEEP_SIZE = 1
_fallocate: list = []


def _allocate(fd: int, size: int) -> bool:
    """Allocate ``size`` bytes of the file ``fd`` from its start without changing its size (Linux);
    whether that was done (False elsewhere, or where the file system does not do it)."""
    if not sys.platform.startswith("linux"):
        return False
    if not _fallocate:
        try:
            fn = ctypes.CDLL(None, use_errno=True).fallocate
            fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
            fn.restype = ctypes.c_int
        except (OSError, AttributeError):
            fn = None
        _fallocate.append(fn)
    fn = _fallocate[0]
    return fn is not None and fn(fd, _FALLOC_FL_KEEP_SIZE, 0, size) == 0


def check_row_groups(path: Any, pf: pq.ParquetFile, ids: Iterable[int], columns: Sequence[str] | None,
                     together: bool = True, footer: list[Any] | None = None) -> None:
    """The row groups ``ids`` of the Parquet file ``path`` (opened as ``pf``; their column chunks of
    ``columns``) checked against the memory budget before any page is decoded: a 14 KiB file can hold a
    300 MiB zstd value (:mod:`explorer.format.budget`). First the uncompressed sizes the footer declares,
    each row group and (``together``: they are read at once) their sum; then the page headers of those
    chunks, each page against the budget and all of a chunk's against the footer, since Arrow allocates
    what a page header declares (:func:`explorer.format.parquet_pages.check_page_sizes`). ``footer``: the
    file's :func:`~explorer.format.parquet_pages.footer_chunks` parsed before (a reader reading one file range
    by range parses it once)."""
    # the footer's chunks as parsed here: pyarrow's RowGroupMetaData.column() aborts the process on some
    # damaged footers (an uncaught C++ exception), and these bytes' checksum may not be checked yet
    groups, wanted = footer if footer is not None else footer_chunks(path), None if columns is None else set(columns)
    total, read = 0, []
    for i in ids:
        if not 0 <= i < len(groups):
            raise SnapshotCorruptError(f"{path}: row group {i} is not in its footer ({len(groups)} row groups)")
        rg = groups[i]
        size = sum(max(0, c.total_uncompressed_size) for c in rg.columns
                   if wanted is None or c.path_in_schema.split(".")[0] in wanted)
        if wanted is None:
            size = max(size, rg.total_byte_size)
        budget.check(size, file=path, what=f"row group {i} ({rg.num_rows:,} rows, uncompressed)")
        total += size
        read.append(i)
    if together and len(read) > 1:
        budget.check(total, file=path, what=f"row groups {read[0]}..{read[-1]} read together (uncompressed)")
    if budget.current() is not None:
        check_page_sizes(path, groups, read, wanted)


def read_parquet_key_groups(path: Path, row_groups: list[list[int]], key_groups: Iterable[int] | None,
                            columns: Sequence[str] | None = None, footer: list[Any] | None = None) -> pa.Table:
    """Read the row groups of ``path`` that hold any of ``key_groups`` (all when None); ``footer``: see
    :func:`check_row_groups`."""
    pf = pq.ParquetFile(path)
    if key_groups is None:
        check_row_groups(path, pf, range(pf.metadata.num_row_groups), columns, footer=footer)
        return pf.read(columns=list(columns) if columns else None)
    wanted = np.unique(np.fromiter((int(k) for k in key_groups), dtype=np.int64))
    # a row group is wanted when some wanted key group lies in [lo, hi]: the first wanted >= lo is <= hi
    ids = [i for i, (lo, hi, _) in enumerate(row_groups)
           if (j := int(np.searchsorted(wanted, lo))) < len(wanted) and wanted[j] <= hi]
    if not ids:
        return pf.schema_arrow.empty_table() if columns is None else pf.schema_arrow.empty_table().select(list(columns))
    cols = list(columns) if columns else None
    if cols is not None and "key_group" not in cols:
        cols = cols + ["key_group"]
    check_row_groups(path, pf, ids, cols, footer=footer)
    t = pf.read_row_groups(ids, columns=cols)

    if len(wanted) == int(wanted[-1]) - int(wanted[0]) + 1:  # a range: two comparisons, no hash set
        col = t.column("key_group")
        lo_hi = [int(min(lo for lo, _, _ in (row_groups[i] for i in ids))), int(max(hi for _, hi, _ in
                                                                                   (row_groups[i] for i in ids)))]
        if not (wanted[0] <= lo_hi[0] and lo_hi[1] <= wanted[-1]):
            t = t.filter(pc.and_(pc.greater_equal(col, pa.scalar(int(wanted[0]), pa.int32())),
                                 pc.less_equal(col, pa.scalar(int(wanted[-1]), pa.int32()))))
    else:
        t = t.filter(pc.is_in(t.column("key_group"), value_set=pa.array(wanted, type=pa.int32())))
    if columns is not None and "key_group" not in columns:
        t = t.drop_columns(["key_group"])
    return t
