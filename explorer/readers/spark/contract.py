"""A Spark state table (from the store files or Spark's data source) as the explorer's contract rows.

:class:`ContractRows` is the part of :class:`~.reader.SparkCheckpointReader` that maps the columns both
paths give (``key``, ``value``, ``partition_id``, ``user_map_key`` / ``user_map_value``, ``list_element``,
``expiration_timestamp_ms``) onto the contract (the table in ``reader``'s module doc): values unwrapped,
TTL and other expiries as ``expires_at``, join rows and sessions per grouping key, aggregation buffers'
collect lists decoded (``collect``). The Arrow helpers below are shared with ``buckets`` and ``changes``.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...errors import ReaderError
from ..base import TIMESTAMP, KeyedStateQuery, make_piece
from .collect import decode_collect_buffers
from .part import SparkPart


class ContractRows(SparkPart):
    """Decoded state tables to contract pieces (see module doc)."""

    @cached_property
    def _collect_notes(self) -> list[str]:
        """Notes of decoded collect buffers, each added once to :attr:`notes`."""
        return OnceNotes(self.notes)

    def _converted(self, op, st, t: pa.Table, query: KeyedStateQuery) -> pa.Table:
        """:meth:`_to_contract`, its own failures (not the files') a :class:`ReaderError` naming the state: the
        bytes decoded already, so a failure here is the explorer's, never a damaged file."""
        try:
            return self._to_contract(op, st, t, query)
        except Exception as exc:  # noqa: BLE001
            raise ReaderError(f"state {st['state']!r} of operator {op['operator']!r} at batch {self.batch_id} in "
                              f"{self.path}: converting its decoded rows to the explorer's columns failed "
                              f"({type(exc).__name__}: {exc})") from exc

    def _to_contract(self, op, st, t: pa.Table, query: KeyedStateQuery) -> pa.Table:
        kind = st["kind"]
        key_col = t.column("key").combine_chunks()
        key = unwrap(key_col)
        part = t.column("partition_id").combine_chunks().cast(pa.int32())
        user_key = None
        expires = None
        if kind in ("event_timer", "processing_timer"):
            value = t.column("expiration_timestamp_ms").combine_chunks()
            expires = value  # a timer fires at its timestamp: shown as one in expires_at
            size = row_bytes(key_col) + 8
        elif kind == "map":
            uk = t.column("user_map_key").combine_chunks()
            user_key = unwrap(uk)
            value, expires, vraw = value_and_ttl(t.column("user_map_value").combine_chunks())
            size = row_bytes(key_col) + row_bytes(uk) + row_bytes(vraw)
        elif kind == "list":
            value, expires, vraw = value_and_ttl(t.column("list_element").combine_chunks())
            user_key = pa.array(run_index(key_col), pa.int64())
            size = row_bytes(key_col) + row_bytes(vraw)
        else:
            raw_value = t.column("value").combine_chunks()
            if op["spark_operator"].lower().startswith(("statestoresave", "sessionwindowstatestoresave")):
                raw_value = decode_collect_buffers(raw_value, f"values of {op['operator']!r}", self._collect_notes)
            value, expires, vraw = value_and_ttl(raw_value)
            if expires is None:
                expires = expiry_in_value(raw_value)
            size = row_bytes(key_col) + row_bytes(vraw)
            per_key = st["state"].endswith("keyWithIndexToValue") or op["spark_operator"].startswith("sessionWindow")
            if per_key and pa.types.is_struct(key_col.type) and key_col.type.num_fields > 1:
                # a join side's rows / a key's sessions: shown per join (grouping) key, the row's index among
                # the key's rows / the session's start as user_key
                n = key_col.type.num_fields
                user_key = key_col.field(n - 1)
                if pa.types.is_integer(user_key.type):
                    user_key = user_key.cast(pa.int64())
                fields = [key_col.type.field(i) for i in range(n - 1)]
                key = unwrap(pa.StructArray.from_arrays([key_col.field(i) for i in range(n - 1)], fields=fields,
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


class OnceNotes(list):
    """A list that passes each new note on to ``target`` once."""

    def __init__(self, target: list[str]) -> None:
        super().__init__()
        self._target = target

    def append(self, note: str) -> None:
        if note not in self._target:
            self._target.append(note)


# --- Arrow helpers -------------------------------------------------------------------------
def unwrap(arr: pa.Array) -> pa.Array:
    """A one-field struct (how Spark wraps keys and values) as its field; others unchanged."""
    if pa.types.is_struct(arr.type) and arr.type.num_fields == 1:
        child = arr.field(0)
        if arr.null_count:
            child = pc.if_else(arr.is_valid(), child, pa.nulls(len(arr), child.type))
        return child
    return arr


def expiry_in_value(arr: pa.Array) -> pa.Array | None:
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


def value_and_ttl(arr: pa.Array) -> tuple[pa.Array, pa.Array | None, pa.Array]:
    """(value, expiry ms or None, the raw stored value) of a state value column."""
    if pa.types.is_struct(arr.type) and arr.type.get_field_index("ttlExpirationMs") >= 0:
        raw = arr.field(arr.type.get_field_index("value"))
        expires = arr.field(arr.type.get_field_index("ttlExpirationMs"))
        return unwrap(raw), expires, raw
    return unwrap(arr), None, arr


def row_bytes(arr: pa.Array) -> np.ndarray:
    """Bytes of each row's fields (strings by length, numbers by width): a size estimate."""
    t = arr.type
    n = len(arr)
    if pa.types.is_struct(t):
        total = np.zeros(n, np.int64)
        for i in range(t.num_fields):
            total += row_bytes(arr.field(i))
        return total
    if pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        return np.asarray(pc.binary_length(arr).fill_null(0), dtype=np.int64)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t):
        flat = arr.flatten() if not pa.types.is_map(t) else pa.StructArray.from_arrays(
            [arr.keys, arr.items], ["k", "v"])
        sizes = row_bytes(flat)
        offsets = np.asarray(arr.offsets)
        csum = np.concatenate([[0], np.cumsum(sizes)])
        return (csum[offsets[1:]] - csum[offsets[:-1]]).astype(np.int64) + 4
    if pa.types.is_null(t):
        return np.zeros(n, np.int64)
    try:
        return np.full(n, max(1, t.bit_width // 8), np.int64)
    except ValueError:
        return np.zeros(n, np.int64)


def run_index(key: pa.Array) -> np.ndarray:
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
