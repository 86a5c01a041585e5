"""Reading the RocksDB backend's native files (incremental and full native checkpoints) without the engine.

An incremental checkpoint stores a RocksDB subtask's keyed state as the
database's own files, not as Parquet. Its metadata marks such a subtask with
``"state_format": "rocksdb-native"`` and lists the files under ``"native"``::

    "native": {"files": {"000012.sst": "../shared/<uid>/<sha>-000012.sst",
                         "MANIFEST-000005": "native/<uid>/0/MANIFEST-000005", ...},
               "max_parallelism": 128, "key_group_prefix_bytes": 1}

(SST files live in the checkpoint directory's ``shared/`` area and are named
by content, so consecutive checkpoints share them; the small files are private
to the checkpoint. A *full* native checkpoint, Flink's ``CheckpointType.FULL``,
keeps its SST files private too: ``native/<uid>/<subtask>/000012.sst``.) The byte layout of keys and values is the one of
:mod:`.layout` (format version 1), which the engine writes; this module decodes
it with the state's declared type from the metadata, so a reader needs neither
the job's code nor the engine.

Nothing here modifies a checkpoint: :class:`NativeFiles` links (or copies)
the files into a private temporary folder first, because RocksDB, even
read-only, wants to own the directory it opens.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import pyarrow as pa

from ...errors import SnapshotFormatError
from ..keyed import SAVEPOINT, KeyGroupParquetWriter, ParquetProfile, rows_to_table, write_parquet_by_key_group
from ..prefetch import prefetch
from ..snapshot import resolve
from ...storage import as_path
from ..ttl import is_expired
from ..states import StoredState
from ..types import TypeInfo
from .columns import decode_batch, supported
from .layout import decode_rows, key_group_bounds, scan

__all__ = [
    "NATIVE_FORMAT",
    "TABLE_BATCH",
    "NativeFiles",
    "decoded_rows",
    "key_group_runs",
    "materialize",
    "native_rows",
    "native_table",
    "write_decoded",
    "write_native_table",
]

#: the ``state_format`` of a subtask whose keyed state is stored as RocksDB files
NATIVE_FORMAT = "rocksdb-native"


def materialize(folder: Path, files: dict[str, str], target: Path) -> Path:
    """Put the files of one native subtask into ``target`` (a new folder) under their RocksDB names.

    SST files are hard-linked (they are immutable; RocksDB never writes into
    an existing SST), everything else is copied, so opening ``target``
    read-write can never change the checkpoint.
    """
    target = Path(target)
    target.mkdir(parents=True, exist_ok=False)
    for name, rel in sorted(files.items()):
        if "/" in name or name in ("", ".", ".."):
            raise SnapshotFormatError(f"{folder}: native file name {name!r} is not a plain file name")
        src = resolve(folder, rel)
        dst = target / name
        if name.endswith(".sst"):
            try:
                os.link(src, dst)
                continue
            except OSError:
                pass
        shutil.copyfile(src, dst)
    if not (target / "CURRENT").is_file():
        raise SnapshotFormatError(f"{folder}: the native files {sorted(files)} have no CURRENT file")
    return target


def key_group_runs(key_groups: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted key groups as inclusive ``(first, last)`` runs: one range scan each."""
    runs: list[tuple[int, int]] = []
    for kg in sorted(set(int(k) for k in key_groups)):
        if runs and kg == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], kg)
        else:
            runs.append((kg, kg))
    return runs


def native_rows(cf, desc: "StoredState | dict[str, Any]", prefix_bytes: int, runs: list[tuple[int, int]],
                value_info: TypeInfo | None = None) -> Iterator[tuple]:
    """Rows ``(key_group, key, namespace, user_key_or_index, value, last_access_ms)`` of one state.

    ``cf`` is the state's column family, ``desc`` its description from the
    snapshot metadata, ``runs`` the inclusive key-group ranges to scan.
    Values decode with ``value_info`` (default: the described type, structs as dicts).
    """
    state = StoredState.of(desc)
    yield from decode_rows(_entries(cf, prefix_bytes, runs), state.kind, state.has_ttl,
                           prefix_bytes, value_info or state.value_info, state.name)


#: raw entries decoded together by :func:`native_table`
TABLE_BATCH = 1 << 16


def _decoded_tables(cf, desc: "StoredState | dict[str, Any]", prefix_bytes: int, runs: list[tuple[int, int]], value_info: TypeInfo,
                    user_key: Any, expire: tuple[int, int] | None) -> Iterator[tuple[Any, dict[str, str]]]:
    """Non-empty tables of TABLE_BATCH raw entries each, decoded column-wise where their shape
    allows and row by row otherwise, with their kinds."""

    state = StoredState.of(desc)
    ttl, kind = state.has_ttl, state.kind
    # the next batch is read from RocksDB in a thread while this one is decoded
    for keys, values in prefetch(_raw_batches(cf, prefix_bytes, runs, TABLE_BATCH), "snapshot-scan"):
        got = decode_batch(keys, values, kind, prefix_bytes, ttl, value_info, user_key, expire)
        if got is None:
            rows = list(decoded_rows(zip(keys, values), desc, prefix_bytes, value_info, expire))
            if not rows:
                continue
            got = rows_to_table(rows, value_info, user_key)
        yield got


def decoded_rows(entries: Iterable[tuple[bytes, bytes]], desc: "StoredState | dict[str, Any]", prefix_bytes: int,
                 value_info: TypeInfo, expire: tuple[int, int] | None) -> Iterator[tuple]:
    """Raw ``(key, value)`` entries of the state ``desc`` decoded row by row (:func:`.layout.decode_rows`),
    without the rows expired at ``now_ms`` when ``expire`` = ``(ttl_ms, now_ms)`` and the state has TTL."""
    state = StoredState.of(desc)
    rows = decode_rows(entries, state.kind, state.has_ttl, prefix_bytes, value_info, state.name)
    if expire is not None and state.has_ttl:
        ttl_ms, now_ms = expire
        rows = (r for r in rows if not is_expired(r[5], ttl_ms, now_ms))
    return rows


def _row_table(cf, desc: "StoredState | dict[str, Any]", prefix_bytes: int, runs: list[tuple[int, int]], value_info: TypeInfo,
               user_key: Any, expire: tuple[int, int] | None) -> tuple[Any, dict[str, str]]:
    """The whole table decoded row by row (the reference path)."""

    if expire is None or not StoredState.of(desc).has_ttl:
        rows = native_rows(cf, desc, prefix_bytes, runs, value_info)
    else:
        rows = decoded_rows(_entries(cf, prefix_bytes, runs), desc, prefix_bytes, value_info, expire)
    return rows_to_table(list(rows), value_info, user_key)


def native_table(cf, desc: "StoredState | dict[str, Any]", prefix_bytes: int, runs: list[tuple[int, int]], value_info: TypeInfo,
                 user_key: Any, expire: tuple[int, int] | None = None, columnar: bool = True
                 ) -> tuple[Any, dict[str, str]]:
    """One state's entries in ``runs`` as the canonical keyed-state table
    (:func:`explorer.format.keyed.rows_to_table` of :func:`native_rows`, with its kinds).

    Batches of raw entries are decoded column-wise where their shape allows
    (:mod:`.columns`), the others row by row; ``columnar=False`` decodes
    everything row by row. ``expire`` = ``(ttl_ms, now_ms)`` drops entries that
    have expired at ``now_ms`` (a full-snapshot TTL cleanup). ``cf`` is only
    iterated, so it should be a private, read-only view (its iterator stays open).
    """


    if not columnar or not supported(StoredState.of(desc).kind, value_info, user_key):
        return _row_table(cf, desc, prefix_bytes, runs, value_info, user_key, expire)
    tables: list[pa.Table] = []
    kinds: dict[str, str] | None = None
    for table, k in _decoded_tables(cf, desc, prefix_bytes, runs, value_info, user_key, expire):
        if kinds is not None and (k != kinds or table.schema != tables[0].schema):
            # e.g. keys of two types: the row path reports it (or a namespace kind differs)
            return _row_table(cf, desc, prefix_bytes, runs, value_info, user_key, expire)
        kinds = k
        tables.append(table)
    if not tables:
        return rows_to_table([], value_info, user_key)
    return pa.concat_tables(tables), kinds  # one chunk per batch: the Parquet writer takes them as they are


def write_native_table(cf, desc: "StoredState | dict[str, Any]", prefix_bytes: int, runs: list[tuple[int, int]],
                       value_info: TypeInfo, user_key: Any, path: Path, expire: tuple[int, int] | None = None,
                       profile: ParquetProfile = SAVEPOINT
                       ) -> tuple[list[list[int]], int, dict[str, str], dict[str, str] | None]:
    """:func:`native_table` written to ``path`` as :func:`explorer.format.keyed.write_parquet_by_key_group`
    writes it (the same file), each batch as soon as it is decoded, so the Parquet encoding
    overlaps the scan. Returns the row groups, the row count, the kinds, and the file's
    checksum entry (``{"sha256": hex}`` or ``{"xxh3_128": hex}``, the ``profile``'s) when it was
    computed while writing (else None)."""

    def whole(table_kinds):
        table, kinds = table_kinds
        return write_parquet_by_key_group(table, path, profile=profile), table.num_rows, kinds, None

    if not supported(StoredState.of(desc).kind, value_info, user_key):
        return whole(_row_table(cf, desc, prefix_bytes, runs, value_info, user_key, expire))
    got = write_decoded(path, _decoded_tables(cf, desc, prefix_bytes, runs, value_info, user_key, expire),
                        lambda: rows_to_table([], value_info, user_key), profile)
    return whole(_row_table(cf, desc, prefix_bytes, runs, value_info, user_key, expire)) if got is None else got


def write_decoded(path: Path, pieces: Iterable[tuple[Any, dict[str, str]]], empty: Callable[[], tuple[Any, dict]],
                  profile: ParquetProfile = SAVEPOINT, size_hint: int = 0
                  ) -> tuple[list[list[int]], int, dict[str, str], dict[str, str] | None] | None:
    """Write decoded ``(table, kinds)`` pieces of one state to ``path`` as they come, as one
    key-group Parquet file: ``(row groups, rows, kinds, checksum entry)``. None, with the file
    aborted, when a piece's kinds or schema differ from the first's (the caller takes the
    row path, which reports or reconciles it); without pieces, ``empty()`` written whole
    (checksum None: the caller hashes the file). ``size_hint``: about the file's size, if known
    (see :class:`explorer.format.keyed.KeyGroupParquetWriter`)."""

    writer: KeyGroupParquetWriter | None = None
    kinds: dict[str, str] | None = None
    try:
        for table, k in pieces:
            if writer is None:
                writer = KeyGroupParquetWriter(path, table.schema, profile=profile, size_hint=size_hint)
                kinds = k
            elif k != kinds or table.schema != writer.schema:
                writer.abort()
                writer = None
                return None
            writer.write(table)
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    if writer is None:
        table, kinds = empty()
        return write_parquet_by_key_group(table, path, profile=profile), table.num_rows, kinds, None
    groups = writer.close()
    return groups, writer.rows, kinds, writer.checksum


def _entries(cf, prefix_bytes: int, runs: list[tuple[int, int]]) -> Iterator[tuple[bytes, bytes]]:
    """Raw entries of the key-group ``runs``, one chunked scan (:func:`.layout.scan`) each."""
    for first, last in runs:
        yield from scan(lambda: cf, *key_group_bounds(first, last, prefix_bytes))


def _raw_batches(cf, prefix_bytes: int, runs: list[tuple[int, int]], size: int
                 ) -> Iterator[tuple[list[bytes], list[bytes]]]:
    """Raw keys and values in ``runs``, ``size`` entries at a time (each one scan chunk)."""
    for first, last in runs:
        entries = scan(lambda: cf, *key_group_bounds(first, last, prefix_bytes), chunk=size, bulk=True)
        while chunk := list(itertools.islice(entries, size)):
            keys, values = zip(*chunk)
            yield list(keys), list(values)


class NativeFiles:
    """One native subtask opened read-only from a private link farm; use as a context manager.

    >>> with NativeFiles(folder, sub["native"]) as nf:
    ...     rows = list(nf.rows(desc, key_groups=[3, 4]))
    """

    def __init__(self, folder: Path, native: dict[str, Any], scratch: Path | None = None) -> None:
        self.folder = as_path(folder)
        self.native = native
        self.prefix_bytes = int(native["key_group_prefix_bytes"])
        self._tmp = tempfile.mkdtemp(prefix="state-explorer-native-", dir=scratch)
        self.path = materialize(self.folder, native["files"], Path(self._tmp) / "db")
        self._db = None
        self._cfs: dict[str, Any] = {}

    def __enter__(self) -> "NativeFiles":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _open(self):
        if self._db is None:
            from rocksdict import AccessType, Options, Rdict

            self._db = Rdict(str(self.path), Options(raw_mode=True), access_type=AccessType.read_only())
        return self._db

    def column_family(self, name: str):
        cf = self._cfs.get(name)
        if cf is None:
            try:
                cf = self._cfs[name] = self._open().get_column_family(name)
            except Exception as exc:  # rocksdict raises a bare Exception for an unknown family
                raise SnapshotFormatError(f"{self.folder}: the native files of this subtask have no state {name!r}") from exc
        return cf

    def rows(self, desc: "StoredState | dict[str, Any]", key_groups: Iterable[int] | None = None,
             key_group_range: tuple[int, int] | None = None, value_info: TypeInfo | None = None) -> Iterator[tuple]:
        """Rows of the state ``desc``, restricted to ``key_groups`` (a set) or ``key_group_range``."""
        if key_groups is not None:
            runs = key_group_runs(key_groups)
        elif key_group_range is not None:
            runs = [tuple(key_group_range)]
        else:
            runs = [(0, (1 << (8 * self.prefix_bytes)) - 2)]
        return native_rows(self.column_family(StoredState.of(desc).name), desc, self.prefix_bytes, runs, value_info)

    def close(self) -> None:
        for cf in self._cfs.values():
            cf.close()
        self._cfs = {}
        if self._db is not None:
            self._db.close()
            self._db = None
        shutil.rmtree(self._tmp, ignore_errors=True)
