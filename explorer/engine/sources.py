"""Replayable sources. A source is a set of *splits*; each split is read from an
offset, and the offset is operator state, so a restored job resumes exactly
where its checkpoint was taken.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from ..errors import JobError

__all__ = [
    "CollectionSource",
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


class CollectionSource(Source):
    """Records from an in-memory sequence, cut into ``num_splits`` contiguous splits."""

    name = "collection"

    def __init__(self, items: Sequence[Any], num_splits: int = 1) -> None:
        self.items = items if isinstance(items, (list, tuple)) else list(items)
        if num_splits <= 0:
            raise JobError(f"num_splits must be positive, found {num_splits}")
        n = len(self.items)
        self._bounds = [(n * i // num_splits, n * (i + 1) // num_splits) for i in range(num_splits)]

    def splits(self) -> list[str]:
        return [str(i) for i in range(len(self._bounds))]

    def read(self, split, offset, max_records):
        lo, hi = self._bounds[int(split)]
        start = lo + offset
        end = min(hi, start + max_records)
        return list(self.items[start:end]), offset + (end - start), end >= hi

    def describe(self):
        return {"type": "collection", "records": len(self.items), "splits": len(self._bounds)}


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
