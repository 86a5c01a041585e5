"""Column-wise encoding of canonical keyed-state rows into raw RocksDB entries (restore).

The inverse of :mod:`.columns`: a batch of the Parquet
table of :mod:`explorer.format.keyed` (one row group, say) becomes the raw keys
and values the RocksDB backend would write for those rows
(:meth:`explorer.engine.backends.rocksdb.RocksDBStateTable.load_rows` into an
empty state; layout in :mod:`.layout`), built with
Arrow and NumPy kernels instead of one Python object per part of every row:

* keys and map user keys: ``str`` (zero bytes escaped) or ``int``, without nulls;
* namespace: the default (``None``) only;
* values: ``int``, ``float``, ``bool``, ``str`` and ``bytes`` in value / reducing /
  aggregating and map states (null map values too), and list states of those
  element types; with or without TTL (the last-access time must be set).

:func:`encode_batch` returns the entries sorted by raw key, as RocksDB keeps
them (what an ``SstFileWriter`` needs): list elements of one key joined with
``,`` in row order, and of equal raw keys in other states the last row wins,
exactly as the row path's puts would leave it. It returns None for anything
outside these shapes; the caller then loads that batch the row-by-row way.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..parquet_pages import ByteSpans
from .layout import LIST_DELIMITER

__all__ = ["encode_batch", "splits", "supported"]

_SIGN = np.uint64(1 << 63)
_SCALAR_TYPES = ("int", "float", "bool", "str", "bytes")
_NONE = pa.scalar(b"\x01", pa.binary())
_STR_TAG = pa.scalar(b"\x07", pa.binary())
_TERM = pa.scalar(b"\x00\x01", pa.binary())
_EMPTY = pa.scalar(b"", pa.binary())


class _Unsupported(Exception):
    pass


def _simple(desc: dict | None) -> str | None:
    return desc.get("type") if desc is not None and len(desc) == 1 else None


def supported(kind: str, value_type: dict, user_key_type: dict | None) -> bool:
    """Whether a state of ``kind`` with these declared types (their ``describe()``) can be encoded here."""
    if _simple(value_type) not in _SCALAR_TYPES:
        return False
    if kind == "map":
        return _simple(user_key_type) in ("int", "str")
    return kind in ("value", "reducing", "aggregating", "list")


def _fixed(mat: np.ndarray) -> pa.Array:
    """An (n, w) uint8 matrix as a binary array of n w-byte values."""
    n, w = mat.shape
    offsets = np.arange(n + 1, dtype=np.int32) * np.int32(w)
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets),
                                                  pa.py_buffer(np.ascontiguousarray(mat, dtype=np.uint8))])


def _big_endian(values: np.ndarray, dtype: str) -> np.ndarray:
    """Values as big-endian bytes, one row each."""
    n = len(values)
    return values.astype(dtype).view(np.uint8).reshape(n, np.dtype(dtype).itemsize)


def _numbers(col: pa.Array, dtype: Any) -> np.ndarray:
    if col.null_count:
        raise _Unsupported
    return col.to_numpy(zero_copy_only=False).astype(dtype, copy=False)


def _key_part(col: pa.Array, type_name: str) -> pa.Array:
    """encode_key of every value of ``col`` (see :mod:`explorer.format.keycodec`)."""
    if col.null_count:
        raise _Unsupported  # None keys: the row path
    if type_name == "int":
        if not pa.types.is_int64(col.type):
            raise _Unsupported
        u = _numbers(col, np.int64).view(np.uint64) ^ _SIGN
        mat = np.empty((len(col), 9), dtype=np.uint8)
        mat[:, 0] = 4
        mat[:, 1:] = _big_endian(u, ">u8")
        return _fixed(mat)
    if type_name == "str":
        if not pa.types.is_string(col.type):
            raise _Unsupported
        raw = pc.replace_substring(col.cast(pa.binary()), b"\x00", b"\x00\xff")
        return pc.binary_join_element_wise(_STR_TAG, raw, _TERM, _EMPTY)
    raise _Unsupported


def _varints(lengths: np.ndarray) -> pa.Array:
    """The unsigned LEB128 varint of each length (:func:`explorer.format.types.encode_varint`)."""
    n = len(lengths)
    lengths = lengths.astype(np.int64)
    nbytes = np.ones(n, dtype=np.int64)
    for j in range(1, 10):
        more = lengths >= (1 << (7 * j))
        if not more.any():
            break
        nbytes += more
    width = int(nbytes.max()) if n else 1
    mat = np.empty((n, width), dtype=np.uint8)
    for j in range(width):
        mat[:, j] = ((lengths >> (7 * j)) & 0x7F) | np.where(j < nbytes - 1, 0x80, 0)
    keep = np.arange(width)[None, :] < nbytes[:, None]
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(nbytes, out=offsets[1:])
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(mat[keep])])


def _payload(col: pa.Array, type_name: str) -> pa.Array:
    """TypeInfo.encode of every value; a null value encodes as nothing (the caller flags it)."""
    if type_name in ("int", "float"):
        dtype = np.int64 if type_name == "int" else np.float64
        want = pa.types.is_int64 if type_name == "int" else pa.types.is_float64
        if not want(col.type):
            raise _Unsupported
        v = col.fill_null(0).to_numpy(zero_copy_only=False).astype(dtype, copy=False)
        out = _fixed(_big_endian(v, ">i8" if type_name == "int" else ">f8"))
    elif type_name == "bool":
        if not pa.types.is_boolean(col.type):
            raise _Unsupported
        v = col.fill_null(False).to_numpy(zero_copy_only=False).astype(np.uint8)
        out = _fixed(v.reshape(-1, 1))
    elif type_name in ("str", "bytes"):
        out = pc.binary_join_element_wise(*_payload_parts(col, type_name), _EMPTY)
    else:
        raise _Unsupported
    if col.null_count:
        out = pc.if_else(col.is_valid(), out, _EMPTY)
    return out


def _payload_parts(col: "pa.Array | ByteSpans", type_name: str) -> tuple[pa.Array, "pa.Array | ByteSpans"]:
    """A string or bytes column's encoding as two parts: each value's varint length, and its bytes
    (the column itself: values in place in a mapped file stay there)."""
    if isinstance(col, ByteSpans):
        return _varints(col.lengths()), col
    want = pa.types.is_string if type_name == "str" else pa.types.is_binary
    if not want(col.type):
        raise _Unsupported
    raw = col.cast(pa.binary()) if type_name == "str" else col
    lengths = pc.binary_length(raw).fill_null(0).to_numpy(zero_copy_only=False)
    return _varints(lengths), raw


def _by_key(keys: pa.Array, columns: tuple[pa.Array, ...]) -> tuple[pa.Array, tuple[pa.Array, ...], np.ndarray]:
    """``keys`` and the value ``columns`` beside them sorted by key (stable: equal keys keep their
    row order), and where each run of equal keys starts."""
    if keys.null_count or any(c.null_count for c in columns):
        raise _Unsupported
    if not _nondecreasing(keys):
        order = pc.sort_indices(keys)
        keys, columns = keys.take(order), tuple(c.take(order) for c in columns)
    return keys, columns, _run_starts(keys)


def _sorted_last(keys: pa.Array, columns: tuple[pa.Array, ...]) -> tuple[pa.Array, tuple[pa.Array, ...]]:
    """:func:`_by_key`, the last put of equal keys kept (what writing them in row order leaves)."""
    keys, columns, first = _by_key(keys, columns)
    if not first.all():
        idx = pa.array(np.flatnonzero(np.append(first[1:], True)))
        keys, columns = keys.take(idx), tuple(c.take(idx) for c in columns)
    return keys, columns


def _array(a: Any) -> pa.Array:
    if isinstance(a, pa.ChunkedArray):
        return a.chunk(0) if a.num_chunks == 1 else a.combine_chunks()  # one chunk: no copy
    return a


def _nondecreasing(keys: pa.Array) -> bool:
    return len(keys) < 2 or bool(pc.all(pc.less_equal(keys[:-1], keys[1:])).as_py())


def _run_starts(keys: pa.Array) -> np.ndarray:
    """A bool per row: whether its key differs from the previous row's (sorted keys)."""
    first = np.ones(len(keys), dtype=bool)
    if len(keys) > 1:
        first[1:] = pc.not_equal(keys[1:], keys[:-1]).to_numpy(zero_copy_only=False)
    return first


def splits(kind: str, value_type: dict) -> bool:
    """Whether :func:`encode_batch` gives a state of this shape its values in two parts with ``split``
    (and so takes its value column as :class:`~explorer.format.parquet_pages.ByteSpans`)."""
    return kind in ("value", "reducing", "aggregating") and _simple(value_type) in ("str", "bytes")


def encode_batch(table: pa.Table, kind: str, prefix_bytes: int, ttl: bool, value_type: dict,
                 user_key_type: dict | None, key_kind: str, namespace_kind: str, split: bool = False,
                 values: ByteSpans | None = None) -> tuple[pa.Array, Any] | None:
    """The raw RocksDB ``(keys, values)`` (binary arrays, keys strictly ascending) that
    loading ``table``'s rows into an empty state of this shape writes, or None when
    the batch is not in a shape encoded here (then load it row by row).

    With ``split``, values that are a length and the bytes of a string or ``bytes`` (value,
    reducing and aggregating state, :func:`splits`) come as two arrays ``(heads, bytes)``, the
    heads each value's last-access time (with TTL) and length, the value column itself as the
    second (no copy of it): what :func:`explorer.format.sst.writer.write_sst` takes. ``values``,
    for such a state only, stands for the table's value column (then not read): its bytes in
    place in the mapped Parquet file (:func:`explorer.format.parquet_pages.column_spans`)."""
    if table.num_rows == 0 or namespace_kind != "null" or not supported(kind, value_type, user_key_type):
        return None
    if values is not None and (not split or not splits(kind, value_type) or len(values) != table.num_rows):
        return None
    try:
        return _encode(table, kind, prefix_bytes, ttl, _simple(value_type), _simple(user_key_type), key_kind, split,
                       values)
    except (_Unsupported, pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowCapacityError, OverflowError):
        return None


def _encode(table: pa.Table, kind: str, prefix_bytes: int, ttl: bool, vname: str, ukname: str | None,
            key_kind: str, split: bool = False, spans: ByteSpans | None = None) -> tuple[pa.Array, Any]:
    n = table.num_rows
    if table.column("namespace").null_count != n:
        raise _Unsupported
    kg = _numbers(_array(table.column("key_group")), np.int64)
    if kg.min() < 0 or kg.max() >= 1 << (8 * prefix_bytes):
        raise _Unsupported
    parts = [_fixed(_big_endian(kg, ">u1" if prefix_bytes == 1 else ">u2")),
             _key_part(_array(table.column("key")), key_kind), _NONE]
    if kind == "map":
        parts.append(_key_part(_array(table.column("user_key")), ukname))
    keys = pc.binary_join_element_wise(*parts, _EMPTY)

    value_col = spans if spans is not None else _array(table.column("value"))
    if value_col.null_count and kind != "map":
        raise _Unsupported  # None values cannot be stored: the row path says why
    if split and kind in ("value", "reducing", "aggregating") and vname in ("str", "bytes"):
        heads, bodies = _payload_parts(value_col, vname)
        if ttl:  # the last-access time before the length
            ts = _numbers(_array(table.column("last_access")), np.int64)
            heads = pc.binary_join_element_wise(_fixed(_big_endian(ts, ">i8")), heads, _EMPTY)
        return _sorted_last(keys, (heads, bodies))
    body = [_payload(value_col, vname)]
    if kind == "map":
        body.insert(0, _fixed(value_col.is_valid().to_numpy(zero_copy_only=False).astype(np.uint8).reshape(-1, 1)))
    if ttl:
        ts = _numbers(_array(table.column("last_access")), np.int64)
        body.insert(0, _fixed(_big_endian(ts, ">i8")))
    values = pc.binary_join_element_wise(*body, _EMPTY) if len(body) > 1 else body[0]
    if kind != "list":  # equal raw keys: the last put wins
        keys, (values,) = _sorted_last(keys, (values,))
        return keys, values
    # one RocksDB value per key: its elements joined by ","
    keys, (values,), first = _by_key(keys, (values,))
    starts = np.flatnonzero(first)
    offsets = np.append(starts, n).astype(np.int32)
    values = pc.binary_join(pa.ListArray.from_arrays(pa.array(offsets), values), LIST_DELIMITER)
    return keys.take(pa.array(starts)), values
