"""A Spark checkpoint's layout and metadata: the part of :class:`~.reader.SparkCheckpointReader` that
answers ``info``, ``operators``, ``states`` and ``subtasks`` and decides how state is read.

What it reads: the offset log of the batch (its timestamp, watermark and the SQL settings frozen at the
first batch), the query's ``metadata``, the operators' metadata (``state/<op>/_metadata``: v1 from the
file, transformWithState's v2 through Spark's ``state-metadata`` source), and the store folders of
operators that have none (``kinds``). From those it decides :attr:`CheckpointLayout.jvm_free` (the store
files are read without Spark) and each operator's states (``_states_of``: one per store of a built-in
operator, one per state variable of transformWithState, one per descriptor of the bucket layout).
A checkpoint on an object store mirrored batch by batch (``layout.BatchMirror``) fetches the rest of its
files when a question needs every batch (``_everything``).
"""

from __future__ import annotations

import json
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd

from ...errors import ReaderError, SnapshotFormatError
from ...format.untrusted import excerpt
from ...spark_session import spark_progress
from ..base import OPERATOR_COLUMNS, STATE_COLUMNS, SUBTASK_COLUMNS, SnapshotInfo, SnapshotReader
from . import layout
from .checks import spark_checks
from .jvm import spark_cause
from .part import SparkPart
from .stores import PROVIDERS

_KINDS = {"ValueState": "value", "ListState": "list", "MapState": "map"}
_TIMER_PREFIXES = ("$eventTimers", "$procTimers")
#: why an aggregation's value fields are named count, sum, count_2 ... and not after the query's aliases
_BUFFER_NOTE = (
    "values of {operator} are Spark's aggregation buffers: one field per slot of each aggregate's buffer, named "
    "by Spark after the function (count, sum, min, max; avg keeps a sum and a count), repeats numbered in the "
    "query's order (count_2, sum_2, ...); the query's aliases (.alias('n')) are not in the checkpoint's "
    "metadata, so they cannot be shown")
_HDFS_PROVIDER = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"


class CheckpointLayout(SparkPart):
    """The checkpoint's files and metadata (see module doc)."""

    @classmethod
    def on_store(cls, remote: Any, **options: Any) -> SnapshotReader:
        """The checkpoint at ``remote`` (a :class:`~explorer.storage.StoragePath`), read from a local folder that
        holds only the files of the batch read (:class:`.layout.BatchMirror`); a note says so."""
        mirror = layout.BatchMirror(remote)
        reader = cls(remote, mirror=mirror, **options)
        reader.notes.insert(0, mirror.note())
        return reader

    @classmethod
    def check_files(cls, path: Path, **options: Any) -> list:
        """Every file the newest committed batch needs, checked without a JVM (:mod:`.checks`)."""
        return spark_checks(path, **options)  # normalised at the door (explorer.verify)

    # --- cheap metadata (files only) ------------------------------------------------------
    @classmethod
    def detect(cls, path: Path) -> bool:
        return (path / "metadata").is_file() and (path / "offsets").is_dir() and (path / "commits").is_dir()

    @cached_property
    def _offset_metadata(self) -> dict[str, Any]:
        f = self.path / "offsets" / str(self.batch_id)
        lines = layout.verified_text(f, self.roots).splitlines()
        if not lines or not lines[0].startswith("v"):
            raise SnapshotFormatError(f"{f}: expected an offset log starting with a version line like 'v1'")
        if lines[0] not in ("v1", "v2"):
            raise SnapshotFormatError(f"{f}: unknown offset log version {excerpt(lines[0])} (known: v1, v2)")
        try:
            return json.loads(lines[1])
        except (IndexError, json.JSONDecodeError) as exc:
            raise SnapshotFormatError(f"{f}: the offset log's metadata line is not JSON") from exc

    @property
    def sql_conf(self) -> dict[str, str]:
        """The SQL settings the checkpoint froze at its first batch."""
        return dict(self._offset_metadata.get("conf", {}))

    @property
    def num_partitions(self) -> int:
        """``spark.sql.shuffle.partitions`` of this checkpoint: Spark's maximum parallelism."""
        return int(self.sql_conf.get("spark.sql.shuffle.partitions", 200))

    def checkpoint_ids(self) -> list[int]:
        """Committed micro-batch ids, oldest first."""
        return list(self.committed)

    def info(self) -> SnapshotInfo:
        meta = self._offset_metadata
        try:
            query_id = json.loads(layout.verified_text(self.path / "metadata", self.roots)).get("id")
        except (SnapshotFormatError, json.JSONDecodeError, AttributeError):
            query_id = None
        ts = meta.get("batchTimestampMs")
        return SnapshotInfo(
            path=self.path,
            format=self.format_name,
            kind="checkpoint",
            checkpoint_id=self.batch_id,
            created_at=None if ts is None else pd.Timestamp(int(ts), unit="ms", tz="UTC"),
            job_id=query_id,
            extra={
                "watermark_ms": meta.get("batchWatermarkMs"),
                "shuffle_partitions": self.num_partitions,
                "committed_batches": list(self.committed),
                "state_store_provider": self.sql_conf.get("spark.sql.streaming.stateStore.providerClass"),
                "checkpoint_format_version": self.format_version,
            },
        )

    def _everything(self) -> None:
        """A checkpoint mirrored batch by batch: fetch the rest of its files (Spark's own reader, every batch)."""
        if self._mirror is not None and not self._mirror.whole:
            self._mirror.everything()
            self.notes[:] = [self._mirror.note() if n.startswith(str(self._mirror.remote)) else n for n in self.notes]

    def snapshot_batches(self, operator_id: int = 0, partition: int = 0) -> list[int]:
        """Batches whose full snapshot (``<batch + 1>.zip``) exists for one store partition."""
        self._everything()
        d = self.path / "state" / str(operator_id) / str(partition)
        out = []
        if d.is_dir():
            for f in d.glob("*.zip"):
                v = f.name.split(".")[0].split("_")[0]
                if v.isdigit():
                    out.append(int(v) - 1)
        return sorted(out)

    @property
    def provider(self) -> str:
        """The checkpoint's state store provider class."""
        return self.sql_conf.get("spark.sql.streaming.stateStore.providerClass", _HDFS_PROVIDER)

    @cached_property
    def jvm_free(self) -> bool:
        """Whether state is read from the store files without Spark (:mod:`.stores`): HDFS-backed and RocksDB
        stores of the built-in operators, checkpoint format v1 and v2."""
        provider = self.provider
        conf = self.sql_conf
        # encodings the files are read in: UnsafeRow values without row checksums, Spark's lz4, zstd or snappy codec
        other = {k: conf[k] for k, ok in (("spark.sql.streaming.stateStore.encodingFormat", ("unsaferow",)),
                                          ("spark.sql.streaming.stateStore.rowChecksum.enabled", ("false",)),
                                          ("spark.sql.streaming.stateStore.compression.codec",
                                           ("lz4", "zstd", "snappy")))
                 if conf.get(k, ok[0]).lower().rsplit(".", 1)[-1].replace("compressioncodec", "") not in ok}
        rows = self._file_metadata_rows()  # None: some operator has transformWithState's metadata
        possible = provider in PROVIDERS and self.format_version in (1, 2) and not other and rows is not None and all(
            r["operatorProperties"] in (None, "") for r in rows)
        why = (f"its store is {provider.rsplit('.', 1)[-1]}"
               f"{' with transformWithState' if provider in PROVIDERS and rows is None else ''}"
               f"{''.join(f', {k}={v}' for k, v in other.items())}")
        if self._jvm is False and not possible:
            raise ReaderError(f"{self.path}: only HDFS-backed and RocksDB stores of the built-in operators (UnsafeRow "
                              f"encoding; lz4, zstd or snappy) are read without Spark; {why} (open it with jvm=None)")
        if not possible and self._jvm is None:
            self.notes.append(f"{self.path}: read through Spark's state data source (a JVM, seconds per read), not "
                              f"from the files: {why}, which the explorer does not read without Spark")
        return possible and self._jvm is not True

    def _file_metadata_rows(self) -> list[dict[str, Any]] | None:
        """The operators' ``state/<op>/_metadata/metadata`` (v1) files as state-metadata rows, or None when some
        operator has only the v2 metadata (transformWithState) that needs Spark to read."""
        rows = []
        for op_id in layout.discover_operators(self.path):
            f = self.path / "state" / str(op_id) / "_metadata" / "metadata"
            if not f.is_file():
                if layout.has_operator_metadata(self.path, op_id):
                    return None
                continue
            lines = layout.verified_text(f, self.roots).splitlines()
            try:
                doc = json.loads(lines[1])
            except (IndexError, json.JSONDecodeError) as exc:
                raise SnapshotFormatError(f"{f}: expected a version line and the operator's JSON") from exc
            if lines[0] != "v1":
                return None
            info = doc["operatorInfo"]
            for st in doc["stateStoreInfo"]:
                rows.append({"operatorId": info["operatorId"], "operatorName": info["operatorName"],
                             "stateStoreName": st["storeName"], "numPartitions": st["numPartitions"],
                             "minBatchId": None, "maxBatchId": None, "operatorProperties": None})
        return rows

    @cached_property
    def _metadata_rows(self) -> list[dict[str, Any]]:
        if not (self.path / "state").is_dir():
            return []
        if self.jvm_free:
            return self._file_metadata_rows() or []
        with_meta = [i for i in layout.discover_operators(self.path) if layout.has_operator_metadata(self.path, i)]
        if not with_meta:
            return []
        try:
            self._use_format_version()
            with spark_progress(f"reading the operators of {self.path} through Spark"):
                rows = self.spark.read.format("state-metadata").load(str(self._spark_path)).collect()
        except Exception as exc:  # pyspark raises many types; name the path and the cause
            raise ReaderError(f"{self.path}/state: Spark's state-metadata source could not read the operators' "
                              f"_metadata: {spark_cause(exc)}") from exc
        return [r.asDict() for r in rows]

    @cached_property
    def _operators(self) -> list[dict[str, Any]]:
        """One dict per stateful operator: id, name, partitions, stores, state variables."""
        by_id: dict[int, dict[str, Any]] = {}
        for r in self._metadata_rows:
            op = by_id.setdefault(int(r["operatorId"]), {
                "operator_id": int(r["operatorId"]),
                "spark_operator": r["operatorName"],
                "num_partitions": int(r["numPartitions"]),
                "min_batch_id": r["minBatchId"],
                "max_batch_id": r["maxBatchId"],
                "stores": [],
                "variables": [],
                "time_mode": None,
            })
            op["stores"].append(r["stateStoreName"])
            props = r.get("operatorProperties")
            if props:
                try:
                    p = json.loads(props)
                except json.JSONDecodeError:
                    p = {}
                op["time_mode"] = p.get("timeMode", op["time_mode"])
                for v in p.get("stateVariables", []):
                    op["variables"].append(v)
        for op_id, found in layout.discover_operators(self.path).items():
            if op_id not in by_id:
                by_id[op_id] = self._discovered_operator(op_id, found)
        names = [o["spark_operator"] for o in by_id.values()]
        for o in by_id.values():
            n = o["spark_operator"]
            o["operator"] = n if names.count(n) == 1 else f"{n}-{o['operator_id']}"
            if n.lower().startswith(("statestoresave", "sessionwindowstatestoresave")):
                self.notes.append(_BUFFER_NOTE.format(operator=o["operator"]))
        return [by_id[k] for k in sorted(by_id)]

    def _states_of(self, op: dict[str, Any]) -> list[dict[str, Any]]:
        """(state, kind, how to read it) for one operator."""
        out = []
        if op["variables"] and self._is_bucket_layout(op):  # the adapter's bucket layout
            for name, e in self._bucket_tables(op).items():
                out.append({"state": name, "kind": e["kind"], "ttl": e["ttl_ms"] is not None, "ttl_ms": e["ttl_ms"],
                            "bucket": True, "options": {}})
            return out
        if op["variables"]:  # transformWithState
            for v in op["variables"]:
                name, vtype = v["stateName"], v["stateVariableType"]
                if vtype == "TimerState" or name.startswith(_TIMER_PREFIXES):
                    kind = "processing_timer" if name.startswith("$procTimers") else "event_timer"
                    out.append({"state": name, "kind": kind, "ttl": False, "options": {"readRegisteredTimers": "true"}})
                elif name.startswith("$"):
                    continue  # other internal column families cannot be read by name
                else:
                    out.append({"state": name, "kind": _KINDS.get(vtype, "value"), "ttl": bool(v.get("ttlEnabled")),
                                "options": {"stateVarName": name}})
        else:  # built-in operators: one state per store
            for store in op["stores"]:
                out.append({"state": store, "kind": "value", "ttl": False, "options": {"storeName": store}})
        return out

    def _find(self, state: str, operator: str | None):
        if state.startswith("$ttl") or (state.startswith("$") and not state.startswith(_TIMER_PREFIXES)):
            raise ReaderError(
                f"{self.path}: {state!r} is an internal column family of transformWithState, which Spark's "
                "state reader cannot read by name; TTL expirations are in the 'expires_at' column of the state "
                "itself, timers are read as states '$eventTimers_keyToTimestamp' / '$procTimers_keyToTimestamp'"
            )
        for op in self._operators:
            if operator is not None and op["operator"] != operator:
                continue
            for st in self._states_of(op):
                if st["state"] == state:
                    if st.get("bucket"):
                        raise ReaderError(
                            f"{self.path}: state {state!r} of operator {op['operator']!r} was written by the adapter's "
                            "bucket layout, where Spark's change feed and snapshots see whole buckets, not keys; "
                            "compare two batches instead: reader.at_batch(a) and reader.at_batch(b)"
                        )
                    return op, st
        known = [(o["operator"], s["state"]) for o in self._operators for s in self._states_of(o)]
        raise ReaderError(f"{self.path}: no state {state!r}" + (f" in operator {operator!r}" if operator else "")
                          + f"; the checkpoint has {known}")

    def operators(self) -> pd.DataFrame:
        rows = [{
            "operator": o["operator"], "operator_id": o["operator_id"], "uid": str(o["operator_id"]),
            "parallelism": o["num_partitions"], "max_parallelism": o["num_partitions"],
            "spark_operator": o["spark_operator"], "operator_kind": layout.operator_kind(o["spark_operator"]),
            "kind_inferred": bool(o.get("inferred")), "time_mode": o["time_mode"],
            "min_batch_id": o["min_batch_id"], "max_batch_id": o["max_batch_id"],
        } for o in self._operators]
        return pd.DataFrame(rows, columns=list(OPERATOR_COLUMNS) + [
            "spark_operator", "operator_kind", "kind_inferred", "time_mode", "min_batch_id", "max_batch_id"])

    def states(self) -> pd.DataFrame:
        rows = []
        for o in self._operators:
            for s in self._states_of(o):
                rows.append({
                    "operator": o["operator"], "state": s["state"], "kind": s["kind"],
                    "key_type": None, "value_type": None, "ttl_ms": s.get("ttl_ms"),
                    "update_type": "ON_CREATE_AND_WRITE" if s["ttl"] and not s.get("bucket") else None,
                    "visibility": "NEVER_RETURN_EXPIRED" if s["ttl"] and not s.get("bucket") else None,
                    "ttl_enabled": s["ttl"],
                })
        return pd.DataFrame(rows, columns=list(STATE_COLUMNS) + ["ttl_enabled"])

    def subtasks(self) -> pd.DataFrame:
        rows = [{"operator": o["operator"], "subtask": p, "key_group_start": p, "key_group_end": p}
                for o in self._operators for p in range(o["num_partitions"])]
        return pd.DataFrame(rows, columns=list(SUBTASK_COLUMNS))
