"""History: how state evolved over the checkpoints of a directory.

One row per (checkpoint, operator, state) with the state's entries, file bytes
and (optionally) number of distinct keys, and the checkpoint's own figures
repeated on each of its rows: total bytes, the *incremental* bytes (files whose
content, by SHA-256, the previous checkpoint did not have: what this checkpoint
really had to write), the change in total bytes, duration, sync/async time and
alignment time. Figures come from the snapshots' metadata; only ``keys`` reads
the key column of the state files.

Sync, async and alignment times are those of the slowest subtask (the maximum over
subtasks, as Flink's checkpoint statistics give them): subtasks snapshot in parallel,
so their sum is no duration of anything and can exceed the checkpoint's own duration.
``created_at`` is the snapshot's own time (its metadata), never a file's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import AnalysisError
from ..stored import checkpoints_in, open_stored
from ._columns import cached_frame, state_rows
from ._common import is_snapshot
from ._keys import key_codes

HISTORY_COLUMNS = ["checkpoint_id", "created_at", "kind", "path", "operator", "state", "ttl_ms", "entries", "bytes",
                   "keys", "checkpoint_bytes", "incremental_bytes", "delta_bytes", "duration_ms", "sync_ms",
                   "async_ms", "alignment_ms"]


def _snapshots(source: Any) -> list[Any]:
    if is_snapshot(source):
        return [source]
    if isinstance(source, (str, Path)):
        p = Path(source)
        if not p.exists():
            raise AnalysisError(f"{p}: no such checkpoint directory")
        chks = checkpoints_in(p) if p.is_dir() else []
        if chks:
            return [open_stored(c) for c in chks]
        return [open_stored(p)]
    snaps = [s if is_snapshot(s) else open_stored(s) for s in source]
    return sorted(snaps, key=lambda s: (s.checkpoint_id is None, s.checkpoint_id or 0))


def _file_digests(snap: Any) -> dict[str, int] | None:
    meta = getattr(snap.reader, "meta", None)
    if not meta or "files" not in meta:
        return None
    return {e.get("sha256", rel): int(e["bytes"]) for rel, e in meta["files"].items()}


def _state_bytes(snap: Any) -> dict[tuple[str, str], int]:
    meta = getattr(snap.reader, "meta", None)
    out: dict[tuple[str, str], int] = {}
    if not meta:
        return out
    files = meta.get("files", {})
    for o in meta.get("operators", []):
        for sub in o.get("subtasks", []):
            for s in sub.get("states", []):
                # an incremental checkpoint's RocksDB state has no file of its own, only its SST bytes
                b = files.get(s["file"], {}).get("bytes", 0) if s.get("file") else s.get("bytes", 0)
                out[(o["name"], s["name"])] = out.get((o["name"], s["name"]), 0) + int(b)
            tm = sub.get("timers")
            if tm:
                b = int(files.get(tm["file"], {}).get("bytes", 0))
                out[(o["name"], "timers")] = out.get((o["name"], "timers"), 0) + b
    return out


def _keys_per_state(snap: Any) -> dict[tuple[str, str], int]:
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


def history(checkpoints: Any, *, keys: bool = True, per_state: bool = True) -> pd.DataFrame:
    """Size, incremental delta, duration, alignment and keys over all checkpoints (oldest first).

    ``checkpoints`` is a checkpoint directory (its complete ``chk-N`` folders), or a list
    of snapshots or paths. With ``per_state=False`` one row per checkpoint.
    Columns (per state): see :data:`HISTORY_COLUMNS`.
    """
    snaps = _snapshots(checkpoints)
    if not snaps:
        raise AnalysisError(f"{checkpoints}: no complete checkpoints found")
    rows = []
    prev_digests: dict[str, int] | None = None
    prev_total: int | None = None
    for snap in snaps:
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
            "alignment_ms": t.get("alignment_ms"),
        }
        prev_digests, prev_total = digests, total
        if not per_state:
            states = snap.states
            rows.append({**common, "operator": None, "state": None, "ttl_ms": None,
                         "entries": int(states["entries"].sum()) if "entries" in states else None,
                         "bytes": total, "keys": _total_keys(snap) if keys else None})
            continue
        sbytes = _state_bytes(snap)
        nkeys = _keys_per_state(snap) if keys else {}
        for r in snap.states.itertuples(index=False):
            rows.append({**common, "operator": r.operator, "state": r.state,
                         "ttl_ms": None if pd.isna(r.ttl_ms) else int(r.ttl_ms),
                         "entries": int(getattr(r, "entries", 0) or 0), "bytes": sbytes.get((r.operator, r.state)),
                         "keys": nkeys.get((r.operator, r.state), 0) if keys else None})
    out = pd.DataFrame(rows, columns=HISTORY_COLUMNS)
    out["created_at"] = pd.to_datetime(out["created_at"], utc=True)
    return out


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
    g = hist.groupby("checkpoint_id", sort=True, observed=True)
    out = g[cols[1:]].first().reset_index()
    out["entries"] = g["entries"].sum().to_numpy()
    out["keys"] = g["keys"].sum(min_count=1).to_numpy() if hist["keys"].notna().any() else np.nan
    return out
