"""Key groups of many keys at once, in NumPy, equal element for element to :mod:`._scalar`.

Java's ``String.hashCode`` of many strings is one polynomial over their UTF-16 code
units, ``H(s) = sum(s[t] * 31**(len(s) - 1 - t))`` whose low 32 bits are the hash, computed
over a flat array of units and the offsets of each string (:func:`polynomial_hashes`), in
three NumPy passes whatever the string lengths, through prefix sums (``B`` odd, hence
invertible mod ``2**64``)::

    G[i] = sum(c[t] * B**-t for t < i)              (one cumulative sum over all units)
    H(units[a:b]) = (G[b] - G[a]) * B**(b - 1)

Strings of one length (ids, zero-padded numbers) are a matrix hashed column by column
(Horner) instead. Python strings are encoded to UTF-16 first (:func:`java_string_hash_codes`);
pure-ASCII Arrow strings are their own code units, read from the Arrow buffers without a copy
(:func:`java_string_hashes`), and from :data:`KERNEL_STRINGS` strings on by the numba kernel
of :mod:`.kernels` (imported then: numba costs ~0.3 s to load).

:func:`key_groups_of` picks the fastest path for any column of keys; :func:`key_groups_for`
also answers for Spark's partitioning (Spark's shuffle partitions stand for key groups there).
"""

from __future__ import annotations

import struct
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa

from ..errors import KeyGroupError, KeyTypeError
from ._scalar import MASK32, UPPER_BOUND_MAX_PARALLELISM, check_parallelism, java_hash_code, murmur_hash
from .spark import partition_ids

#: strings from which :func:`java_string_hashes` uses the numba kernel: below, NumPy's passes
#: cost less than loading numba in a process that has not yet (~0.3 s)
KERNEL_STRINGS = 1 << 20

_CHUNK = 1 << 18
_MAX_WIDTH = 256
_MAX_WIDTHS = 48


def _check_max_parallelism(max_parallelism: int) -> None:
    if not 0 < max_parallelism <= UPPER_BOUND_MAX_PARALLELISM:
        raise KeyGroupError(
            f"max parallelism must be in 1..{UPPER_BOUND_MAX_PARALLELISM}, found {max_parallelism!r}"
        )


def murmur_np(codes: np.ndarray) -> np.ndarray:
    """``murmur_hash`` over an int32/uint32 array (same results as the scalar form)."""
    with np.errstate(over="ignore"):
        k = codes.astype(np.uint32, copy=True)
        k *= np.uint32(0xCC9E2D51)
        k = (k << np.uint32(15)) | (k >> np.uint32(17))
        k *= np.uint32(0x1B873593)
        k = (k << np.uint32(13)) | (k >> np.uint32(19))
        k = k * np.uint32(5) + np.uint32(0xE6546B64)
        k ^= np.uint32(4)
        k ^= k >> np.uint32(16)
        k *= np.uint32(0x85EBCA6B)
        k ^= k >> np.uint32(13)
        k *= np.uint32(0xC2B2AE35)
        k ^= k >> np.uint32(16)
        s = k.view(np.int32).astype(np.int64)
    # Java: negative -> negate; Integer.MIN_VALUE -> 0
    s = np.where(s == -(1 << 31), 0, np.abs(s))
    return s


# --- String.hashCode over code units ---------------------------------------------------------


def _inverse(b: int) -> int:
    return pow(b, -1, 1 << 64)


def _powers(base: int, n: int) -> np.ndarray:
    """``base**t mod 2**64`` for ``t = 0..n-1``."""
    out = np.empty(max(n, 1), dtype=np.uint64)
    out[0] = 1
    if n > 1:
        out[1:] = np.uint64(base)
        np.multiply.accumulate(out, out=out)
    return out[:n]


_POWERS: dict[tuple[int, int], np.ndarray] = {}


def _powers_cached(base: int, size: int) -> np.ndarray:
    key = (base, size)
    if key not in _POWERS:
        if len(_POWERS) > 4:
            _POWERS.clear()
        block = 1 << 12
        small = _powers(base, block)
        big = _powers(pow(base, block, 1 << 64), max(1, -(-size // block)))
        _POWERS[key] = np.multiply.outer(big, small).ravel()[:size]
    return _POWERS[key]


def horner(matrix: np.ndarray, base: int, dtype: type = np.uint64) -> np.ndarray:
    """``sum(row[t] * base**(width - 1 - t))`` of each row of ``matrix``, wrapping in ``dtype``."""
    h = np.zeros(len(matrix), dtype=dtype)
    b = dtype(base)
    for j in range(matrix.shape[1]):
        h *= b
        h += matrix[:, j]
    return h


def _by_length(body: np.ndarray, rel: np.ndarray, lengths: np.ndarray, widths: np.ndarray, base: int,
               out: np.ndarray) -> None:
    present = np.flatnonzero(widths)
    if len(present) == 1:  # one length: the units are the matrix
        width = int(present[0])
        if width:
            out[:] = horner(body.reshape(len(lengths), width), base)
        return
    starts = rel[:-1]
    for width in present:
        if width == 0:
            continue
        idx = np.flatnonzero(lengths == width)
        out[idx] = horner(body[starts[idx, None] + np.arange(width)], base)


def _by_prefix_sums(body: np.ndarray, rel: np.ndarray, base: int) -> np.ndarray:
    m = len(body)
    size = 1 << max(int(m).bit_length(), 12)
    winv, wpow = _powers_cached(_inverse(base), size), _powers_cached(base, size)
    g = np.zeros(m + 1, dtype=np.uint64)
    np.multiply(body, winv[:m], out=g[1:], dtype=np.uint64)
    np.cumsum(g, out=g)
    ends = rel[1:]
    return (g[ends] - g[rel[:-1]]) * wpow[np.maximum(ends - 1, 0)]


def unit_polynomials(offsets: np.ndarray, units: np.ndarray, base: int = 31) -> np.ndarray:
    """``sum(units[t] * base**(len - 1 - t)) mod 2**64`` of every string ``units[offsets[i]:offsets[i + 1]]``.

    ``base`` must be odd. With ``base=31`` over UTF-16 code units the low 32 bits are Java's
    ``String.hashCode``. A chunk of at most ``_CHUNK`` strings at a time: strings of a few
    lengths by Horner over one matrix per length, anything else by prefix sums (module doc).
    """
    if base % 2 == 0:
        raise ValueError(f"the base must be odd (invertible mod 2**64), found {base}")
    n = len(offsets) - 1
    out = np.zeros(max(n, 0), dtype=np.uint64)
    for lo in range(0, n, _CHUNK):
        hi = min(n, lo + _CHUNK)
        off = offsets[lo: hi + 1].astype(np.int64)
        body = units[int(off[0]): int(off[-1])]
        rel = off - off[0]
        lengths = np.diff(rel)
        widths = np.bincount(lengths) if int(lengths.max()) <= _MAX_WIDTH else None
        if widths is not None and np.count_nonzero(widths) > _MAX_WIDTHS:
            widths = None
        if widths is not None:
            _by_length(body, rel, lengths, widths, base, out[lo:hi])
        else:
            out[lo:hi] = _by_prefix_sums(body, rel, base)
    return out


def string_buffers(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets of the array's own strings, the data buffer as uint8) of an Arrow string or
    binary array, without copies."""
    off_type = np.int64 if pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type) else np.int32
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], dtype=off_type)[arr.offset: arr.offset + len(arr) + 1]
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    return offsets, data


def polynomial_hashes(arr: pa.Array | pa.ChunkedArray, base: int) -> np.ndarray:
    """:func:`unit_polynomials` of the bytes of every string of ``arr`` (uint64); nulls hash
    like empty strings (callers check nulls)."""
    if base % 2 == 0:
        raise ValueError(f"the base must be odd (invertible mod 2**64), found {base}")
    if isinstance(arr, pa.ChunkedArray):
        parts = [polynomial_hashes(c, base) for c in arr.chunks]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint64)
    if not len(arr):
        return np.zeros(0, dtype=np.uint64)
    offsets, data = string_buffers(arr)
    return unit_polynomials(offsets, data, base)


def is_ascii(arr: pa.Array | pa.ChunkedArray) -> bool:
    """Whether every byte of the strings of ``arr`` is below 0x80."""
    chunks = arr.chunks if isinstance(arr, pa.ChunkedArray) else [arr]
    for c in chunks:
        if not len(c):
            continue
        offsets, data = string_buffers(c)
        body = data[int(offsets[0]): int(offsets[-1])]
        if body.size and int(body.max()) >= 0x80:
            return False
    return True


def java_string_hashes(arr: pa.Array | pa.ChunkedArray) -> np.ndarray | None:
    """Java ``String.hashCode`` (as uint32) of pure-ASCII Arrow strings, or None if any is not ASCII.

    ``KERNEL_STRINGS`` strings or more: one numba pass (:func:`.kernels.java_hashes`,
    10 M keys in ~0.05 s instead of ~0.45 s); fewer: NumPy (Horner over the buffer as a
    matrix for strings of one length, :func:`unit_polynomials` otherwise).
    """
    if isinstance(arr, pa.Array) and len(arr) >= KERNEL_STRINGS:
        from . import kernels  # numba: loaded only for columns this long

        offsets, data = string_buffers(arr)
        out = np.empty(len(arr), dtype=np.uint32)
        ok = kernels.java_hashes(offsets, data, out)
        if ok < 0:
            raise ValueError(f"a {arr.type} array of {len(arr)} values whose offsets run outside its "
                             f"{len(data)}-byte data buffer (expected rising offsets within it)")
        return out if ok else None
    if not is_ascii(arr):
        return None
    if isinstance(arr, pa.Array) and len(arr):
        offsets, data = string_buffers(arr)
        lengths = np.diff(offsets)
        width = int(lengths[0])
        if (lengths == width).all():  # one length: Horner in uint32 over the buffer as a matrix
            body = data[int(offsets[0]): int(offsets[-1])]
            return horner(body.reshape(len(arr), width), 31, np.uint32) if width else \
                np.zeros(len(arr), dtype=np.uint32)
    return (polynomial_hashes(arr, 31) & np.uint64(MASK32)).astype(np.uint32)


def java_string_hash_codes(strings: list[str]) -> np.ndarray:
    """``String.hashCode()`` of many strings at once (as uint32), equal to :func:`java_hash_code`."""
    n = len(strings)
    if n == 0:
        return np.zeros(0, dtype=np.uint32)
    # one encode of all strings joined: without characters outside the BMP (two UTF-16 units
    # each) every string's UTF-16 length is its length in code points
    joined = "".join(strings).encode("utf-16-le", "surrogatepass")
    lens = np.fromiter(map(len, strings), dtype=np.int64, count=n)
    if int(lens.sum()) * 2 != len(joined):
        encoded = [s.encode("utf-16-le", "surrogatepass") for s in strings]
        lens = np.fromiter(map(len, encoded), dtype=np.int64, count=n) // 2
        joined = b"".join(encoded)
    if int(lens.sum()) == 0:
        return np.zeros(n, dtype=np.uint32)
    offsets = np.concatenate(([0], np.cumsum(lens)))
    units = np.frombuffer(joined, dtype="<u2")
    return (unit_polynomials(offsets, units, 31) & np.uint64(MASK32)).astype(np.uint32)


# --- key groups ---------------------------------------------------------------------------------


def _long_hash_np(values: np.ndarray) -> np.ndarray:
    u = values.astype(np.int64).view(np.uint64)
    return ((u ^ (u >> np.uint64(32))) & np.uint64(MASK32)).astype(np.uint32)


def assign_key_groups(keys: Iterable[Any] | np.ndarray, max_parallelism: int) -> np.ndarray:
    """Key groups of many keys at once, equal element for element to :func:`assign_to_key_group`.

    Integer and float NumPy arrays (and Arrow/pandas columns of them) are hashed with
    NumPy; strings and mixed keys are hashed once per distinct value.
    """
    _check_max_parallelism(max_parallelism)
    arr = _as_array(keys)
    if arr.dtype.kind in "iu" and arr.dtype != np.uint64:
        codes = _long_hash_np(arr)
    elif arr.dtype.kind == "b":
        codes = np.where(arr, 1231, 1237).astype(np.uint32)
    elif arr.dtype.kind == "f":
        f = arr.astype(np.float64)
        bits = f.view(np.int64).copy()
        bits[np.isnan(f)] = 0x7FF8000000000000
        codes = _long_hash_np(bits)
    elif len(arr) and all(type(v) is str for v in arr):
        uniques, inverse = np.unique(arr.astype(object), return_inverse=True)
        codes = java_string_hash_codes(list(uniques))
        return (murmur_np(codes) % max_parallelism)[inverse.reshape(-1)]
    else:
        values = list(arr)
        cache: dict[Any, int] = {}
        out = np.empty(len(values), dtype=np.int64)
        for i, v in enumerate(values):
            # Python equality is looser than Java's: False == 0 == 0.0 == -0.0 and
            # 42 == 42.0 share one dict slot, yet hash differently in Java. So the
            # cache is keyed by the value *and* its Java type (floats by their bits).
            ck = v if type(v) is str else _typed_cache_key(v)
            try:
                kg = cache[ck]
            except KeyError:
                kg = cache[ck] = murmur_hash(java_hash_code(v)) % max_parallelism
            except TypeError:  # unhashable in Python: compute directly
                kg = murmur_hash(java_hash_code(v)) % max_parallelism
            out[i] = kg
        return out
    return murmur_np(codes) % max_parallelism


def _typed_cache_key(v: Any) -> Any:
    """A dict key that is equal only for values Java hashes alike (see ``assign_key_groups``)."""
    t = type(v)
    if t is float or isinstance(v, np.floating):
        return ("f", struct.pack(">d", float(v)) if v == v else b"nan")
    if t is tuple:
        return ("t", tuple(_typed_cache_key(f) for f in v))
    return (t.__name__, v)


def _as_array(keys: Any) -> np.ndarray:
    if isinstance(keys, np.ndarray):
        return keys
    to_numpy = getattr(keys, "to_numpy", None)
    if to_numpy is not None:  # pandas Series / Arrow array
        try:
            arr = to_numpy(zero_copy_only=False)  # pyarrow
        except TypeError:
            arr = to_numpy()
        return np.asarray(arr)
    keys = list(keys)
    if keys and all(type(k) is int for k in keys):
        try:
            return np.asarray(keys, dtype=np.int64)
        except OverflowError as exc:
            raise KeyTypeError("an int key does not fit in a Java long (64 bits)") from exc
    arr = np.empty(len(keys), dtype=object)
    arr[:] = keys
    return arr


def key_groups_for_hash_codes(codes: np.ndarray, max_parallelism: int) -> np.ndarray:
    """Vectorised :func:`compute_key_group_for_key_hash`: key groups of known Java hashCodes.

    For readers that compute ``hashCode`` in bulk straight from serialized keys.
    """
    _check_max_parallelism(max_parallelism)
    codes = np.asarray(codes)
    if codes.dtype.kind == "i":
        codes = codes.astype(np.int64) & MASK32
    return murmur_np(codes.astype(np.uint32)) % max_parallelism


def operator_indices_for_key_groups(max_parallelism: int, parallelism: int, key_groups: np.ndarray) -> np.ndarray:
    """Vectorised :func:`operator_index_for_key_group`."""
    check_parallelism(parallelism, max_parallelism)
    kg = np.asarray(key_groups, dtype=np.int64)
    return kg * parallelism // max_parallelism


def key_groups_of(keys: pd.Series | np.ndarray | pa.Array, max_parallelism: int) -> np.ndarray:
    """Flink key groups of a column of keys (int64), equal to :func:`assign_key_groups`.

    ASCII string keys (the common case) get Java's ``String.hashCode`` computed from the
    Arrow buffers (:func:`java_string_hashes`); everything else goes to
    :func:`assign_key_groups`.
    """
    arr = keys
    if isinstance(arr, pd.Series):
        arr = arr.to_numpy()
    if isinstance(arr, np.ndarray) and arr.dtype == object and len(arr) and all(
        type(x) is str for x in arr[: min(len(arr), 64)]
    ):
        try:
            arr = pa.array(arr, type=pa.string())
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            arr = keys
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if isinstance(arr, pa.Array) and (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)) \
            and arr.null_count == 0:
        codes = java_string_hashes(arr)
        if codes is not None:
            return key_groups_for_hash_codes(codes, max_parallelism).astype(np.int64)
    return np.asarray(assign_key_groups(keys, max_parallelism), dtype=np.int64)


def spark_partitions_of(keys: Any, num_partitions: int) -> np.ndarray:
    """Spark's shuffle partition of each key with ``num_partitions`` partitions (int64).

    A key of several grouping columns is a tuple (or an Arrow struct); its fields are hashed
    column by column, as Spark's ``hash(col1, col2, ...)`` does (:mod:`explorer.keygroups.spark`).
    """
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    if isinstance(keys, pa.Array) and pa.types.is_struct(keys.type):
        columns: list[Any] = [keys.field(i) for i in range(keys.type.num_fields)]
    elif isinstance(keys, pa.Array):
        columns = [keys]
    else:
        seq = list(keys)
        columns = [list(c) for c in zip(*seq)] if seq and all(isinstance(v, tuple) for v in seq) else [seq]
    if not columns or not len(columns[0]):
        return np.zeros(0, dtype=np.int64)
    return partition_ids(columns, num_partitions).astype(np.int64)


#: how keys map to key groups: Flink's key groups, or Spark's shuffle partitions
SCHEMES = ("flink", "spark")


def key_groups_for(keys: Sequence[Any] | pa.Array | np.ndarray, max_parallelism: int,
                   scheme: str = "flink") -> np.ndarray:
    """Key groups (int64) of ``keys`` under ``scheme``: ``"flink"`` (:func:`key_groups_of`) or
    ``"spark"`` (:func:`spark_partitions_of`, ``max_parallelism`` partitions)."""
    if scheme == "spark":
        return spark_partitions_of(keys, max_parallelism)
    return key_groups_of(keys, max_parallelism)
