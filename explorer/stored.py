"""A snapshot as stored: which reader opens a path, and the :class:`StoredSnapshot` over it.

Opening reads metadata only. ``keyed_state(...)`` reads keyed state on demand, pushing
operator, state and key-group filters down to the files, and returns one pandas DataFrame
with the columns of the public contract (:data:`explorer.readers.base.CONTRACT_COLUMNS`),
whatever the format. A :class:`StoredSnapshot` also owns the :class:`AnalysisCache` the
analyses keep on it.

This is the layer under :mod:`explorer.analysis`: analyses take a ``StoredSnapshot`` (or a
DataFrame) and open paths with :func:`open_stored`. :class:`explorer.snapshot.Snapshot`,
what ``explorer.open`` returns, is a ``StoredSnapshot`` with the analyses as methods and a
notebook display.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from tqdm.auto import tqdm

from .errors import AnalysisError, SnapshotError, SnapshotNotFoundError
from .format.checkpoint_dir import checkpoint_folders
from .keygroups import assign_to_key_group
from .readers.base import (
    CONTRACT_COLUMNS,
    FIXED_TYPES,
    TUPLE_COLUMNS,
    KeyedStateQuery,
    SnapshotReader,
    constant_values,
    convert_failure,
    empty_piece,
    has_union,
    python_values,
    struct_to_tuple,
)
from .readers.engine import EngineSnapshotReader
from .storage import FileCache, StoragePath, as_path
from .storage.sizes import parse_size

#: readers tried in order by :func:`reader_for`
READERS: list[type[SnapshotReader]] = [EngineSnapshotReader]


def register_optional_readers() -> None:
    """Add the Flink and Spark readers to :data:`READERS` (imported at the first open, not with `explorer`)."""
    try:  # the Flink reader (pure Python)
        from .readers.flink import FlinkSnapshotReader  # type: ignore[attr-defined]

        if FlinkSnapshotReader not in READERS:
            READERS.append(FlinkSnapshotReader)
    except ImportError:  # pragma: no cover - optional module not present
        pass
    try:  # Spark checkpoints (needs a SparkSession only when read)
        from .readers.spark import SparkCheckpointReader  # type: ignore[attr-defined]

        global _SPARK
        _SPARK = SparkCheckpointReader
        if SparkCheckpointReader not in READERS:
            READERS.append(SparkCheckpointReader)
    except ImportError:  # pragma: no cover
        pass


def _readers_lazily() -> Iterator[type[SnapshotReader]]:
    """:data:`READERS` in order; the optional ones (Flink's, Spark's) registered, and so imported, only when
    the ones before them did not recognise the path (an engine snapshot opens without importing them)."""
    yield from list(READERS)
    register_optional_readers()
    yield from list(READERS)


def checkpoints_in(directory: Path) -> list[Path]:
    """Complete ``chk-N`` folders of an engine checkpoint directory, oldest first.

    Folders that vanish while they are looked at (a job's retention deleting old
    checkpoints) are left out, not an error.
    """
    try:
        return [p for _, p in checkpoint_folders(as_path(directory), EngineSnapshotReader.detect)]
    except FileNotFoundError as exc:
        raise SnapshotNotFoundError(f"{directory}: vanished while listing its chk-N folders") from exc


def _chk_folders(directory: Any) -> list[tuple[int, Any]]:
    """``(N, folder)`` of the ``chk-N`` folders of ``directory``, newest first."""
    return checkpoint_folders(directory)[::-1]


def _detect(reader_cls: type[SnapshotReader], p: Any) -> bool:
    try:
        return bool(reader_cls.detect(p))
    except Exception as exc:  # noqa: BLE001 - the error boundary of detection
        err = convert_failure(exc, p, what="detecting the format of")
        if err is exc:
            raise
        raise err from exc


def _newest_checkpoint(directory: Any, **options: Any) -> SnapshotReader | None:
    """The reader of the newest ``chk-N`` of ``directory`` that opens, whatever its format (the engine's,
    Flink's: a job's checkpoint directory of ``chk-N``, ``shared/``, ``taskowned/``), as the engines pick
    the checkpoint to restore; a newer one passed over (no ``_metadata`` yet: being written or aborted;
    or damaged) is said in a note of the reader and a warning."""
    passed: list[str] = []
    for n, p in _chk_folders(directory):
        try:
            cls = next((c for c in READERS if c is not _SPARK and _detect(c, p)), None)
            if cls is None:
                passed.append(f"chk-{n} (no complete _metadata: being written, aborted or not a snapshot)")
                continue
            reader = cls(p, **options)
        except FileNotFoundError:
            passed.append(f"chk-{n} (vanished while opening it: removed by the job's retention?)")
            continue
        except SnapshotError as exc:
            passed.append(f"chk-{n} ({exc})")
            continue
        if passed:
            text = (f"{directory}: opened chk-{n}, the newest checkpoint that opens; passed over newer "
                    + "; ".join(passed))
            reader.notes.insert(0, text)
            warnings.warn(text, stacklevel=3)
        return reader
    if passed:
        raise SnapshotError(f"{directory}: no chk-N folder opens; found " + "; ".join(passed)
                            + "; expected at least one complete checkpoint")
    return None


_SPARK: type | None = None  # the Spark reader once registered (it reads local folders only)


def reader_for(path: str | Path, storage_options: dict[str, Any] | None = None,
               cache_dir: str | Path | None = None, cache_max_bytes: int | str | None = None,
               **options: Any) -> SnapshotReader:
    """The reader of a checkpoint, savepoint or checkpoint directory (its newest complete checkpoint).

    ``path``: a local path or a URL of a remote store (``s3://``, ``gs://``, ``hdfs://``,
    ``abfs://``; :mod:`explorer.storage`), whose files are fetched when first read into a local
    cache (``cache_dir``, ``cache_max_bytes``; ``storage_options`` for the filesystem).
    For a checkpoint directory, a newer ``chk-N`` that does not open is never passed over
    silently: the reader's notes and a warning say which one was opened and why.
    """
    cache = FileCache(cache_dir, cache_max_bytes) if (cache_dir is not None or cache_max_bytes is not None) else None
    p = as_path(path, storage_options, cache)
    if not p.exists():
        raise SnapshotNotFoundError(f"{p}: no such file or directory; expected a checkpoint or savepoint folder")
    if p.is_dir() and not (p / "_metadata").exists() and any(True for _ in _chk_folders(p)):
        register_optional_readers()  # a job's checkpoint directory may hold any format's chk-N
        reader = _newest_checkpoint(p, **options)
        if reader is not None:
            return reader
    tried: set[type[SnapshotReader]] = set()
    for reader_cls in _readers_lazily():
        if reader_cls in tried:
            continue
        tried.add(reader_cls)
        if _detect(reader_cls, p):
            if isinstance(p, StoragePath) and reader_cls is _SPARK:
                return reader_cls.on_store(p, **options)  # a local folder of the files of the batch read
            return reader_cls(p, **options)
    listing = sorted(x.name for x in p.iterdir())[:10] if p.is_dir() else [p.name]
    raise SnapshotNotFoundError(
        f"{p}: found {listing}, which is no snapshot State Explorer knows; expected an engine checkpoint or "
        "savepoint (_metadata starting with SXSNAP), a checkpoint directory of chk-N folders, a Spark "
        "Structured Streaming checkpoint, or an Apache Flink savepoint/checkpoint (_metadata)"
    )


def open_stored(path: str | Path, memory_budget: int | str | None = None, **options: Any) -> "StoredSnapshot":
    """A :class:`StoredSnapshot` of what :func:`reader_for` finds at ``path`` (``explorer.open``
    gives the same as an :class:`explorer.snapshot.Snapshot`)."""
    return StoredSnapshot(reader_for(path, **options), memory_budget=memory_budget)


#: what one row of keyed state costs in memory as the contract DataFrame of :meth:`StoredSnapshot.keyed_state`
#: (measured: 10 M keys of ``bench_explorer`` peaked at 4.4 GB, about 440 bytes per row, Python keys included)
FRAME_BYTES_PER_ROW = 440
#: what one row costs while an analysis holds it (the analysis columns, keys as codes, the Arrow pieces they
#: came from and the per-key sums; :mod:`explorer.analysis._ranges`). Measured with ``bench_scale``'s
#: children on 2.4 M rows: budgets of 256 MB and 512 MB peaked 365 MB and 570-600 MB above the ~130 MB of
#: Python and its imports (hot keys, key-group distribution, diff)
ANALYSIS_BYTES_PER_ROW = 320
_MB = 1 << 20


def available_memory() -> int:
    """Bytes of memory available to this process now (``MemAvailable`` of Linux; else the physical memory)."""
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:  # not Linux
        pass
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - no way to tell
        return 4 << 30


def default_memory_budget() -> int:
    """Half the memory available when the snapshot is opened, at least 256 MB."""
    return max(256 * _MB, available_memory() // 2)


def parse_memory_budget(budget: int | str | None) -> int:
    """``memory_budget=`` as bytes: an int, a string such as ``"2GB"``/``"512MB"`` (GB means GiB, as in Flink's and
    Spark's memory settings: :mod:`explorer.storage.sizes`), or None (the default)."""
    if budget is None:
        return default_memory_budget()
    return parse_size(budget, what="memory_budget", error=ValueError)


class AnalysisCache:
    """What the analyses keep on a :class:`Snapshot` between calls (a snapshot on disk does not change).

    Filled by :mod:`explorer.analysis` (its ``_columns`` module), emptied by
    :meth:`StoredSnapshot.drop_analysis_cache`:

    * ``frame``: the analysis frame, the columns most analyses need with keys as integer
      codes (None until the first analysis loads it);
    * ``pieces``: ``(operator, state, first row, end row)`` of each reader piece in ``frame``;
    * ``row_hashes``: a uint64 hash of each row's ``(namespace, user_key, value)`` (for a
      diff), or None until computed;
    * ``derived``: what analyses built from ``frame``, by key (:meth:`memo`). A key is a tuple
      ``(what, rows, *parameters)``: ``what`` names the result (``"per_key"``,
      ``"kg_aggregates"``, ``"key_stats"``), ``rows`` the operators and states it was built
      from (``filter_key`` of ``explorer.analysis._columns``), the rest whatever else it
      depends on (an operator's layout, a max parallelism); ``("heavy_hitters",)`` is the
      reader's traffic sketch, read once.
    """

    def __init__(self) -> None:
        self.frame: pd.DataFrame | None = None
        self.pieces: list[tuple[str, str, int, int]] = []
        self.row_hashes: np.ndarray | None = None
        self.derived: dict[tuple, Any] = {}

    @property
    def loaded(self) -> bool:
        """Whether the analysis frame is loaded."""
        return self.frame is not None

    def memo(self, key: tuple, build: Callable[[], Any]) -> Any:
        """``build()`` once per ``key`` (see the class doc for the key scheme)."""
        if key not in self.derived:
            self.derived[key] = build()
        return self.derived[key]

    def clear(self) -> None:
        """Forget everything: the next analysis loads the frame again."""
        self.frame, self.pieces, self.row_hashes = None, [], None
        self.derived.clear()

class StoredSnapshot:
    """A snapshot opened through its reader: metadata, keyed state, and the analyses' cache."""

    def __init__(self, reader: SnapshotReader, memory_budget: int | str | None = None) -> None:
        self.reader = reader
        self._info = reader.info()
        #: the columns and results analyses keep on this snapshot (:class:`AnalysisCache`)
        self.analysis_cache = AnalysisCache()
        #: bytes analyses may hold at once: past it they stream over key-group ranges
        #: (:mod:`explorer.analysis._ranges`); default half the memory available at opening
        self.memory_budget = parse_memory_budget(memory_budget)
        reader.memory_budget = self.memory_budget  # what its decoders check declared sizes against

    # --- metadata ---------------------------------------------------------------------
    @property
    def path(self) -> Path:
        return self.reader.path

    @property
    def format(self) -> str:
        return self._info.format

    @property
    def kind(self) -> str:
        return self._info.kind

    @property
    def checkpoint_id(self) -> int | None:
        return self._info.checkpoint_id

    @property
    def created_at(self) -> pd.Timestamp | None:
        return self._info.created_at

    @property
    def operators(self) -> pd.DataFrame:
        return self.reader.operators()

    @property
    def states(self) -> pd.DataFrame:
        return self.reader.states()

    @property
    def subtasks(self) -> pd.DataFrame:
        return self.reader.subtasks()

    @property
    def notes(self) -> list[str]:
        return list(self.reader.notes)

    def parallelism(self, operator: str | None = None) -> int:
        ops = self.operators
        if operator is not None:
            ops = ops[ops["operator"] == operator]
        keyed = ops[ops.get("keyed", True) == True] if "keyed" in ops else ops  # noqa: E712
        return int((keyed if len(keyed) else ops)["parallelism"].max())

    def max_parallelism(self, operator: str | None = None) -> int:
        ops = self.operators
        if operator is not None:
            ops = ops[ops["operator"] == operator]
        return int(ops["max_parallelism"].max())

    # --- data -------------------------------------------------------------------------
    def keyed_state(
        self,
        operator: str | Iterable[str] | None = None,
        state: str | Iterable[str] | None = None,
        key: Any = None,
        key_groups: Iterable[int] | None = None,
        columns: Sequence[str] | None = None,
        progress: bool | None = None,
        *,
        limit: int | None = None,
        offset: int = 0,
        unbounded: bool = False,
    ) -> pd.DataFrame:
        """Keyed state, one row per entry, with the contract columns (filters pushed down).

        ``key_groups`` is any iterable of key groups (``range(0, 64)`` for a range). ``offset``
        and ``limit`` page through the rows in the reader's order (operator, subtask, state,
        key group): only the pieces up to the page are read and only the page is converted.
        Without ``limit``, a read whose estimated DataFrame exceeds the snapshot's
        ``memory_budget`` raises :class:`~explorer.errors.AnalysisError` unless ``unbounded=True``:
        stream it with :meth:`batches`, or ask a filtered or paged part.
        """
        if offset < 0 or (limit is not None and limit < 0):
            raise ValueError(f"offset={offset!r}, limit={limit!r}: expected non-negative row counts")
        q = self.query(operator, state, key_groups, columns)
        if key is not None and q.key_groups is None:
            q = self._key_query(q, key)
        # the columns with one value a piece (operator, state, kind) are not built row by row in Arrow only to
        # be dropped: readers leave them out and give their values with the piece (``_combine`` fills them)
        light = [c for c in (columns or CONTRACT_COLUMNS) if c not in _PER_PIECE_COLUMNS]
        try:
            return self._keyed_frame(dataclasses.replace(q, columns=tuple(light)) if light and (
                not columns or set(columns) & set(_PER_PIECE_COLUMNS)) else q, key, columns, progress, limit,
                offset, unbounded)
        except _LeftOut:  # a reader that does not give them: read them
            return self._keyed_frame(q, key, columns, progress, limit, offset, unbounded)

    def _keyed_frame(self, q: KeyedStateQuery, key: Any, columns: Sequence[str] | None, progress: bool | None,
                     limit: int | None, offset: int, unbounded: bool) -> pd.DataFrame:
        total = self.reader.estimated_rows(q)
        if limit is None and not unbounded and key is None and total \
                and total * FRAME_BYTES_PER_ROW > self.memory_budget:
            raise AnalysisError(
                f"{self.path}: keyed_state() would hold about {total:,} rows, about "
                f"{total * FRAME_BYTES_PER_ROW / _MB:,.0f} MB as a DataFrame, over the memory budget of "
                f"{self.memory_budget / _MB:,.0f} MB; expected a part that fits: filter (operator=, state=, key=, "
                "key_groups=), page (limit=, offset=), stream (snap.batches(), snap.dataset()), or pass "
                "unbounded=True (or open with a larger memory_budget=)")
        if limit is not None and total:
            total = min(total, offset + limit)
        show = progress if progress is not None else bool(total and total > 2_000_000)
        pieces = []
        skip, left = offset, limit
        with tqdm(total=total, unit="rows", desc="loading state", disable=not show) as bar:
            for piece in self.reader.keyed_pieces(q):
                if left is not None and left <= 0:
                    break
                if columns:
                    piece = piece.select([c for c in CONTRACT_COLUMNS if c in columns and c in piece.column_names])
                bar.update(piece.num_rows)
                if skip:
                    if piece.num_rows <= skip:
                        skip -= piece.num_rows
                        continue
                    piece, skip = piece.slice(skip), 0
                if left is not None:
                    piece = piece.slice(0, left)
                    left -= piece.num_rows
                pieces.append(piece)
        try:
            df = _combine(pieces, columns)
        except _LeftOut:
            raise
        except Exception as exc:  # noqa: BLE001 - pieces that do not fit together are damaged input
            err = convert_failure(exc, self.path, what="combining the pieces read from")
            if err is exc:
                raise
            raise err from exc
        if key is not None and not getattr(self.reader, "filters_keys", False):
            df = df[df["key"].map(lambda k: k == key)].reset_index(drop=True)
        return df

    def query(self, operator: str | Iterable[str] | None = None, state: str | Iterable[str] | None = None,
              key_groups: Iterable[int] | None = None, columns: Sequence[str] | None = None) -> KeyedStateQuery:
        """The reader's :class:`~explorer.readers.base.KeyedStateQuery` for these filters."""
        return KeyedStateQuery(
            operators=_as_set(operator),
            states=_as_set(state),
            key_groups=None if key_groups is None else frozenset(int(k) for k in key_groups),
            columns=tuple(columns) if columns else None,
        )

    # --- streamed reads ---------------------------------------------------------------
    def batches(self, batch_size: int = 65_536, operator: str | Iterable[str] | None = None,
                state: str | Iterable[str] | None = None, key_groups: Iterable[int] | None = None,
                columns: Sequence[str] | None = None, key: Any = None,
                progress: bool | None = None) -> Iterator[pa.RecordBatch]:
        """Keyed state as Arrow record batches of at most ``batch_size`` rows, read piece by piece.

        Only one piece (one state file's wanted key groups) is in memory at a time. Batches
        have the contract columns (``columns=`` selects some); the ``key``, ``namespace``,
        ``user_key`` and ``value`` types are those of each state, so batches of different
        states may have different schemas. Tuple keys are structs ``f0, f1, ...``.
        """
        if batch_size <= 0:
            raise ValueError(f"batch_size={batch_size!r}: expected a positive number of rows")
        q = self.query(operator, state, key_groups, columns)
        if key is not None and q.key_groups is None:
            q = self._key_query(q, key)
        total = self.reader.estimated_rows(q)
        show = progress if progress is not None else bool(total and total > 2_000_000)
        with tqdm(total=total, unit="rows", desc="streaming state", disable=not show) as bar:
            for piece in self.reader.keyed_pieces(q):
                if columns:
                    piece = piece.select([c for c in CONTRACT_COLUMNS if c in columns])
                if key is not None and not getattr(self.reader, "filters_keys", False) and piece.num_rows:
                    keys = piece.column("key").to_pylist()
                    piece = piece.filter(pa.array([k == key or struct_to_tuple(k) == key for k in keys]))
                bar.update(piece.num_rows)
                yield from piece.to_batches(max_chunksize=batch_size)

    def to_arrow(self, operator: str | Iterable[str] | None = None, state: str | Iterable[str] | None = None,
                 key_groups: Iterable[int] | None = None, columns: Sequence[str] | None = None,
                 key: Any = None) -> pa.Table:
        """Keyed state as one Arrow table (no pandas conversion: about a quarter of the DataFrame's memory).

        Pieces of states whose keys or values have different types are combined where Arrow can
        (``promote_options="permissive"``); where it cannot, a clear error asks for one state
        (``state=``) or :meth:`batches`.
        """
        batches = list(self.batches(operator=operator, state=state, key_groups=key_groups, columns=columns,
                                    key=key, batch_size=1 << 30))
        if not batches:
            cols = [c for c in CONTRACT_COLUMNS if not columns or c in columns]
            return empty_piece(cols)
        try:
            return pa.concat_tables([pa.Table.from_batches([b]) for b in batches], promote_options="permissive")
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
            schemas = sorted({str(b.schema.field("key").type) + " / " + str(b.schema.field("value").type)
                              for b in batches if "key" in b.schema.names and "value" in b.schema.names})
            raise AnalysisError(
                f"{self.path}: the states asked for have keys or values of different types ({'; '.join(schemas)}), "
                f"which one Arrow table cannot hold ({exc}); expected one state (state=...), or use "
                "snap.batches() whose batches keep each state's own types") from exc

    def dataset(self, operator: str | Iterable[str] | None = None, state: str | Iterable[str] | None = None):
        """A :class:`pyarrow.dataset.Dataset` of keyed state that other tools (DuckDB, Polars, Spark) can query.

        For engine snapshots stored as Parquet it is the state files themselves, not a copy:
        one fragment per (operator, state, subtask) file, with ``operator``, ``state`` and
        ``subtask`` as partition fields and each file's key-group range in its partition
        expression, so a filter on ``key_group`` skips whole files (and, through the Parquet
        statistics of row groups cut at key-group boundaries, row groups). Columns are those of
        the files (``key_group, key, namespace, user_key, value, last_access``), not the
        contract's computed ones (sizes, expiry). The states asked for must share a schema
        (their key and value types): pass ``state=`` otherwise. Other formats (Flink, Spark) get
        an in-memory dataset of :meth:`to_arrow` (read once, so it must fit the memory budget).
        """
        files = getattr(self.reader, "parquet_files", None)
        q = self.query(operator, state)
        if callable(files):
            found = files(q)
            if found is not None:
                return _parquet_dataset(self.path, found)
        return ds.dataset(self.to_arrow(operator=operator, state=state))

    def _key_query(self, q: KeyedStateQuery, key: Any) -> KeyedStateQuery:
        own = getattr(self.reader, "key_query", None)  # a reader whose keys are placed its own way (Spark's)
        if own is not None:
            return own(q, key)
        try:
            kg = assign_to_key_group(key, self.max_parallelism())
        except Exception:  # noqa: BLE001 - foreign key types: no push-down, filter after reading
            return q
        return KeyedStateQuery(q.operators, q.states, frozenset([kg]), q.keys, q.columns)

    def operator_state(self) -> pd.DataFrame:
        return self.reader.operator_state()

    def metrics(self) -> pd.DataFrame:
        return self.reader.metrics()

    def heavy_hitters(self) -> pd.DataFrame:
        return self.reader.heavy_hitters()

    def timings(self) -> dict[str, Any]:
        return self.reader.timings()

    def drop_analysis_cache(self) -> None:
        """Forget the columns the analyses loaded and kept on this Snapshot (to free memory)."""
        self.analysis_cache.clear()

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.format}, id={self.checkpoint_id}, path={str(self.path)!r}, "
                f"operators={len(self.operators)})")

def _parquet_dataset(path: Path, files: list[dict[str, Any]]):
    """A FileSystemDataset over the state files ``files`` (``file, operator, state, subtask,
    key_group_start, key_group_end`` each) with those as partition fields and guarantees."""
    if not files:
        raise AnalysisError(f"{path}: no Parquet state file matches; expected an operator and state it holds")
    schemas = {}
    for f in files:
        schemas.setdefault((f["operator"], f["state"]), pq.read_schema(f["file"]))
    try:
        file_schema = pa.unify_schemas(list(schemas.values()))
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise AnalysisError(
            f"{path}: the states {sorted(schemas)} have different column types, which one dataset cannot hold "
            f"({exc}); expected one state: snap.dataset(state=...)") from exc
    schema = file_schema.remove_metadata()
    for name, typ in (("operator", pa.string()), ("state", pa.string()), ("subtask", pa.int32())):
        schema = schema.append(pa.field(name, typ))
    parts = []
    for f in files:
        kg = ds.field("key_group")
        parts.append((ds.field("operator") == f["operator"]) & (ds.field("state") == f["state"])
                     & (ds.field("subtask") == pa.scalar(f["subtask"], pa.int32()))
                     & (kg >= pa.scalar(f["key_group_start"], pa.int32()))
                     & (kg <= pa.scalar(f["key_group_end"], pa.int32())))
    return ds.FileSystemDataset.from_paths([str(f["file"]) for f in files], schema=schema,
                                           format=ds.ParquetFileFormat(), filesystem=pafs.LocalFileSystem(),
                                           partitions=parts)


def _as_set(x: str | Iterable[str] | None) -> frozenset[str] | None:
    if x is None:
        return None
    if isinstance(x, str):
        return frozenset([x])
    return frozenset(x)


#: columns that hold one value per piece (an operator's, a state's, a kind's name)
_PER_PIECE_COLUMNS = ("operator", "state", "kind")


def _constant(piece: pa.Table, name: str) -> tuple[bool, Any]:
    """Whether column ``name`` of ``piece`` holds one value, and that value; the piece may have been read
    without that column when its metadata gives the value."""
    given = constant_values(piece)
    if name in given:
        return True, given[name]
    if name not in piece.column_names:
        return piece.num_rows == 0, None  # an empty piece has no value to give
    column = piece.column(name)
    if len(column) == 0 or column.null_count:
        return False, None
    first = column[0]
    if not pc.all(pc.equal(column, first)).as_py():
        return False, None
    return True, first.as_py()


def _ints_with_nulls(column: pa.ChunkedArray) -> np.ndarray:
    """An integer column with nulls as an object array of Python ints and None (no Python list in between)."""
    out = np.empty(len(column), dtype=object)
    valid = column.is_valid().to_numpy(zero_copy_only=False)
    idx = np.flatnonzero(valid)
    out[idx] = column.filter(column.is_valid()).to_numpy(zero_copy_only=False).astype(np.int64).tolist() \
        if len(idx) else []
    return out


def _piece_to_pandas(piece: pa.Table) -> pd.DataFrame:
    mixed = [f.name for f in piece.schema if has_union(f.type)]  # values of mixed types: Python values as stored
    df = piece.drop_columns(mixed).to_pandas(maps_as_pydicts="strict", integer_object_nulls=True,
                                             deduplicate_objects=False)
    for c in mixed:
        df.insert(piece.column_names.index(c), c, pd.Series(python_values(piece.column(c)), dtype=object, index=df.index))
    meta = piece.schema.metadata or {}
    for c in meta.get(TUPLE_COLUMNS, b"").decode().split(","):
        if c and c in df.columns:
            df[c] = pd.Series([struct_to_tuple(v) for v in df[c]], index=df.index, dtype=object)
    return df


def _combine(pieces: list[pa.Table], columns: Sequence[str] | None) -> pd.DataFrame:
    """One DataFrame from the pieces, in contract column order.

    Columns that are constant within each piece (operator, state, kind) are not converted
    row by row through Arrow: they are filled with ``np.repeat`` of one Python string per
    piece, which is what makes loading close to a raw ``read_table().to_pandas()``.
    """
    cols = [c for c in CONTRACT_COLUMNS if not columns or c in columns]
    if not pieces:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in cols})
    filled: dict[str, np.ndarray] = {}
    for c in _PER_PIECE_COLUMNS:
        if c not in cols:
            continue
        values = []
        for p in pieces:
            ok, v = _constant(p, c)
            if not ok:
                break
            values.append(v)
        else:
            filled[c] = np.repeat(np.array(values, dtype=object), [p.num_rows for p in pieces])
            continue
        # not one value a piece: converted row by row, each piece's column built where it was left out
        pieces = [_with_constant(p, c) for p in pieces]
    if filled:
        pieces = [p.drop_columns([c for c in filled if c in p.column_names]) for p in pieces]
    if any((p.schema.metadata and TUPLE_COLUMNS in p.schema.metadata) or any(has_union(f.type) for f in p.schema)
           for p in pieces):
        return _assemble(pd.concat([_piece_to_pandas(p) for p in pieces], ignore_index=True), filled, cols)
    try:
        table = pa.concat_tables(pieces, promote_options="permissive")
        gaps = [c for c in ("user_key", "value") if c in table.column_names
                and pa.types.is_integer(table.schema.field(c).type) and table.column(c).null_count]
        # deduplicate_objects=False: keys are mostly distinct, and looking each string up in a hash table
        # to share equal ones cost 7 of the 9 CPU seconds of converting 10 M keys
        df = table.drop_columns(gaps).to_pandas(maps_as_pydicts="strict", split_blocks=True,
                                                integer_object_nulls=True, deduplicate_objects=False)
        for c in gaps:  # integers with gaps (states mixed) stay exact Python ints: not float64
            filled[c] = _ints_with_nulls(table.column(c))
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        df = pd.concat([p.to_pandas(maps_as_pydicts="strict", integer_object_nulls=True, deduplicate_objects=False)
                        for p in pieces], ignore_index=True)
    return _assemble(df, filled, cols)


class _LeftOut(Exception):
    """A piece was read without a per-piece column it holds row by row: read again with that column."""


def _with_constant(piece: pa.Table, name: str) -> pa.Table:
    """``piece`` with its column ``name``, built from the metadata's value when the piece was read without it."""
    if name in piece.column_names:
        return piece
    given = constant_values(piece)
    if name not in given and piece.num_rows:
        raise _LeftOut(name)
    at = sum(1 for c in CONTRACT_COLUMNS[: CONTRACT_COLUMNS.index(name)] if c in piece.column_names)
    return piece.add_column(at, name, pa.repeat(pa.scalar(given.get(name), type=FIXED_TYPES.get(name)), piece.num_rows))


def _assemble(df: pd.DataFrame, filled: dict[str, np.ndarray], cols: list[str]) -> pd.DataFrame:
    """``df``'s columns and the object arrays of ``filled`` as one frame in ``cols`` order, nothing copied.

    ``DataFrame.insert`` copies the column it is given and scans an object column for datetimes: for the
    three per-piece columns of 12 M rows that took 1.3 s of a 6 s load; a frame built from the columns
    as they are, without consolidating them, takes a millisecond.
    """
    index = df.index if len(df.columns) or not filled else pd.RangeIndex(len(next(iter(filled.values()))))
    parts = {c: pd.Series(filled[c], index=index, dtype=object, copy=False) if c in filled else df[c] for c in cols}
    return pd.DataFrame(parts, index=index, copy=False)
