"""Which Spark partition a key lands in, recomputed without Spark.

A stateful streaming operator (``groupBy().agg()``, ``transformWithState``,
``dropDuplicates`` ...) shuffles its input by ``HashPartitioning`` on the
grouping columns, so the partition of a key, and with it the state store
partition that holds its state, is::

    partition = pmod(hash(col1, col2, ...), spark.sql.shuffle.partitions)

where ``hash`` is Spark SQL's ``hash()`` function: Murmur3 x86 32-bit with
seed 42, applied **column by column**, each column's hash being the seed of
the next (not a hash over the row's bytes). A null column leaves the running
hash unchanged. Per Spark SQL type:

=======================  ==============================================
Spark type               what is hashed
=======================  ==============================================
boolean                  ``hashInt(1 or 0)``
byte, short, int, date   ``hashInt(value)`` (date: days since epoch)
long, timestamp          ``hashLong(value)`` (timestamp: microseconds)
float                    ``hashInt(floatToIntBits(v))``, -0.0 as 0.0
double                   ``hashLong(doubleToLongBits(v))``, -0.0 as 0.0
string                   Spark's ``hashUnsafeBytes`` over the UTF-8 bytes
binary                   the same over the raw bytes
decimal(p, s), p <= 18   ``hashLong`` of the unscaled value (a long)
decimal(p, s), p > 18    ``hashUnsafeBytes`` of the unscaled value's
                         two's-complement big-endian bytes, shortest
                         form (Java's ``BigInteger.toByteArray``)
=======================  ==============================================

``hashUnsafeBytes`` is not textbook Murmur3: after the 4-byte words it mixes
each remaining byte (sign-extended) as a whole block. The number of shuffle
partitions is frozen into a checkpoint at its first batch (the explorer reads
it from the checkpoint's offset log), so a what-if "rescale" of Spark state
means a new checkpoint, and the partition function here says where each key
would go.

Everything is vectorised over NumPy/Arrow arrays.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa

from ..errors import KeyTypeError

__all__ = ["SEED", "partition_ids", "spark_hash", "spark_hash_value", "spark_partition"]

SEED = 42

_C1 = np.uint32(0xCC9E2D51)
_C2 = np.uint32(0x1B873593)
_M5 = np.uint32(5)
_N1 = np.uint32(0xE6546B64)
_F1 = np.uint32(0x85EBCA6B)
_F2 = np.uint32(0xC2B2AE35)

#: Spark SQL type names accepted in ``types=`` and the Arrow type each is cast to.
SPARK_TYPES: dict[str, pa.DataType] = {
    "boolean": pa.bool_(),
    "byte": pa.int8(),
    "tinyint": pa.int8(),
    "short": pa.int16(),
    "smallint": pa.int16(),
    "int": pa.int32(),
    "integer": pa.int32(),
    "long": pa.int64(),
    "bigint": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "binary": pa.binary(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
}


_DECIMAL = re.compile(r"^decimal\((\d+),\s*(-?\d+)\)$")
#: the most digits a decimal keeps as a long (Spark's ``Decimal.MAX_LONG_DIGITS``)
MAX_LONG_DIGITS = 18


def _decimal_type(spark_type: str) -> pa.DataType | None:
    """The Arrow type of a Spark ``decimal(p,s)`` type name, None for other names."""
    m = _DECIMAL.match(spark_type.strip().lower())
    if m is None:
        return None
    p, s = int(m.group(1)), int(m.group(2))
    if not 0 < p <= 38:
        raise KeyTypeError(f"Spark decimal precision must be 1 to 38, found {spark_type!r}")
    return pa.decimal128(p, s)


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def _mix_k1(k1: np.ndarray) -> np.ndarray:
    k1 = k1 * _C1
    k1 = _rotl(k1, 15)
    return k1 * _C2


def _mix_h1(h1: np.ndarray, k1: np.ndarray) -> np.ndarray:
    h1 = h1 ^ k1
    h1 = _rotl(h1, 13)
    return h1 * _M5 + _N1


def _fmix(h1: np.ndarray, length: np.ndarray | int) -> np.ndarray:
    h1 = h1 ^ np.asarray(length, dtype=np.uint32)
    h1 = h1 ^ (h1 >> np.uint32(16))
    h1 = h1 * _F1
    h1 = h1 ^ (h1 >> np.uint32(13))
    h1 = h1 * _F2
    return h1 ^ (h1 >> np.uint32(16))


def _hash_int(values: np.ndarray, seed: np.ndarray) -> np.ndarray:
    """Murmur3 hashInt of 32-bit values (any int dtype, taken modulo 2**32)."""
    k = values.astype(np.int64).astype(np.uint32)
    return _fmix(_mix_h1(seed, _mix_k1(k)), 4)


def _hash_long(values: np.ndarray, seed: np.ndarray) -> np.ndarray:
    v = values.astype(np.int64).view(np.uint64)
    low = (v & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    high = (v >> np.uint64(32)).astype(np.uint32)
    h1 = _mix_h1(seed, _mix_k1(low))
    h1 = _mix_h1(h1, _mix_k1(high))
    return _fmix(h1, 8)


def _hash_bytes(arr: pa.Array, seed: np.ndarray) -> np.ndarray:
    """Spark's hashUnsafeBytes over each element of a (large_)binary/string array (nulls untouched)."""
    arr = arr.cast(pa.large_binary()) if not pa.types.is_large_binary(arr.type) else arr
    n = len(arr)
    if n == 0:
        return seed.copy()
    if arr.offset:
        arr = pa.concat_arrays([arr])  # normalise the offset
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], dtype=np.int64, count=n + 1).copy()
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    starts = offsets[:-1]
    lengths = offsets[1:] - starts
    # pad the data so that reading 4 bytes past any start is safe
    data = np.concatenate([data, np.zeros(4, np.uint8)])
    h1 = seed.copy()
    words = lengths // 4
    max_words = int(words.max()) if n else 0
    for j in range(max_words):
        m = words > j
        pos = starts[m] + 4 * j
        w = (
            data[pos].astype(np.uint32)
            | (data[pos + 1].astype(np.uint32) << np.uint32(8))
            | (data[pos + 2].astype(np.uint32) << np.uint32(16))
            | (data[pos + 3].astype(np.uint32) << np.uint32(24))
        )
        h1[m] = _mix_h1(h1[m], _mix_k1(w))
    tails = lengths - 4 * words
    for t in range(3):
        m = tails > t
        if not m.any():
            break
        pos = starts[m] + 4 * words[m] + t
        b = data[pos].astype(np.int8).astype(np.int32).astype(np.uint32)  # sign-extended byte
        h1[m] = _mix_h1(h1[m], _mix_k1(b))
    return _fmix(h1, lengths.astype(np.uint32))


def _to_arrow(column: Any, spark_type: str | None) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if not isinstance(column, pa.Array):
        try:
            if isinstance(column, (pd.Series, pd.Index)):
                column = pa.Array.from_pandas(column)  # pandas' NaN means missing: a null
            else:
                column = pa.array(column)  # a Python float('nan') stays NaN, as in Spark
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise KeyTypeError(f"cannot hash a key column like {column!r:.80}: {exc}") from exc
    if spark_type is not None:
        t = SPARK_TYPES.get(spark_type.lower()) or _decimal_type(spark_type)
        if t is None:
            raise KeyTypeError(f"unknown Spark type {spark_type!r}; expected one of {sorted(SPARK_TYPES)}")
        if column.type != t:
            # int -> float loses precision exactly as Spark's CAST does; allow it
            column = column.cast(t, safe=not pa.types.is_floating(t))
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    return column


def _unscaled(arr: pa.Array) -> list[int]:
    """The unscaled integer of each decimal (nulls as 0): the value times ten to its scale."""
    scale = arr.type.scale
    out = []
    for d in arr.to_pylist():
        if d is None:
            out.append(0)
            continue
        sign, digits, exp = d.as_tuple()  # exact, whatever the decimal context's precision
        n = int("".join(map(str, digits)) or "0")
        shift = exp + scale
        n = n * 10**shift if shift >= 0 else n // 10**-shift
        out.append(-n if sign else n)
    return out


def _java_bytes(n: int) -> bytes:
    """``BigInteger.toByteArray``: two's complement, big-endian, the fewest bytes that keep the sign."""
    bits = n.bit_length() if n >= 0 else (~n).bit_length()
    return n.to_bytes(bits // 8 + 1, "big", signed=True)


def _hash_decimal(arr: pa.Array, seed: np.ndarray) -> np.ndarray:
    """Spark's hash of a decimal column: its unscaled long for precision <= 18, else the unscaled value's bytes."""
    unscaled = _unscaled(arr)
    if arr.type.precision <= MAX_LONG_DIGITS:
        return _hash_long(np.array(unscaled, dtype=np.int64), seed)
    return _hash_bytes(pa.array([_java_bytes(n) for n in unscaled], pa.binary()), seed)


def _hash_column(arr: pa.Array, seed: np.ndarray) -> np.ndarray:
    t = arr.type
    valid = None if arr.null_count == 0 else np.asarray(arr.is_valid())
    if pa.types.is_null(t):
        return seed
    if pa.types.is_boolean(t):
        h = _hash_int(np.asarray(arr.fill_null(False), dtype=np.int32), seed)
    elif pa.types.is_integer(t):
        vals = np.asarray(arr.fill_null(0))
        if t.bit_width <= 32 and not (t == pa.uint32()):
            h = _hash_int(vals, seed)
        else:
            h = _hash_long(vals.astype(np.int64), seed)
    elif pa.types.is_float32(t):
        v = np.asarray(arr.fill_null(0.0), dtype=np.float32).copy()
        v[v == 0] = np.float32(0.0)  # -0.0 hashes like 0.0
        bits = v.view(np.int32).copy()
        bits[np.isnan(v)] = 0x7FC00000  # Java's floatToIntBits canonical NaN
        h = _hash_int(bits, seed)
    elif pa.types.is_float64(t):
        v = np.asarray(arr.fill_null(0.0), dtype=np.float64).copy()
        v[v == 0] = 0.0
        bits = v.view(np.int64).copy()
        bits[np.isnan(v)] = 0x7FF8000000000000  # Java's doubleToLongBits canonical NaN
        h = _hash_long(bits, seed)
    elif pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
        h = _hash_bytes(arr, seed)
    elif pa.types.is_date32(t):
        h = _hash_int(np.asarray(arr.cast(pa.int32()).fill_null(0)), seed)
    elif pa.types.is_timestamp(t):
        us = arr.cast(pa.timestamp("us", tz=t.tz)).cast(pa.int64()).fill_null(0)
        h = _hash_long(np.asarray(us), seed)
    elif pa.types.is_decimal(t):
        h = _hash_decimal(arr, seed)
    else:
        raise KeyTypeError(
            f"cannot recompute Spark's hash of a key column of Arrow type {t}; supported: boolean, integers, "
            "float, double, string, binary, date, timestamp, decimal"
        )
    if valid is not None:
        h = np.where(valid, h, seed)
    return h


def spark_hash(columns: Sequence[Any], types: Sequence[str | None] | None = None, seed: int = SEED) -> np.ndarray:
    """Spark SQL ``hash(col1, col2, ...)`` of each row, as int32.

    ``columns`` are equally long arrays (lists, NumPy, pandas or Arrow), one per
    grouping column. ``types`` optionally names each column's Spark type
    (``"int"``, ``"long"``, ``"string"`` ...); by default the Arrow type decides
    (Python ints are ``long``, as Spark infers them).
    """
    if not columns:
        raise KeyTypeError("spark_hash needs at least one column")
    types = list(types) if types is not None else [None] * len(columns)
    if len(types) != len(columns):
        raise KeyTypeError(f"{len(columns)} key columns but {len(types)} types")
    arrays = [_to_arrow(c, t) for c, t in zip(columns, types)]
    n = len(arrays[0])
    if any(len(a) != n for a in arrays):
        raise KeyTypeError(f"key columns differ in length: {[len(a) for a in arrays]}")
    h = np.full(n, seed & 0xFFFFFFFF, dtype=np.uint32)
    for a in arrays:
        h = _hash_column(a, h)
    return h.view(np.int32)


def spark_partition(hashes: np.ndarray, num_partitions: int) -> np.ndarray:
    """``pmod(hash, num_partitions)``: the non-negative remainder, as int32."""
    if num_partitions <= 0:
        raise KeyTypeError(f"the number of partitions must be positive, found {num_partitions}")
    return np.mod(hashes.astype(np.int64), num_partitions).astype(np.int32)


def partition_ids(columns: Sequence[Any], num_partitions: int, types: Sequence[str | None] | None = None) -> np.ndarray:
    """The shuffle (and state store) partition of each key: ``pmod(hash(cols...), n)``."""
    return spark_partition(spark_hash(columns, types), num_partitions)


def spark_hash_value(*values: Any, types: Sequence[str | None] | None = None, seed: int = SEED) -> int:
    """Spark's ``hash(v1, v2, ...)`` of one row of Python values."""
    return int(spark_hash([[v] for v in values], types, seed)[0])

