"""Spark Structured Streaming checkpoints, read through Spark's own state data source.

A streaming checkpoint directory holds ``metadata`` (the query id),
``offsets/<batch>`` (what each micro-batch read, with the batch's timestamp,
watermark and the SQL settings frozen at the first batch), ``commits/<batch>``
(batches that finished) and ``state/<operator>/<partition>/`` (the state
stores). The stores of the built-in operators (HDFS-backed and RocksDB, checkpoint
format v1 and v2) are read from their files without a JVM (:mod:`.stores`);
``transformWithState`` and the rest are read through Spark
(``format("state-metadata")`` and ``format("statestore")``). Either way the
answer is mapped onto the explorer's contract:

=======================  ===================================================
contract                 Spark
=======================  ===================================================
operator                 the stateful operator (``transformWithStateInPySparkExec``,
                         ``stateStoreSave`` ...), suffixed ``-<id>`` if two share a name
state                    the state variable (``transformWithState``) or the
                         state store name (``default`` for aggregations)
key_group                the state store partition (``partition_id``)
subtask                  the same partition id: Spark has no separate subtask,
                         each shuffle partition is one task and one store
max_parallelism          ``spark.sql.shuffle.partitions`` of the checkpoint
                         (frozen at its first batch)
checkpoint_id            the micro-batch id (``batch_id=`` reads an older one)
expires_at               ``ttlExpirationMs`` of TTL-enabled state variables,
                         ``expiresAtMicros`` of dropDuplicatesWithinWatermark,
                         ``timeoutTimestamp`` of a GroupState, a timer's time
value of a timer         its ``expiration_timestamp_ms`` (``readRegisteredTimers``)
key of join rows         the join key (``user_key``: the row's index for that key)
key of session windows   the grouping key (``user_key``: the session's start)
size_bytes               an estimate: the bytes of the key's and value's fields
=======================  ===================================================

What the files decide, before Spark is asked (:mod:`.layout`): the checkpoint
format version (v2: ``stateUniqueIds`` in ``commits/``, ``<v>_<uuid>`` files; the
session is set to it, Spark does not detect it), operators without ``_metadata``
(Spark 3.x: found from ``state/<op>/`` and noted), a copy whose metadata names
another folder's schema files (read through a folder pointing at the copy's own),
a missing partition folder (an error naming it, never fewer rows). Stores of the
built-in operators are read from their files without a JVM (:mod:`.stores`, every
checksum the files carry verified; ``jvm=True`` forces Spark's data source,
``jvm=False`` the files). Aggregation buffers repeat names (``count, sum, count``),
which ``toArrow()`` refuses: they are renamed by position (``count_2``) before; the
query's aliases are not in the checkpoint (a note says so).

Queries of the adapter's bucket layout (:mod:`explorer.format.spark_buckets`) keep all
keys' state in one Spark value per bucket (``__explorer_buckets``); this reader
decodes those values (Arrow IPC tables, format name and version checked) into
the same per-key rows: one state per descriptor, with the descriptor's kind,
``last_access`` and ``expires_at`` from the adapter's own TTL, and timers as
``event_timers`` / ``processing_timers``. ``key_group`` is the partition of the
key's bucket, where Spark keeps it.

Gaps of Spark's state reader in PySpark 4.3, worked around here:

* an unflattened MapState cannot go to pandas through Arrow (its map keys are
  structs): collections are always read flattened, and through ``toArrow()``;
* internal column families (``$ttl_*``, ``$procTimers_*``, ``$eventTimers_*``)
  cannot be read by name: timers are read with ``readRegisteredTimers``, TTL from
  the values' ``ttlExpirationMs``;
* the change feed of registered timers throws inside Spark: :meth:`changes`
  compares each batch's registered timers with the batch before instead;
* ``snapshotStartBatchId`` works only for batches whose snapshot (``<v>.zip``)
  exists: :meth:`snapshot_batches` lists them and other ids are refused clearly.
"""

from __future__ import annotations

import dataclasses
import json
from functools import cached_property
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from tqdm.auto import tqdm

from ...errors import ReaderError, SnapshotFormatError, SnapshotNotFoundError, VersionGoneError
from ...format.spark_buckets import STATE_NAME, TIMERS, decode_tables
from ...format.untrusted import Roots, excerpt
from ...keygroups.spark import partition_ids
from ...spark_session import get_spark, log_path, root_cause, spark_progress
from ..base import (
    CONTRACT_COLUMNS,
    OPERATOR_COLUMNS,
    OPERATOR_STATE_COLUMNS,
    STATE_COLUMNS,
    SUBTASK_COLUMNS,
    TIMESTAMP,
    KeyedStateQuery,
    SnapshotInfo,
    SnapshotReader,
    empty_piece,
    make_piece,
)
from . import layout
from .checks import spark_checks
from .collect import decode_collect_buffers
from .hdfs import read_schema
from .history import spark_history
from .keys import key_leaves, leaf_types, unique_names
from .stores import PROVIDERS, batch_records, state_table
from .unsaferow import json_leaf_types
from .values import flatten_values

__all__ = ["SparkCheckpointReader"]

_KINDS = {"ValueState": "value", "ListState": "list", "MapState": "map"}
_TIMER_PREFIXES = ("$eventTimers", "$procTimers")


def _batch_ids(directory: Path) -> list[int]:
    if not directory.is_dir():
        return []
    return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())


def _short(exc: BaseException) -> str:
    """Spark's cause in one line (the JVM's root exception, not Py4J's first line) and where the JVM log is."""
    return f"{root_cause(exc)} (Spark's full output: {log_path()})"


_FORMAT_CONF = "spark.sql.streaming.stateStore.checkpointFormatVersion"
#: why an aggregation's value fields are named count, sum, count_2 ... and not after the query's aliases
_BUFFER_NOTE = (
    "values of {operator} are Spark's aggregation buffers: one field per slot of each aggregate's buffer, named "
    "by Spark after the function (count, sum, min, max; avg keeps a sum and a count), repeats numbered in the "
    "query's order (count_2, sum_2, ...); the query's aliases (.alias('n')) are not in the checkpoint's "
    "metadata, so they cannot be shown")
_HDFS_PROVIDER = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"


class SparkCheckpointReader(SnapshotReader):
    """One micro-batch of a Spark Structured Streaming checkpoint (the latest committed by default)."""

    format_name = "spark-checkpoint"
    in_chk_folders = False  # one folder holds every batch

    def __init__(self, path: str | Path, batch_id: int | None = None, spark=None, jvm: bool | None = None,
                 mirror: layout.BatchMirror | None = None, allow_roots: Any = None) -> None:
        """``jvm=False`` reads HDFS-backed stores from their files only (no JVM started), ``True`` always through
        Spark's data source; ``None`` (default): from the files when every operator's store is HDFS-backed
        and of the built-in operators, through Spark otherwise.

        ``mirror``: the checkpoint is on an object store (``path`` is ignored); only the files of the batch
        read are fetched (:class:`.layout.BatchMirror`), the rest when a question needs them.

        Every file read resolves inside the checkpoint folder (symlinks followed, then checked); ``allow_roots``:
        more folders files may lie in (a ``state/`` folder linked to another disk)."""
        self._mirror = mirror
        if mirror is not None:
            if batch_id is None and mirror.committed:
                batch_id = mirror.committed[-1]
            path = mirror.batch(batch_id) if batch_id in mirror.committed else mirror.everything()
        super().__init__(path)
        self._jvm = jvm
        self._allow_roots = list(allow_roots or [])
        #: the folders this checkpoint's files may be read from (:class:`~explorer.format.untrusted.Roots`)
        self.roots = Roots([self.path], self._allow_roots, what="the checkpoint folder")
        if not self.detect(self.path):
            raise SnapshotNotFoundError(
                f"{self.path} is not a Spark Structured Streaming checkpoint: expected a 'metadata' file and "
                "'offsets/' and 'commits/' folders"
            )
        self._spark = spark
        self.committed = list(mirror.committed) if mirror is not None else _batch_ids(self.path / "commits")
        if not self.committed:
            raise SnapshotFormatError(f"{self.path}: the checkpoint has no committed micro-batch (commits/ is empty)")
        if batch_id is None:
            batch_id = self.committed[-1]
        elif batch_id not in self.committed:
            raise SnapshotFormatError(
                f"{self.path}: batch {batch_id} is not committed; committed batches are "
                f"{self.committed[0]}..{self.committed[-1]}"
            )
        self.batch_id = int(batch_id)
        #: checkpoint format version (1 or 2), from the commit log and the store files' names
        self.format_version = layout.checkpoint_format_version(self.path, self.committed, self.roots)

    @classmethod
    def on_store(cls, remote: Any, **options: Any) -> "SparkCheckpointReader":
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

    def at_batch(self, batch_id: int) -> "SparkCheckpointReader":
        """The same checkpoint as of another committed micro-batch."""
        other = SparkCheckpointReader(self.path, batch_id=batch_id, spark=self._spark, jvm=self._jvm,
                                      mirror=self._mirror, allow_roots=self._allow_roots)
        if "_spark_path" in self.__dict__:
            other.__dict__["_spark_path"] = self.__dict__["_spark_path"]
        return other

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

    # --- Spark ----------------------------------------------------------------------------
    @property
    def spark(self):
        if self._spark is None:
            self._spark = get_spark()
        return self._spark

    @cached_property
    def _spark_path(self) -> Path:
        """The folder Spark reads: the checkpoint, or for a moved copy one whose metadata points at the copy."""
        self._everything()
        layout.check_links(self.path, self.roots)  # Spark follows links itself: none may lead out
        resolved = layout.resolved_copy(self.path, roots=self.roots)
        if resolved != self.path.resolve():
            self.notes.append(
                f"{self.path} was copied from elsewhere: its operator metadata names schema files of the original "
                "folder; they are read from this copy instead")
        return resolved

    def _use_format_version(self) -> None:
        """Spark reads a v2 checkpoint only when the session's format version says 2 (it does not detect it)."""
        if self.spark.conf.get(_FORMAT_CONF, "1") != str(self.format_version):
            self.spark.conf.set(_FORMAT_CONF, str(self.format_version))

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
                              f"_metadata: {_short(exc)}") from exc
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
            if op_id in by_id:
                continue
            # Spark 3.x writes no state/<op>/_metadata (or it was lost): the folders and schemas say what there is
            inferred = self._inferred_operator(op_id, list(found.stores))
            if inferred is not None:
                self.notes.append(
                    f"{self.path}/state/{op_id}: no operator metadata (state/{op_id}/_metadata: Spark 3.x writes "
                    f"none, or it was deleted); read with store(s) {', '.join(found.stores)} from its folders; its "
                    f"operator ({inferred}, a {layout.operator_kind(inferred)}) is inferred from its state schema"
                    + (" (or applyInPandasWithState: the same state layout)"
                       if inferred == "flatMapGroupsWithState" else ""))
            else:
                self.notes.append(
                    f"{self.path}/state/{op_id}: no operator metadata (state/{op_id}/_metadata: Spark 3.x writes none, "
                    f"or it was deleted); read as a stateful operator with store(s) {', '.join(found.stores)} from "
                    "its folders, its operator name is unknown")
            by_id[op_id] = {
                "operator_id": op_id, "spark_operator": inferred or f"operator-{op_id}",
                "num_partitions": max(len(found.partitions), self.num_partitions),
                "min_batch_id": None, "max_batch_id": None, "stores": list(found.stores), "variables": [],
                "time_mode": None, "discovered": True, "inferred": inferred is not None,
            }
        names = [o["spark_operator"] for o in by_id.values()]
        for o in by_id.values():
            n = o["spark_operator"]
            o["operator"] = n if names.count(n) == 1 else f"{n}-{o['operator_id']}"
            if n.lower().startswith(("statestoresave", "sessionwindowstatestoresave")):
                self.notes.append(_BUFFER_NOTE.format(operator=o["operator"]))
        return [by_id[k] for k in sorted(by_id)]

    def _inferred_operator(self, op_id: int, stores: list[str]) -> str | None:
        """Spark 4's name of an operator without metadata, from its stores and state schema
        (:func:`.layout.infer_operator`); None when the schema is unreadable or fits no operator."""
        if any(s.endswith(("keyToNumValues", "keyWithIndexToValue")) for s in stores):
            return "symmetricHashJoin"
        try:
            key_schema, value_schema = read_schema(layout.store_schema_file(self.path, op_id, stores[0]), self.roots)
        except (SnapshotFormatError, OSError, ValueError, KeyError):
            return None
        return layout.infer_operator(key_schema, value_schema, stores)

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
                raise ReaderError(f"reading {where} through Spark's state data source failed: {_short(exc)}") from exc
            parts = t.column("partition_id").to_pylist()
            buckets = _unwrap(t.column("key").combine_chunks()).to_pylist()
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

    # --- keyed state ----------------------------------------------------------------------
    def _frame(self, op: dict[str, Any], options: dict[str, str], extra: dict[str, Any] | None = None):
        self._use_format_version()
        r = self.spark.read.format("statestore").option("path", str(self._spark_path))
        r = r.option("operatorId", op["operator_id"])
        if not (extra and "readChangeFeed" in extra):  # Spark refuses batchId together with the change feed
            r = r.option("batchId", self.batch_id)
        for k, v in {**options, **(extra or {})}.items():
            r = r.option(k, v)
        return r.load()

    def _read(self, op, st, query: KeyedStateQuery, extra=None) -> pa.Table:
        from pyspark.sql import functions as F

        where = (f"state {st['state']!r} of operator {op['operator']!r} at batch {self.batch_id} in "
                 f"{self.path}/state/{op['operator_id']}")
        self._check_partitions(op, query)
        if self.jvm_free and not extra:
            parts = sorted(query.key_groups) if query.key_groups is not None else op["num_partitions"]
            try:
                t = state_table(self.path, op["operator_id"], parts, self.batch_id,
                                st["options"].get("storeName", "default"), self.provider, self.format_version,
                                None if op.get("discovered") else op["spark_operator"].startswith("sessionWindow"),
                                roots=self.roots)
            except SnapshotFormatError as exc:
                if self._jvm is False or isinstance(exc, VersionGoneError):  # Spark needs the same files
                    raise
                self.notes.append(f"{where}: read through Spark's data source: {exc}")
            else:
                return t
        try:
            df = self._frame(op, st["options"], extra)
            if query.key_groups is not None:
                df = df.where(F.col("partition_id").isin([int(k) for k in query.key_groups]))
            if query.keys is not None and query.key_groups is None:
                parts = self._partitions_of(op, st, df.schema["key"].dataType, query.keys)
                if parts is not None:
                    df = df.where(F.col("partition_id").isin(parts))
            with spark_progress(f"reading {where} through Spark"):
                return _unique_names(df).toArrow()
        except ReaderError:
            raise
        except Exception as exc:
            raise ReaderError(f"reading {where} through Spark's state data source failed: {_short(exc)}") from exc

    def _check_partitions(self, op: dict[str, Any], query: KeyedStateQuery) -> None:
        missing = layout.missing_partitions(self.path, op["operator_id"], op["num_partitions"])
        if query.key_groups is not None:
            missing = [p for p in missing if p in query.key_groups]
        if missing:
            folders = ", ".join(f"{self.path}/state/{op['operator_id']}/{p}" for p in missing)
            raise ReaderError(
                f"operator {op['operator']!r} has {op['num_partitions']} state partitions but {folders} "
                f"{'is' if len(missing) == 1 else 'are'} missing: the keys of "
                f"{'that partition' if len(missing) == 1 else 'those partitions'} would be lost, so nothing is read "
                "(restore the folder, or read the others with key_groups=)")

    def keyed_pieces(self, query: KeyedStateQuery) -> Iterator[pa.Table]:
        todo = [(op, st) for op in self._operators if query.wants_operator(op["operator"])
                for st in self._states_of(op) if query.wants_state(st["state"])]
        how = "from its files" if self.jvm_free else "through Spark"
        with tqdm(total=len(todo), desc=f"reading Spark state {how}", unit="state", disable=None,
                  leave=False) as bar:
            for op, st in todo:
                bar.set_postfix_str(f"{op['operator']}/{st['state']}", refresh=False)
                yield from self._pieces_of(op, st, query)
                bar.update(1)

    def _pieces_of(self, op: dict[str, Any], st: dict[str, Any], query: KeyedStateQuery) -> Iterator[pa.Table]:
        if query.keys is not None and query.columns is not None and "key" not in query.columns:
            # key= with columns= that leave the key out: the key column is read to match on, then dropped
            inner = dataclasses.replace(query, columns=tuple(query.columns) + ("key",))
            for piece in self._pieces_of(op, st, inner):
                yield piece.drop_columns(["key"])
            return
        if st.get("bucket"):
            pieces = [self._bucket_piece(op, st, query)]
        elif self.jvm_free:  # one piece per partition: the first rows come before the last are decoded
            self._check_partitions(op, query)
            wanted = query.key_groups
            if query.keys is not None and wanted is None:  # key=: only the keys' partitions
                types = json_leaf_types(read_schema(layout.store_schema_file(
                    self.path, op["operator_id"], st["options"].get("storeName", "default")), self.roots)[0])
                found = self._partitions_of(op, st, types, query.keys)
                wanted = None if found is None else frozenset(found)
            parts = [p for p in range(op["num_partitions"]) if wanted is None or p in wanted]
            pieces = (self._converted(op, st, self._read(op, st, dataclasses.replace(
                query, key_groups=frozenset([p]))), query) for p in parts)
        else:
            pieces = [self._converted(op, st, self._read(op, st, query), query)]
        for piece in pieces:
            if query.keys is not None and "key" in piece.column_names:
                # a key of several columns is a struct: matched with a tuple (or dict) of its fields,
                # in order; timestamps by their instant, a window as {"start", "end"}
                try:
                    keys = {key_leaves(k) for k in query.keys}
                    mask = [key_leaves(d) in keys for d in piece.column("key").to_pylist()]
                except Exception as exc:  # noqa: BLE001 - our own conversion failed, not the input
                    raise ReaderError(f"state {st['state']!r} of operator {op['operator']!r} in {self.path}: "
                                      f"matching its keys with {list(query.keys)!r} failed "
                                      f"({type(exc).__name__}: {exc})") from exc
                piece = piece.filter(pa.array(mask, pa.bool_()))
            yield piece

    @cached_property
    def _collect_notes(self) -> list[str]:
        """Notes of decoded collect buffers, each added once to :attr:`notes`."""
        return _OnceNotes(self.notes)

    def _converted(self, op, st, t: pa.Table, query: KeyedStateQuery) -> pa.Table:
        """:meth:`_to_contract`, its own failures (not the files') a :class:`ReaderError` naming the state: the
        bytes decoded already, so a failure here is the explorer's, never a damaged file."""
        try:
            return self._to_contract(op, st, t, query)
        except Exception as exc:  # noqa: BLE001
            raise ReaderError(f"state {st['state']!r} of operator {op['operator']!r} at batch {self.batch_id} in "
                              f"{self.path}: converting its decoded rows to the explorer's columns failed "
                              f"({type(exc).__name__}: {exc})") from exc

    # --- key= lookups ---------------------------------------------------------------------
    #: the reader matches keys itself (StoredSnapshot leaves keyed_state(key=) to it)
    filters_keys = True

    def key_query(self, query: KeyedStateQuery, key: Any) -> KeyedStateQuery:
        """``keyed_state(key=k)``: read only the Spark partition of ``k`` (per operator, from its key schema)."""
        return KeyedStateQuery(query.operators, query.states, query.key_groups, (key,), query.columns)

    def key_matches(self, row_key: Any, key: Any) -> bool:
        return key_leaves(row_key) == key_leaves(key)

    def _partitions_of(self, op, st, key_type, keys) -> list[int] | None:
        """The Spark partitions of ``keys`` in one store, or None when a key does not fit the store's key
        columns (then every partition is read)."""
        parts = self._partition_list(op, st, key_type, keys)
        return None if any(p is None for p in parts) else sorted(set(parts))

    def _partition_list(self, op, st, key_type, keys) -> list[int | None]:
        """Spark's partition of each key: Murmur3 of its grouping columns mod the partitions, as the shuffle
        placed it (None for a key that does not fit the store's key columns)."""
        types = leaf_types(key_type) if not isinstance(key_type, list) else key_type
        if st["state"].endswith("keyWithIndexToValue") or op["spark_operator"].startswith("sessionWindow"):
            types = types[:-1]  # the row index / session start is not part of the shuffle key
        types = ["long" if t == "timestamp" else t for t in types]  # microseconds, hashed as a long
        out: list[int | None] = []
        for k in keys:
            leaves = key_leaves(k)
            if len(leaves) != len(types) or not types:
                out.append(None)
                continue
            try:
                cols = [[v[1] if isinstance(v, tuple) else v] for v in leaves]
                out.append(int(partition_ids(cols, op["num_partitions"], types)[0]))
            except Exception:  # noqa: BLE001 - a value of another type: no push-down, the filter decides
                out.append(None)
        return out

    def partitions_of(self, keys: list[Any], operator: str | None = None, state: str | None = None) -> list[int | None]:
        """The Spark partition (``key_group``) of each key in one state (by default the operator's first):
        what ``keyed_state(key=k)`` reads."""
        if state is None:
            op = next(o for o in self._operators if operator is None or o["operator"] == operator)
            st = self._states_of(op)[0]
        else:
            op, st = self._find(state, operator)
        try:
            key_type = self._frame(op, st["options"]).schema["key"].dataType
        except Exception as exc:  # noqa: BLE001
            raise ReaderError(f"{self.path}/state/{op['operator_id']}: cannot read the key schema of "
                              f"{st['state']!r}: {_short(exc)}") from exc
        return self._partition_list(op, st, key_type, list(keys))

    def _to_contract(self, op, st, t: pa.Table, query: KeyedStateQuery) -> pa.Table:
        kind = st["kind"]
        key_col = t.column("key").combine_chunks()
        key = _unwrap(key_col)
        part = t.column("partition_id").combine_chunks().cast(pa.int32())
        user_key = None
        expires = None
        if kind in ("event_timer", "processing_timer"):
            value = t.column("expiration_timestamp_ms").combine_chunks()
            expires = value  # a timer fires at its timestamp: shown as one in expires_at
            size = _row_bytes(key_col) + 8
        elif kind == "map":
            uk = t.column("user_map_key").combine_chunks()
            user_key = _unwrap(uk)
            value, expires, vraw = _value_and_ttl(t.column("user_map_value").combine_chunks())
            size = _row_bytes(key_col) + _row_bytes(uk) + _row_bytes(vraw)
        elif kind == "list":
            value, expires, vraw = _value_and_ttl(t.column("list_element").combine_chunks())
            user_key = pa.array(_run_index(key_col), pa.int64())
            size = _row_bytes(key_col) + _row_bytes(vraw)
        else:
            raw_value = t.column("value").combine_chunks()
            if op["spark_operator"].lower().startswith(("statestoresave", "sessionwindowstatestoresave")):
                raw_value = decode_collect_buffers(raw_value, f"values of {op['operator']!r}", self._collect_notes)
            value, expires, vraw = _value_and_ttl(raw_value)
            if expires is None:
                expires = _expiry_in_value(raw_value)
            size = _row_bytes(key_col) + _row_bytes(vraw)
            per_key = st["state"].endswith("keyWithIndexToValue") or op["spark_operator"].startswith("sessionWindow")
            if per_key and pa.types.is_struct(key_col.type) and key_col.type.num_fields > 1:
                # a join side's rows / a key's sessions: shown per join (grouping) key, the row's index among
                # the key's rows / the session's start as user_key
                n = key_col.type.num_fields
                user_key = key_col.field(n - 1)
                if pa.types.is_integer(user_key.type):
                    user_key = user_key.cast(pa.int64())
                fields = [key_col.type.field(i) for i in range(n - 1)]
                key = _unwrap(pa.StructArray.from_arrays([key_col.field(i) for i in range(n - 1)], fields=fields,
                                                         mask=key_col.is_null() if key_col.null_count else None))
        data = {
            "operator": op["operator"],
            "state": st["state"],
            "kind": kind,
            "key": key,
            "key_group": part,
            "subtask": part,
            "user_key": user_key,
            "value": value,
            "expires_at": None if expires is None else expires.cast(pa.int64()).cast(TIMESTAMP),
            "size_bytes": pa.array(size, pa.int64()),
        }
        if len(key) == 0:
            data["operator"] = pa.array([], pa.string())  # make_piece needs one array to size the piece
        return make_piece(data, query.columns)

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
                size = _row_bytes(key) + 8
            else:
                value = t.column("value").combine_chunks()
                size = _row_bytes(key) + _row_bytes(value)
                if kind == "map":
                    user_key = t.column("user_key").combine_chunks()
                    size = size + _row_bytes(user_key)
                elif kind == "list":
                    user_key = pa.array(_run_index(key), pa.int64())
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

    # --- history ---------------------------------------------------------------------------
    def changes(self, state: str, start_batch_id: int, end_batch_id: int | None = None,
                operator: str | None = None) -> pd.DataFrame:
        """What changed in ``state`` between two batches (Spark's change feed): one row per change.

        Columns: ``batch_id, change_type, key, key_group, user_key, value, expires_at``.
        Needs changelog checkpointing (on in :func:`explorer.spark.get_spark`). Timers of transformWithState
        (whose change feed Spark's reader cannot read: it throws a ClassCastException in PySpark 4.3) come from
        the registered timers of each batch and the one before it: ``update`` a timer registered in that
        batch, ``delete`` one that fired or was deleted.
        """
        op, st = self._find(state, operator)
        end = self.batch_id if end_batch_id is None else int(end_batch_id)
        if st["kind"] in ("event_timer", "processing_timer"):
            return self._timer_changes(op, st, int(start_batch_id), end)
        if self.jvm_free:  # the stores' files are at hand: consecutive batches compared, no JVM
            return self._diff_changes(op, st, int(start_batch_id), end, [])
        extra = {"readChangeFeed": "true", "changeStartBatchId": int(start_batch_id), "changeEndBatchId": end}
        opts = {k: v for k, v in st["options"].items()}
        where = f"the change feed of {state!r} ({start_batch_id}..{end}) in {self.path}"
        try:
            df = self._frame(op, opts, extra)
            with spark_progress(f"reading {where} through Spark"):
                t = _unique_names(df).toArrow()
        except Exception as exc:  # noqa: BLE001 - Spark's feed needs every changelog: compare batches instead
            on = self.sql_conf.get("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled",
                                   "false").lower() == "true"
            why = ("changelog checkpointing was on, so a changelog of this range is gone (the store's maintenance "
                   "deletes old ones) or was written before it was switched on" if on else
                   "changelog checkpointing was off for this query")
            return self._diff_changes(op, st, int(start_batch_id), end, [
                f"reading {where} failed ({why}): {_short(exc)}; the changes were found by comparing the state "
                "of consecutive batches instead"])
        out = {"batch_id": t.column("batch_id").to_numpy(), "change_type": t.column("change_type").to_pylist(),
               "key": _unwrap(t.column("key").combine_chunks()).to_pylist(),
               "key_group": t.column("partition_id").to_numpy()}
        vcol = {"map": "user_map_value", "list": "list_element"}.get(st["kind"], "value")
        value, expires, _ = _value_and_ttl(t.column(vcol).combine_chunks())
        out["user_key"] = (_unwrap(t.column("user_map_key").combine_chunks()).to_pylist()
                           if st["kind"] == "map" else [None] * t.num_rows)
        out["value"] = value.to_pylist()
        out["expires_at"] = (pd.to_datetime(expires.to_numpy(zero_copy_only=False), unit="ms", utc=True)
                             if expires is not None else pd.NaT)
        df = pd.DataFrame(out)
        df["expires_at"] = pd.to_datetime(df["expires_at"], utc=True)  # NaT too: one dtype with the timers'
        return df.sort_values(["batch_id", "key_group"], kind="stable").reset_index(drop=True)

    def _diff_changes(self, op, st, start: int, end: int, notes: list[str]) -> pd.DataFrame:
        """The changes of one state in batches ``start..end`` from the state of each batch and the one before:
        ``update`` a row added or whose value (or expiry) changed, ``delete`` a row gone (its value null, as in
        Spark's feed). A key re-written with the same value is no change here. A batch that cannot be rebuilt
        (its files deleted by the store's maintenance, or its commit purged) has no rows, and a note in
        ``attrs["notes"]`` says which batch and why; so has the batch after it (nothing to compare with)."""
        cols = ["batch_id", "change_type", "key", "key_group", "user_key", "value", "expires_at"]
        query = KeyedStateQuery(operators=frozenset([op["operator"]]), states=frozenset([st["state"]]))
        where = f"state {st['state']!r} of operator {op['operator']!r} in {self.path}"

        def state_at(batch: int) -> dict[tuple, dict[str, Any]]:
            if batch < 0:
                return {}
            if batch not in self.committed:
                raise VersionGoneError(f"batch {batch} is not in the commit log (committed: "
                                       f"{self.committed[0]}..{self.committed[-1]}; older entries are purged)")
            out = {}
            for piece in self.at_batch(batch)._pieces_of(op, st, query):
                for r in piece.select(["key", "key_group", "user_key", "value", "expires_at"]).to_pylist():
                    out[(r["key_group"], key_leaves(r["key"]), key_leaves(r["user_key"]))] = r
            return out

        def attempt(batch: int) -> tuple[dict | None, str | None]:
            try:
                return state_at(batch), None
            except (VersionGoneError, ReaderError) as exc:
                return None, str(exc)

        rows = []
        before, why_before = attempt(start - 1)
        for b in range(start, end + 1):
            now, why = attempt(b)
            if now is None or before is None:
                own, why_own = self._own_records(op, st, b, query)
            if now is None:
                if own is None:
                    notes.append(f"{where}: the changes of batch {b} are unknown: its state cannot be rebuilt: {why}")
                else:
                    rows += own
                    notes.append(f"{where}: the state of batch {b} cannot be rebuilt ({why}): its changes are its own "
                                 "records in its changelog (delta) file: every key it wrote is an update, also one "
                                 "written with the value it had")
            elif before is None:
                if own is None:
                    notes.append(f"{where}: the changes of batch {b} are unknown: the state of batch {b - 1} before "
                                 f"it cannot be rebuilt ({why_before}) and batch {b}'s own records cannot be read "
                                 f"({why_own})")
                else:
                    rows += own
                    notes.append(f"{where}: the state of batch {b - 1} cannot be rebuilt ({why_before}): the changes "
                                 f"of batch {b} are its own records in its changelog (delta) file: every key it "
                                 "wrote is an update, also one written with the value it had")
            else:
                for k, r in now.items():
                    old = before.get(k)
                    if old is None or repr(old["value"]) != repr(r["value"]) or old["expires_at"] != r["expires_at"]:
                        rows.append({**r, "batch_id": b, "change_type": "update"})
                for k in before.keys() - now.keys():
                    rows.append({**before[k], "batch_id": b, "change_type": "delete", "value": None})
            before, why_before = now, why
        df = pd.DataFrame(rows, columns=cols)
        df["batch_id"] = df["batch_id"].astype("int64")
        df["expires_at"] = pd.to_datetime(df["expires_at"], utc=True)
        df = df.sort_values(["batch_id", "key_group", "change_type"], kind="stable").reset_index(drop=True)
        df.attrs["notes"] = notes
        return df

    def _own_records(self, op, st, batch: int, query: KeyedStateQuery) -> tuple[list[dict] | None, str | None]:
        """The changes of ``batch`` from its own changelog (RocksDB) or delta (HDFS-backed) file: what it put
        (``update``) and deleted (``delete``, value null), without the state before it; (None, why) when
        the file is not there or the store is read through Spark."""
        if not self.jvm_free:
            return None, "the store is read through Spark's data source"
        if batch not in self.committed:
            return None, f"batch {batch} is not in the commit log"
        try:
            self._check_partitions(op, query)
            t = batch_records(self.path, op["operator_id"], op["num_partitions"], batch,
                              st["options"].get("storeName", "default"), self.provider, self.format_version,
                              None if op.get("discovered") else op["spark_operator"].startswith("sessionWindow"),
                              roots=self.roots)
        except (SnapshotFormatError, ReaderError) as exc:
            return None, str(exc)
        deleted = t.column("deleted").to_pylist()
        piece = self.at_batch(batch)._converted(op, st, t.drop_columns(["deleted"]), query)
        rows = []
        for gone, r in zip(deleted, piece.select(["key", "key_group", "user_key", "value", "expires_at"]).to_pylist()):
            if gone:
                rows.append({**r, "batch_id": batch, "change_type": "delete", "value": None, "expires_at": None})
            else:
                rows.append({**r, "batch_id": batch, "change_type": "update"})
        return rows, None

    def _timer_changes(self, op, st, start: int, end: int) -> pd.DataFrame:
        """The change feed of a timer state, from the registered timers of consecutive batches."""
        cols = ["batch_id", "change_type", "key", "key_group", "user_key", "value", "expires_at"]
        query = KeyedStateQuery(operators=frozenset([op["operator"]]), states=frozenset([st["state"]]))

        def timers(batch: int) -> dict[tuple, dict[str, Any]]:
            if batch < self.committed[0]:
                return {}
            if batch not in self.committed:
                raise ReaderError(f"{self.path}: the timer changes of batch {batch + 1} need batch {batch}, which "
                                  f"is not committed (committed: {self.committed[0]}..{self.committed[-1]})")
            at = self.at_batch(batch)
            out = {}
            for piece in at._pieces_of(op, st, query):
                for r in piece.select(["key", "key_group", "value", "expires_at"]).to_pylist():
                    out[(key_leaves(r["key"]), r["value"])] = r
            return out

        rows = []
        before = timers(start - 1)
        for b in range(start, end + 1):
            now = timers(b)
            for k in now.keys() - before.keys():
                rows.append({"batch_id": b, "change_type": "update", **now[k]})
            for k in before.keys() - now.keys():
                rows.append({"batch_id": b, "change_type": "delete", **before[k]})
            before = now
        df = pd.DataFrame(rows, columns=cols)
        df["user_key"] = None
        df["batch_id"] = df["batch_id"].astype("int64")
        df["expires_at"] = pd.to_datetime(df["expires_at"], utc=True)
        return df.sort_values(["batch_id", "key_group", "change_type"], kind="stable").reset_index(drop=True)

    def read_snapshot(self, state: str, snapshot_start_batch_id: int, partition: int,
                      operator: str | None = None) -> pa.Table:
        """One partition of ``state`` rebuilt from the snapshot of ``snapshot_start_batch_id`` plus changelogs."""
        op, st = self._find(state, operator)
        have = self.snapshot_batches(op["operator_id"], partition)
        if snapshot_start_batch_id not in have:
            raise ReaderError(
                f"{self.path}: partition {partition} of operator {op['operator']!r} has no snapshot for batch "
                f"{snapshot_start_batch_id} (Spark's snapshotStartBatchId needs a '<batch + 1>.zip'); snapshots "
                f"exist for batches {have or 'none'}"
            )
        extra = {"snapshotStartBatchId": int(snapshot_start_batch_id), "snapshotPartitionId": int(partition)}
        t = self._read(op, st, KeyedStateQuery(), extra)
        return self._to_contract(op, st, t, KeyedStateQuery())

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

    def estimated_rows(self, query: KeyedStateQuery) -> int | None:
        return None

    def flat_state(self, operator: str | None = None, state: str | None = None) -> pd.DataFrame:
        """One state's rows with one column per value field (:func:`.values.flatten_values`), e.g. an
        aggregation's ``count, sum, count_2, sum_2, ...``; by default the first state of the first operator."""
        states = self.states()
        if operator is not None:
            states = states[states["operator"] == operator]
        if state is not None:
            states = states[states["state"] == state]
        if states.empty:
            raise ReaderError(f"{self.path}: no state {state!r} of operator {operator!r}; the checkpoint has "
                              f"{list(zip(self.states()['operator'], self.states()['state']))}")
        op, st = states.iloc[0]["operator"], states.iloc[0]["state"]
        pieces = list(self.keyed_pieces(KeyedStateQuery(operators=frozenset([op]), states=frozenset([st]))))
        df = pa.concat_tables(pieces).to_pandas(maps_as_pydicts="strict") if pieces else pd.DataFrame(
            columns=list(CONTRACT_COLUMNS))
        return flatten_values(df)

    def history(self, keys: bool = True, per_state: bool = True) -> pd.DataFrame:
        """Every retained batch (what :func:`explorer.history` shows for a Spark checkpoint):
        see :func:`explorer.readers.spark.history.spark_history`."""
        self._everything()
        return spark_history(self, keys=keys, per_state=per_state)


class _OnceNotes(list):
    """A list that passes each new note on to ``target`` once."""

    def __init__(self, target: list[str]) -> None:
        super().__init__()
        self._target = target

    def append(self, note: str) -> None:
        if note not in self._target:
            self._target.append(note)


# --- Arrow helpers -------------------------------------------------------------------------
def _unwrap(arr: pa.Array) -> pa.Array:
    """A one-field struct (how Spark wraps keys and values) as its field; others unchanged."""
    if pa.types.is_struct(arr.type) and arr.type.num_fields == 1:
        child = arr.field(0)
        if arr.null_count:
            child = pc.if_else(arr.is_valid(), child, pa.nulls(len(arr), child.type))
        return child
    return arr


def _unique_names(df):
    """``df`` with the value struct's repeated field names made unique, positionally (``toArrow()``
    refuses repeats; Spark names aggregation buffers by function: ``count, sum, count, sum``).

    The n-th repeat of a name gets ``_<n>``: ``count, sum, count_2, sum_2, sum_3, min, max``.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructField, StructType

    out = []
    changed = False
    for f in df.schema.fields:
        t = f.dataType
        if isinstance(t, StructType):
            names = unique_names([x.name for x in t.fields])
            if names != [x.name for x in t.fields]:
                changed = True
                new = StructType([StructField(n, x.dataType, x.nullable) for n, x in zip(names, t.fields)])
                out.append(F.col(f.name).cast(new).alias(f.name))
                continue
        out.append(F.col(f.name))
    return df.select(*out) if changed else df


def _expiry_in_value(arr: pa.Array) -> pa.Array | None:
    """Expiry Spark keeps inside a value, as epoch ms: ``expiresAtMicros`` of dropDuplicatesWithinWatermark,
    ``timeoutTimestamp`` of (flatMap|applyInPandas)WithState (-1: no timeout)."""
    if not pa.types.is_struct(arr.type):
        return None
    if arr.type.get_field_index("expiresAtMicros") >= 0:
        return pc.divide(arr.field(arr.type.get_field_index("expiresAtMicros")).cast(pa.int64()), 1000)
    if arr.type.get_field_index("timeoutTimestamp") >= 0:
        ms = arr.field(arr.type.get_field_index("timeoutTimestamp")).cast(pa.int64())
        return pc.if_else(pc.greater(ms, 0), ms, pa.nulls(len(ms), pa.int64()))
    return None


def _value_and_ttl(arr: pa.Array) -> tuple[pa.Array, pa.Array | None, pa.Array]:
    """(value, expiry ms or None, the raw stored value) of a state value column."""
    if pa.types.is_struct(arr.type) and arr.type.get_field_index("ttlExpirationMs") >= 0:
        raw = arr.field(arr.type.get_field_index("value"))
        expires = arr.field(arr.type.get_field_index("ttlExpirationMs"))
        return _unwrap(raw), expires, raw
    return _unwrap(arr), None, arr


def _row_bytes(arr: pa.Array) -> np.ndarray:
    """Bytes of each row's fields (strings by length, numbers by width): a size estimate."""
    t = arr.type
    n = len(arr)
    if pa.types.is_struct(t):
        total = np.zeros(n, np.int64)
        for i in range(t.num_fields):
            total += _row_bytes(arr.field(i))
        return total
    if pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        return np.asarray(pc.binary_length(arr).fill_null(0), dtype=np.int64)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t):
        flat = arr.flatten() if not pa.types.is_map(t) else pa.StructArray.from_arrays(
            [arr.keys, arr.items], ["k", "v"])
        sizes = _row_bytes(flat)
        offsets = np.asarray(arr.offsets)
        csum = np.concatenate([[0], np.cumsum(sizes)])
        return (csum[offsets[1:]] - csum[offsets[:-1]]).astype(np.int64) + 4
    if pa.types.is_null(t):
        return np.zeros(n, np.int64)
    try:
        return np.full(n, max(1, t.bit_width // 8), np.int64)
    except ValueError:
        return np.zeros(n, np.int64)


def _run_index(key: pa.Array) -> np.ndarray:
    """Position of each row within its run of equal keys (list element index)."""
    vals = key.to_pylist()
    out = np.zeros(len(vals), np.int64)
    prev = object()
    i = 0
    for j, v in enumerate(vals):
        if v != prev:
            i = 0
            prev = v
        out[j] = i
        i += 1
    return out
