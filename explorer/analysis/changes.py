"""The change feed: every change of state between two batches, to find where a key went wrong.

>>> explorer.changes("ckpt", key="u012", from_batch=2, to_batch=5)

One row per change: ``batch_id, operator, state, change_type`` (``update`` /
``delete``), ``key, key_group, user_key, value, expires_at``. Spark checkpoints
answer it from Spark's change feed (``readChangeFeed``), which needs the
RocksDB store with changelog checkpointing or the HDFS-backed store; timers of
``transformWithState`` (no readable change feed in PySpark 4.3) from the registered
timers of each batch and the batch before: ``update`` a timer registered, ``delete``
one that fired or was deleted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from ..errors import AnalysisError
from ..spark_session import spark_progress
from ..stored import open_stored

__all__ = ["CHANGE_COLUMNS", "changes"]

CHANGE_COLUMNS = ["batch_id", "operator", "state", "change_type", "key", "key_group", "user_key", "value",
                  "expires_at"]


def changes(path: str | Path | Any, key: Any = None, from_batch: int | None = None, to_batch: int | None = None,
            operator: str | None = None, state: str | None = None) -> pd.DataFrame:
    """Changes of every state (or ``operator``/``state``) in batches ``from_batch..to_batch`` (both included;
    default: all retained), only those of ``key`` when given, oldest first."""
    snap = path if hasattr(path, "reader") else open_stored(path)
    reader = snap.reader
    if not hasattr(reader, "changes") or not hasattr(reader, "checkpoint_ids"):
        raise AnalysisError(f"{snap.path}: {'an' if snap.format[:1] in 'aeiou' else 'a'} {snap.format} snapshot has no change feed; compare two checkpoints "
                            "with explorer.diff(a, b) instead")
    ids = reader.checkpoint_ids()
    start = ids[0] if from_batch is None else int(from_batch)
    end = ids[-1] if to_batch is None else int(to_batch)
    if start > end or end not in ids:
        raise AnalysisError(f"{snap.path}: batches {start}..{end} are not a range of committed batches "
                            f"{ids[0]}..{ids[-1]}")
    states = snap.states
    if snap.format.startswith("spark") and not reader.jvm_free:  # Spark's change feed: jobs that take a while
        with spark_progress(f"reading the changes of batches {start}..{end} of {snap.path} through Spark"):
            return _changes(reader, states, start, end, key, operator, state)
    return _changes(reader, states, start, end, key, operator, state)


def _changes(reader: Any, states: pd.DataFrame, start: int, end: int, key: Any, operator: str | None,
             state: str | None) -> pd.DataFrame:
    frames, notes = [], []
    for r in states.itertuples(index=False):
        if (operator is not None and r.operator != operator) or (state is not None and r.state != state):
            continue
        df = reader.changes(r.state, start, end, operator=r.operator)
        notes += df.attrs.get("notes", [])  # batches the reader could not answer, and why
        if key is not None:
            df = df[[reader.key_matches(k, key) for k in df["key"]]]
        df.insert(1, "operator", r.operator)
        df.insert(2, "state", r.state)
        frames.append(df)
    out = (pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=CHANGE_COLUMNS))
    out = out[CHANGE_COLUMNS].sort_values(["batch_id", "operator", "state"], kind="stable").reset_index(drop=True)
    out.attrs["notes"] = notes
    return out
