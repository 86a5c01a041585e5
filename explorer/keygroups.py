"""Key groups, computed exactly as Apache Flink computes them.

Flink never hashes a key straight onto a subtask. It hashes the key into one of
``max_parallelism`` *key groups*, and gives each subtask a contiguous range of
key groups. Rescaling moves whole key groups, never single keys.

The rules (Flink's ``KeyGroupRangeAssignment``), all pure functions here:

* ``key_group = murmur_hash(java_hash_code(key)) % max_parallelism``
* ``subtask   = key_group * parallelism // max_parallelism``
* subtask ``i`` owns key groups ``ceil(i * M / p)`` .. ``((i + 1) * M - 1) // p``
* default ``max_parallelism = min(max(next_pow2(p + p // 2), 128), 32768)``
* ``0 < parallelism <= max_parallelism <= 32768``

``java_hash_code`` reproduces ``Object.hashCode()`` of the Java value a Python
key stands for. Python's own ``hash()`` is never used: it changes per process.

=============  ======================  =========================================
Python key     Java type it stands for  hashCode
=============  ======================  =========================================
``str``        ``java.lang.String``     ``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16
                                        code units, in 32-bit two's complement
``int``        ``java.lang.Long``       ``(int)(v ^ (v >>> 32))``; must fit in 64 bits
``bool``       ``java.lang.Boolean``    1231 for true, 1237 for false
``float``      ``java.lang.Double``     ``doubleToLongBits`` folded like a Long
                                        (NaN canonical; ``-0.0`` differs from ``0.0``)
``tuple``      Flink ``TupleN``         ``h = 31*h + hash(f_i)`` starting from the
                                        first field's hash (``null`` fields hash 0)
``JavaInt(v)`` ``java.lang.Integer``    ``v`` itself, for keys declared as Integer
=============  ======================  =========================================

These were checked against Flink's own ``KeyGroupRangeAssignment`` over
hundreds of keys of every type (``tests/data/flink_keygroup_vectors.json``,
made by ``tests/tooling/flink_keygroups``).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np

from .errors import KeyGroupError, KeyTypeError

__all__ = [
    "DEFAULT_LOWER_BOUND_MAX_PARALLELISM",
    "JavaInt",
    "UPPER_BOUND_MAX_PARALLELISM",
    "KeyGroupRange",
    "assign_key_groups",
    "assign_to_key_group",
    "check_parallelism",
    "compute_default_max_parallelism",
    "java_hash_code",
    "java_string_hash_codes",
    "key_group_range_for_operator",
    "key_groups_for_hash_codes",
    "murmur_hash",
    "operator_index_for_key_group",
    "operator_indices_for_key_groups",
]

DEFAULT_LOWER_BOUND_MAX_PARALLELISM = 1 << 7
UPPER_BOUND_MAX_PARALLELISM = 1 << 15

_MASK32 = 0xFFFFFFFF
_MASK64 = 0xFFFFFFFFFFFFFFFF


@dataclass(frozen=True, slots=True)
class JavaInt:
    """A key that Java sees as ``java.lang.Integer`` (hashCode is the value)."""

    value: int

    def __post_init__(self) -> None:
        if not -(1 << 31) <= self.value < (1 << 31):
            raise KeyTypeError(f"JavaInt({self.value}) does not fit in a 32-bit Java int")


def _to_int32(x: int) -> int:
    x &= _MASK32
    return x - (1 << 32) if x & 0x80000000 else x


def _string_hash(s: str) -> int:
    h = 0
    for ch in s:
        c = ord(ch)
        if c > 0xFFFF:  # a supplementary character is two UTF-16 code units
            c -= 0x10000
            h = (31 * h + (0xD800 + (c >> 10))) & _MASK32
            h = (31 * h + (0xDC00 + (c & 0x3FF))) & _MASK32
        else:
            h = (31 * h + c) & _MASK32
    return _to_int32(h)


def _long_hash(v: int) -> int:
    if not -(1 << 63) <= v < (1 << 63):
        raise KeyTypeError(
            f"int key {v} does not fit in a Java long (64 bits); "
            "State Explorer hashes Python ints as java.lang.Long"
        )
    u = v & _MASK64
    return _to_int32((u ^ (u >> 32)) & _MASK32)


def _double_hash(v: float) -> int:
    if v != v:  # NaN: Java's doubleToLongBits canonicalises it
        bits = 0x7FF8000000000000
    else:
        bits = struct.unpack(">q", struct.pack(">d", v))[0]
    return _long_hash(bits)


def java_hash_code(key: Any) -> int:
    """The Java ``hashCode()`` of the Java value ``key`` stands for (see module doc)."""
    t = type(key)
    if t is str:
        return _string_hash(key)
    if t is bool:
        return 1231 if key else 1237
    if t is int:
        return _long_hash(key)
    if t is float:
        return _double_hash(key)
    if t is tuple:
        if not key:
            raise KeyTypeError("an empty tuple is not a Flink key (Tuple0 has no fields to hash)")
        h = 0
        for i, field in enumerate(key):
            fh = 0 if field is None else java_hash_code(field)
            h = fh if i == 0 else (31 * h + fh) & _MASK32
        return _to_int32(h)
    if t is JavaInt:
        return key.value
    if isinstance(key, (np.integer,)):
        return _long_hash(int(key))
    if isinstance(key, (np.floating,)):
        return _double_hash(float(key))
    if isinstance(key, np.str_):
        return _string_hash(str(key))
    if key is None:
        raise KeyTypeError("a key is None; Flink keys must not be null")
    raise KeyTypeError(
        f"cannot reproduce Java's hashCode for a key of type {t.__name__} ({key!r}); "
        "expected str, int, bool, float, tuple of those, or explicit JavaInt"
    )


def _rotl32(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK32


def murmur_hash(code: int) -> int:
    """Flink's ``MathUtils.murmurHash(int)``: one-round Murmur3, made non-negative."""
    k = code & _MASK32
    k = (k * 0xCC9E2D51) & _MASK32
    k = _rotl32(k, 15)
    k = (k * 0x1B873593) & _MASK32
    k = _rotl32(k, 13)
    k = (k * 5 + 0xE6546B64) & _MASK32
    k ^= 4
    k ^= k >> 16
    k = (k * 0x85EBCA6B) & _MASK32
    k ^= k >> 13
    k = (k * 0xC2B2AE35) & _MASK32
    k ^= k >> 16
    s = _to_int32(k)
    if s >= 0:
        return s
    if s != -(1 << 31):
        return -s
    return 0


def check_parallelism(parallelism: int, max_parallelism: int) -> None:
    """Raise :class:`KeyGroupError` unless ``0 < parallelism <= max_parallelism <= 32768``."""
    if not isinstance(parallelism, (int, np.integer)) or parallelism <= 0:
        raise KeyGroupError(f"parallelism must be a positive integer, found {parallelism!r}")
    if not isinstance(max_parallelism, (int, np.integer)) or not 0 < max_parallelism <= UPPER_BOUND_MAX_PARALLELISM:
        raise KeyGroupError(
            f"max parallelism must be in 1..{UPPER_BOUND_MAX_PARALLELISM}, found {max_parallelism!r}"
        )
    if parallelism > max_parallelism:
        raise KeyGroupError(
            f"parallelism {parallelism} is larger than max parallelism {max_parallelism}; "
            "a subtask must own at least one key group"
        )


def assign_to_key_group(key: Any, max_parallelism: int) -> int:
    """The key group of ``key`` among ``max_parallelism`` key groups."""
    if not 0 < max_parallelism <= UPPER_BOUND_MAX_PARALLELISM:
        raise KeyGroupError(
            f"max parallelism must be in 1..{UPPER_BOUND_MAX_PARALLELISM}, found {max_parallelism!r}"
        )
    return murmur_hash(java_hash_code(key)) % max_parallelism


def compute_key_group_for_key_hash(key_hash: int, max_parallelism: int) -> int:
    """The key group for a key whose Java hashCode is already known."""
    return murmur_hash(key_hash) % max_parallelism


def operator_index_for_key_group(max_parallelism: int, parallelism: int, key_group: int) -> int:
    """The subtask index that owns ``key_group`` at ``parallelism``."""
    check_parallelism(parallelism, max_parallelism)
    if not 0 <= key_group < max_parallelism:
        raise KeyGroupError(f"key group {key_group} is outside 0..{max_parallelism - 1}")
    return key_group * parallelism // max_parallelism


@dataclass(frozen=True, slots=True)
class KeyGroupRange:
    """An inclusive range of key groups ``start..end`` (empty when ``end < start``)."""

    start: int
    end: int

    def __len__(self) -> int:
        return max(0, self.end - self.start + 1)

    def __iter__(self):
        return iter(range(self.start, self.end + 1))

    def __contains__(self, key_group: object) -> bool:
        return isinstance(key_group, (int, np.integer)) and self.start <= key_group <= self.end

    def to_list(self) -> list[int]:
        return [self.start, self.end]


def key_group_range_for_operator(max_parallelism: int, parallelism: int, index: int) -> KeyGroupRange:
    """The key groups that subtask ``index`` owns at ``parallelism``."""
    check_parallelism(parallelism, max_parallelism)
    if not 0 <= index < parallelism:
        raise KeyGroupError(f"subtask index {index} is outside 0..{parallelism - 1}")
    start = (index * max_parallelism + parallelism - 1) // parallelism
    end = ((index + 1) * max_parallelism - 1) // parallelism
    return KeyGroupRange(start, end)


def _round_up_to_power_of_two(x: int) -> int:
    return 1 if x <= 1 else 1 << (x - 1).bit_length()


def compute_default_max_parallelism(parallelism: int) -> int:
    """Flink's default max parallelism for an operator of ``parallelism``."""
    if parallelism <= 0:
        raise KeyGroupError(f"parallelism must be a positive integer, found {parallelism!r}")
    return min(
        max(_round_up_to_power_of_two(parallelism + parallelism // 2), DEFAULT_LOWER_BOUND_MAX_PARALLELISM),
        UPPER_BOUND_MAX_PARALLELISM,
    )


# --- vectorised forms ------------------------------------------------------------------


def _murmur_np(codes: np.ndarray) -> np.ndarray:
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


_POW31: np.ndarray = np.ones(1, dtype=np.uint64)


def _pow31(n: int) -> np.ndarray:
    """31**i mod 2**32 for i in 0..n-1 (grown on demand)."""
    global _POW31
    if len(_POW31) < n:
        size = max(n, 2 * len(_POW31))
        out = np.empty(size, dtype=np.uint64)
        out[0] = 1
        for i in range(1, size):  # a few thousand steps at most, once
            out[i] = (int(out[i - 1]) * 31) & _MASK32
        _POW31 = out
    return _POW31[:n]


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
    total = int(lens.sum())
    if total == 0:
        return np.zeros(n, dtype=np.uint32)
    units = np.frombuffer(joined, dtype="<u2").astype(np.uint64)
    starts = np.concatenate(([0], np.cumsum(lens)[:-1]))
    owner = np.repeat(np.arange(n), lens)
    position = np.arange(total, dtype=np.int64) - starts[owner]
    exponent = lens[owner] - 1 - position
    contrib = (units * _pow31(int(lens.max()))[exponent]) & np.uint64(_MASK32)
    nonempty = lens > 0
    sums = np.zeros(n, dtype=np.uint64)
    sums[nonempty] = np.add.reduceat(contrib, starts[nonempty])
    return (sums & np.uint64(_MASK32)).astype(np.uint32)


def _long_hash_np(values: np.ndarray) -> np.ndarray:
    u = values.astype(np.int64).view(np.uint64)
    return ((u ^ (u >> np.uint64(32))) & np.uint64(_MASK32)).astype(np.uint32)


def assign_key_groups(keys: Iterable[Any] | np.ndarray, max_parallelism: int) -> np.ndarray:
    """Key groups of many keys at once, equal element for element to :func:`assign_to_key_group`.

    Integer and float NumPy arrays (and Arrow/pandas columns of them) are hashed with
    NumPy; strings and mixed keys are hashed once per distinct value.
    """
    if not 0 < max_parallelism <= UPPER_BOUND_MAX_PARALLELISM:
        raise KeyGroupError(
            f"max parallelism must be in 1..{UPPER_BOUND_MAX_PARALLELISM}, found {max_parallelism!r}"
        )
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
        return (_murmur_np(codes) % max_parallelism)[inverse.reshape(-1)]
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
    return _murmur_np(codes) % max_parallelism


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
    if not 0 < max_parallelism <= UPPER_BOUND_MAX_PARALLELISM:
        raise KeyGroupError(
            f"max parallelism must be in 1..{UPPER_BOUND_MAX_PARALLELISM}, found {max_parallelism!r}"
        )
    codes = np.asarray(codes)
    if codes.dtype.kind == "i":
        codes = codes.astype(np.int64) & _MASK32
    return _murmur_np(codes.astype(np.uint32)) % max_parallelism


def operator_indices_for_key_groups(max_parallelism: int, parallelism: int, key_groups: np.ndarray) -> np.ndarray:
    """Vectorised :func:`operator_index_for_key_group`."""
    check_parallelism(parallelism, max_parallelism)
    kg = np.asarray(key_groups, dtype=np.int64)
    return kg * parallelism // max_parallelism
