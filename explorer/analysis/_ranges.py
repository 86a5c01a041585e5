"""Analyses under a memory budget: the snapshot cut into key-group ranges, read one range at a time.

Every entry of a key lies in the key's one key group, so anything summed per key
(entries, bytes, traffic), per key group or per subtask is exact when computed range
by range and added up; a top-K over keys is the top K of the ranges' top Ks. An
analysis asked of a Snapshot whose analysis columns would not fit its
``memory_budget`` (:attr:`~explorer.stored.StoredSnapshot.memory_budget`) runs
range by range on *range views*: a :class:`~explorer.stored.StoredSnapshot` over a
:class:`RangeReader`, which passes the range down to the files (Parquet row groups
cut at key-group boundaries; Flink key-group offsets) and keeps the per-key-group
traffic counters and the heavy-hitter sketch of the range only. Each view runs the
in-memory analysis; the module of each analysis merges the answers.

Ranges are planned from the rows per key group the reader knows from metadata
(engine snapshots: each Parquet row group's key-group span and rows), else from the
estimated rows, else from the bytes on disk, so that a range's rows times
:data:`~explorer.stored.ANALYSIS_BYTES_PER_ROW` stay within the budget.
"""

from __future__ import annotations

import os
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from ..keygroups import key_groups_for
from ..readers.base import KeyedStateQuery
from ..stored import ANALYSIS_BYTES_PER_ROW, StoredSnapshot

#: rows assumed per byte of snapshot files when the reader cannot say (Flink, Spark): a row of
#: keyed state takes at least 12 bytes in any of their formats, so this over-counts rows: ranges are safe
ROWS_PER_FILE_BYTE = 1 / 12


class RangeReader:
    """A reader restricted to key groups ``lo..hi``: what its :class:`StoredSnapshot` (a *range view*) reads.

    Metadata (operators, states, subtasks, info, timings) is the whole snapshot's; keyed
    pieces, per-key-group traffic (``metrics``) and the heavy-hitter sketch are the range's.
    """

    def __init__(self, base: Any, lo: int, hi: int, key_groups: Sequence[int] | None = None,
                 entries: bool = False, columns: Iterable[str] | None = None) -> None:
        self.base = base
        #: whether the analyses of the range want the entries hashed as the range loads (a diff's ranges);
        #: the others' ranges read the analysis columns only
        self.entries_with_keys = bool(entries and base.entries_with_keys)
        #: the analysis columns the range's analyses use (None: all of them, :data:`._columns.CACHED_COLUMNS`);
        #: a range view serves one pass of one analysis, so it loads no more
        self.analysis_columns = None if columns is None else frozenset(columns)
        self.lo, self.hi = int(lo), int(hi)
        #: the key groups of the range (all of ``lo..hi`` unless a sparse set was asked)
        self.key_groups = frozenset(range(self.lo, self.hi + 1)) if key_groups is None else frozenset(key_groups)
        self.path = base.path
        self.notes = base.notes
        self.format_name = base.format_name

    def __getattr__(self, name: str) -> Any:  # the reader's declared abilities (filters_keys, key_query, ...)
        return getattr(self.base, name)

    def info(self):
        return self.base.info()

    def operators(self) -> pd.DataFrame:
        return self.base.operators()

    def states(self) -> pd.DataFrame:
        return self.base.states()

    def subtasks(self) -> pd.DataFrame:
        return self.base.subtasks()

    def _narrow(self, query: KeyedStateQuery) -> KeyedStateQuery:
        kgs = self.key_groups if query.key_groups is None else self.key_groups & query.key_groups
        return KeyedStateQuery(query.operators, query.states, frozenset(kgs), query.keys, query.columns)

    def keyed_pieces(self, query: KeyedStateQuery) -> Iterator:
        q = self._narrow(query)
        if not q.key_groups:
            return iter(())
        return self.base.keyed_pieces(q)

    def estimated_rows(self, query: KeyedStateQuery) -> int | None:
        rows = key_group_rows(self.base, query)
        if rows is None:
            return None
        idx = np.fromiter(sorted(k for k in self._narrow(query).key_groups if k < len(rows)), dtype=np.int64)
        return int(round(float(rows[idx].sum()))) if len(idx) else 0

    def metrics(self) -> pd.DataFrame:
        m = self.base.metrics()
        if not len(m) or "key_group" not in m:
            return m
        kg = m["key_group"].to_numpy()
        return m[np.isin(kg, np.fromiter(self.key_groups, dtype=np.int64))].reset_index(drop=True)

    def heavy_hitters(self) -> pd.DataFrame:
        hh, kg = _sketch_key_groups(self.base)
        if not len(hh):
            return hh.copy()  # (the kept frame is never handed out)
        keep = np.isin(kg, np.fromiter(self.key_groups, dtype=np.int64))
        return hh[keep].reset_index(drop=True)

    def operator_state(self) -> pd.DataFrame:
        return self.base.operator_state()

    def timings(self) -> dict[str, Any]:
        return self.base.timings()


#: per base reader: its heavy-hitter sketch and each sketch key's key group (-1: an operator without one), which
#: every range view filters (the keys hashed once, not once per range); snapshots on disk do not change
_SKETCHES: "weakref.WeakKeyDictionary[Any, tuple[pd.DataFrame, np.ndarray]]" = weakref.WeakKeyDictionary()


def _sketch_key_groups(base: Any) -> tuple[pd.DataFrame, np.ndarray]:
    """``base.heavy_hitters()`` and the key group of each of its keys (kept per reader, :data:`_SKETCHES`)."""
    try:
        kept = _SKETCHES.get(base)
    except TypeError:  # a reader that cannot be weakly referenced: worked out every time
        kept = None
    if kept is not None:
        return kept
    hh = base.heavy_hitters()
    kg = np.full(len(hh), -1, dtype=np.int64)
    if len(hh):
        ops = base.operators()
        maxp = dict(zip(ops["operator"], ops["max_parallelism"]))
        scheme = "spark" if str(base.info().format).startswith("spark") else "flink"
        for name, idx in hh.groupby("operator", sort=False, observed=True).indices.items():
            if name in maxp:
                kg[idx] = np.asarray(key_groups_for(list(hh["key"].to_numpy()[idx]), int(maxp[name]), scheme),
                                     dtype=np.int64)
    try:
        _SKETCHES[base] = (hh, kg)
    except TypeError:
        pass
    return hh, kg


def key_group_rows(reader: Any, query: KeyedStateQuery) -> np.ndarray | None:
    """Rows per key group as the reader's metadata tells (None when it cannot)."""
    rows = reader.key_group_rows(query)
    return None if rows is None else np.asarray(rows, dtype=np.float64)


def _max_parallelism(snap: Any, operator: Any) -> int:
    ops = snap.operators
    if operator is not None:
        names = {operator} if isinstance(operator, str) else set(operator)
        ops = ops[ops["operator"].isin(names)]
    if not len(ops):
        ops = snap.operators
    return int(ops["max_parallelism"].max()) if len(ops) else 1


def _file_bytes(path: Path) -> int:
    p = Path(path)
    if p.is_file():
        return p.stat().st_size
    total = 0
    for root, _, files in os.walk(p):
        for f in files:
            try:
                total += os.stat(os.path.join(root, f)).st_size
            except OSError:
                continue
    return total


def rows_per_key_group(snap: Any, operator: Any = None, state: Any = None) -> np.ndarray:
    """Estimated rows per key group of ``snap`` for these operators and states (see the module doc)."""
    q = KeyedStateQuery(operators=None if operator is None else frozenset([operator] if isinstance(operator, str)
                                                                           else operator),
                        states=None if state is None else frozenset([state] if isinstance(state, str) else state))
    reader = snap.reader
    rows = key_group_rows(reader, q)
    if rows is not None:
        return rows
    m = _max_parallelism(snap, operator)
    total = reader.estimated_rows(q)
    if total is None:
        total = _file_bytes(snap.path) * ROWS_PER_FILE_BYTE
    return np.full(m, float(total) / max(m, 1))


def needs_ranges(source: Any, operator: Any = None, state: Any = None, *others: Any) -> bool:
    """Whether an analysis of ``source`` (and ``others``, read side by side) must stream over ranges:
    a Snapshot (not a range view) whose analysis columns are not loaded and would exceed its budget."""
    snaps = [source, *others]
    for s in snaps:
        if not isinstance(s, StoredSnapshot) or isinstance(s.reader, RangeReader) or s.analysis_cache.loaded:
            return False
    rows = sum(float(rows_per_key_group(s, operator, state).sum()) for s in snaps)
    return rows * ANALYSIS_BYTES_PER_ROW > min(s.memory_budget for s in snaps)


def plan(snaps: Sequence[Any], operator: Any = None, state: Any = None,
         budget: int | None = None) -> list[tuple[int, int]]:
    """Contiguous key-group ranges ``(lo, hi)`` covering every key group of ``snaps``, each within the budget
    (the rows of all ``snaps`` in the range counted together; a key group never split)."""
    per = [rows_per_key_group(s, operator, state) for s in snaps]
    m = max(len(r) for r in per)
    rows = np.zeros(m, dtype=np.float64)
    for r in per:
        rows[: len(r)] += r
    budget = budget if budget is not None else min(s.memory_budget for s in snaps)
    cap = max(1.0, budget / ANALYSIS_BYTES_PER_ROW)
    out, lo, acc = [], 0, 0.0
    for kg in range(m):
        if acc and acc + rows[kg] > cap:
            out.append((lo, kg - 1))
            lo, acc = kg, 0.0
        acc += rows[kg]
    if m:
        out.append((lo, m - 1))
    return out


def view(snap: StoredSnapshot, lo: int, hi: int, key_groups: Iterable[int] | None = None,
         entries: bool = False, columns: Iterable[str] | None = None) -> StoredSnapshot:
    """A range view of ``snap``: a StoredSnapshot that reads key groups ``lo..hi`` only (``entries``: whose
    loading hashes the entries too, where the reader reads them cheaply: a diff's; ``columns``: the analysis
    columns it loads, None for all)."""
    return type(snap)(RangeReader(snap.reader, lo, hi, None if key_groups is None else list(key_groups), entries,
                                  columns), memory_budget=snap.memory_budget)


@dataclass
class Pass:
    """One pass over the ranges of one or more snapshots, with a progress bar.

    ``ahead``: the next range's views are loaded (their analysis columns read and numbered by ``load``,
    :func:`._columns.load`, given by the caller: that module imports this one) on background threads, one per snapshot, while the caller works on
    the current range's: the reads, the key kernel and the entry hashes release the GIL, so the
    second core works while the caller merges. Two ranges are then in memory at a time, so
    :func:`ranges` plans them at half the budget."""

    snaps: tuple
    ranges: list[tuple[int, int]]
    what: str
    entries: bool = False
    columns: Any = None
    ahead: bool = False
    #: ``ahead`` only: ``prepare(*views)`` run on the background thread once the next range's views are loaded
    #: (what the caller will ask of them first, kept on the views; its result is dropped)
    prepare: Any = None
    #: ``ahead`` only, when iterated (``map``'s ``fn`` loads its own views): ``load(view)`` reads a view's columns
    load: Any = None

    def _views(self, lo: int, hi: int) -> tuple:
        return tuple(view(s, lo, hi, entries=self.entries, columns=self.columns) for s in self.snaps)

    def __iter__(self) -> Iterator[tuple]:
        show = len(self.ranges) > 1
        with tqdm(total=len(self.ranges), unit="range", desc=self.what, disable=not show) as bar:
            if not self.ahead or len(self.ranges) < 2:
                for lo, hi in self.ranges:
                    yield self._views(lo, hi)
                    bar.update(1)
                return
            if self.load is None:
                raise TypeError("a Pass iterated ahead needs load= (explorer.analysis._columns.load)")
            load_view = self.load

            pool = ThreadPoolExecutor(len(self.snaps), thread_name_prefix="range-ahead")
            pending: list = []
            try:
                def load(v: Any) -> None:
                    load_view(v)

                def submit(i: int) -> tuple:
                    views = self._views(*self.ranges[i])
                    futures = [pool.submit(load, v) for v in views]
                    if self.prepare is not None:  # after the loads, on the thread of the first
                        futures[0] = pool.submit(lambda f=list(futures), v=views: (
                            [x.result() for x in f], self.prepare(*v)))
                    return views, futures

                nxt = submit(0)
                for i in range(len(self.ranges)):
                    views, pending = nxt
                    for f in pending:
                        f.result()  # (a read's error raised here, as the caller's own load would)
                    pending = []
                    if i + 1 < len(self.ranges):
                        nxt = submit(i + 1)
                        pending = nxt[1]
                    yield views
                    del views
                    bar.update(1)
            finally:
                for f in pending:  # (a caller that stopped early: the range loading is dropped once read)
                    f.cancel()
                pool.shutdown(wait=True)


    def map(self, fn: Any) -> Iterator[Any]:
        """``fn(*views)`` of each range, in range order. ``ahead``: on two background threads, two ranges at a
        time (each planned within half the budget; ``fn``'s answer is to be small beside its range: a range is
        dropped once ``fn`` returns), so the two cores work on two ranges; the caller only merges. An error of
        ``fn`` or of a read is raised here, in range order."""
        if not self.ahead or len(self.ranges) < 2:
            for views in self:
                yield fn(*views)
            return
        show = len(self.ranges) > 1
        with tqdm(total=len(self.ranges), unit="range", desc=self.what, disable=not show) as bar:
            pool = ThreadPoolExecutor(2, thread_name_prefix="range-map")
            queue: list = []
            try:
                def task(lo: int, hi: int) -> Any:
                    return fn(*self._views(lo, hi))

                nxt = 0
                while nxt < len(self.ranges) and len(queue) < 2:
                    queue.append(pool.submit(task, *self.ranges[nxt]))
                    nxt += 1
                while queue:
                    out = queue.pop(0).result()
                    if nxt < len(self.ranges):
                        queue.append(pool.submit(task, *self.ranges[nxt]))
                        nxt += 1
                    yield out
                    bar.update(1)
            finally:
                for f in queue:
                    f.cancel()
                pool.shutdown(wait=True)


def ranges(what: str, *snaps: Any, operator: Any = None, state: Any = None, entries: bool = False,
           columns: Iterable[str] | None = None, ahead: bool = False, prepare: Any = None,
           load: Any = None) -> Pass:
    """The range views of ``snaps`` to stream ``what`` over (one tuple of views per range; ``entries`` and
    ``columns``: see :func:`view`; ``ahead``, ``prepare``, ``load``: see :class:`Pass`)."""
    planned = plan(snaps, operator, state)
    if ahead and len(planned) > 1:  # two ranges in memory at a time: each within half the budget
        planned = plan(snaps, operator, state, budget=min(s.memory_budget for s in snaps) // 2)
    return Pass(tuple(snaps), planned, what, entries, columns, ahead, prepare, load)
