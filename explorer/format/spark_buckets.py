"""The stored value of the Spark adapter's bucket layout: one versioned, self-describing codec.

The engine-on-Spark runner (:mod:`explorer.spark_engine.buckets`) keeps each bucket's whole state in
one Spark ``ValueState`` named :data:`STATE_NAME`; the Spark checkpoint reader
(:mod:`explorer.readers.spark`) decodes it. Both use this module, so the on-disk form is written once.

Stored value (versioned; nothing pickled, nothing executed on read)::

    struct<format: string = "explorer-spark-buckets", version: int = 1, buckets: int,
           tables: array<struct<name: string, kind: string, ttl_ms: bigint, data: binary>>>

(``buckets`` is checked on restart: another bucket count would lose keys' state).

``data`` is an Arrow IPC stream. State tables have the columns ``key`` (the
key column, or a struct of the key columns), ``user_key`` (map state),
``value`` (the declared type's Arrow type) and ``last_access`` (epoch ms, TTL
only); list elements are rows in list order. The timer table (kind
``event_timer`` / ``processing_timer``, name :data:`TIMERS`) has ``key`` and
``timestamp`` in firing order. A broadcast state (kind :data:`BROADCAST`) has
``user_key`` and ``value``: the bucket's copy of it, the same in every bucket.
The schema metadata holds the descriptor's JSON description. An unknown format
name or version fails loudly (:func:`check_value`).
"""

from __future__ import annotations

import io
import json
from typing import Any, Iterable, Sequence

import pyarrow as pa

from ..errors import JobError, SnapshotFormatError
from .ttl import is_expired

__all__ = ["BROADCAST", "FORMAT", "PRIMITIVES", "STATE_NAME", "TIMERS", "VERSION", "check_value", "decode_tables",
           "describe", "encode_tables", "from_arrow_values", "from_ipc", "to_arrow_values", "to_ipc"]

#: the one Spark state variable of the bucket layout
STATE_NAME = "__explorer_buckets"
FORMAT = "explorer-spark-buckets"
VERSION = 1
#: the name of the per-key timer table in a bucket
TIMERS = "timers"
#: the kind of a stored broadcast state (``user_key``, ``value``; one copy per bucket)
BROADCAST = "broadcast"

#: Arrow types whose Python values are stored as they are (no conversion through the type's codec)
PRIMITIVES = (pa.int64(), pa.float64(), pa.string(), pa.bool_(), pa.binary())
#: the stored kinds (a descriptor's ``kind``, as in its JSON description) whose tables have a row per element
_MAP, _LIST = "map", "list"


def to_ipc(table: pa.Table) -> bytes:
    """``table`` as the Arrow IPC stream a stored table's ``data`` holds."""
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue()


def from_ipc(data: bytes, where: str) -> pa.Table:
    """The table of a stored ``data`` field; :class:`SnapshotFormatError` naming ``where`` if it is not one."""
    try:
        return pa.ipc.open_stream(pa.py_buffer(bytes(data))).read_all()
    except (pa.ArrowInvalid, OSError) as exc:
        raise SnapshotFormatError(f"{where}: a bucket table is not a readable Arrow IPC stream ({exc})") from exc


def to_arrow_values(info, values: list, arrow_type: pa.DataType) -> pa.Array:
    """Python values of a declared type (``info``, :mod:`explorer.format.types`) as a stored column."""
    if arrow_type in PRIMITIVES:
        return pa.array(values, arrow_type)
    conv = info.to_arrow
    return pa.array([None if v is None else conv(v) for v in values], arrow_type)


def from_arrow_values(info, arr) -> list:
    """The inverse of :func:`to_arrow_values`."""
    vals = arr.to_pylist()
    if arr.type in PRIMITIVES:
        return vals
    conv = info.from_arrow
    return [None if v is None else conv(v) for v in vals]


def encode_tables(tables: Sequence[Any], timers: Any, timer_kind: str,
                  key_array, now_ms: int) -> list[tuple]:
    """The ``tables`` field of a bucket's stored value (expired entries at ``now_ms`` left out).

    ``tables`` are a bucket's in-memory states (each with its ``descriptor`` and ``data``: ``key ->
    entry``, ``key -> [elements]`` or ``key -> {user key: entry}``, an entry being ``(value,
    last access)`` with TTL); ``timers`` its timer queue (``len`` and, in firing order, timers with
    ``key`` and ``timestamp``) or None; ``key_array`` makes the stored key column from keys.
    """
    out = []
    for t in tables:
        if not t.data:
            continue
        d = t.descriptor
        info = d.value_info
        ttl = getattr(d, "ttl", None)
        ttl_ms = None if ttl is None else ttl.ttl_ms
        keys: list = []
        uks: list = []
        vals: list = []
        last: list = []
        kind = d.kind.value
        if kind == _MAP or kind == _LIST:
            is_map = kind == _MAP
            for k, uk, e in _elements(is_map, t.data):
                if ttl_ms is not None:
                    if is_expired(e[1], ttl_ms, now_ms):
                        continue
                    vals.append(e[0])
                    last.append(e[1])
                else:
                    vals.append(e)
                keys.append(k)
                if is_map:
                    uks.append(uk)
        else:
            if ttl_ms is None:
                keys = list(t.data.keys())
                vals = list(t.data.values())
            else:
                for k, e in t.data.items():
                    if not is_expired(e[1], ttl_ms, now_ms):
                        keys.append(k)
                        vals.append(e[0])
                        last.append(e[1])
        if not keys:
            continue
        cols = {"key": key_array(keys)}
        if kind == _MAP:
            uinfo = d.user_key_info
            cols["user_key"] = to_arrow_values(uinfo, uks, uinfo.arrow_type)
        cols["value"] = to_arrow_values(info, vals, info.arrow_type)
        if ttl_ms is not None:
            cols["last_access"] = pa.array(last, pa.int64())
        table = pa.table(cols).replace_schema_metadata({"explorer.descriptor": describe(d)})
        out.append((d.name, kind, ttl_ms, to_ipc(table)))
    if timers is not None and len(timers):
        live = list(timers)
        table = pa.table({"key": key_array([x.key for x in live]),
                          "timestamp": pa.array([x.timestamp for x in live], pa.int64())})
        out.append((TIMERS, timer_kind, None, to_ipc(table)))
    return out


def _elements(is_map: bool, data: dict) -> Iterable[tuple[Any, Any, Any]]:
    """``(key, user key, stored entry)`` of every map entry, or ``(key, None, stored element)``
    of every list element, of one bucket table's data."""
    if is_map:
        return ((k, uk, e) for k, m in data.items() for uk, e in m.items())
    return ((k, None, e) for k, elems in data.items() for e in elems)


_DESCRIBED: dict[int, str] = {}


def describe(d) -> str:
    """The JSON description of descriptor ``d`` a stored table's schema metadata holds (made once per descriptor)."""
    s = _DESCRIBED.get(id(d))
    if s is None:
        s = _DESCRIBED[id(d)] = json.dumps(d.describe())
    return s


def check_value(row: Any, where: str, buckets: int | None = None) -> list:
    """The ``tables`` of a stored bucket value, after checking its format name, version and bucket count."""
    fmt, version, stored_buckets, tables = row[0], row[1], row[2], row[3]
    if fmt != FORMAT:
        raise SnapshotFormatError(f"{where}: expected a bucket value of format {FORMAT!r}, found {fmt!r}")
    if version != VERSION:
        raise SnapshotFormatError(f"{where}: unknown bucket format version {version!r} (known: {VERSION})")
    if buckets is not None and stored_buckets != buckets:
        raise JobError(f"{where}: the checkpoint was written with buckets={stored_buckets}, this query runs with "
                       f"buckets={buckets}; keys would land in other buckets and lose their state: run it with "
                       f"buckets={stored_buckets}")
    return list(tables or [])


def decode_tables(row: Any, where: str, broadcast: bool = False) -> dict[str, tuple[str, int | None, pa.Table]]:
    """``name -> (kind, ttl_ms, Arrow table)`` of one stored bucket value (for readers).

    Keyed states and timers only; ``broadcast=True`` returns the broadcast states instead
    (kind :data:`BROADCAST`, columns ``user_key`` and ``value``: operator state, the same
    in every bucket, not keyed state).
    """
    out = {}
    for name, kind, ttl_ms, data in check_value(row, where):
        if (kind == BROADCAST) == broadcast:
            out[name] = (kind, ttl_ms, from_ipc(data, f"{where}, table {name!r}"))
    return out
