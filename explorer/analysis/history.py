"""History: how state evolved over the checkpoints of a directory.

One row per (checkpoint, operator, state) with the state's entries, file bytes
and (optionally) number of distinct keys, and the checkpoint's own figures
repeated on each of its rows: total bytes, the *incremental* bytes (files whose
content, by SHA-256, the previous checkpoint did not have: what this checkpoint
really had to write), the change in total bytes, duration, sync/async time and
alignment time. Figures come from the snapshots' metadata; only ``keys`` reads
the key column of the state files.

Apache Flink checkpoint directories (``chk-N`` folders holding a ``_metadata``)
give per checkpoint its id (``created_at`` stays unknown: Flink's ``_metadata``
stores no time, and a file's modification time is not the checkpoint's), its bytes (every file and segment its ``_metadata`` names,
plus the ``_metadata`` itself; files shared between checkpoints are what
``incremental_bytes`` leaves out) and ``operator_bytes``, the bytes each
operator's state handles name. Flink stores no durations (those columns stay
null) and no per-state file sizes: a state's ``bytes`` is then the sum of its
entries' ``size_bytes``.

What ``bytes`` counts therefore depends on the format, and the frame says which in
``attrs["bytes_measure"]``: ``"file bytes"`` (the engine's per-state files; with
``per_state=False`` the checkpoint's files, every format), ``"serialized bytes"`` (Flink's
per-state rows: the values' serialized sizes, not files) or ``"new file bytes"`` (Spark's: the
store files each batch wrote). Figures title their axis with it.

Sync, async and alignment times are those of the slowest subtask (the maximum over
subtasks, as Flink's checkpoint statistics give them): subtasks snapshot in parallel,
so their sum is no duration of anything and can exceed the checkpoint's own duration.
``created_at`` is the snapshot's own time (its metadata), never a file's.

A ``chk-N`` of a directory that cannot be read (a superseded checkpoint half deleted: its
``_metadata`` still there, some of the files it names gone, as a cancelled job or a retention
cut short leaves it) is one row with ``complete`` False and a ``note`` saying what is missing,
its figures null; the other checkpoints go on (and are compared with the last complete one
before them). The frame's ``attrs["notes"]`` repeats those notes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import AnalysisError, SnapshotError
from ..format.checkpoint_dir import checkpoint_id
from ..storage import StoragePath, as_path
from ..stored import open_stored, retained_checkpoints
from . import _ranges
from ._columns import cached_frame, state_rows
from ._common import is_snapshot
from ._keys import key_codes
from .distribution import state_sizes

HISTORY_COLUMNS = ["checkpoint_id", "created_at", "kind", "path", "operator", "state", "ttl_ms", "entries", "bytes",
                   "keys", "checkpoint_bytes", "incremental_bytes", "delta_bytes", "duration_ms", "sync_ms",
                   "async_ms", "alignment_ms", "operator_bytes", "complete", "note"]


class _Unreadable:
    """A ``chk-N`` of a checkpoint directory that did not read, and why."""

    def __init__(self, path: Any, checkpoint: int | None, error: BaseException):
        self.path, self.checkpoint_id, self.error = path, checkpoint, error

    @property
    def note(self) -> str:
        return (f"{self.path}: checkpoint {self.checkpoint_id} cannot be read, left out "
                f"(incomplete or partly deleted: {self.error})")


_UNREADABLE = (SnapshotError, FileNotFoundError)


def _open_chk(c: Any, options: dict[str, Any]) -> Any:
    try:
        return open_stored(c, **options)
    except _UNREADABLE as exc:
        return _Unreadable(c, checkpoint_id(c.name), exc)

def _snapshots(source: Any, options: dict[str, Any]) -> list[Any]:
    if is_snapshot(source):
        return [source]
    if isinstance(source, (str, Path, StoragePath)):
        p = as_path(source)
        if not p.exists():
            raise AnalysisError(f"{p}: no such checkpoint directory")
        chks = retained_checkpoints(p)
        if chks:
            return [_open_chk(c, options) for c in chks]
        return [open_stored(p, **options)]
    snaps = [s if is_snapshot(s) else open_stored(s, **options) for s in source]
    return sorted(snaps, key=lambda s: (s.checkpoint_id is None, s.checkpoint_id or 0))


def _file_digests(snap: Any) -> dict[str, int] | None:
    """Bytes of each stored file by an identity shared by checkpoints that share the file (the reader's)."""
    return snap.reader.file_bytes()


def _operator_bytes(snap: Any) -> dict[str, int]:
    files = snap.reader.stored_files()
    if files is None:
        return {}
    named = files.dropna(subset=["operator"])
    return {str(k): int(v) for k, v in named.groupby("operator", sort=False)["bytes"].sum().items()}


def _entry_figures(snap: Any) -> dict[tuple[str, str], tuple[int, int]]:
    """(entries, sum of ``size_bytes``) per (operator, state), from the rows: a state's figures where the
    metadata has none (Flink)."""
    if _ranges.needs_ranges(snap):  # over the memory budget: counted range by range
        sizes = state_sizes(snap)
        return {(op, st): (int(e), int(b)) for op, st, e, b in
                zip(sizes["operator"], sizes["state"], sizes["entries"], sizes["bytes"])}
    df = cached_frame(snap) if hasattr(snap, "reader") else snap.keyed_state(
        columns=["operator", "state", "size_bytes"])
    if not len(df):
        return {}
    sizes = df["size_bytes"].to_numpy(dtype=np.int64, na_value=0)
    return {(op, st): (len(rows), int(sizes[rows].sum())) for op, st, rows in state_rows(df)}


def _state_bytes(snap: Any) -> dict[tuple[str, str], int]:
    own = snap.reader.state_bytes()
    if own is not None:  # a format storing each state in files of its own (the engine's)
        return own
    if snap.reader.stored_files() is not None:  # files named, but not per state (Flink): the entries' sizes
        return {k: b for k, (_, b) in _entry_figures(snap).items()}
    return {}


def _keys_per_state(snap: Any) -> dict[tuple[str, str], int]:
    if _ranges.needs_ranges(snap):  # over the memory budget: counted range by range (a key lies in one range)
        sizes = state_sizes(snap)
        return {(op, st): int(k) for op, st, k in zip(sizes["operator"], sizes["state"], sizes["keys"])}
    df = cached_frame(snap) if hasattr(snap, "reader") else snap.keyed_state(columns=["operator", "state", "key"])
    if not len(df):
        return {}
    codes, kv = key_codes(df)
    seen = np.zeros(max(len(kv), 1), dtype=bool)
    out = {}
    for op, st, rows in state_rows(df):  # distinct keys of a state: mark its codes, count the marks
        c = codes[rows]
        seen[c] = True
        out[(op, st)] = int(seen.sum())
        seen[c] = False
    return out


def _timings(snap: Any) -> dict[str, Any]:
    """The snapshot's timings, with sync/async/alignment as the slowest subtask's (see the module doc)."""
    t = dict(snap.timings())
    try:
        subs = snap.subtasks
    except Exception:  # noqa: BLE001 - a format without a subtask table keeps its own figures
        return t
    for c in ("sync_ms", "async_ms", "alignment_ms"):
        if c in subs and len(subs) and subs[c].notna().any():
            t[c] = round(float(subs[c].max()), 3)
    return t


def history(checkpoints: Any, *, keys: bool = True, per_state: bool = True, **open_options: Any) -> pd.DataFrame:
    """Size, incremental delta, duration, alignment and keys over all checkpoints (oldest first).

    ``checkpoints`` is a checkpoint directory (its complete ``chk-N`` folders), or a list
    of snapshots or paths. With ``per_state=False`` one row per checkpoint.
    ``open_options`` go to each snapshot opened from a path (e.g. ``uids=[...]`` for Flink).
    Columns (per state): see :data:`HISTORY_COLUMNS`.
    """
    snaps = _snapshots(checkpoints, open_options)
    if not snaps:
        raise AnalysisError(f"{checkpoints}: no complete checkpoints found")
    own = snaps[0].reader.history(keys=keys, per_state=per_state) \
        if len(snaps) == 1 and hasattr(snaps[0], "reader") else None
    if own is not None:  # a format whose one folder holds every batch (Spark): its reader reads them all
        return own
    rows = []
    prev_digests: dict[str, int] | None = None
    prev_total: int | None = None
    notes: list[str] = []
    for snap in snaps:
        if not isinstance(snap, _Unreadable):
            try:
                before = len(rows)
                prev_digests, prev_total = _rows_of(snap, rows, prev_digests, prev_total, keys, per_state)
                continue
            except _UNREADABLE as exc:  # a file it names went missing while reading its states
                del rows[before:]
                snap = _Unreadable(snap.path, checkpoint_id(snap.path.name) or snap.checkpoint_id, exc)
        notes.append(snap.note)
        rows.append({c: None for c in HISTORY_COLUMNS} | {
            "checkpoint_id": snap.checkpoint_id, "path": str(snap.path), "complete": False, "note": snap.note})
    out = pd.DataFrame(rows, columns=HISTORY_COLUMNS)
    out["created_at"] = pd.to_datetime(out["created_at"], utc=True)
    out["complete"] = out["complete"].astype(bool)
    if notes:  # the unreadable rows' figures are null: counts stay integers (nullable), not floats
        for c in ("entries", "bytes", "keys", "checkpoint_bytes", "incremental_bytes", "delta_bytes",
                  "operator_bytes", "ttl_ms"):
            if out[c].notna().any() or c != "keys":
                out[c] = out[c].astype("Int64")
    out.attrs["notes"] = notes
    measures = {_bytes_measure(s, per_state) for s in snaps if not isinstance(s, _Unreadable)} - {None}
    out.attrs["bytes_measure"] = measures.pop() if len(measures) == 1 else (
        "bytes (file or serialized, by checkpoint)" if measures else "bytes")
    return out


def _bytes_measure(snap: Any, per_state: bool) -> str | None:
    """What ``snap``'s rows' ``bytes`` count (see the module doc); None where they are null."""
    if not per_state:
        return "file bytes"
    if not hasattr(snap, "reader"):
        return None
    try:
        if snap.reader.state_bytes() is not None:
            return "file bytes"
        return "serialized bytes" if snap.reader.stored_files() is not None else None
    except _UNREADABLE:  # its files went missing meanwhile: its rows were left out
        return None


def _rows_of(snap: Any, rows: list[dict[str, Any]], prev_digests: dict[str, int] | None, prev_total: int | None,
             keys: bool, per_state: bool) -> tuple[dict[str, int] | None, int]:
    """Appends ``snap``'s rows to ``rows``; the figures the next checkpoint is compared with."""
    t = _timings(snap)
    digests = _file_digests(snap)
    total = int(t.get("bytes", sum(digests.values()) if digests else 0))
    if digests is not None and prev_digests is not None:
        incremental = sum(b for d, b in digests.items() if d not in prev_digests)
    else:
        incremental = total
    common = {
        "checkpoint_id": snap.checkpoint_id, "created_at": snap.created_at, "kind": snap.kind,
        "path": str(snap.path), "checkpoint_bytes": total, "incremental_bytes": int(incremental),
        "delta_bytes": total - prev_total if prev_total is not None else total,
        "duration_ms": t.get("duration_ms"), "sync_ms": t.get("sync_ms"), "async_ms": t.get("async_ms"),
        "alignment_ms": t.get("alignment_ms"), "complete": True, "note": None,
    }
    op_bytes = _operator_bytes(snap)
    if not per_state:
        states = snap.states
        rows.append({**common, "operator": None, "state": None, "ttl_ms": None,
                     "entries": (int(states["entries"].sum()) if "entries" in states
                                 else sum(n for n, _ in _entry_figures(snap).values())),
                     "bytes": total, "keys": _total_keys(snap) if keys else None,
                     "operator_bytes": sum(op_bytes.values()) if op_bytes else None})
        return digests, total
    sbytes = _state_bytes(snap)
    counted = _entry_figures(snap) if "entries" not in snap.states else {}
    nkeys = _keys_per_state(snap) if keys else {}
    if not len(snap.states):  # no keyed state (a source's splits only): the checkpoint still has its row
        rows.append({**common, "operator": None, "state": None, "ttl_ms": None, "entries": 0, "bytes": None,
                     "keys": 0 if keys else None,
                     "operator_bytes": sum(op_bytes.values()) if op_bytes else None,
                     "note": "no keyed state: operator state only" if op_bytes else "no keyed state"})
        return digests, total
    for r in snap.states.itertuples(index=False):
        rows.append({**common, "operator": r.operator, "state": r.state,
                     "ttl_ms": None if pd.isna(r.ttl_ms) else int(r.ttl_ms),
                     "entries": (int(getattr(r, "entries", 0) or 0) if not counted
                                 else counted.get((r.operator, r.state), (0, 0))[0]),
                     "bytes": sbytes.get((r.operator, r.state)),
                     "keys": nkeys.get((r.operator, r.state), 0) if keys else None,
                     "operator_bytes": op_bytes.get(r.operator)})
    return digests, total


def _total_keys(snap: Any) -> int:
    df = cached_frame(snap) if hasattr(snap, "reader") else snap.keyed_state(columns=["operator", "key"])
    if not len(df):
        return 0
    codes, kv = key_codes(df)
    op_codes, _ = pd.factorize(df["operator"])
    return int(len(np.unique(op_codes.astype(np.int64) * max(len(kv), 1) + codes)))


def checkpoint_summary(hist: pd.DataFrame) -> pd.DataFrame:
    """One row per checkpoint of a per-state :func:`history` (entries and keys summed over states)."""
    cols = ["checkpoint_id", "created_at", "kind", "path", "checkpoint_bytes", "incremental_bytes", "delta_bytes",
            "duration_ms", "sync_ms", "async_ms", "alignment_ms"]
    cols += [c for c in ("complete", "note") if c in hist]
    g = hist.groupby("checkpoint_id", sort=True, observed=True)
    out = g[cols[1:]].first().reset_index()
    out["entries"] = g["entries"].sum().to_numpy()
    out["keys"] = g["keys"].sum(min_count=1).to_numpy() if hist["keys"].notna().any() else np.nan
    return out
