"""What the tabs share: one snapshot's keyed state loaded once, and cached per-operator aggregates.

The dashboard stays responsive on a million keys because no control change
reads the snapshot again: the keyed-state columns the analyses need are read
once, and what a control moves (a parallelism, a ranking, a "now") is then a
vectorised step over per-key-group or per-key aggregates cached here.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from explorer.analysis import LOAD_COLUMNS, key_group_aggregates, key_stats, with_key_codes
from explorer.snapshot import Snapshot, checkpoint_directory_of
from explorer.snapshot import open as open_snapshot
from explorer.storage import as_path

#: the columns read once for every tab (never ``value``: the Keys tab reads values per key)
COLUMNS = (*LOAD_COLUMNS, "last_access", "expires_at")


class SnapshotData:
    """One snapshot with its keyed state and per-operator aggregates, computed on first use."""

    def __init__(self, snapshot: Snapshot, checkpoint_dir: Path | None = None) -> None:
        self.snapshot = snapshot
        self.checkpoint_dir = checkpoint_dir
        self._kg: dict[str, pd.DataFrame] = {}
        self._ks: dict[str, pd.DataFrame] = {}
        self._rows: dict[str, pd.DataFrame] = {}
        self._coded: dict[str, pd.DataFrame] = {}

    @classmethod
    def from_any(cls, source: Any, **options: Any) -> "SnapshotData":
        """A snapshot, or a path to a snapshot or to a checkpoint directory (then: its newest checkpoint).

        ``options`` go to :func:`explorer.open` (e.g. ``ttl=`` for Apache Flink snapshots).
        """
        if isinstance(source, SnapshotData):
            return source
        snap = source if isinstance(source, Snapshot) else open_snapshot(as_path(source), **options)
        # what explorer.history reads for it: a job's checkpoint directory (any engine's chk-N), or the
        # snapshot's own folder when it holds every checkpoint (Spark's); None for a savepoint on its own
        return cls(snap, checkpoint_directory_of(snap))

    # --- metadata -----------------------------------------------------------------------
    @cached_property
    def keyed_operators(self) -> pd.DataFrame:
        """``operator, parallelism, max_parallelism`` of the operators with keyed state."""
        ops = self.snapshot.operators
        if "keyed" in ops:
            ops = ops[ops["keyed"].astype(bool)]
        with_state = set(self.snapshot.states["operator"]) if len(self.snapshot.states) else set()
        ops = ops[ops["operator"].isin(with_state)] if with_state else ops
        return ops[["operator", "parallelism", "max_parallelism"]].reset_index(drop=True)

    @property
    def operator_names(self) -> list[str]:
        return self.keyed_operators["operator"].tolist()

    def layout(self, operator: str) -> tuple[int, int]:
        """``(parallelism, max_parallelism)`` of ``operator``."""
        row = self.keyed_operators[self.keyed_operators["operator"] == operator]
        if not len(row):
            raise ValueError(f"{self.snapshot.path}: no keyed operator {operator!r}; the keyed operators are "
                             f"{self.operator_names}")
        return int(row["parallelism"].iloc[0]), int(row["max_parallelism"].iloc[0])

    # --- data -----------------------------------------------------------------------------
    @cached_property
    def frame(self) -> pd.DataFrame:
        """The keyed state (without values), read once."""
        return self.snapshot.keyed_state(columns=list(COLUMNS))

    def operator_frame(self, operator: str) -> pd.DataFrame:
        """The rows of ``operator`` (the frame itself when it is the only operator: no copy of a million rows)."""
        if operator not in self._rows:
            df = self.frame
            mask = (df["operator"] == operator).to_numpy()
            self._rows[operator] = df if mask.all() else df[mask]
        return self._rows[operator]

    def coded_frame(self, operator: str) -> pd.DataFrame:
        """:meth:`operator_frame` with its keys as codes (:func:`explorer.analysis.with_key_codes`): the keys
        hashed once for the Keys, Key groups and Hot keys tabs rather than once per analysis."""
        if operator not in self._coded:
            rows = self.operator_frame(operator)
            self._coded[operator] = self.coded if rows is self.frame else with_key_codes(rows)
        return self._coded[operator]

    @cached_property
    def coded(self) -> pd.DataFrame:
        """:attr:`frame` with its keys as codes (:func:`explorer.analysis.with_key_codes`), hashed once."""
        return with_key_codes(self.frame)

    @cached_property
    def metrics(self) -> pd.DataFrame:
        try:
            return self.snapshot.metrics()
        except Exception:  # noqa: BLE001 - formats without per-key-group traffic counters
            return pd.DataFrame(columns=["operator", "subtask", "key_group", "records"])

    @cached_property
    def heavy_hitters(self) -> pd.DataFrame:
        try:
            return self.snapshot.heavy_hitters()
        except Exception:  # noqa: BLE001 - formats without a heavy-hitter sketch
            return pd.DataFrame(columns=["operator", "key", "count", "error"])

    def key_group_aggregates(self, operator: str) -> pd.DataFrame:
        """Per key group ``0..M-1`` of ``operator``: ``entries, bytes, keys, records``."""
        if operator not in self._kg:
            _, m = self.layout(operator)
            # the rows are the operator's already: no operator= (a filter would copy a million rows)
            agg = key_group_aggregates(self.coded_frame(operator), max_parallelism=m)
            rec = self.metrics
            if len(rec):
                r = rec[rec["operator"] == operator]
                if len(r):
                    agg["records"] = np.bincount(r["key_group"].to_numpy(np.int64),
                                                 weights=r["records"].to_numpy(np.float64),
                                                 minlength=m).round().astype(np.int64)[:m]
            self._kg[operator] = agg
        return self._kg[operator]

    def key_stats(self, operator: str) -> pd.DataFrame:
        """One row per key of ``operator``: ``key, key_group, subtask, entries, bytes, records``."""
        if operator not in self._ks:
            p, m = self.layout(operator)
            self._ks[operator] = key_stats(self.coded_frame(operator), parallelism=p,  # the operator's rows
                                           max_parallelism=m, heavy_hitters=self.heavy_hitters)
        return self._ks[operator]
