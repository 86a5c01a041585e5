"""``explorer.open(path)`` and the :class:`Snapshot` it returns.

A :class:`Snapshot` is a :class:`~explorer.stored.StoredSnapshot` (metadata, keyed state
read on demand with filters pushed down to the files, the analyses' cache) with the
analyses of :mod:`explorer.analysis` as methods and a notebook display
(:func:`explorer.report.snapshot_html`). The layers: ``stored`` (opening, reading) under
``analysis`` under this module.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from .analysis import (
    best_parallelisms,
    diff,
    expired_not_cleaned,
    hot_keys,
    imbalance,
    key_group_distribution,
    key_skew,
    key_stats,
    rescale_whatif,
    salting_whatif,
    state_sizes,
    subtask_distribution,
    ttl_expiry,
    ttl_summary,
)
from .report import snapshot_html
from .stored import (
    READERS,
    AnalysisCache,
    StoredSnapshot,
    checkpoint_directory_of,
    checkpoints_in,
    parse_memory_budget,
    reader_for,
    retained_checkpoints,
)

__all__ = ["READERS", "AnalysisCache", "Snapshot", "checkpoint_directory_of", "checkpoints_in", "open",
           "retained_checkpoints"]


def open(path: str | Path, memory_budget: int | str | None = None, **options: Any) -> "Snapshot":  # noqa: A001
    """Open a checkpoint, savepoint or checkpoint directory (the newest complete checkpoint).

    ``path`` is local or a URL of a remote store (``s3://``, ``gs://``, ``hdfs://``, ``abfs://``), whose
    files are fetched as questions need them into a local cache (``cache_dir=``, ``cache_max_bytes=``;
    ``storage_options=`` for the filesystem; see :mod:`explorer.storage`).

    ``memory_budget`` (bytes, or a size such as ``"2GB"``; default half the memory available
    now) bounds what an analysis holds at once: past it, analyses stream over key-group ranges
    (same answers) and ``keyed_state()`` asks for a filter, a page or a stream
    (:meth:`~explorer.stored.StoredSnapshot.batches`, ``to_arrow``, ``dataset``).
    """
    limit = parse_memory_budget(memory_budget)  # current while the metadata is read, too
    return Snapshot(reader_for(path, memory_budget=limit, **options), memory_budget=limit)


class Snapshot(StoredSnapshot):
    """A snapshot opened for exploration."""

    # --- analyses (explorer.analysis) ------------------------------------------------------
    def key_group_distribution(self, parallelism: int | None = None, **kw: Any) -> pd.DataFrame:
        """Entries, bytes, keys and records per key group and its subtask at ``parallelism``
        (:func:`explorer.analysis.key_group_distribution`)."""
        return key_group_distribution(self, parallelism, **kw)

    def subtask_distribution(self, parallelism: int | None = None, **kw: Any) -> pd.DataFrame:
        """Loads per subtask (:func:`explorer.analysis.subtask_distribution`)."""
        return subtask_distribution(self, parallelism, **kw)

    def imbalance(self, parallelism: int | None = None, **kw: Any) -> pd.DataFrame:
        """max/mean and coefficient of variation per metric (:func:`explorer.analysis.imbalance`)."""
        return imbalance(self, parallelism, **kw)

    def rescale_whatif(self, parallelisms: int | Sequence[int] | None = None, **kw: Any) -> pd.DataFrame:
        """Imbalance at other parallelisms and max parallelisms (:func:`explorer.analysis.rescale_whatif`)."""
        return rescale_whatif(self, parallelisms, **kw)

    def best_parallelisms(self, parallelisms: Sequence[int] | None = None, **kw: Any) -> pd.DataFrame:
        """The parallelisms with the best balance (:func:`explorer.analysis.best_parallelisms`)."""
        return best_parallelisms(self, parallelisms, **kw)

    def hot_keys(self, n: int = 10, by: str = "auto", **kw: Any) -> pd.DataFrame:
        """Top keys by traffic where counted, else bytes (``by="auto"``), or by ``"traffic"``, ``"bytes"``,
        ``"entries"`` (:func:`explorer.analysis.hot_keys`)."""
        return hot_keys(self, n, by, **kw)

    def key_skew(self, by: str = "auto", **kw: Any) -> pd.DataFrame:
        """Gini and top-1 % share of keys (:func:`explorer.analysis.key_skew`)."""
        return key_skew(self, by, **kw)

    def salting_whatif(self, keys: Any = None, n: int = 4, **kw: Any) -> pd.DataFrame:
        """Subtask loads before/after splitting keys into ``f"{k}#{i}"`` (:func:`explorer.analysis.salting_whatif`)."""
        return salting_whatif(self, keys, n, **kw)

    def ttl_expiry(self, now: Any = None, freq: str = "1h", **kw: Any) -> pd.DataFrame:
        """Expiry timeline of TTL state from ``now`` (:func:`explorer.analysis.ttl_expiry`)."""
        return ttl_expiry(self, now, freq, **kw)

    def expired_not_cleaned(self, now: Any = None, **kw: Any) -> pd.DataFrame:
        """TTL entries expired but still stored (:func:`explorer.analysis.expired_not_cleaned`)."""
        return expired_not_cleaned(self, now, **kw)

    def ttl_summary(self, now: Any = None) -> pd.DataFrame:
        """Per state: TTL, size, expired entries (:func:`explorer.analysis.ttl_summary`)."""
        return ttl_summary(self, now)

    def key_stats(self, **kw: Any) -> pd.DataFrame:
        """One row per (operator, key): entries, bytes, traffic (:func:`explorer.analysis.key_stats`)."""
        return key_stats(self, **kw)

    def state_sizes(self) -> pd.DataFrame:
        """Entries, bytes and keys per state, counted from the data (:func:`explorer.analysis.state_sizes`)."""
        return state_sizes(self)

    def diff(self, other: "Snapshot | str | Path", **kw: Any) -> pd.DataFrame:
        """Keys added, removed, changed from this snapshot to ``other`` (a Snapshot or a path)
        (:func:`explorer.analysis.diff`)."""
        return diff(self, other, **kw)

    def _repr_html_(self) -> str:
        return snapshot_html(self)
