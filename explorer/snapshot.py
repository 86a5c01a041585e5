"""``explorer.open(path)`` and the :class:`Snapshot` it returns.

Opening reads metadata only. ``Snapshot.keyed_state(...)`` reads keyed state
on demand, pushing operator, state and key-group filters down to the files,
and returns one pandas DataFrame with the columns of the public contract
(:data:`explorer.readers.base.CONTRACT_COLUMNS`), whatever the format.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from tqdm.auto import tqdm

from .errors import SnapshotNotFoundError
from .readers.base import CONTRACT_COLUMNS, TUPLE_COLUMNS, KeyedStateQuery, SnapshotReader, struct_to_tuple
from .readers.engine import EngineSnapshotReader

_CHK = re.compile(r"^chk-(\d+)$")

#: readers tried in order by :func:`open`
READERS: list[type[SnapshotReader]] = [EngineSnapshotReader]


def _register_optional_readers() -> None:
    try:  # the Flink reader (pure Python)
        from .readers.flink import FlinkSnapshotReader  # type: ignore[attr-defined]

        if FlinkSnapshotReader not in READERS:
            READERS.append(FlinkSnapshotReader)
    except ImportError:  # pragma: no cover - optional module not present
        pass
    try:  # Spark checkpoints (needs a SparkSession only when read)
        from .readers.spark import SparkCheckpointReader  # type: ignore[attr-defined]

        if SparkCheckpointReader not in READERS:
            READERS.append(SparkCheckpointReader)
    except ImportError:  # pragma: no cover
        pass


def checkpoints_in(directory: Path) -> list[Path]:
    """Complete ``chk-N`` folders of an engine checkpoint directory, oldest first."""
    found = []
    for p in Path(directory).iterdir():
        m = _CHK.match(p.name)
        if m and EngineSnapshotReader.detect(p):
            found.append((int(m.group(1)), p))
    return [p for _, p in sorted(found)]


def open(path: str | Path, **options: Any) -> "Snapshot":  # noqa: A001 - the public name
    """Open a checkpoint, savepoint or checkpoint directory (the newest complete checkpoint)."""
    p = Path(path)
    if not p.exists():
        raise SnapshotNotFoundError(f"{p}: no such file or directory; expected a checkpoint or savepoint folder")
    _register_optional_readers()
    for reader_cls in READERS:
        if reader_cls.detect(p):
            return Snapshot(reader_cls(p, **options))
    if p.is_dir():
        chks = checkpoints_in(p)
        if chks:
            return Snapshot(EngineSnapshotReader(chks[-1], **options))
    listing = sorted(x.name for x in p.iterdir())[:10] if p.is_dir() else [p.name]
    raise SnapshotNotFoundError(
        f"{p}: found {listing}, which is no snapshot State Explorer knows; expected an engine checkpoint or "
        "savepoint (_metadata starting with SXSNAP), a checkpoint directory of chk-N folders, a Spark "
        "Structured Streaming checkpoint, or an Apache Flink savepoint/checkpoint (_metadata)"
    )


class Snapshot:
    """A snapshot opened for exploration."""

    def __init__(self, reader: SnapshotReader) -> None:
        self.reader = reader
        self._info = reader.info()

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
        df = _combine(pieces, columns)
        if key is not None:
            df = df[df["key"].map(lambda k: k == key)].reset_index(drop=True)
        return df

    def _key_query(self, q: KeyedStateQuery, key: Any) -> KeyedStateQuery:
        from .keygroups import assign_to_key_group

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

    # --- analyses (explorer.analysis) ------------------------------------------------------
    def key_group_distribution(self, parallelism: int | None = None, **kw: Any) -> pd.DataFrame:
        """Entries, bytes, keys and records per key group and its subtask at ``parallelism``
        (:func:`explorer.analysis.key_group_distribution`)."""
        from .analysis import key_group_distribution

        return key_group_distribution(self, parallelism, **kw)

    def subtask_distribution(self, parallelism: int | None = None, **kw: Any) -> pd.DataFrame:
        """Loads per subtask (:func:`explorer.analysis.subtask_distribution`)."""
        from .analysis import subtask_distribution

        return subtask_distribution(self, parallelism, **kw)

    def imbalance(self, parallelism: int | None = None, **kw: Any) -> pd.DataFrame:
        """max/mean and coefficient of variation per metric (:func:`explorer.analysis.imbalance`)."""
        from .analysis import imbalance

        return imbalance(self, parallelism, **kw)

    def rescale_whatif(self, parallelisms: int | Sequence[int] | None = None, **kw: Any) -> pd.DataFrame:
        """Imbalance at other parallelisms and max parallelisms (:func:`explorer.analysis.rescale_whatif`)."""
        from .analysis import rescale_whatif

        return rescale_whatif(self, parallelisms, **kw)

    def best_parallelisms(self, parallelisms: Sequence[int] | None = None, **kw: Any) -> pd.DataFrame:
        """The parallelisms with the best balance (:func:`explorer.analysis.best_parallelisms`)."""
        from .analysis import best_parallelisms

        return best_parallelisms(self, parallelisms, **kw)

    def hot_keys(self, n: int = 10, by: str = "bytes", **kw: Any) -> pd.DataFrame:
        """Top keys by ``"bytes"``, ``"entries"`` or ``"traffic"`` (:func:`explorer.analysis.hot_keys`)."""
        from .analysis import hot_keys

        return hot_keys(self, n, by, **kw)

    def key_skew(self, by: str = "bytes", **kw: Any) -> pd.DataFrame:
        """Gini and top-1 % share of keys (:func:`explorer.analysis.key_skew`)."""
        from .analysis import key_skew

        return key_skew(self, by, **kw)

    def salting_whatif(self, keys: Any = None, n: int = 4, **kw: Any) -> pd.DataFrame:
        """Subtask loads before/after splitting keys into ``f"{k}#{i}"`` (:func:`explorer.analysis.salting_whatif`)."""
        from .analysis import salting_whatif

        return salting_whatif(self, keys, n, **kw)

    def ttl_expiry(self, now: Any = None, freq: str = "1h", **kw: Any) -> pd.DataFrame:
        """Expiry timeline of TTL state from ``now`` (:func:`explorer.analysis.ttl_expiry`)."""
        from .analysis import ttl_expiry

        return ttl_expiry(self, now, freq, **kw)

    def expired_not_cleaned(self, now: Any = None, **kw: Any) -> pd.DataFrame:
        """TTL entries expired but still stored (:func:`explorer.analysis.expired_not_cleaned`)."""
        from .analysis import expired_not_cleaned

        return expired_not_cleaned(self, now, **kw)

    def ttl_summary(self, now: Any = None) -> pd.DataFrame:
        """Per state: TTL, size, expired entries (:func:`explorer.analysis.ttl_summary`)."""
        from .analysis import ttl_summary

        return ttl_summary(self, now)

    def diff(self, other: "Snapshot", **kw: Any) -> pd.DataFrame:
        """Keys added, removed, changed from this snapshot to ``other`` (:func:`explorer.analysis.diff`)."""
        from .analysis import diff

        return diff(self, other, **kw)

    def drop_analysis_cache(self) -> None:
        """Forget the columns the analyses loaded and kept on this Snapshot (to free memory)."""
        self.__dict__.pop("_analysis_cache", None)

    def _repr_html_(self) -> str:
        from .report import snapshot_html

        return snapshot_html(self)

    def __repr__(self) -> str:
        return (f"Snapshot({self.format}, id={self.checkpoint_id}, path={str(self.path)!r}, "
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
    df = piece.to_pandas(maps_as_pydicts="strict")
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
        df = table.to_pandas(maps_as_pydicts="strict", split_blocks=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        df = pd.concat([p.to_pandas(maps_as_pydicts="strict") for p in pieces], ignore_index=True)
    for c in cols:
        if c in filled:
            df.insert(cols.index(c), c, filled[c])
    return df if list(df.columns) == cols else df[cols]
