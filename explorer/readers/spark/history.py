"""A Spark checkpoint's history: every retained micro-batch, per operator and state.

Rows, distinct keys and the rows added / removed since the previous batch come
from reading each batch's state (``batchId=``); bytes come from the store files
on disk (``<v>.delta|snapshot|changelog|zip``, ``v = batch + 1``, what that batch
wrote: ``attrs["bytes_measure"]`` is ``"new file bytes"``), so they need no JVM. States that share one store
(a ``transformWithState`` operator's, column families of one RocksDB store) have no bytes of their own:
their ``bytes`` are null (``attrs["notes"]`` says so), the store's are the batch's ``incremental_bytes``. A retained batch whose store files the store's maintenance deleted (a
RocksDB store keeps versions from its oldest retained snapshot on; the offset log may keep older batches)
is a row with ``reconstructable`` False and a ``note`` naming the missing files, not an error.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pandas as pd

from ...errors import SnapshotFormatError, VersionGoneError
from ..base import KeyedStateQuery
from . import layout
from .keys import key_leaves

if TYPE_CHECKING:
    from .reader import SparkCheckpointReader

__all__ = ["SPARK_HISTORY_COLUMNS", "spark_history"]

#: the explorer's history columns plus Spark's own: rows added and removed since the previous batch,
#: the batch's event-time watermark
SPARK_HISTORY_COLUMNS = ["checkpoint_id", "created_at", "kind", "path", "operator", "state", "ttl_ms", "entries",
                         "bytes", "keys", "added", "removed", "checkpoint_bytes", "incremental_bytes", "delta_bytes",
                         "watermark_ms", "duration_ms", "sync_ms", "async_ms", "alignment_ms", "reconstructable",
                         "note"]


def _row_ids(df: pd.DataFrame) -> set:
    """One hashable identity per row: key, user key and value (a changed value counts as removed + added)."""
    return {(key_leaves(k), key_leaves(u), repr(v)) for k, u, v in zip(df["key"], df["user_key"], df["value"])}


def _offsets(reader: "SparkCheckpointReader", batch: int) -> dict[str, Any]:
    f = reader.path / "offsets" / str(batch)
    if not f.is_file():
        return {}  # purged by Spark's retention since the listing
    lines = layout.verified_text(f, reader.roots).splitlines()
    try:
        doc = json.loads(lines[1])
    except (IndexError, json.JSONDecodeError) as exc:
        raise SnapshotFormatError(f"{f}: expected a version line and the batch's JSON offset metadata") from exc
    if not isinstance(doc, dict):
        raise SnapshotFormatError(f"{f}: expected a JSON object of batch metadata, found {type(doc).__name__}")
    return doc


def spark_history(reader: "SparkCheckpointReader", keys: bool = True, per_state: bool = True) -> pd.DataFrame:
    """One row per (retained batch, operator, state), oldest first; ``per_state=False``: one per batch."""
    files = layout.store_files(reader.path)
    retained = [b for b in reader.checkpoint_ids() if (reader.path / "offsets" / str(b)).is_file()]
    op_names = {int(r.operator_id): r.operator for r in reader.operators().itertuples(index=False)}
    states = reader.states()
    ttl = {(r.operator, r.state): r.ttl_ms for r in states.itertuples(index=False)}
    rows: list[dict[str, Any]] = []
    prev_ids: dict[tuple[str, str], set | None] = {}  # None: the batch before could not be rebuilt
    gap = False  # the batch before could not be rebuilt: what this one added and removed is unknown
    prev_total: int | None = None
    for b in retained:
        version = b + 1
        on_disk = sum(f.size for f in files if f.version <= version)
        written = [f for f in files if f.version == version]
        meta = _offsets(reader, b)
        created = meta.get("batchTimestampMs")
        common = {
            "checkpoint_id": b, "kind": "micro-batch", "path": str(reader.path),
            "created_at": None if created is None else pd.Timestamp(int(created), unit="ms", tz="UTC"),
            "checkpoint_bytes": on_disk, "incremental_bytes": sum(f.size for f in written),
            "delta_bytes": on_disk - prev_total if prev_total is not None else on_disk,
            "watermark_ms": meta.get("batchWatermarkMs"), "duration_ms": None, "sync_ms": None, "async_ms": None,
            "alignment_ms": None,
        }
        prev_total = on_disk
        at = reader.at_batch(b)
        try:
            pieces = list(at.keyed_pieces(KeyedStateQuery(columns=("operator", "state", "key", "user_key",
                                                                    "value"))))
        except VersionGoneError as exc:  # the store's maintenance deleted what this batch is rebuilt from
            gone = {**common, "entries": None, "bytes": None, "keys": None, "added": None, "removed": None,
                    "reconstructable": False, "note": f"batch {b} cannot be rebuilt: {exc}"}
            pairs = [(r.operator, r.state) for r in states.itertuples(index=False)] if per_state else [(None, None)]
            rows += [{**gone, "operator": op, "state": st, "ttl_ms": ttl.get((op, st))} for op, st in pairs]
            prev_ids, gap = {k: None for k in prev_ids}, True
            continue
        df = (pd.concat([p.to_pandas() for p in pieces], ignore_index=True) if pieces
              else pd.DataFrame(columns=["operator", "state", "key", "user_key", "value"]))
        common = {**common, "reconstructable": True, "note": None}
        batch_rows = []
        pairs = [(r.operator, r.state) for r in states.itertuples(index=False)]
        for (op, st), g in df.groupby(["operator", "state"], sort=True):
            ids = _row_ids(g)
            before = prev_ids.get((op, st))
            prev_ids[(op, st)] = ids
            op_id = next((i for i, n in op_names.items() if n == op), None)
            store = st if st in layout.JOIN_STORES else "default"
            shared = sum(1 for o, s in pairs if o == op and (s if s in layout.JOIN_STORES else "default") == store)
            batch_rows.append({
                **common, "operator": op, "state": st, "ttl_ms": ttl.get((op, st)), "entries": len(g),
                # the store's files hold every state of the store (a transformWithState operator's column
                # families): one state's share of them is unknown, not the whole store's bytes again
                "bytes": (sum(f.size for f in written if f.operator_id == op_id and f.store == store)
                          if shared <= 1 else None),
                "keys": int(pd.Series([repr(k) for k in g["key"]]).nunique()) if keys else None,
                "added": len(ids - before) if before is not None else (None if gap else len(ids)),
                "removed": len(before - ids) if before is not None else (None if gap else 0),
            })
        for key in list(prev_ids):  # a state that emptied out this batch
            if key not in {(r["operator"], r["state"]) for r in batch_rows} and prev_ids[key] is None:
                prev_ids[key] = set()
            elif key not in {(r["operator"], r["state"]) for r in batch_rows} and prev_ids[key]:
                batch_rows.append({**common, "operator": key[0], "state": key[1], "ttl_ms": ttl.get(key),
                                   "entries": 0, "bytes": 0, "keys": 0 if keys else None, "added": 0,
                                   "removed": len(prev_ids[key])})
                prev_ids[key] = set()
        gap = False
        if per_state:
            rows += batch_rows
        else:
            unknown = any(r["added"] is None for r in batch_rows)
            rows.append({**common, "operator": None, "state": None, "ttl_ms": None,
                         "entries": sum(r["entries"] for r in batch_rows), "bytes": common["incremental_bytes"],
                         "keys": int(pd.Series([repr(k) for k in df["key"]]).nunique()) if keys else None,
                         "added": None if unknown else sum(r["added"] for r in batch_rows),
                         "removed": None if unknown else sum(r["removed"] for r in batch_rows)})
    out = pd.DataFrame(rows, columns=SPARK_HISTORY_COLUMNS)
    out["created_at"] = pd.to_datetime(out["created_at"], utc=True)
    out.attrs["bytes_measure"] = "new file bytes"  # what each batch wrote (explorer.analysis.history's doc)
    out["bytes"] = out["bytes"].astype("Int64")
    shared = sorted({f"{o}/{s}" for o, s, b, ok in zip(out["operator"], out["state"], out["bytes"],
                                                        out["reconstructable"]) if ok and pd.isna(b) and s})
    out.attrs["notes"] = [f"bytes unknown per state for {', '.join(shared)}: their operator keeps them in one "
                          "state store, whose files (incremental_bytes) hold them all"] if shared else []
    return out
