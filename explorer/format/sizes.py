"""Serialized size of values, computed column-wise from Arrow (no per-value Python).

The size of a value is the number of bytes our binary encoding
(:mod:`explorer.format.types`) takes for it: 8 for int/float, 1 for bool,
length + 1 for strings and bytes (a one-byte length prefix for short ones),
the sum of the fields for structs, count prefix plus elements for lists and maps.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def value_sizes(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Bytes per value of ``arr`` as int64 (0 for nulls)."""
    if isinstance(arr, pa.ChunkedArray):
        if arr.num_chunks == 0:
            return np.zeros(0, dtype=np.int64)
        return np.concatenate([value_sizes(c) for c in arr.chunks]) if arr.num_chunks > 1 else value_sizes(arr.chunk(0))
    n = len(arr)
    t = arr.type
    if pa.types.is_null(t):
        return np.zeros(n, dtype=np.int64)
    if pa.types.is_boolean(t):
        out = np.ones(n, dtype=np.int64)
    elif pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_temporal(t) or pa.types.is_decimal(t):
        out = np.full(n, max(1, t.bit_width // 8), dtype=np.int64)
    elif pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        lens = pc.binary_length(arr).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        out = lens + 1 + (lens >= 128)
    elif pa.types.is_struct(t):
        out = np.zeros(n, dtype=np.int64)
        for i in range(t.num_fields):
            out += value_sizes(arr.field(i))
    elif pa.types.is_map(t):
        keys = value_sizes(arr.keys)
        items = value_sizes(arr.items)
        out = _per_list(arr.offsets, keys + items, n)
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        out = _per_list(arr.offsets, value_sizes(arr.values), n)
    elif pa.types.is_dictionary(t):
        out = value_sizes(arr.dictionary_decode())
    else:
        out = np.full(n, 8, dtype=np.int64)
    if arr.null_count:
        out = np.where(arr.is_null().to_numpy(zero_copy_only=False), 0, out)
    return out


def _per_list(offsets: pa.Array, elem_sizes: np.ndarray, n: int) -> np.ndarray:
    off = offsets.to_numpy(zero_copy_only=False).astype(np.int64)
    csum = np.concatenate([[0], np.cumsum(elem_sizes)])
    start, end = off[:-1], off[1:]
    start = np.clip(start, 0, len(elem_sizes))
    end = np.clip(end, 0, len(elem_sizes))
    return (csum[end] - csum[start]) + 1
