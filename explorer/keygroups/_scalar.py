"""Key groups of one key at a time: Java's hashCode, Flink's murmur, the subtask ranges (pure Python).

The rules are in the package doc (:mod:`explorer.keygroups`); :mod:`._vectorised` computes
the same over arrays, and :mod:`.kernels` holds the numba form of ``String.hashCode``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import KeyGroupError, KeyTypeError

DEFAULT_LOWER_BOUND_MAX_PARALLELISM = 1 << 7
UPPER_BOUND_MAX_PARALLELISM = 1 << 15

MASK32 = 0xFFFFFFFF
_MASK64 = 0xFFFFFFFFFFFFFFFF


@dataclass(frozen=True, slots=True)
class JavaInt:
    """A key that Java sees as ``java.lang.Integer`` (hashCode is the value)."""

    value: int

    def __post_init__(self) -> None:
        if not -(1 << 31) <= self.value < (1 << 31):
            raise KeyTypeError(f"JavaInt({self.value}) does not fit in a 32-bit Java int")


def to_int32(x: int) -> int:
    x &= MASK32
    return x - (1 << 32) if x & 0x80000000 else x


def _string_hash(s: str) -> int:
    h = 0
    for ch in s:
        c = ord(ch)
        if c > 0xFFFF:  # a supplementary character is two UTF-16 code units
            c -= 0x10000
            h = (31 * h + (0xD800 + (c >> 10))) & MASK32
            h = (31 * h + (0xDC00 + (c & 0x3FF))) & MASK32
        else:
            h = (31 * h + c) & MASK32
    return to_int32(h)


def _long_hash(v: int) -> int:
    if not -(1 << 63) <= v < (1 << 63):
        raise KeyTypeError(
            f"int key {v} does not fit in a Java long (64 bits); "
            "State Explorer hashes Python ints as java.lang.Long"
        )
    u = v & _MASK64
    return to_int32((u ^ (u >> 32)) & MASK32)


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
            h = fh if i == 0 else (31 * h + fh) & MASK32
        return to_int32(h)
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
    return ((x << r) | (x >> (32 - r))) & MASK32


def murmur_hash(code: int) -> int:
    """Flink's ``MathUtils.murmurHash(int)``: one-round Murmur3, made non-negative."""
    k = code & MASK32
    k = (k * 0xCC9E2D51) & MASK32
    k = _rotl32(k, 15)
    k = (k * 0x1B873593) & MASK32
    k = _rotl32(k, 13)
    k = (k * 5 + 0xE6546B64) & MASK32
    k ^= 4
    k ^= k >> 16
    k = (k * 0x85EBCA6B) & MASK32
    k ^= k >> 13
    k = (k * 0xC2B2AE35) & MASK32
    k ^= k >> 16
    s = to_int32(k)
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


