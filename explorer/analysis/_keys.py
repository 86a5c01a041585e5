"""Keys as integer codes: what lets analyses of 10 M rows count keys with ``np.bincount``.

The analysis frame (:mod:`._columns`) holds each key as a code into a :class:`KeyValues`
(Arrow dictionaries of the keys, one per key type); a user's DataFrame gets the same
interface through :func:`key_codes`, which factorizes its keys with pandas
(:func:`factorize_keys`). Only the codes an answer reports become Python objects again
(:meth:`KeyValues.take`); key groups and 64-bit hashes are computed once per key, not per row.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..keygroups import key_groups_for
from ._hashing import splitmix64, string_hash64


class Deferred:
    """A segment of ``n`` keys built by ``build()`` when first used: a range whose question never looks at a
    key (a key-group distribution) does not gather its dictionary.

    With ``source`` (an Arrow array) and ``rows`` (rising positions in it), the segment is
    ``source.take(rows)``: a few keys are then taken and looked up in ``source`` itself
    (:meth:`KeyValues.take`, :meth:`KeyValues.codes_of`), so that a question looking at a few keys
    (a range's top keys, its sketch's keys) does not gather millions."""

    __slots__ = ("n", "build", "source", "rows")

    def __init__(self, n: int, build: Any, source: Any = None, rows: np.ndarray | None = None) -> None:
        self.n, self.build = int(n), build
        self.source, self.rows = source, rows

    def __len__(self) -> int:
        return self.n


class KeyValues:
    """Codes 0..n-1 and the keys they stand for (Arrow arrays, or a NumPy object array; a :class:`Deferred`
    one is built on first use)."""

    def __init__(self, segments: Sequence[Any]) -> None:
        self._segments = list(segments)
        self.offsets = np.cumsum([0] + [len(s) for s in self._segments])
        self._key_groups: dict[Any, Any] = {}
        self._codes: dict[tuple, np.ndarray] = {}
        #: key joins with other snapshots' keys (:func:`explorer.analysis.diff.diff`), by their id
        self.joins: dict[int, tuple[Any, Any]] = {}

    @property
    def segments(self) -> list[Any]:
        if any(isinstance(seg, Deferred) for seg in self._segments):
            built = []
            for i, seg in enumerate(self._segments):
                if isinstance(seg, Deferred):
                    want = len(seg)
                    seg = seg.build()
                    if len(seg) != want:  # pragma: no cover - a kernel that numbered keys wrongly
                        raise RuntimeError(f"key segment {i} built {len(seg)} keys, expected {want}")
                built.append(seg)
            self._segments = built
        return self._segments

    @classmethod
    def from_objects(cls, uniques: np.ndarray) -> "KeyValues":
        return cls([np.asarray(uniques, dtype=object)])

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def __deepcopy__(self, memo: dict) -> "KeyValues":
        # immutable; pandas deep-copies DataFrame.attrs into every derived frame
        return self

    def __copy__(self) -> "KeyValues":
        return self

    def _in_source(self, i: int) -> Any:
        """Segment ``i`` when it is a :class:`Deferred` not built yet that can be read in its source, else None."""
        seg = self._segments[i]
        return seg if isinstance(seg, Deferred) and seg.source is not None and seg.rows is not None else None

    def take(self, codes: np.ndarray | Sequence[int]) -> np.ndarray:
        """The keys of ``codes`` as Python objects (only these are materialised)."""
        codes = np.asarray(codes, dtype=np.int64)
        if len(self._segments) == 1 and (d := self._in_source(0)) is not None and pa.types.is_string(d.source.type):
            if len(codes) and (codes.min() < 0 or codes.max() >= d.n):
                raise IndexError(f"key codes outside 0..{d.n - 1}")
            return d.source.take(pa.array(d.rows[codes])).to_numpy(zero_copy_only=False)
        if len(self.segments) == 1 and not isinstance(self.segments[0], np.ndarray) and \
                pa.types.is_string(self.segments[0].type):  # one Arrow segment of strings: no masks, no copies
            return self.segments[0].take(pa.array(codes)).to_numpy(zero_copy_only=False)
        out = np.empty(len(codes), dtype=object)
        for off, seg in zip(self.offsets[:-1], self.segments):
            sel = (codes >= off) & (codes < off + len(seg))
            if not sel.any():
                continue
            idx = codes[sel] - off
            if isinstance(seg, np.ndarray):
                vals = seg[idx]
            elif pa.types.is_string(seg.type) or pa.types.is_large_string(seg.type):
                vals = seg.take(pa.array(idx)).to_numpy(zero_copy_only=False)  # str objects, built in C++
            else:
                vals = seg.take(pa.array(idx)).to_pylist()
            sub = np.empty(len(vals), dtype=object)
            sub[:] = vals
            out[sel] = sub
        return out

    def codes_of(self, keys: Iterable[Any]) -> np.ndarray:
        """Codes of ``keys`` (-1 for keys not present); remembered for the last few key lists."""
        keys = list(keys)
        memo_key = tuple(_typed(k) for k in keys)
        if memo_key not in self._codes:
            if len(self._codes) >= 16:
                self._codes.clear()
            self._codes[memo_key] = self._codes_of(keys)
        return self._codes[memo_key].copy()

    def _codes_of(self, keys: list[Any]) -> np.ndarray:
        out = np.full(len(keys), -1, dtype=np.int64)
        if len(self._segments) == 1 and (d := self._in_source(0)) is not None:
            hashes = self._key_groups.get("hash64")
            if hashes is not None and _codes_by_hash(d, hashes, keys, out) or _codes_in_source(d, keys, out):
                return out
        for off, seg in zip(self.offsets[:-1], self.segments):
            if isinstance(seg, np.ndarray):
                if _codes_of_strings(seg, keys, off, out):
                    continue
                where = {}
                for i, v in enumerate(seg):
                    where.setdefault(_typed(v), i)
                for j, k in enumerate(keys):
                    i = where.get(_typed(k))
                    if i is not None and out[j] < 0:
                        out[j] = off + i
                continue
            todo = [j for j in range(len(keys)) if out[j] < 0]
            try:
                probe = pa.array([keys[j] for j in todo], type=seg.type)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
                probe = None
            if probe is not None:  # hash the few keys asked, scan the dictionary once
                where = pc.index_in(seg, value_set=probe)
                hit = np.flatnonzero(where.is_valid().to_numpy(zero_copy_only=False))
                for code, j in zip(hit, where.filter(where.is_valid()).to_numpy(zero_copy_only=False)):
                    out[todo[int(j)]] = off + int(code)
                continue
            for j in todo:  # keys of mixed types: one at a time
                try:
                    f = pc.index(seg, pa.scalar(keys[j], type=seg.type)).as_py()
                except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, OverflowError):
                    continue
                if f >= 0:
                    out[j] = off + f
        return out

    def hash64(self) -> np.ndarray | None:
        """A 64-bit hash of every code's key (kept), or None when the keys are not one Arrow
        array of strings, binaries or integers. Equal keys hash equal; a diff checks the
        keys of equal hashes before it matches them (:func:`explorer.analysis.diff.diff`)."""
        if "hash64" not in self._key_groups:
            self._key_groups["hash64"] = _key_hash64(self.segments)
        return self._key_groups["hash64"]

    def keep_hash64(self, hashes: np.ndarray) -> None:
        """Keep ``hashes`` as :meth:`hash64` (they must be what it computes: the key numbering's, per code)."""
        if len(hashes) != len(self):
            raise ValueError(f"{len(hashes)} key hashes for {len(self)} keys")
        self._key_groups["hash64"] = hashes

    def forget(self) -> None:
        """Forget the key groups, hashes, code look-ups and joins computed so far."""
        self._key_groups.clear()
        self._codes.clear()
        self.joins.clear()

    def has_hash64(self) -> bool:
        """Whether :meth:`hash64` is computed already."""
        return "hash64" in self._key_groups

    def key_groups(self, max_parallelism: int, scheme: str = "flink") -> np.ndarray:
        """The key group of every code's key at ``max_parallelism`` (hashed once per key and M).

        ``scheme="flink"``: Flink's key group (murmur of the Java hashCode, mod M);
        ``"spark"``: Spark's shuffle partition with M partitions (:func:`explorer.keygroups.spark_partitions_of`).
        """
        k = (max_parallelism, scheme)
        if k not in self._key_groups:  # keys do not change: hash them once per M
            parts = [key_groups_for(seg, max_parallelism, scheme) for seg in self.segments]
            self._key_groups[k] = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        return self._key_groups[k]


def _codes_in_source(d: Deferred, keys: list[Any], out: np.ndarray) -> bool:
    """:meth:`KeyValues._codes_of` of the one segment ``d`` (``d.source.take(d.rows)``, not built) found in
    ``d.source``: the rows equal to a key, of which the key's first row (one of ``d.rows``) is its code, as
    the key's position in the gathered dictionary would be. False (nothing done) when the keys do not
    convert to the source's type."""
    try:
        probe = pa.array(keys, type=d.source.type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        return False
    where = pc.index_in(d.source, value_set=probe)
    valid = where.is_valid().to_numpy(zero_copy_only=False)
    hit = np.flatnonzero(valid)
    which = where.filter(where.is_valid()).to_numpy(zero_copy_only=False)
    pos = np.searchsorted(d.rows, hit)
    first = pos < len(d.rows)
    first[first] = d.rows[pos[first]] == hit[first]  # a key's first row: the row its code was given at
    for code, j in zip(pos[first], which[first]):
        out[int(j)] = int(code)
    return True


#: :func:`_codes_by_hash` asks for at most this many keys (a sketch's keys); more go through Arrow's look-up
_BY_HASH_KEYS = 4096


def _codes_by_hash(d: Deferred, hashes: np.ndarray, keys: list[Any], out: np.ndarray) -> bool:
    """:func:`_codes_in_source` of a few keys from the keys' 64-bit hashes the numbering kept (``hashes``, one per
    code, :func:`._hashing.string_hash64`'s): the codes whose hash is one of the keys' (a 16-bit filter, then the
    hashes), each confirmed by its key's value, so a collision costs a comparison, never a wrong code; a key
    asked twice is found the first time, as :func:`_codes_in_source` finds it. False
    (nothing done) where the keys do not convert to the source's type, are many, or hold a null."""
    t = d.source.type
    if not (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t)) or len(keys) > _BY_HASH_KEYS or len(hashes) != d.n:
        return False
    try:
        probe = pa.array(keys, type=t)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        return False
    if probe.null_count:
        return False
    ph = string_hash64(probe)
    seen = np.zeros(1 << 16, dtype=bool)
    seen[(ph & np.uint64(0xFFFF)).astype(np.intp)] = True
    cand = np.flatnonzero(seen[(hashes & np.uint64(0xFFFF)).astype(np.intp)])
    cand = cand[np.isin(hashes[cand], ph)]
    code_of = {}
    for c, v in zip(cand.tolist(), d.source.take(pa.array(d.rows[cand])).to_pylist()):
        code_of.setdefault(v, c)
    asked = set()
    for j, v in enumerate(probe.to_pylist()):  # a key asked twice: found the first time (as Arrow's index_in)
        if v not in asked:
            asked.add(v)
            out[j] = code_of.get(v, -1)
    return True


def _key_hash64(segments: list[Any]) -> np.ndarray | None:
    if len(segments) != 1 or isinstance(segments[0], np.ndarray):
        return None
    seg = segments[0]
    t = seg.type
    if seg.null_count:
        return None
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return string_hash64(seg)
    if pa.types.is_integer(t):
        return splitmix64(seg.cast(pa.int64()).to_numpy(zero_copy_only=False).view(np.uint64))
    return None


def _codes_of_strings(seg: np.ndarray, keys: list[Any], off: int, out: np.ndarray) -> bool:
    """:meth:`KeyValues._codes_of` for ``str`` keys in an object array: pandas' ``isin`` (hashed in C, a
    ``str`` keeps its hash) finds the few values equal to a key, and only those go through the per-key
    rule (same type, the first of equal ones). False (nothing done) when a key is not a ``str`` or a
    value cannot be hashed."""
    if not keys or any(type(k) is not str for k in keys):
        return False
    try:
        hits = np.flatnonzero(pd.Series(seg, dtype=object, copy=False).isin(np.asarray(keys, dtype=object)).to_numpy())
    except TypeError:  # e.g. lists among the values
        return False
    where: dict[Any, int] = {}
    for i in hits:
        where.setdefault(_typed(seg[i]), int(i))
    for j, k in enumerate(keys):
        i = where.get(_typed(k))
        if i is not None and out[j] < 0:
            out[j] = off + i
    return True


def _typed(v: Any) -> Any:
    try:
        hash(v)
    except TypeError:
        return ("repr", repr(v))
    return (type(v).__name__, v)


def key_codes(df: pd.DataFrame) -> tuple[np.ndarray, KeyValues]:
    """Integer codes of ``df["key"]`` and the keys they stand for."""
    kv = df.attrs.get("key_values")
    if isinstance(kv, KeyValues):
        return df["key"].to_numpy(dtype=np.int64), kv
    codes, uniques = factorize_keys(df["key"])
    return codes, KeyValues.from_objects(uniques)



def with_key_codes(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` (a shallow copy) with its keys hashed once: ``key`` as integer codes and the keys they stand
    for in ``attrs["key_values"]``, as the analysis frame of a Snapshot holds them. Every analysis of the
    copy answers as of ``df`` itself without factorizing a million keys again (:func:`key_codes`)."""
    if isinstance(df.attrs.get("key_values"), KeyValues):
        return df
    codes, kv = key_codes(df)
    out = df.copy(deep=False)
    out["key"] = codes
    out.attrs["key_values"] = kv
    return out


def first_occurrences(codes: np.ndarray) -> np.ndarray:
    """Row of the first occurrence of each code, for codes numbered in order of first appearance
    (as :func:`pandas.factorize` numbers them)."""
    if not len(codes):
        return np.zeros(0, dtype=np.int64)
    prev_max = np.maximum.accumulate(np.concatenate([[-1], codes[:-1]]))
    return np.flatnonzero(codes > prev_max)


def factorize_keys(keys: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes for keys (tuples and other unhashable-by-pandas keys go through ``repr``)."""
    try:
        # a null key (impossible in Flink, but what damaged bytes can decode to) gets a code of its
        # own rather than -1, which no per-key count or look-up could index
        codes, uniques = pd.factorize(keys, sort=False, use_na_sentinel=False)
        return codes.astype(np.int64), np.asarray(uniques, dtype=object)
    except TypeError:  # e.g. lists / dicts as keys: group by their repr, keep the first of each
        codes, _ = pd.factorize(keys.map(repr), sort=False)
        return codes.astype(np.int64), keys.to_numpy()[first_occurrences(codes)]
