"""Replayable sources. A source is a set of *splits*; each split is read from an
offset, and the offset is operator state, so a restored job resumes exactly
where its checkpoint was taken.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pyarrow as pa

from ..errors import JobError
from .channels import ColumnBatch, DictColumn, KeyDictionary

__all__ = [
    "CollectionSource",
    "ColumnSource",
    "FileSource",
    "GeneratorSource",
    "Source",
    "WatermarkStrategy",
]


class Source:
    """A replayable, split-based source."""

    name = "source"

    def splits(self) -> list[str]:
        raise NotImplementedError

    def read(self, split: str, offset: int, max_records: int) -> tuple[list[Any], int, bool]:
        """Up to ``max_records`` records of ``split`` from ``offset``: (records, new_offset, finished)."""
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        return {"type": type(self).__name__}


class _ContiguousSplits(Source):
    """A source of ``n`` records held in memory, cut into ``num_splits`` contiguous splits;
    subclasses give :meth:`_slice` (records ``start:end`` as one batch)."""

    def _cut(self, n: int, num_splits: int) -> None:
        if num_splits <= 0:
            raise JobError(f"num_splits must be positive, found {num_splits}")
        self._bounds = [(n * i // num_splits, n * (i + 1) // num_splits) for i in range(num_splits)]

    def _slice(self, start: int, end: int) -> Any:
        raise NotImplementedError

    def splits(self) -> list[str]:
        return [str(i) for i in range(len(self._bounds))]

    def read(self, split, offset, max_records):
        lo, hi = self._bounds[int(split)]
        start = lo + offset
        end = min(hi, start + max_records)
        return self._slice(start, end), offset + (end - start), end >= hi


class CollectionSource(_ContiguousSplits):
    """Records from an in-memory sequence, cut into ``num_splits`` contiguous splits."""

    name = "collection"

    def __init__(self, items: Sequence[Any], num_splits: int = 1) -> None:
        self.items = items if isinstance(items, (list, tuple)) else list(items)
        self._cut(len(self.items), num_splits)

    def _slice(self, start: int, end: int) -> Any:
        items = self.items
        return items[start:end] if type(items) is list else list(items[start:end])  # a list slice is a copy already

    def describe(self):
        return {"type": "collection", "records": len(self.items), "splits": len(self._bounds)}


class ColumnSource(_ContiguousSplits):
    """Records held as columns (a pyarrow Table, a pandas DataFrame, or a dict of equal-length
    sequences), cut into ``num_splits`` contiguous splits.

    Batches travel as :class:`~explorer.engine.channels.ColumnBatch` es: hash
    routing and the built-in keyed aggregates work on the columns directly
    (``key_by`` a column position or name), and every other operator sees the
    records as tuples of Python scalars in column order, exactly as if the same
    tuples had been given to :class:`CollectionSource`. Numeric columns become
    NumPy arrays; strings (and other Arrow types) are dictionary-encoded once
    here (:class:`~explorer.engine.channels.DictColumn`), as a Parquet or Arrow
    dictionary column would be, so a batch's keys are integer codes into one
    shared dictionary. Nulls are refused.
    """

    name = "columns"

    def __init__(self, data: Any, num_splits: int = 1) -> None:
        if num_splits <= 0:
            raise JobError(f"num_splits must be positive, found {num_splits}")
        if isinstance(data, pa.Table):
            names, cols = list(data.column_names), [data.column(i).combine_chunks() for i in range(data.num_columns)]
        elif hasattr(data, "columns") and hasattr(data, "iloc"):  # a pandas DataFrame
            names = [str(c) for c in data.columns]
            cols = [data[c].to_numpy() for c in data.columns]
        elif isinstance(data, dict):
            names, cols = [str(k) for k in data], list(data.values())
        else:
            raise JobError(f"column source: expected a pyarrow Table, a pandas DataFrame or a dict of columns, "
                           f"found {type(data).__name__}")
        if not cols:
            raise JobError("column source: no columns")
        self.names = names
        self.columns = [_as_column(c, name) for c, name in zip(cols, names)]
        lengths = {len(c) for c in self.columns}
        if len(lengths) != 1:
            raise JobError(f"column source: columns {names} have different lengths {sorted(lengths)}; expected one length")
        self.num_rows = lengths.pop()
        self._cut(self.num_rows, num_splits)

    def column_index(self, name: str | int) -> int:
        if isinstance(name, int):
            if not -len(self.columns) <= name < len(self.columns):
                raise JobError(f"column source has {len(self.columns)} columns; position {name} does not exist")
            return name % len(self.columns)
        try:
            return self.names.index(name)
        except ValueError:
            raise JobError(f"column source has columns {self.names}; no column named {name!r}") from None

    def _slice(self, start: int, end: int) -> ColumnBatch:
        return ColumnBatch([c[start:end] for c in self.columns], end - start, self.names)

    def describe(self):
        return {"type": "columns", "records": self.num_rows, "splits": len(self._bounds), "columns": self.names}


def _as_column(col: Any, name: str) -> Any:
    """A column as a NumPy array (numbers, booleans) or an Arrow array (strings and the rest)."""
    if isinstance(col, DictColumn):
        return col
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if isinstance(col, pa.Array):
        if pa.types.is_integer(col.type) or pa.types.is_floating(col.type) or pa.types.is_boolean(col.type):
            if col.null_count:
                raise JobError(f"column source: column {name!r} has {col.null_count} nulls; expected none")
            return col.to_numpy(zero_copy_only=False)
        if col.null_count:
            raise JobError(f"column source: column {name!r} has {col.null_count} nulls; expected none")
        # strings and the rest: dictionary-encoded once, so batches carry integer codes
        if pa.types.is_dictionary(col.type):
            # a dictionary column (say, read from Parquet) is used as it is when its values are
            # distinct (unused values do no harm); one that repeats values is encoded afresh
            if len(col.dictionary.unique()) == len(col.dictionary) and not col.dictionary.null_count:
                indices = col.indices.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
                return DictColumn(indices, KeyDictionary(col.dictionary.to_pylist()))
            col = col.dictionary_decode()
        enc = col.dictionary_encode()
        indices = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
        return DictColumn(indices, KeyDictionary(enc.dictionary.to_pylist()))
    if isinstance(col, np.ndarray):
        if col.ndim == 1 and col.dtype.kind in "biuf":
            return col
        col = col.tolist()
    try:
        arr = pa.array(col if isinstance(col, list) else list(col))
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
        raise JobError(f"column source: column {name!r} is neither numbers nor one Arrow type ({exc})") from exc
    return _as_column(arr, name)


class GeneratorSource(Source):
    """Records made by a pure function of position, so any offset can be replayed.

    ``batch_fn(split_index, start, count)`` returns the records at positions
    ``start .. start + count - 1`` of that split. ``records_per_split=None``
    makes the source unbounded.
    """

    name = "generator"

    def __init__(
        self,
        batch_fn: Callable[[int, int, int], list[Any]],
        records_per_split: int | None,
        num_splits: int = 1,
    ) -> None:
        self.batch_fn = batch_fn
        self.records_per_split = records_per_split
        self.num_splits = num_splits

    def splits(self) -> list[str]:
        return [str(i) for i in range(self.num_splits)]

    def read(self, split, offset, max_records):
        n = max_records
        if self.records_per_split is not None:
            n = max(0, min(max_records, self.records_per_split - offset))
        records = self.batch_fn(int(split), offset, n) if n else []
        done = self.records_per_split is not None and offset + len(records) >= self.records_per_split
        return records, offset + len(records), done

    def describe(self):
        return {"type": "generator", "records_per_split": self.records_per_split, "splits": self.num_splits}


class FileSource(Source):
    """Lines of text files (one split per file); the offset is a byte position.

    With ``json_lines=True`` every line is parsed as JSON.
    """

    name = "file"

    def __init__(self, paths: str | Path | Sequence[str | Path], json_lines: bool = False) -> None:
        if isinstance(paths, (str, Path)):
            paths = [paths]
        self.paths = [Path(p) for p in paths]
        for p in self.paths:
            if not p.is_file():
                raise JobError(f"file source {p}: no such file")
        self.json_lines = json_lines

    def splits(self) -> list[str]:
        return [str(p) for p in self.paths]

    def read(self, split, offset, max_records):
        records = []
        with open(split, "rb") as f:
            f.seek(offset)
            for _ in range(max_records):
                line = f.readline()
                if not line:
                    break
                text = line.decode("utf-8").rstrip("\r\n")
                if self.json_lines:
                    try:
                        records.append(json.loads(text))
                    except json.JSONDecodeError as exc:
                        raise JobError(f"{split} at byte {offset}: not a JSON line ({exc})") from exc
                else:
                    records.append(text)
            pos = f.tell()
            done = not f.read(1)
        return records, pos, done

    def describe(self):
        return {"type": "file", "paths": [str(p) for p in self.paths]}


@dataclass(frozen=True)
class WatermarkStrategy:
    """Event timestamps and watermarks for a source.

    ``for_bounded_out_of_orderness(max_delay_ms)`` emits watermark
    ``max_timestamp_seen - max_delay_ms - 1`` (as Flink's
    BoundedOutOfOrdernessWatermarks does); ``for_monotonous_timestamps()`` is
    the same with no delay.
    """

    max_out_of_orderness_ms: int = 0
    timestamp_assigner: Callable[[Any], int] | None = None

    @classmethod
    def for_bounded_out_of_orderness(cls, max_out_of_orderness_ms: int) -> "WatermarkStrategy":
        if max_out_of_orderness_ms < 0:
            raise JobError(f"out-of-orderness must not be negative, found {max_out_of_orderness_ms}")
        return cls(int(max_out_of_orderness_ms))

    @classmethod
    def for_monotonous_timestamps(cls) -> "WatermarkStrategy":
        return cls(0)

    def with_timestamp_assigner(self, fn: Callable[[Any], int]) -> "WatermarkStrategy":
        return WatermarkStrategy(self.max_out_of_orderness_ms, fn)
