"""Snapshots as a Spark DataFrame: a PySpark Python Data Source named ``state-explorer``.

::

    from explorer.spark import get_spark, read_state
    spark = get_spark()                                   # or any SparkSession, local or a cluster
    df = read_state(spark, "sample_data/flink/heap-canonical-savepoint", operator="user-state")
    # the same as
    register(spark)
    df = spark.read.format("state-explorer").option("operator", "user-state").load(path)

It reads every format ``explorer.open`` reads (engine checkpoints and savepoints, Apache
Flink savepoints and checkpoints, Spark checkpoints whose stores are read without a JVM)
in parallel: one input partition per (operator, subtask, key-group range), each read by a
Spark executor that opens the snapshot itself from the path and yields Arrow record batches
(nothing of the state goes through the driver). The path must therefore be readable by every
executor under the same name: a shared filesystem or what ``explorer.open`` reads remotely;
on a cluster the executors also need this package installed. The master URL does not matter:
what runs on ``local[2]`` runs on ``spark://host:7077`` unchanged.

The rows are the keyed-state contract (:data:`explorer.readers.base.CONTRACT_COLUMNS`) with
a Spark type per column (:data:`SPARK_SCHEMA`). The four columns whose type differs from
state to state (``key, namespace, user_key, value``) are JSON text, one encoding for every
state so that one DataFrame holds them all: ``"user-1"`` (with its quotes) for a string,
``42`` for a number, ``["a", 1]`` for a tuple key, ``{"count": 3, ...}`` for a struct;
:func:`to_json` gives the text of a Python value (``F.col("key") == to_json("user-1")``) and
:func:`from_json` turns it back. A user-given schema (``spark.read.schema(...)``) may name
other Arrow-castable types for those columns (``key string`` reads string keys bare).

Options (all strings in Spark; :func:`read_state` takes Python values and converts them):

``operator``, ``state``
    names to read (comma-separated, or a JSON list); default all keyed operators and states
``key_groups``
    key groups to read: ``"0-63"``, ``"3,5,9"`` or a JSON list
``columns``
    the contract columns to produce (comma-separated, in contract order), default all;
    leaving out ``value`` saves encoding the values when only sizes are asked
``splits``
    cut each subtask's key-group range into this many partitions (default 1); more
    parallelism for a snapshot with few subtasks, at the price of reading a subtask's
    files once per split for the formats that cannot seek to a key group
``ttl``, ``jars``, ``uids``, ``type_hints``, ``kryo_version``, ``pyflink``
    the Apache Flink reader's options (``ttl`` as JSON ``{"state": milliseconds}``, lists as
    JSON lists or comma-separated); the jars must be readable by the executors
``batch_id``
    the micro-batch of a Spark checkpoint (default: the latest committed)
``partition_bytes``
    for the snapshots whose key groups are read by range (engine snapshots: Parquet row groups
    cut at key-group boundaries; Apache Flink's key-group streams, the canonical savepoints and the
    heap backend's, through the key-group offsets in ``_metadata``), a subtask holding more state
    bytes than this (default 64 MiB; for ``aggregate=diff`` 16 MiB of both snapshots together;
    ``"0"`` for one partition per subtask) is cut into as many key-group ranges of about equal
    bytes as it takes (whole key groups: the engine's bytes per key group from its row groups,
    Flink's exact from the offsets); with ``splits``, the larger count wins. RocksDB instances and
    changelogs, read whole per subtask, are cut by ``splits`` only
``memory_budget``
    what one partition's task may hold at once (bytes, or a size such as ``"256MB"``; default
    :data:`TASK_MEMORY_BUDGET`; ``"0"``: no limit): a partition whose key groups are read by range
    reads, aggregates or diffs them in pieces of whole key groups whose rows (of both snapshots for
    ``aggregate=diff``), at :data:`~explorer.stored.ANALYSIS_BYTES_PER_ROW` each, fit it, one piece
    after the other (the one-machine analyses' key-group ranges, inside a task). A partition's
    aggregates are then the pieces' (disjoint key groups: the sums and top keys merge the same way
    as the partitions'). Partitions stay as ``partition_bytes`` plans them: the budget bounds a task's
    memory, not the number of tasks
``aggregate``
    ``key_groups`` or ``hot_keys``: each partition aggregates what it read and sends only the
    aggregates (:data:`AGGREGATE_SCHEMA`), for :mod:`explorer.distributed.analysis`. Every entry of a key
    lies in one key group, hence in one partition, so per-key and per-key-group figures summed
    over partitions are exact. ``key_groups``: a row per (operator, key group) with the entries,
    bytes and distinct keys of its non-timer state (``row = "key_group"``). ``hot_keys`` adds, per
    ranking of the ``by`` option (``bytes``, ``entries``, comma-separated), the partition's ``top``
    keys in :func:`rank_hot_keys`'s order (``row = "top:bytes"``...), and the keys listed in the
    ``keys`` option (a JSON list of their JSON texts, ``row = "key"``) with their figures.
    ``diff`` (with ``other``): rows of :data:`DIFF_SCHEMA`, see below
``other``, ``diff_keys``
    ``aggregate=diff``: the diff from the loaded snapshot to the one at ``other``. Both are planned
    by the same key-group ranges (cut where a subtask of either starts), and each partition reads
    its range of both and diffs it with the local :func:`explorer.analysis.diff` (every entry of a
    key lies in one key group, the same on both sides at the same max parallelism: the per-range
    diffs are the whole diff, nothing is joined across partitions). It sends, per (operator, state,
    status), the keys and their entries and bytes in both snapshots (``row = "status"``), and a row
    per key (``row = "key"``): for the changed, added and removed keys (``diff_keys=changes``, the
    default), every key (``all``) or none (``none``). The reader options apply to both snapshots
``verify``
    the engine reader's checksum verification (default true)

A directory of checkpoints is resolved once, when Spark plans the read: every partition
reads the same ``chk-N`` (or micro-batch) even if a newer one completes meanwhile.

A partition that fails raises the project's :class:`~explorer.errors.StateExplorerError`
in the executor, naming the file; Spark wraps it in its own exception, and
:func:`raise_state_error` (used by :mod:`explorer.distributed.analysis`) turns that back into the
same class and message on the driver.
"""

from __future__ import annotations

import json
import ctypes
import math
import re
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from .. import errors as errors_module
from ..analysis.diff import diff_key_groups
from ..errors import ReaderError, StateExplorerError
from ..ranking import nth_largest
from ..readers.base import CONTRACT_COLUMNS, KeyedStateQuery, convert_failure
from ..readers.spark import SparkCheckpointReader
from ..storage import as_path
from ..storage.sizes import parse_size
from ..stored import ANALYSIS_BYTES_PER_ROW, StoredSnapshot, reader_for

__all__ = ["AGGREGATE_SCHEMA", "DIFF_SCHEMA", "NAME", "SPARK_SCHEMA", "StateExplorerDataSource", "aggregate_partition",
           "check_read", "diff_rows", "from_json", "merge_pieces", "raise_state_error", "rank_hot_keys", "read_state",
           "register", "to_json"]

#: the format name ``spark.read.format(...)`` takes
NAME = "state-explorer"

#: Spark types of the contract columns (the free-typed four as JSON text)
SPARK_TYPES: dict[str, str] = {
    "operator": "string",
    "state": "string",
    "kind": "string",
    "key": "string",
    "key_group": "int",
    "subtask": "int",
    "namespace": "string",
    "user_key": "string",
    "value": "string",
    "last_access": "timestamp",
    "expires_at": "timestamp",
    "size_bytes": "bigint",
}
#: the default schema, as Spark DDL
SPARK_SCHEMA = ", ".join(f"{c} {SPARK_TYPES[c]}" for c in CONTRACT_COLUMNS)

#: the columns whose type differs from state to state: JSON text unless a schema says otherwise
JSON_COLUMNS = ("key", "namespace", "user_key", "value")

_SOURCE_OPTIONS = ("path", "operator", "state", "key_groups", "columns", "splits", "partition_bytes", "memory_budget",
                   "aggregate", "top", "by", "keys", "other", "diff_keys")
_READER_OPTIONS = {
    "engine": ("verify",),
    "flink": ("ttl", "jars", "uids", "type_hints", "kryo_version", "pyflink"),
    "spark-checkpoint": ("batch_id",),
}
_ALL_READER_OPTIONS = tuple(o for opts in _READER_OPTIONS.values() for o in opts)

#: rows per Arrow record batch handed to Spark
BATCH_ROWS = 65_536
#: state bytes per partition (``partition_bytes``) for the snapshots whose key groups are read by range
PARTITION_BYTES = 64 << 20
#: state bytes of both snapshots together per partition of ``aggregate=diff`` (its default ``partition_bytes``):
#: a partition holds both sides' rows of its range at once, about 2 M rows of an engine snapshot here
DIFF_PARTITION_BYTES = 16 << 20
#: what one partition's task holds at once (``memory_budget``): its key groups are read in pieces whose rows fit
#: it. Two tasks run at once on ``local[2]``; measured on 100 M keys (``bench_scale --part spark``), a 64 MiB
#: partition read whole peaked at 1.8-2.0 GB in its Python worker
TASK_MEMORY_BUDGET = 256 << 20
#: Flink handles whose key groups are read by range (key-group offsets into one stream)
_SEEKING_FLINK_HANDLES = ("key-groups", "savepoint-key-groups")

#: the rows of an ``aggregate=`` read (see the module doc)
AGGREGATE_SCHEMA = "row string, operator string, key_group int, key string, entries bigint, bytes bigint, keys bigint"
AGGREGATES = ("key_groups", "hot_keys", "diff")
#: the rows of an ``aggregate=diff`` read (see the module doc)
DIFF_SCHEMA = ("row string, operator string, state string, key string, status string, keys bigint, entries_a bigint, "
               "entries_b bigint, bytes_a bigint, bytes_b bigint")
#: which keys an ``aggregate=diff`` partition sends a row for (besides its per-status totals)
DIFF_KEYS = ("changes", "all", "none")
TIMER_KINDS = ("event_timer", "processing_timer")
#: the contract columns an aggregating partition reads
_AGGREGATE_READ = ("operator", "state", "kind", "key", "key_group", "size_bytes")
#: tied keys at a partition's top-``n`` boundary sent whole up to this many (past it, the first ones in key order)
_TIE_ROWS = 4096


# --- options ------------------------------------------------------------------------------------
def _names(text: str | None) -> list[str] | None:
    if text is None or text == "":
        return None
    text = text.strip()
    if text.startswith("["):
        return [str(x) for x in json.loads(text)]
    return [x.strip() for x in text.split(",") if x.strip()]


def _key_groups(text: str | None) -> frozenset[int] | None:
    if text is None or text.strip() == "":
        return None
    text = text.strip()
    try:
        if text.startswith("["):
            return frozenset(int(x) for x in json.loads(text))
        out: set[int] = set()
        for part in text.split(","):
            part = part.strip()
            m = re.fullmatch(r"(\d+)\s*-\s*(\d+)", part)
            if m:
                out.update(range(int(m.group(1)), int(m.group(2)) + 1))
            elif part:
                out.add(int(part))
        return frozenset(out)
    except (ValueError, TypeError) as exc:
        raise ReaderError(f"option key_groups={text!r}: expected key groups like '0-63', '3,5,9' or a JSON "
                          "list of integers") from exc


def _bool(name: str, text: str) -> bool:
    t = str(text).strip().lower()
    if t in ("true", "1", "yes"):
        return True
    if t in ("false", "0", "no"):
        return False
    raise ReaderError(f"option {name}={text!r}: expected true or false")


def _reader_options(options: Mapping[str, str]) -> dict[str, Any]:
    """The reader's keyword arguments from the string options (unknown ones refused, never ignored)."""
    out: dict[str, Any] = {}
    for name, text in options.items():
        name = name.lower()
        if name in _SOURCE_OPTIONS:
            continue
        if name not in _ALL_READER_OPTIONS:
            raise ReaderError(f"unknown option {name!r} of the {NAME} data source; known options are "
                              f"{sorted(_SOURCE_OPTIONS + _ALL_READER_OPTIONS)}")
        try:
            if name == "ttl":
                out["ttl"] = {str(k): timedelta(milliseconds=float(v)) for k, v in json.loads(text).items()}
            elif name in ("jars", "uids"):
                out[name] = _names(text) or []
            elif name == "type_hints":
                out[name] = json.loads(text)
            elif name in ("kryo_version", "batch_id"):
                out[name] = int(text)
            else:  # verify, pyflink
                out[name] = _bool(name, text)
        except (ValueError, TypeError, AttributeError) as exc:
            if isinstance(exc, StateExplorerError):
                raise
            raise ReaderError(f"option {name}={text!r} of the {NAME} data source does not parse: {exc}; "
                              "expected ttl as JSON {\"state\": milliseconds}, lists as JSON or comma-separated, "
                              "numbers as integers") from exc
    return out


def _aggregate_option(options: Mapping[str, str]) -> str | None:
    opts = {k.lower(): v for k, v in options.items()}
    agg = (opts.get("aggregate") or "").strip().lower() or None
    if agg is not None and agg not in AGGREGATES:
        raise ReaderError(f"option aggregate={agg!r} of the {NAME} data source: expected one of {list(AGGREGATES)}")
    return agg


def _int_option(options: Mapping[str, str], name: str, default: int) -> int:
    text = options.get(name)
    if text is None or str(text).strip() == "":
        return default
    try:
        value = int(str(text).strip())
    except ValueError as exc:
        raise ReaderError(f"option {name}={text!r} of the {NAME} data source: expected a whole number") from exc
    if value < 0:
        raise ReaderError(f"option {name}={text!r} of the {NAME} data source: expected 0 or more")
    return value


def _budget_option(options: Mapping[str, str]) -> int:
    """``memory_budget`` in bytes (0: no limit)."""
    text = options.get("memory_budget")
    if text is None or str(text).strip() == "":
        return TASK_MEMORY_BUDGET
    if str(text).strip() == "0":
        return 0
    try:
        return parse_size(str(text).strip(), what="memory_budget", error=ReaderError)
    except ReaderError as exc:
        raise ReaderError(f"option {exc} of the {NAME} data source (what one partition's task holds at once; "
                          "'0' for no limit)") from exc


def _source_options(options: Mapping[str, str]) -> None:
    """Refuse bad values of the data source's own options (on the driver, before Spark plans the read)."""
    for name, default in (("splits", 1), ("partition_bytes", PARTITION_BYTES), ("top", 10)):
        _int_option(options, name, default)
    _budget_option(options)
    _aggregate_option(options)
    keys = (options.get("diff_keys") or "changes").strip().lower()
    if keys not in DIFF_KEYS:
        raise ReaderError(f"option diff_keys={options.get('diff_keys')!r} of the {NAME} data source: expected one "
                          f"of {list(DIFF_KEYS)}")
    if options.get("other") and _aggregate_option(options) != "diff":
        raise ReaderError(f"option other={options.get('other')!r} of the {NAME} data source names the second snapshot "
                          "of aggregate='diff'; expected aggregate='diff' with it")
    if _aggregate_option(options) == "diff" and not options.get("other"):
        raise ReaderError(f"option aggregate='diff' of the {NAME} data source needs the second snapshot: "
                          "option other=PATH (the diff goes from the loaded path to it)")
    wrong = sorted(set(_names(options.get("by")) or []) - {"bytes", "entries"})
    if wrong:
        raise ReaderError(f"option by={options.get('by')!r} of the {NAME} data source: expected bytes or entries "
                          f"(comma-separated), found {wrong}")


def _check_options_fit(fmt: str, kwargs: Mapping[str, Any], path: str) -> None:
    wrong = sorted(set(kwargs) - set(_READER_OPTIONS.get(fmt, ())))
    if wrong:
        raise ReaderError(f"{path}: a {fmt} snapshot takes none of the options {wrong}; its reader's options are "
                          f"{list(_READER_OPTIONS.get(fmt, ()))}")


def _open(path: str, fmt: str | None, kwargs: Mapping[str, Any]):
    """The snapshot's reader. Spark checkpoints are read from their files only (``jvm=False``): an executor
    cannot start a SparkSession of its own."""
    if fmt == "spark-checkpoint":
        where = as_path(path)
        reader = (SparkCheckpointReader(path, jvm=False, **kwargs) if isinstance(where, Path) else
                  SparkCheckpointReader.on_store(where, jvm=False, **kwargs))  # the batch's files, fetched
        try:
            reader.jvm_free  # noqa: B018 - raises when the stores need Spark's own reader
        except ReaderError as exc:
            raise ReaderError(
                f"{path}: this Spark checkpoint's state stores are read only through Spark's own state data "
                f"source (a JVM), which a {NAME} partition on an executor cannot start ({exc}); open it with "
                "explorer.open(path) on one machine, or read it with Spark's format('statestore')") from exc
        return reader
    return reader_for(path, **kwargs)


def _absolute(path: str) -> str:
    """A local path made absolute (an executor's working folder is not the driver's); a URL as it is."""
    if re.match(r"^[A-Za-z][\w+.-]*://", path):
        return path
    return str(Path(path).absolute())


def _resolve(path: str, kwargs: dict[str, Any]):
    """``(reader, format, kwargs)``: the snapshot at ``path`` opened once (on the planner), with what makes every
    executor read the same snapshot (a checkpoint directory's ``chk-N``, a Spark checkpoint's micro-batch)."""
    if SparkCheckpointReader.detect(as_path(path)):
        fmt = "spark-checkpoint"
    else:
        fmt = reader_for(path).format_name  # which format, before giving it options it may not take
    _check_options_fit(fmt, kwargs, path)
    reader = _open(path, fmt, kwargs)
    if fmt == "spark-checkpoint":
        kwargs = {**kwargs, "batch_id": reader.batch_id}
    return reader, fmt, kwargs


# --- JSON text of Arrow columns ------------------------------------------------------------------
def _plain(value: Any) -> Any:
    """``value`` as JSON takes it: tuple structs (``f0, f1, ...``) and tuples as lists, bytes as hex."""
    if isinstance(value, dict):
        if value and all(k == f"f{i}" for i, k in enumerate(value)):
            return [_plain(v) for v in value.values()]
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    return value


def to_json(value: Any) -> str:
    """The JSON text a value has in the data source's ``key``, ``namespace``, ``user_key`` and ``value`` columns."""
    if isinstance(value, tuple):
        value = list(value)
    return json.dumps(_plain(value), ensure_ascii=False, separators=(",", ":"), default=str)


def _tuples(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    return value


def from_json(text: str | None, tuples: bool = True) -> Any:
    """A value back from its JSON text (lists as tuples, as tuple keys are, unless ``tuples=False``)."""
    if text is None:
        return None
    value = json.loads(text)
    return _tuples(value) if tuples else value


_CONTROL = r"[\x00-\x1f]"


def _json_column(arr: pa.ChunkedArray | pa.Array) -> pa.Array:
    """An Arrow column as JSON text: strings and integers vectorised, anything else value by value."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    t = arr.type
    if pa.types.is_null(t):
        return pa.nulls(len(arr), pa.string())
    if pa.types.is_dictionary(t):
        arr = arr.dictionary_decode()
        t = arr.type
    if (pa.types.is_string(t) or pa.types.is_large_string(t)) and not pc.any(
            pc.match_substring_regex(arr, _CONTROL)).as_py():
        s = pc.replace_substring(pc.replace_substring(arr.cast(pa.string()), "\\", "\\\\"), '"', '\\"')
        return pc.binary_join_element_wise('"', s, '"', "")
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        return arr.cast(pa.string())
    values = arr.to_pylist()
    return pa.array([None if v is None else to_json(v) for v in values], type=pa.string())


def _spark_piece(piece: pa.Table, schema: pa.Schema) -> pa.Table:
    """A reader's piece in the Arrow schema Spark expects (the columns of ``schema``, in its order)."""
    out = []
    for field in schema:
        col = piece.column(field.name) if field.name in piece.column_names else pa.nulls(piece.num_rows)
        if field.name in JSON_COLUMNS and pa.types.is_string(field.type):
            col = _json_column(col)
        elif isinstance(col, pa.ChunkedArray):
            col = col.combine_chunks()
        if col.type != field.type:
            col = col.cast(field.type)
        out.append(col)
    return pa.Table.from_arrays(out, schema=schema)


# --- aggregates computed in the partition ---------------------------------------------------------------
def key_order(text: str | None) -> tuple:
    """Where a key (its JSON text) goes among tied keys: numbers by value (``try_cast(key AS double)``, NaN after
    the other numbers), then the other keys by their text (a string's without its quotes), as
    :func:`explorer.distributed.analysis` ranks them in Spark."""
    if text is None:
        return (1, 0, 0.0, "")
    number = None
    if not text.startswith('"'):
        try:
            number = float(text)
        except ValueError:
            number = None
    plain = text[1:-1] if text.startswith('"') and len(text) >= 2 else text
    if number is None:
        return (1, 0, 0.0, plain)
    return (0, 1 if math.isnan(number) else 0, 0.0 if math.isnan(number) else number, plain)


def rank_hot_keys(rows: pd.DataFrame, metric: str, n: int) -> pd.DataFrame:
    """The ``n`` top rows of per-key sums (``operator, key`` as JSON text, ``entries``, ``bytes``...) of each
    operator: ``metric`` falling, then entries falling, then :func:`key_order`; with a ``rank`` column (1..)."""
    if not len(rows):
        return rows.assign(rank=pd.Series(dtype="int64"))
    parts = []
    for _, g in rows.groupby("operator", sort=True):
        order = sorted(range(len(g)), key=lambda i, m=g[metric].to_numpy(), e=g["entries"].to_numpy(),
                       k=list(g["key"]): (-int(m[i]), -int(e[i]), key_order(k[i])))
        top = g.iloc[order[:n]].copy()
        top["rank"] = range(1, len(top) + 1)
        parts.append(top)
    return pd.concat(parts, ignore_index=True)


def _groupable(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_integer(t)


def _rows_of(piece: pa.Table) -> tuple[pa.ChunkedArray, pa.ChunkedArray, pa.ChunkedArray, bool] | None:
    """``key, key_group, size_bytes`` of one piece's non-timer rows, the key in a type that hashes (strings and
    integers as they are, anything else as its JSON text), and whether the key is that JSON text."""
    kind = piece.column("kind")
    timers = pc.is_in(kind, value_set=pa.array(TIMER_KINDS))
    if pc.any(timers).as_py():
        piece = piece.filter(pc.invert(timers))
    if not piece.num_rows:
        return None
    key = piece.column("key")
    if pa.types.is_dictionary(key.type):
        key = pa.chunked_array([c.dictionary_decode() for c in key.chunks], key.type.value_type)
    if not _groupable(key.type):  # tuple keys, floats...: grouped by their JSON text
        return pa.chunked_array([_json_column(c) for c in key.chunks], pa.string()), piece.column("key_group"), \
            piece.column("size_bytes"), True
    if pa.types.is_large_string(key.type):
        key = key.cast(pa.string())
    elif pa.types.is_integer(key.type):
        key = key.cast(pa.int64())
    return key, piece.column("key_group"), piece.column("size_bytes"), False


def _numpy(col: pa.ChunkedArray, dtype) -> np.ndarray:
    return np.concatenate([c.to_numpy(zero_copy_only=False) for c in col.chunks]).astype(dtype, copy=False) \
        if col.num_chunks else np.zeros(0, dtype)


def _key_texts(keys: pa.Array) -> list[str | None]:
    """The JSON texts of ``keys``, as the data source's ``key`` column has them."""
    return _json_column(keys).to_pylist()


def aggregate_partition(pieces: Iterable[pa.Table], operator: str, aggregate: str, top: int = 10,
                        by: Iterable[str] = ("bytes",), keys: Iterable[str] | None = None) -> pa.Table:
    """What one partition sends for ``aggregate=`` (rows of :data:`AGGREGATE_SCHEMA`), from the pieces it read:
    per key group the entries, bytes and distinct keys; for ``hot_keys`` also the top keys of each ranking of
    ``by`` and the figures of the listed ``keys`` (JSON texts). Timers are left out, as the analyses do.

    The keys are dictionary-encoded once (one hash pass), the sums are NumPy ``bincount``s over the codes."""
    parts = [r for r in (_rows_of(p) for p in pieces if p.num_rows) if r is not None]
    cols: dict[str, list] = {"row": [], "operator": [], "key_group": [], "key": [], "entries": [], "bytes": [],
                             "keys": []}

    def add(row: str, kg, key, entries, nbytes, nkeys=None) -> None:
        n = len(kg)
        cols["row"].extend([row] * n)
        cols["operator"].extend([operator] * n)
        cols["key_group"].extend(int(x) for x in kg)
        cols["key"].extend(key if key is not None else [None] * n)
        cols["entries"].extend(int(x) for x in entries)
        cols["bytes"].extend(int(x) for x in nbytes)
        cols["keys"].extend((int(x) for x in nkeys) if nkeys is not None else [None] * n)

    if parts:
        json_keys = any(j for *_, j in parts)
        if json_keys or len({k.type for k, *_ in parts}) > 1:  # keys of several types: all as JSON text
            parts = [(k if j else pa.chunked_array([_json_column(c) for c in k.chunks], pa.string()), g, b, True)
                     for k, g, b, j in parts]
            json_keys = True
        key = pa.chunked_array([c for k, *_ in parts for c in k.chunks], parts[0][0].type)
        kg = _numpy(pa.chunked_array([c for _, g, _, _ in parts for c in g.chunks], pa.int32()), np.int64)
        size = _numpy(pa.chunked_array([c for _, _, b, _ in parts for c in b.chunks], pa.int64()), np.int64)
        encoded = pc.dictionary_encode(key)  # one dictionary for every chunk
        dictionary = encoded.chunks[0].dictionary if encoded.num_chunks else pa.array([], key.type)
        n = len(dictionary)
        codes = _numpy(pa.chunked_array([c.indices.fill_null(n) for c in encoded.chunks], pa.int32()), np.int64)
        has_null = bool((codes == n).any())  # a null key: one group of its own, as Spark groups it
        m = n + 1
        entries = np.bincount(codes, minlength=m)
        nbytes = np.bincount(codes, weights=size, minlength=m)
        key_kg = np.full(m, np.iinfo(np.int64).max, dtype=np.int64)
        key_kg[codes] = kg
        if not (key_kg[codes] == kg).all():  # a key in two key groups (damaged data): the smallest, as Spark
            key_kg[:] = np.iinfo(np.int64).max
            np.minimum.at(key_kg, codes, kg)
            pairs = np.unique(kg * m + codes)
            pairs = pairs[pairs % m != n]
            keys_per_kg = np.bincount(pairs // m)
        else:
            present = key_kg[:n][entries[:n] > 0]
            keys_per_kg = np.bincount(present) if len(present) else np.zeros(0, np.int64)
        kg_entries = np.bincount(kg)
        kg_bytes = np.bincount(kg, weights=size, minlength=len(kg_entries))
        keys_per_kg = np.pad(keys_per_kg, (0, max(0, len(kg_entries) - len(keys_per_kg))))
        groups = np.flatnonzero(kg_entries)
        add("key_group", groups, None, kg_entries[groups], np.rint(kg_bytes[groups]), keys_per_kg[groups])
        if aggregate == "hot_keys":
            nbytes = np.rint(nbytes).astype(np.int64)
            held = np.flatnonzero(entries) if has_null else np.flatnonzero(entries[:n])

            def texts(codes_: np.ndarray) -> list[str | None]:
                real = dictionary.take(pa.array(codes_[codes_ < n], pa.int64()))
                out = iter(real.to_pylist() if json_keys else _key_texts(real))
                return [None if c == n else next(out) for c in codes_]

            for metric in dict.fromkeys(by):
                chosen = _top_codes(held, nbytes if metric == "bytes" else entries, entries, top, texts)
                add(f"top:{metric}", key_kg[chosen], texts(chosen), entries[chosen], nbytes[chosen])
            if keys:
                wanted = _listed_codes(dictionary, list(keys), json_keys)
                wanted = wanted[entries[wanted] > 0] if len(wanted) else wanted
                add("key", key_kg[wanted], texts(wanted), entries[wanted], nbytes[wanted])
    return pa.table({"row": pa.array(cols["row"], pa.string()), "operator": pa.array(cols["operator"], pa.string()),
                     "key_group": pa.array(cols["key_group"], pa.int32()), "key": pa.array(cols["key"], pa.string()),
                     "entries": pa.array(cols["entries"], pa.int64()), "bytes": pa.array(cols["bytes"], pa.int64()),
                     "keys": pa.array(cols["keys"], pa.int64())})


def merge_pieces(tables: list[pa.Table], top: int) -> pa.Table:
    """One partition's ``aggregate=hot_keys`` rows from its pieces' (:func:`aggregate_partition` of each, disjoint
    key groups): the key-group and listed-key rows as they are, and each ranking's top candidates chosen again
    over all the pieces' candidates by the same rule (a piece's candidates hold its top ``top`` in the final
    order, so theirs together hold the partition's)."""
    t = pa.concat_tables(tables)
    row = t.column("row")
    is_top = pc.starts_with(row, "top:")
    out = [t.filter(pc.invert(is_top))]
    for name in sorted(set(row.filter(is_top).to_pylist())):
        c = t.filter(pc.equal(row, name))
        entries = _numpy(c.column("entries"), np.int64)
        metric = entries if name == "top:entries" else _numpy(c.column("bytes"), np.int64)
        keys = c.column("key").to_pylist()
        chosen = _top_codes(np.arange(c.num_rows), metric, entries, top, lambda codes: [keys[i] for i in codes])
        out.append(c.take(pa.array(np.sort(chosen), pa.int64())))
    return pa.concat_tables(out)


def _top_codes(held: np.ndarray, metric: np.ndarray, entries: np.ndarray, n: int, texts) -> np.ndarray:
    """The partition's candidates for the ``n`` top keys by ``metric`` (codes among ``held``): every key above
    the ``n``-th's (metric, entries), and the keys tied with it (past :data:`_TIE_ROWS` of them, the first in
    key order, ``texts(codes)`` giving their JSON texts)."""
    if n <= 0 or not len(held):
        return np.zeros(0, np.int64)
    m, e = metric[held], entries[held]
    if len(held) > n:
        t_m = nth_largest(m, n)
        above = m > t_m
        tied = m == t_m
        k = n - int(above.sum())  # places left for the tied keys, by entries
        e_t = nth_largest(e[tied], k)
        tied &= e >= e_t
        above |= tied & (e > e_t)
        tied &= e == e_t
    else:
        above, tied = np.ones(len(held), bool), np.zeros(len(held), bool)
    out, ties = held[above], held[tied & ~above]
    if len(ties) > _TIE_ROWS:
        order = sorted(range(len(ties)), key=lambda i, t=texts(ties): key_order(t[i]))
        ties = ties[order[:max(0, n - len(out))]]
    return np.concatenate([out, ties])


def _listed_codes(dictionary: pa.Array, texts: list[str], json_keys: bool) -> np.ndarray:
    """The codes of the keys whose JSON texts are ``texts`` (those in ``dictionary``; its values are those texts
    when ``json_keys``)."""
    if json_keys:
        wanted = pa.array(texts, dictionary.type)
    elif pa.types.is_integer(dictionary.type):
        values = [v for v in (from_json(t, tuples=False) for t in texts) if isinstance(v, int)
                  and not isinstance(v, bool)]
        wanted = pa.array(values, dictionary.type)
    else:
        wanted = pa.array([v for v in (from_json(t, tuples=False) for t in texts) if isinstance(v, str)],
                          dictionary.type)
    return np.flatnonzero(pc.is_in(dictionary, value_set=wanted).to_numpy(zero_copy_only=False))


# --- the data source ------------------------------------------------------------------------------
class StatePartition(InputPartition):
    """One (operator, subtask, key-group range) of a resolved snapshot (picklable plain values)."""

    def __init__(self, path: str, fmt: str, kwargs: dict[str, Any], operator: str, subtask: int,
                 key_groups: tuple[int, int], states: tuple[str, ...] | None,
                 only: tuple[int, ...] | None, other: tuple[str, str, dict[str, Any]] | None = None,
                 pieces: tuple[tuple[int, int], ...] | None = None) -> None:
        super().__init__((operator, subtask, key_groups))
        self.path, self.fmt, self.kwargs = path, fmt, kwargs
        self.operator, self.subtask, self.key_groups = operator, subtask, key_groups
        self.states, self.only = states, only
        #: ``aggregate=diff``: the second snapshot's (path, format, reader options), read over the same range
        self.other = other
        #: the key-group ranges the task reads one after the other (``memory_budget``); None: all at once
        self.pieces = pieces

    def ranges(self) -> list[tuple[int, int, tuple[int, ...] | None]]:
        """``(lo, hi, only)`` of each piece read in turn (``only``: the asked key groups in it, or None)."""
        out = []
        for lo, hi in self.pieces or (self.key_groups,):
            only = None if self.only is None else tuple(k for k in self.only if lo <= k <= hi)
            if only is None or only:
                out.append((lo, hi, only))
        return out

    def __repr__(self) -> str:
        return (f"StatePartition({self.operator!r}, subtask={self.subtask}, key_groups={self.key_groups[0]}.."
                f"{self.key_groups[1]})")


class StateExplorerDataSource(DataSource):
    """``spark.read.format("state-explorer").load(path)``: see the module doc."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        agg = _aggregate_option(self.options)
        if agg == "diff":
            return DIFF_SCHEMA
        if agg is not None:
            return AGGREGATE_SCHEMA
        cols = _names(self.options.get("columns")) or list(CONTRACT_COLUMNS)
        unknown = [c for c in cols if c not in CONTRACT_COLUMNS]
        if unknown:
            raise ReaderError(f"option columns: {unknown} are no contract columns; expected some of "
                              f"{list(CONTRACT_COLUMNS)}")
        return ", ".join(f"{c} {SPARK_TYPES[c]}" for c in CONTRACT_COLUMNS if c in cols)

    def reader(self, schema) -> "StateReader":
        return StateReader(dict(self.options), schema)


#: readers opened by this Python worker, by (path, format, options): Spark reuses its workers
_OPEN: dict[str, Any] = {}


def _cached_reader(path: str, fmt: str, kwargs: dict[str, Any]):
    key = json.dumps([path, fmt, sorted((k, repr(v)) for k, v in kwargs.items())])
    if key not in _OPEN:
        if len(_OPEN) > 8:
            _OPEN.clear()
        _OPEN[key] = _open(path, fmt, kwargs)
    return _OPEN[key]


def _cached_stored(path: str, fmt: str, kwargs: dict[str, Any], reader: Any = None) -> StoredSnapshot:
    """A StoredSnapshot over this worker's reader of the snapshot (its metadata read once per worker)."""
    key = json.dumps(["stored", path, fmt, sorted((k, repr(v)) for k, v in kwargs.items())])
    reader = reader if reader is not None else _cached_reader(path, fmt, kwargs)
    got = _OPEN.get(key)
    if got is None or got.reader is not reader:
        got = _OPEN[key] = StoredSnapshot(reader)
    return got


class _Side:
    """One snapshot of a read, resolved on the planner: its reader, format, options and keyed subtasks."""

    def __init__(self, path: str, reader: Any, fmt: str, kwargs: dict[str, Any]) -> None:
        self.reader, self.fmt, self.kwargs = reader, fmt, kwargs
        self.path = _absolute(path if str(as_path(path)) == str(reader.path) else str(reader.path))
        subs = reader.subtasks()
        self.operators = set(subs["operator"])
        subs = subs.dropna(subset=["key_group_start", "key_group_end"])
        self.subs = subs[subs["operator"].isin(set(reader.states()["operator"]))]
        self._bytes: dict[str, np.ndarray] = {}

    @classmethod
    def of(cls, path: str, kwargs: dict[str, Any]) -> "_Side":
        reader, fmt, kwargs = _resolve(path, kwargs)
        return cls(path, reader, fmt, kwargs)

    def keyed_operators(self) -> set[str]:
        return set(self.subs["operator"])

    def max_parallelism(self, operator: str) -> int | None:
        ops = self.reader.operators()
        got = ops[ops["operator"] == operator]["max_parallelism"] if "max_parallelism" in ops else ()
        return int(got.iloc[0]) if len(got) and not pd.isna(got.iloc[0]) else None

    def seeks(self, row: Any) -> bool:
        """Whether this subtask's key groups are read by range (a range costs its bytes, not the subtask's)."""
        return self.fmt == "engine" or (self.fmt == "flink" and getattr(row, "handle", None) in _SEEKING_FLINK_HANDLES)

    def bytes_per_key_group(self, operator: str, m: int) -> np.ndarray:
        """The operator's state bytes per key group ``0..m-1``: each subtask's bytes spread over its key groups as
        the reader's metadata counts rows (engine: Parquet row groups; Flink: key-group offsets, so exact)."""
        if operator not in self._bytes:
            rows = self.reader.key_group_rows(KeyedStateQuery(operators=frozenset([operator])))
            if rows is not None:
                rows = np.asarray(rows, dtype=np.float64)
            g = self.subs[self.subs["operator"] == operator]
            size = int(g["key_group_end"].max()) + 1 if len(g) else 0
            out = np.zeros(size, dtype=np.float64)
            for row in g.itertuples(index=False):
                lo, hi = int(row.key_group_start), int(row.key_group_end)
                nbytes = getattr(row, "bytes", None)
                nbytes = 0.0 if nbytes is None or pd.isna(nbytes) else float(nbytes)
                w = rows[lo: hi + 1] if rows is not None and len(rows) > hi else None
                if w is None or not w.sum() > 0:
                    out[lo: hi + 1] += nbytes / (hi - lo + 1)
                else:
                    out[lo: hi + 1] += nbytes * w / w.sum()
            self._bytes[operator] = out
        out = self._bytes[operator]
        return np.pad(out, (0, max(0, m - len(out))))[:m]

    def rows_per_key_group(self, operator: str, states: Iterable[str] | None, m: int) -> np.ndarray:
        """The rows of the operator's ``states`` (None: all) per key group ``0..m-1`` as the reader's metadata
        tells (engine: its row groups; Flink: an upper estimate from the key-group offsets), else from the
        bytes (:data:`~explorer.analysis._ranges.ROWS_PER_FILE_BYTE`, an over-count)."""
        query = KeyedStateQuery(operators=frozenset([operator]),
                                states=None if states is None else frozenset(states))
        rows = self.reader.key_group_rows(query)
        if rows is None:
            rows = self.bytes_per_key_group(operator, m) / 12
        rows = np.asarray(rows, dtype=np.float64)
        return np.pad(rows, (0, max(0, m - len(rows))))[:m]


def _pieces(lo: int, hi: int, rows: np.ndarray, budget: int) -> tuple[tuple[int, int], ...] | None:
    """``lo..hi`` cut into ranges of whole key groups whose ``rows`` (per key group) at
    :data:`~explorer.stored.ANALYSIS_BYTES_PER_ROW` each fit ``budget`` (a key group above it alone; empty key
    groups join their neighbours); None when the whole range fits (or no budget)."""
    if budget <= 0 or float(rows[lo: hi + 1].sum()) * ANALYSIS_BYTES_PER_ROW <= budget:
        return None
    cap = budget / ANALYSIS_BYTES_PER_ROW
    out, start, acc = [], lo, 0.0
    for kg in range(lo, hi + 1):
        if acc and acc + rows[kg] > cap:
            out.append((start, kg - 1))
            start, acc = kg, 0.0
        acc += rows[kg]
    out.append((start, hi))
    return tuple(out)


def _same_key_groups(a: _Side, b: _Side) -> None:
    """Refuse a diff by key-group ranges of two snapshots whose common operators differ in max parallelism."""
    for name in sorted(a.keyed_operators() & b.keyed_operators()):
        ma, mb = a.max_parallelism(name), b.max_parallelism(name)
        if ma is not None and mb is not None and ma != mb:
            raise ReaderError(
                f"{a.path} and {b.path}: operator {name!r} has max parallelism {ma} in the first snapshot and {mb} "
                "in the second, so a key's key group differs between them; aggregate=diff needs the same max "
                "parallelism (explorer.distributed.analysis.diff joins the keys instead)")


def _segments(operator: str, sides: list[_Side]) -> list[tuple[int, int, int, bool]]:
    """``(lo, hi, subtask, seeks)``: the operator's key groups cut where a subtask of any side starts or ends, so
    that each segment lies in one subtask of each side (``subtask``: the first side's holding it, else the
    second's); ``seeks`` when every side holding it reads it by range."""
    spans = []
    for i, side in enumerate(sides):
        g = side.subs[side.subs["operator"] == operator]
        spans += [(int(r.key_group_start), int(r.key_group_end), i, int(r.subtask), side.seeks(r))
                  for r in g.itertuples(index=False)]
    bounds = sorted({lo for lo, *_ in spans} | {hi + 1 for _, hi, *_ in spans})
    out = []
    for lo, nxt in zip(bounds[:-1], bounds[1:]):
        hi = nxt - 1
        holders = sorted((i, sub, seeks) for a, b, i, sub, seeks in spans if a <= lo and hi <= b)
        if holders:
            out.append((lo, hi, holders[0][1], all(seeks for *_, seeks in holders)))
    return out


def _cut(lo: int, hi: int, weights: np.ndarray | None, parts: int) -> list[tuple[int, int]]:
    """``lo..hi`` cut into at most ``parts`` ranges of whole key groups: of about equal ``weights`` (bytes per key
    group) where given, else of equal key-group counts."""
    if parts <= 1 or hi <= lo:
        return [(lo, hi)]
    w = None if weights is None else weights[lo: hi + 1]
    if w is None or not w.sum() > 0:
        step = max(1, -(-(hi - lo + 1) // parts))
        return [(a, min(hi, a + step - 1)) for a in range(lo, hi + 1, step)]
    cum = np.cumsum(w)
    ends = np.searchsorted(cum, cum[-1] * np.arange(1, parts) / parts, side="left")  # the range ending there
    starts = sorted({lo} | {lo + int(e) + 1 for e in ends if e + 1 < len(w)})
    return [(a, b - 1) for a, b in zip(starts, starts[1:] + [hi + 1])]


def release_memory() -> None:
    """Give the pages a finished partition freed back to the system (Arrow's pool, the C heap's free top and
    holes): Spark keeps a Python worker alive between tasks, and it would otherwise hold its largest task's peak
    while idle (100 M keys, a diff's task: ~480 of its ~550 MB), which counts against the machine's memory."""
    try:
        pa.default_memory_pool().release_unused()
    except Exception:  # noqa: BLE001 - best effort: an allocator without it
        pass
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None).malloc_trim(0)
        except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
            pass


class StateReader(DataSourceReader):
    """Plans the partitions (on the driver's planner) and reads one (on an executor)."""

    def __init__(self, options: dict[str, str], schema) -> None:
        from pyspark.sql.pandas.types import to_arrow_schema

        self.options = {k.lower(): v for k, v in options.items()}
        self.path = self.options.get("path")
        self.arrow_schema = to_arrow_schema(schema, timezone="UTC")

    def partitions(self) -> list[StatePartition]:
        if not self.path:
            raise ReaderError(f"the {NAME} data source needs a path: spark.read.format({NAME!r}).load(path)")
        kwargs = _reader_options(self.options)
        _source_options(self.options)
        side = _Side.of(self.path, kwargs)
        operators = _names(self.options.get("operator"))
        states = _names(self.options.get("state"))
        only = _key_groups(self.options.get("key_groups"))
        splits = max(1, _int_option(self.options, "splits", 1))
        agg = _aggregate_option(self.options)
        per_part = _int_option(self.options, "partition_bytes", DIFF_PARTITION_BYTES if agg == "diff"
                               else PARTITION_BYTES)
        budget = _budget_option(self.options)
        other = _Side.of(self.options["other"], kwargs) if agg == "diff" else None
        sides = [side] if other is None else [side, other]
        if operators is not None:
            known = set().union(*(s.operators for s in sides))
            missing = sorted(set(operators) - known)
            if missing:
                raise ReaderError(f"{self.path}: no operator named {missing}; the operators are {sorted(known)}")
        names = sorted(set().union(*(s.keyed_operators() for s in sides)))
        if other is not None:
            _same_key_groups(side, other)
        out: list[StatePartition] = []
        for name in names:
            if operators is not None and name not in operators:
                continue
            for lo, hi, subtask, seeks in _segments(name, sides):
                cuts = splits
                weights = None
                if per_part and seeks:
                    weights = sum(s.bytes_per_key_group(name, hi + 1) for s in sides)
                    cuts = max(cuts, -(-int(round(float(weights[lo: hi + 1].sum()))) // per_part))  # sized by bytes
                rows = None
                if budget and seeks:  # read by range: a task reads its range in pieces that fit the budget
                    rows = sum(s.rows_per_key_group(name, states, hi + 1) for s in sides)
                    if only is not None:
                        rows = np.where(np.isin(np.arange(len(rows)), list(only)), rows, 0.0)
                for a, b in _cut(lo, hi, weights, cuts):
                    if only is not None and not any(a <= k <= b for k in only):
                        continue
                    part_only = None if only is None else tuple(sorted(k for k in only if a <= k <= b))
                    out.append(StatePartition(side.path, side.fmt, side.kwargs, name, subtask, (a, b),
                                              None if states is None else tuple(states), part_only,
                                              None if other is None else (other.path, other.fmt, other.kwargs),
                                              pieces=None if rows is None else _pieces(a, b, rows, budget)))
        return out

    def read(self, partition: StatePartition) -> Iterator[pa.RecordBatch]:
        reader = None
        try:
            reader = _cached_reader(partition.path, partition.fmt, partition.kwargs)
            ranges = partition.ranges()
            if _aggregate_option(self.options) == "hot_keys" and len(ranges) > 1:
                # the pieces' top candidates chosen again over the partition: the driver ranks no more than before
                tables = [pa.Table.from_batches(list(self._read_range(partition, reader, lo, hi, only)),
                                                schema=self.arrow_schema) for lo, hi, only in ranges]
                yield from merge_pieces(tables, _int_option(self.options, "top", 10)).to_batches(
                    max_chunksize=BATCH_ROWS)
                return
            for lo, hi, only in ranges:  # one piece of the range at a time (memory_budget)
                yield from self._read_range(partition, reader, lo, hi, only)
        except StateExplorerError as exc:
            raise _with_partition(exc, partition) from exc
        except Exception as exc:  # noqa: BLE001 - the boundary: everything below becomes the tree
            err = convert_failure(exc, partition.path, getattr(reader, "current_file", None))
            raise _with_partition(err, partition) from exc
        finally:
            release_memory()

    def _read_range(self, partition: StatePartition, reader: Any, lo: int, hi: int,
                    only: tuple[int, ...] | None) -> Iterator[pa.RecordBatch]:
        """The batches of key groups ``lo..hi`` (``only``: these of them) of the partition: its rows, or what
        ``aggregate=`` makes of them."""
        groups = frozenset(only) if only is not None else frozenset(range(lo, hi + 1))
        agg = _aggregate_option(self.options)
        if agg == "diff":
            table = self._diff(partition, reader, lo, hi, only)
            yield from table.cast(self.arrow_schema).to_batches(max_chunksize=BATCH_ROWS)
            return
        columns = _AGGREGATE_READ if agg else tuple(self.arrow_schema.names)  # a reader may skip the values
        query = KeyedStateQuery(operators=frozenset([partition.operator]),
                                states=None if partition.states is None else frozenset(partition.states),
                                key_groups=groups,
                                columns=None if set(CONTRACT_COLUMNS) <= set(columns) else columns)
        if agg:
            table = aggregate_partition(reader.keyed_pieces(query), partition.operator, agg,
                                        top=_int_option(self.options, "top", 10),
                                        by=_names(self.options.get("by")) or ["bytes"],
                                        keys=_names(self.options.get("keys")))
            yield from table.cast(self.arrow_schema).to_batches(max_chunksize=BATCH_ROWS)
            return
        for piece in reader.keyed_pieces(query):
            if not piece.num_rows:
                continue
            table = _spark_piece(piece, self.arrow_schema)
            yield from table.to_batches(max_chunksize=BATCH_ROWS)

    def _diff(self, partition: StatePartition, reader: Any, lo: int, hi: int,
              only: tuple[int, ...] | None) -> pa.Table:
        """``aggregate=diff``: the local diff of key groups ``lo..hi`` of both snapshots
        (:func:`explorer.analysis.diff.diff_key_groups`), as :func:`diff_rows`."""
        a = _cached_stored(partition.path, partition.fmt, partition.kwargs, reader)
        b = _cached_stored(*partition.other)
        d = diff_key_groups(a, b, lo, hi, only, operator=partition.operator, state=partition.states,
                            unchanged=True)
        return diff_rows(d, (self.options.get("diff_keys") or "changes").strip().lower())


def diff_rows(d: pd.DataFrame, keys: str = "changes") -> pa.Table:
    """What an ``aggregate=diff`` partition sends (rows of :data:`DIFF_SCHEMA`) from its range's diff ``d`` (the
    columns of :func:`explorer.analysis.diff`, unchanged keys included): per (operator, state, status) the keys
    and their entries and bytes in both snapshots (``row = "status"``), and a row per key (``row = "key"``,
    ``keys = 1``, the key as JSON text) for the changed, added and removed keys (``keys="changes"``), every key
    (``"all"``) or none (``"none"``)."""
    sums = ["entries_a", "entries_b", "bytes_a", "bytes_b"]
    g = d.groupby(["operator", "state", "status"], observed=True, sort=True)
    status = g[sums].sum()
    status.insert(0, "keys", g.size())
    status = status.reset_index()
    status["status"] = status["status"].astype(str)
    status.insert(0, "row", "status")
    status["key"] = None
    rows = d if keys == "all" else d.iloc[0:0] if keys == "none" else d[(d["status"] != "unchanged").to_numpy()]
    out = pd.DataFrame({"row": "key", "operator": rows["operator"].astype(str).to_numpy(),
                        "state": rows["state"].astype(str).to_numpy(), "key": _key_json(rows["key"]),
                        "status": rows["status"].astype(str).to_numpy(), "keys": 1,
                        **{c: rows[c].to_numpy(dtype=np.int64) for c in sums}})
    both = pd.concat([status, out], ignore_index=True) if len(out) else status
    cols = ["row", "operator", "state", "key", "status", "keys", *sums]
    return pa.table({c: pa.array(both[c].to_numpy(dtype=object if c in cols[:5] else np.int64),
                                 pa.string() if c in cols[:5] else pa.int64()) for c in cols})


def _key_json(keys: pd.Series) -> list[str | None]:
    """The JSON texts of a diff's keys, as the data source's ``key`` column has them."""
    values = keys.to_numpy(dtype=object)
    try:
        arr = pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        return [None if v is None else to_json(v) for v in values]
    return _json_column(arr).to_pylist()


def _with_partition(err: StateExplorerError, partition: StatePartition) -> StateExplorerError:
    """``err`` as it will read in Spark's task failure: the class and message, with the partition named."""
    text = f"{err} [{NAME} partition: operator {partition.operator!r}, subtask {partition.subtask}, key groups " \
           f"{partition.key_groups[0]}..{partition.key_groups[1]}]"
    try:
        return type(err)(text)
    except Exception:  # noqa: BLE001 - a subclass with its own constructor: keep it as it is
        return err


# --- the driver's side -----------------------------------------------------------------------------
_ERROR_LINE = re.compile(r"^(?:explorer\.errors\.)?([A-Z]\w*Error): (.+)$")


def raise_state_error(exc: BaseException) -> None:
    """Raise the :class:`StateExplorerError` a Spark failure carries from a partition (same class and
    message), if it carries one; return otherwise (the caller re-raises ``exc``)."""
    if isinstance(exc, StateExplorerError):
        raise exc
    text = str(exc)
    found = None
    for line in text.splitlines():
        m = _ERROR_LINE.match(line.strip())
        if m and isinstance(getattr(errors_module, m.group(1), None), type) \
                and issubclass(getattr(errors_module, m.group(1)), StateExplorerError):
            found = m
    if found is not None:
        cls = getattr(errors_module, found.group(1))
        try:
            err = cls(found.group(2))
        except Exception:  # noqa: BLE001
            err = ReaderError(found.group(2))
        raise err from exc


def register(spark) -> None:
    """Make ``spark.read.format("state-explorer")`` known to this session."""
    spark.dataSource.register(StateExplorerDataSource)


def _option_text(name: str, value: Any) -> str:
    if name == "ttl" and isinstance(value, Mapping):
        return json.dumps({str(k): (v.total_seconds() * 1000 if isinstance(v, timedelta) else float(v))
                           for k, v in value.items()})
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple, set, frozenset)):
        return json.dumps([str(v) for v in value])
    if isinstance(value, Mapping):
        return json.dumps(value)
    return str(value)


def read_state(spark, path: str | Path, **options: Any):
    """The keyed state of the snapshot at ``path`` as a Spark DataFrame (see the module doc for the options).

    The snapshot's metadata is opened here once first, so that a wrong path or option fails now, with the
    project's error, rather than at the first action.
    """
    register(spark)
    texts = check_read(path, **options)
    return spark.read.format(NAME).options(**texts).load(_absolute(str(path)))


def check_read(path: str | Path, **options: Any) -> dict[str, str]:
    """The options of a read of ``path`` as Spark's strings, checked on the driver first (the snapshot's metadata
    opened once, the options parsed): a wrong path or option fails here with the project's error."""
    texts = {k: _option_text(k, v) for k, v in options.items() if v is not None}
    if "other" in texts:
        texts["other"] = _absolute(texts["other"])
    kwargs = _reader_options(texts)
    _source_options(texts)
    if texts.get("other") and _aggregate_option(texts) == "diff":
        _same_key_groups(_Side.of(str(path), kwargs), _Side.of(texts["other"], kwargs))
    else:
        _resolve(str(path), kwargs)
    return texts
