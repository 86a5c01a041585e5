"""``explorer.list(path)``: the retained checkpoints and savepoints under a path, local or remote.

One row per snapshot found at ``path`` or in its folders (down to :data:`MAX_DEPTH` levels): a
job's checkpoint directory lists each ``chk-N`` (complete or not: a ``chk-N`` without a
``_metadata`` is one being written, or aborted, and the engines skip it on restore), a
savepoint folder itself, a Spark checkpoint (its latest committed batch). Columns: ``path``,
``id``, ``kind``, ``format``, ``time`` (the snapshot's own time where it stores one, else when
its metadata file was written), ``time_from`` (which of the two: ``"snapshot"`` or ``"file"``), ``size_bytes`` and ``files`` (the files under its folder; a
Flink or engine incremental checkpoint's ``shared/`` files are the job's, not counted),
``complete``, ``note``. Only metadata is read: no state file is fetched.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pandas as pd

from .errors import SnapshotNotFoundError, StateExplorerError
from .format.checkpoint_dir import checkpoint_id, has_metadata
from .stored import READERS, register_optional_readers
from .storage import FileCache, StoragePath, as_path

#: how many folder levels below ``path`` are searched
MAX_DEPTH = 3
COLUMNS = ["path", "id", "kind", "format", "time", "time_from", "size_bytes", "files", "complete", "note"]
#: folders inside snapshots and job directories that hold no snapshot of their own
_SKIP = {"shared", "taskowned", "keyed", "timers", "operator", "native", "inflight", "state", "offsets", "commits",
         "sources", "_spark_metadata"}


def list_snapshots(path: str | Path, storage_options: dict[str, Any] | None = None,
                   cache_dir: str | Path | None = None) -> pd.DataFrame:
    """The checkpoints and savepoints under ``path``, newest first within each folder (see module doc)."""
    cache = FileCache(cache_dir) if cache_dir is not None else None
    root = as_path(path, storage_options, cache)
    if not root.exists():
        raise SnapshotNotFoundError(f"{root}: no such file or directory; expected a folder holding checkpoints "
                                    "or savepoints")
    register_optional_readers()
    rows: list[dict[str, Any]] = []
    _scan(root, rows, 0)
    df = pd.DataFrame(rows, columns=COLUMNS)
    if len(df):
        df["time"] = pd.to_datetime(df["time"], utc=True)
        df = df.sort_values(["kind", "time", "id"], ascending=[True, False, False], na_position="last",
                            ignore_index=True)
    return df


def _files(folder: Any) -> tuple[int, int]:
    """Bytes and count of the files under ``folder``."""
    if isinstance(folder, StoragePath):
        found = folder.walk_files()
        return sum(s for _, s in found), len(found)
    total = n = 0
    for dirpath, _, names in os.walk(folder):
        for name in names:
            try:
                total += os.path.getsize(os.path.join(dirpath, name))
                n += 1
            except OSError:  # removed while listed (retention)
                pass
    return total, n


def _is_spark(folder: Any) -> bool:
    return (folder / "metadata").is_file() and (folder / "offsets").is_dir() and (folder / "commits").is_dir()


def _scan(folder: Any, rows: list[dict[str, Any]], depth: int) -> None:
    if folder.is_file():
        folder = folder.parent
    if _is_spark(folder):
        rows.append(_spark_row(folder))
        return
    if (folder / "_metadata").is_file():
        rows.append(_snapshot_row(folder))
        return
    if depth >= MAX_DEPTH:
        return
    for child in sorted(folder.iterdir()):
        if not child.is_dir() or child.name in _SKIP:
            continue
        if (chk := checkpoint_id(child.name)) is not None and not has_metadata(child):
            size, n = _files(child)
            rows.append({"path": str(child), "id": chk, "kind": "checkpoint",
                         "format": None, "time": None, "time_from": None, "size_bytes": size, "files": n, "complete": False,
                         "note": "no _metadata: being written, or aborted (the engines skip it on restore)"})
            continue
        _scan(child, rows, depth + 1)


def _snapshot_row(folder: Any) -> dict[str, Any]:
    size, n = _files(folder)
    row: dict[str, Any] = {"path": str(folder), "size_bytes": size, "files": n}
    chk = checkpoint_id(folder.name)
    try:
        mtime = pd.Timestamp((folder / "_metadata").stat().st_mtime, unit="s", tz="UTC")
    except OSError:
        mtime = None
    try:
        cls = next((c for c in READERS if c.detect(folder)), None)
        if cls is None:
            raise StateExplorerError(f"{folder / '_metadata'}: a _metadata of no format State Explorer knows")
        info = cls(folder).info()
    except StateExplorerError as exc:
        row.update({"id": chk, "kind": "checkpoint" if chk is not None else None, "format": None,
                    "time": mtime, "time_from": "file" if mtime is not None else None, "complete": False,
                    "note": str(exc)[:300]})
        return row
    row.update({"id": info.checkpoint_id, "kind": info.kind, "format": info.format,
                "time": info.created_at if info.created_at is not None else mtime,
                "time_from": "snapshot" if info.created_at is not None else "file" if mtime is not None else None,
                "complete": True, "note": None})
    return row


def _spark_row(folder: Any) -> dict[str, Any]:
    size, n = _files(folder)
    commits = sorted((int(p.name), p) for p in (folder / "commits").iterdir() if p.name.isdigit())
    offsets = {int(p.name) for p in (folder / "offsets").iterdir() if p.name.isdigit()}
    last = commits[-1] if commits else None
    note = None
    if offsets and (not commits or max(offsets) > commits[-1][0]):
        note = f"batch {max(offsets)} started but not committed (the query resumes from it)"
    return {"path": str(folder), "id": last[0] if last else None, "kind": "checkpoint", "format": "spark-checkpoint",
            "time": pd.Timestamp(last[1].stat().st_mtime, unit="s", tz="UTC") if last else None,
            "time_from": "file" if last else None,
            "size_bytes": size, "files": n, "complete": last is not None, "note": note}

