"""The snapshot as stored: :class:`StoredSnapshot`, a reader's metadata and keyed state on demand.

Opening reads metadata only. ``keyed_state(...)`` reads keyed state on demand, pushing
operator, state and key-group filters down to the files, and returns one pandas DataFrame
with the columns of the public contract (:data:`explorer.readers.base.CONTRACT_COLUMNS`),
whatever the format (assembled by :mod:`.frames`); ``batches``, ``to_arrow`` and ``dataset``
stream or share it without pandas. A :class:`StoredSnapshot` also owns the
:class:`~.cache.AnalysisCache` the analyses keep on it, and its memory budget (:mod:`.memory`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
from tqdm.auto import tqdm

from ..errors import AnalysisError
from ..keygroups import assign_to_key_group
from ..readers.base import (
    CONTRACT_COLUMNS,
    KeyedStateQuery,
    SnapshotReader,
    convert_failure,
    empty_piece,
    struct_to_tuple,
    tidy_metadata,
)
from ..storage.sizes import format_size
from .cache import AnalysisCache
from .dataset import parquet_dataset
from .frames import PER_PIECE_COLUMNS, LeftOut, combine
from .memory import FRAME_BYTES_PER_ROW, parse_memory_budget

__all__ = ["StoredSnapshot"]


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
        return tidy_metadata(self.reader.states())

    @property
    def subtasks(self) -> pd.DataFrame:
        return tidy_metadata(self.reader.subtasks())

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
        # be dropped: readers leave them out and give their values with the piece (``combine`` fills them)
        light = [c for c in (columns or CONTRACT_COLUMNS) if c not in PER_PIECE_COLUMNS]
        try:
            return self._keyed_frame(dataclasses.replace(q, columns=tuple(light)) if light and (
                not columns or set(columns) & set(PER_PIECE_COLUMNS)) else q, key, columns, progress, limit,
                offset, unbounded)
        except LeftOut:  # a reader that does not give them: read them
            return self._keyed_frame(q, key, columns, progress, limit, offset, unbounded)

    def _keyed_frame(self, q: KeyedStateQuery, key: Any, columns: Sequence[str] | None, progress: bool | None,
                     limit: int | None, offset: int, unbounded: bool) -> pd.DataFrame:
        total = self.reader.estimated_rows(q)
        if limit is None and not unbounded and key is None and total \
                and total * FRAME_BYTES_PER_ROW > self.memory_budget:
            raise AnalysisError(
                f"{self.path}: keyed_state() would hold about {total:,} rows, about "
                f"{format_size(total * FRAME_BYTES_PER_ROW)} as a DataFrame, over the memory budget of "
                f"{format_size(self.memory_budget)}; expected a part that fits: filter (operator=, state=, key=, "
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
            df = combine(pieces, columns)
        except LeftOut:
            raise
        except Exception as exc:  # noqa: BLE001 - pieces that do not fit together are damaged input
            err = convert_failure(exc, self.path, what="combining the pieces read from")
            if err is exc:
                raise
            raise err from exc
        if key is not None and not self.reader.filters_keys:
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
                if key is not None and not self.reader.filters_keys and piece.num_rows:
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
        found = self.reader.parquet_files(self.query(operator, state))
        if found is not None:
            return parquet_dataset(self.path, found, self.memory_budget)
        return ds.dataset(self.to_arrow(operator=operator, state=state))

    def _key_query(self, q: KeyedStateQuery, key: Any) -> KeyedStateQuery:
        own = self.reader.key_query(q, key)  # a reader whose keys are placed its own way (Spark's)
        if own is not None:
            return own
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
