"""The adapter's bucket layout in a Spark checkpoint: the part of :class:`~.reader.SparkCheckpointReader`
that reads it.

Queries run with the adapter's bucket layout (:mod:`explorer.format.spark_buckets`) keep all keys' state
in one Spark value per bucket (``__explorer_buckets``). Those values are read once per operator through
Spark's data source and decoded (Arrow IPC tables, format name and version checked) into per-key rows:
one state per descriptor, with its kind, ``last_access`` and ``expires_at`` from the adapter's own TTL,
timers as ``event_timers`` / ``processing_timers``, broadcast state as :meth:`BucketLayout.operator_state`.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ...errors import ReaderError
from ...format.spark_buckets import STATE_NAME, TIMERS, decode_tables
from ...spark_session import spark_progress
from ..base import CONTRACT_COLUMNS, OPERATOR_STATE_COLUMNS, TIMESTAMP, KeyedStateQuery, empty_piece, make_piece
from .contract import row_bytes, run_index, unwrap
from .jvm import spark_cause
from .part import SparkPart


class BucketLayout(SparkPart):
    """The bucket layout's values decoded into states and rows (see module doc)."""

    def _is_bucket_layout(self, op: dict[str, Any]) -> bool:
        return any(v.get("stateName") == STATE_NAME for v in op["variables"])

    def _bucket_values(self, op: dict[str, Any]) -> list[tuple[int, Any, dict]]:
        """The adapter's stored bucket values of one operator: ``(partition, bucket, value)``, read once."""
        cache = self.__dict__.setdefault("_bucket_value_cache", {})
        if op["operator_id"] not in cache:
            where = f"state {STATE_NAME!r} of operator {op['operator']!r} at batch {self.batch_id} in {self.path}"
            try:
                with spark_progress(f"reading {where} through Spark"):
                    t = self._frame(op, {"stateVarName": STATE_NAME}).toArrow()
            except Exception as exc:
                raise ReaderError(f"reading {where} through Spark's state data source failed: "
                                  f"{spark_cause(exc)}") from exc
            parts = t.column("partition_id").to_pylist()
            buckets = unwrap(t.column("key").combine_chunks()).to_pylist()
            values = t.column("value").to_pylist()
            cache[op["operator_id"]] = [(int(p), b, v) for p, b, v in zip(parts, buckets, values) if v is not None]
        return cache[op["operator_id"]]

    @staticmethod
    def _bucket_row(value: dict) -> tuple:
        return (value.get("format"), value.get("version"), value.get("buckets"),
                [(x["name"], x["kind"], x["ttl_ms"], x["data"]) for x in value.get("tables") or []])

    def _bucket_tables(self, op: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """The adapter's bucket values of one operator, decoded: ``state -> {kind, ttl_ms, pieces}``."""
        cache = self.__dict__.setdefault("_bucket_cache", {})
        if op["operator_id"] in cache:
            return cache[op["operator_id"]]
        where = f"state {STATE_NAME!r} of operator {op['operator']!r} at batch {self.batch_id} in {self.path}"
        out: dict[str, dict[str, Any]] = {}
        for part, bucket, value in self._bucket_values(op):
            for name, (kind, ttl_ms, table) in decode_tables(self._bucket_row(value),
                                                             f"{where}, bucket {bucket}").items():
                if name == TIMERS:
                    name = "event_timers" if kind == "event_timer" else "processing_timers"
                e = out.setdefault(name, {"kind": kind, "ttl_ms": ttl_ms, "pieces": []})
                e["pieces"].append((int(part), table))
        cache[op["operator_id"]] = out
        return out

    def operator_state(self) -> pd.DataFrame:
        """Broadcast state of pipelines run with the adapter's bucket layout (``mode`` ``BROADCAST``): every
        bucket keeps its own copy, as every Flink subtask does; shown once per Spark partition (``subtask``),
        with a note if copies within a partition differ."""
        rows = []
        for op in self._operators:
            if not (op["variables"] and self._is_bucket_layout(op)):
                continue
            where = f"state {STATE_NAME!r} of operator {op['operator']!r} at batch {self.batch_id} in {self.path}"
            seen: dict[tuple, str] = {}
            for part, bucket, value in self._bucket_values(op):
                tables = decode_tables(self._bucket_row(value), f"{where}, bucket {bucket}", broadcast=True)
                for name, (_kind, _ttl, table) in tables.items():
                    for uk, v in zip(table.column("user_key").to_pylist(), table.column("value").to_pylist()):
                        ident = (name, part, repr(uk))
                        if ident in seen:
                            if seen[ident] != repr(v):
                                self.notes.append(f"{where}: broadcast state {name!r} differs between the buckets of "
                                                  f"partition {part} at key {uk!r}")
                            continue
                        seen[ident] = repr(v)
                        rows.append({"operator": op["operator"], "state": name, "mode": "BROADCAST",
                                     "subtask": part, "user_key": uk, "value": v,
                                     "size_bytes": len(repr(uk)) + len(repr(v))})
        return pd.DataFrame(rows, columns=list(OPERATOR_STATE_COLUMNS))

    def _bucket_piece(self, op, st, query: KeyedStateQuery) -> pa.Table:
        """One state of the bucket layout as contract rows (one per value, list element, map entry, timer)."""
        pieces = []
        for part, t in self._bucket_tables(op)[st["state"]]["pieces"]:
            if query.key_groups is not None and part not in query.key_groups:
                continue
            key = t.column("key").combine_chunks()
            n = len(key)
            kind = st["kind"]
            user_key = last = expires = None
            if kind in ("event_timer", "processing_timer"):
                value = t.column("timestamp").combine_chunks()
                size = row_bytes(key) + 8
            else:
                value = t.column("value").combine_chunks()
                size = row_bytes(key) + row_bytes(value)
                if kind == "map":
                    user_key = t.column("user_key").combine_chunks()
                    size = size + row_bytes(user_key)
                elif kind == "list":
                    user_key = pa.array(run_index(key), pa.int64())
                if "last_access" in t.column_names:
                    la = t.column("last_access").combine_chunks()
                    last = la.cast(pa.timestamp("ms")).cast(TIMESTAMP)
                    expires = pc.add(la, int(st["ttl_ms"])).cast(pa.timestamp("ms")).cast(TIMESTAMP)
            pieces.append(make_piece({
                "operator": op["operator"], "state": st["state"], "kind": kind,
                "key": key, "key_group": pa.array([part] * n, pa.int32()), "subtask": pa.array([part] * n, pa.int32()),
                "user_key": user_key, "value": value, "last_access": last, "expires_at": expires,
                "size_bytes": pa.array(size, pa.int64()),
            }, query.columns))
        if not pieces:
            return empty_piece(query.columns or CONTRACT_COLUMNS)
        piece = pa.concat_tables(pieces, promote_options="permissive")
        return piece
