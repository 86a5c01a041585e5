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

import re
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from tqdm.auto import tqdm

from .errors import SnapshotError, SnapshotNotFoundError
from .keygroups import assign_to_key_group
from .readers.base import (
    CONTRACT_COLUMNS,
    TUPLE_COLUMNS,
    KeyedStateQuery,
    SnapshotReader,
    convert_failure,
    struct_to_tuple,
)
from .readers.engine import EngineSnapshotReader
from .storage import FileCache, StoragePath, as_path

_CHK = re.compile(r"^chk-(\d+)$")

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


def checkpoints_in(directory: Path) -> list[Path]:
    """Complete ``chk-N`` folders of an engine checkpoint directory, oldest first.

    Folders that vanish while they are looked at (a job's retention deleting old
    checkpoints) are left out, not an error.
    """
    found = []
    try:
        entries = list(as_path(directory).iterdir())
    except FileNotFoundError as exc:
        raise SnapshotNotFoundError(f"{directory}: vanished while listing its chk-N folders") from exc
    for p in entries:
        m = _CHK.match(p.name)
        if not m:
            continue
        try:
            complete = EngineSnapshotReader.detect(p)
        except OSError:  # deleted (or made unreadable) between listing and looking
            continue
        if complete:
            found.append((int(m.group(1)), p))
    return [p for _, p in sorted(found)]


def _chk_folders(directory: Any) -> list[tuple[int, Any]]:
    """``(N, folder)`` of the ``chk-N`` folders of ``directory``, newest first."""
    chks = []
    for p in directory.iterdir():
        m = _CHK.match(p.name)
        if m:
            chks.append((int(m.group(1)), p))
    return sorted(chks, key=lambda t: t[0], reverse=True)


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
    register_optional_readers()
    if p.is_dir() and not (p / "_metadata").exists() and any(True for _ in _chk_folders(p)):
        reader = _newest_checkpoint(p, **options)
        if reader is not None:
            return reader
    for reader_cls in READERS:
        if _detect(reader_cls, p):
            if isinstance(p, StoragePath) and reader_cls is _SPARK:
                local = p.mirror()  # Spark's reader (and its JVM) reads a local folder
                reader = reader_cls(local, **options)
                reader.notes.insert(0, f"{p}: read from a local mirror of its files, {local} (each file fetched "
                                       "once into the cache)")
                return reader
            return reader_cls(p, **options)
    listing = sorted(x.name for x in p.iterdir())[:10] if p.is_dir() else [p.name]
    raise SnapshotNotFoundError(
        f"{p}: found {listing}, which is no snapshot State Explorer knows; expected an engine checkpoint or "
        "savepoint (_metadata starting with SXSNAP), a checkpoint directory of chk-N folders, a Spark "
        "Structured Streaming checkpoint, or an Apache Flink savepoint/checkpoint (_metadata)"
    )


def open_stored(path: str | Path, **options: Any) -> "StoredSnapshot":
    """A :class:`StoredSnapshot` of what :func:`reader_for` finds at ``path`` (``explorer.open``
    gives the same as an :class:`explorer.snapshot.Snapshot`)."""
    return StoredSnapshot(reader_for(path, **options))


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

    def __init__(self, reader: SnapshotReader) -> None:
        self.reader = reader
        self._info = reader.info()
        #: the columns and results analyses keep on this snapshot (:class:`AnalysisCache`)
        self.analysis_cache = AnalysisCache()

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
    ) -> pd.DataFrame:
        """Keyed state, one row per entry, with the contract columns (filters pushed down)."""
        q = KeyedStateQuery(
            operators=_as_set(operator),
            states=_as_set(state),
            key_groups=None if key_groups is None else frozenset(int(k) for k in key_groups),
            columns=tuple(columns) if columns else None,
        )
        if key is not None and q.key_groups is None:
            q = self._key_query(q, key)
        total = self.reader.estimated_rows(q)
        show = progress if progress is not None else bool(total and total > 2_000_000)
        pieces = []
        with tqdm(total=total, unit="rows", desc="loading state", disable=not show) as bar:
            for piece in self.reader.keyed_pieces(q):
                if columns:
                    piece = piece.select([c for c in CONTRACT_COLUMNS if c in columns])
                pieces.append(piece)
                bar.update(piece.num_rows)
        try:
            df = _combine(pieces, columns)
        except Exception as exc:  # noqa: BLE001 - pieces that do not fit together are damaged input
            err = convert_failure(exc, self.path, what="combining the pieces read from")
            if err is exc:
                raise
            raise err from exc
        if key is not None and not getattr(self.reader, "filters_keys", False):
            df = df[df["key"].map(lambda k: k == key)].reset_index(drop=True)
        return df

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

def _as_set(x: str | Iterable[str] | None) -> frozenset[str] | None:
    if x is None:
        return None
    if isinstance(x, str):
        return frozenset([x])
    return frozenset(x)


#: columns that hold one value per piece (an operator's, a state's, a kind's name)
_PER_PIECE_COLUMNS = ("operator", "state", "kind")


def _constant(column: pa.ChunkedArray) -> tuple[bool, Any]:
    if len(column) == 0 or column.null_count:
        return False, None
    first = column[0]
    if not pc.all(pc.equal(column, first)).as_py():
        return False, None
    return True, first.as_py()


def _piece_to_pandas(piece: pa.Table) -> pd.DataFrame:
    df = piece.to_pandas(maps_as_pydicts="strict", integer_object_nulls=True)
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
        if c not in cols or not all(c in p.column_names for p in pieces):
            continue
        values = []
        for p in pieces:
            ok, v = _constant(p.column(c))
            if not ok:
                break
            values.append(v)
        else:
            filled[c] = np.repeat(np.array(values, dtype=object), [p.num_rows for p in pieces])
    if filled:
        pieces = [p.drop_columns(list(filled)) for p in pieces]
    if any(p.schema.metadata and TUPLE_COLUMNS in p.schema.metadata for p in pieces):
        df = pd.concat([_piece_to_pandas(p) for p in pieces], ignore_index=True)
        for c in cols:
            if c in filled:
                df.insert(cols.index(c), c, filled[c])
        return df if list(df.columns) == cols else df[cols]
    try:
        table = pa.concat_tables(pieces, promote_options="permissive")
        df = table.to_pandas(maps_as_pydicts="strict", split_blocks=True, integer_object_nulls=True)
        for c in ("user_key", "value"):  # integers with gaps (states mixed) stay exact: not float64
            if c in table.column_names and pa.types.is_integer(table.schema.field(c).type) \
                    and table.column(c).null_count:
                df[c] = pd.Series(table.column(c).to_pylist(), dtype=object, index=df.index)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        df = pd.concat([p.to_pandas(maps_as_pydicts="strict", integer_object_nulls=True) for p in pieces], ignore_index=True)
    for c in cols:
        if c in filled:
            df.insert(cols.index(c), c, filled[c])
    return df if list(df.columns) == cols else df[cols]
