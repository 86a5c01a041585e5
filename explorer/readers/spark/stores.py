"""One operator's state store at a batch as Spark's state data source shows it, read from the files only.

``partition_id, key, value`` (key and value structs of the store's schema), from
the HDFS-backed store's files (:mod:`.hdfs`) or the RocksDB store's (:mod:`.rocksdb`),
``UnsafeRow`` bytes decoded column-wise (:mod:`.unsaferow`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

from ...errors import SnapshotCorruptError, SnapshotFormatError, VersionGoneError
from ...format.untrusted import Roots
from .hdfs import read_hdfs_store, read_schema, records, spark_stream, store_dir
from .layout import verified_bytes, verified_text
from .rocksdb import ENCODING_VERSION, changelog_records, read_rocksdb_store
from .unsaferow import decode_rows

__all__ = ["PROVIDERS", "batch_records", "state_table", "state_unique_ids"]

HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
#: the store providers read without a JVM
PROVIDERS = (HDFS, ROCKSDB)


def state_unique_ids(ckpt: Path, batch_id: int, op: int, roots: Roots | None = None) -> list[list[str]] | None:
    """Checkpoint format v2: the ids per partition (a list per partition, one per store) that
    ``commits/<batch_id>`` gives operator ``op``; None when the commit log has none."""
    f = Path(ckpt) / "commits" / str(batch_id)
    lines = verified_text(f, roots or Roots.of(ckpt)).splitlines()
    try:
        doc = json.loads(lines[1]) if len(lines) > 1 else {}
    except json.JSONDecodeError as exc:
        raise SnapshotFormatError(f"{f}: cannot read the commit log of batch {batch_id} ({exc})") from exc
    ids = (doc.get("stateUniqueIds") or {}).get(str(op))
    return None if ids is None else [list(p) for p in ids]


def _prefix_split(keys: list[bytes], where: str) -> tuple[list[bytes], list[bytes]] | None:
    """Keys of the prefix-scan layout (session windows: the grouping key, then the session's start), each a
    little-endian int32 length, the prefix's version byte and row, then the rest's; None if a key is not."""
    prefix, rest = [], []
    for k in keys:
        if len(k) < 6:
            return None
        n = int.from_bytes(k[:4], "little")
        if n < 1 or 4 + n >= len(k) or k[4] != ENCODING_VERSION or k[4 + n] != ENCODING_VERSION:
            return None
        prefix.append(k[4:4 + n])
        rest.append(k[4 + n:])
    return prefix, rest


def _decode_keys(keys: list[bytes], schema: dict, where: str, skip: int, prefix_scan: bool) -> pa.StructArray:
    if not prefix_scan:
        return decode_rows(keys, schema, f"{where}: key", skip, ENCODING_VERSION if skip else None)
    split = _prefix_split(keys, where)
    if split is None:
        raise SnapshotCorruptError(f"{where}: the keys are neither version byte + UnsafeRow nor the prefix-scan "
                                   "layout (int32 length, prefix row, rest row) of session windows")
    fields = schema["fields"]
    a = decode_rows(split[0], {**schema, "fields": fields[:-1]}, f"{where}: key prefix", 1)
    b = decode_rows(split[1], {**schema, "fields": fields[-1:]}, f"{where}: key rest", 1)
    children = [a.field(i) for i in range(a.type.num_fields)] + [b.field(0)]
    return pa.StructArray.from_arrays(children, fields=list(a.type) + [b.type.field(0)])


def state_table(ckpt: Path, op: int, partitions: int | list[int], batch_id: int, store: str = "default",
                provider: str = HDFS, format_version: int = 1, session_window: bool | None = None,
                roots: Roots | None = None) -> pa.Table:
    """``partition_id, key, value`` of one operator's store at ``batch_id``, like Spark's state data source
    (``partitions``: how many, or which). ``session_window``: whether the operator is a session window
    (its RocksDB keys are in the prefix-scan layout); None: unknown (Spark 3.x), told by the keys.
    ``roots``: where files may be read from (default: ``ckpt``)."""
    roots = Roots.of(ckpt) if roots is None else roots
    schema_dir = store_dir(ckpt, op, 0, store)  # Spark writes the schema into partition 0's folder only
    key_schema, value_schema = read_schema(schema_dir / "_metadata" / "schema", roots)
    where = str(store_dir(ckpt, op, 0, store).parent)
    uuids = state_unique_ids(ckpt, batch_id, op, roots) if format_version == 2 else None
    if format_version == 2 and uuids is None:
        raise SnapshotFormatError(f"{ckpt}/commits/{batch_id}: a checkpoint of format v2 without the state ids "
                                  f"of operator {op} (stateUniqueIds)")
    parts, keys, values = [], [], []
    for p in range(partitions) if isinstance(partitions, int) else partitions:
        if provider == ROCKSDB:
            ids = None if uuids is None else (uuids[p] if p < len(uuids) else [])
            rows = read_rocksdb_store(ckpt, op, p, batch_id + 1, store, ids, roots)
        elif provider == HDFS:
            rows = read_hdfs_store(ckpt, op, p, batch_id + 1, store, roots)
        else:
            raise SnapshotFormatError(f"{ckpt}: state store provider {provider} is not read without Spark "
                                      f"(known: {', '.join(x.rsplit('.', 1)[-1] for x in PROVIDERS)})")
        parts += [p] * len(rows)
        keys += rows.keys()
        values += rows.values()
    return _table(parts, keys, values, key_schema, value_schema, where, provider, session_window)


def _table(parts: list[int], keys: list[bytes], values: list[bytes | None], key_schema: dict, value_schema: dict,
           where: str, provider: str, session_window: bool | None) -> pa.Table:
    """``partition_id, key, value`` decoded from the rows' bytes (a None value: a null value, a deleted row)."""
    skip, prefix_scan = 0, False
    if provider == ROCKSDB:
        # session windows keep their keys in the prefix-scan layout (grouping key, then the session's start)
        prefix_scan = len(key_schema["fields"]) > 1 and (
            session_window if session_window is not None
            else any(k[:1] != bytes([ENCODING_VERSION]) for k in keys[:64]))
        skip = 1
    present = [v for v in values if v is not None]
    value = decode_rows(present, value_schema, f"{where}: value", skip, ENCODING_VERSION if skip else None)
    if len(present) != len(values):  # deleted rows: null values in their places
        at = iter(range(len(present)))
        value = value.take(pa.array([None if v is None else next(at) for v in values], pa.int64()))
    return pa.table({
        "partition_id": pa.array(parts, pa.int32()),
        "key": _decode_keys(keys, key_schema, where, skip, prefix_scan),
        "value": value,
    })


def batch_records(ckpt: Path, op: int, partitions: int | list[int], batch_id: int, store: str = "default",
                  provider: str = HDFS, format_version: int = 1, session_window: bool | None = None,
                  roots: Roots | None = None) -> pa.Table:
    """What batch ``batch_id`` itself wrote to one operator's store, from its own file only: the RocksDB
    store's ``<batch + 1>.changelog`` (format v2: ``<batch + 1>_<uuid>.changelog`` of the commit log's ids),
    the HDFS-backed store's ``<batch + 1>.delta``. ``partition_id, key, value, deleted``: a put's key and
    value, a delete's key with a null value; per key its last record in the batch. Answers the changes of a
    batch whose state before it is gone (the store's maintenance deleted its files). A missing file is a
    :class:`VersionGoneError` naming it."""
    roots = Roots.of(ckpt) if roots is None else roots
    key_schema, value_schema = read_schema(store_dir(ckpt, op, 0, store) / "_metadata" / "schema", roots)
    where = str(store_dir(ckpt, op, 0, store).parent)
    version = batch_id + 1
    uuids = state_unique_ids(ckpt, batch_id, op, roots) if format_version == 2 else None
    parts, keys, values = [], [], []
    for p in range(partitions) if isinstance(partitions, int) else partitions:
        d = store_dir(ckpt, op, p, store)
        if provider == ROCKSDB:
            names = ([f"{version}_{u}.changelog" for u in (uuids[p] if uuids and p < len(uuids) else [])]
                     if format_version == 2 else [f"{version}.changelog"])
        elif provider == HDFS:
            names = [f"{version}.delta"]
        else:
            raise SnapshotFormatError(f"{ckpt}: state store provider {provider} is not read without Spark")
        f = next((d / n for n in names if (d / n).is_file()), None)
        if f is None:
            raise VersionGoneError(f"{d}: the records of batch {batch_id} ({' or '.join(names) or 'its changelog'}) "
                                   "are not there (a snapshot only, or deleted by the store's maintenance)")
        rows: dict[bytes, bytes | None] = {}
        if provider == ROCKSDB:
            changelog_records(f, rows, keep_deletes=True, roots=roots)
        else:
            records(spark_stream(verified_bytes(f, roots), str(f)), str(f), rows, keep_deletes=True)
        parts += [p] * len(rows)
        keys += rows.keys()
        values += rows.values()
    t = _table(parts, keys, values, key_schema, value_schema, where, provider, session_window)
    return t.append_column("deleted", pa.array([v is None for v in values], pa.bool_()))
