"""Routing records between subtasks: key selectors, key-group assignment, partitioners.

A hash edge (``key_by``) sends each record to the subtask that owns its key
group, exactly as Flink's KeyGroupStreamPartitioner does. The key and key
group computed for routing travel with the batch, so the keyed operator does
not compute them again.
"""

from __future__ import annotations

import operator
from itertools import repeat
from typing import Any, Callable

import numpy as np
import pandas as pd

from ..errors import JobError, KeyTypeError
from ..keygroups import (
    assign_key_groups,
    java_hash_code,
    java_string_hash_codes,
    key_groups_for_hash_codes,
    murmur_hash,
)
from .channels import Batch, Channel, ColumnBatch, DictColumn, DictUniques, KeyDictionary


def factorize_keys(keys: list[Any]) -> tuple[np.ndarray, list[Any]]:
    """``(codes, uniques)``: the distinct keys in order of first appearance, and each key's position among them.

    Keys compare as Python compares them (as the dicts of the heap backend do).
    ``None`` and NaN are not keys (Flink rejects null keys).
    """
    n = len(keys)
    arr = np.fromiter(keys, dtype=object, count=n)  # each key whole (tuples too), no shape discovered
    try:
        codes, uniques = pd.factorize(arr)
    except TypeError as exc:
        raise KeyTypeError(f"a key in {keys[:3]!r}... is not hashable") from exc
    if n and codes.min() < 0:
        bad = keys[int(np.flatnonzero(codes < 0)[0])]
        raise KeyTypeError(f"key {bad!r} is not usable as a key (null keys are not allowed); expected a value")
    return codes, uniques.tolist()


def factorize_column(column: Any) -> tuple[np.ndarray, list[Any]]:
    """:func:`factorize_keys` for a column (NumPy array, Arrow array, dictionary column or list),
    without per-record objects."""
    if isinstance(column, DictColumn):
        codes, ucodes = pd.factorize(column.indices)
        return codes, _pick(column.dictionary.values, ucodes)
    if isinstance(column, np.ndarray):
        if column.dtype.kind == "f" and np.isnan(column).any():
            raise KeyTypeError("a key column holds NaN; NaN is not a usable key")
        codes, uniques = pd.factorize(column)
        return codes, uniques.tolist()
    if hasattr(column, "dictionary_encode"):  # an Arrow array
        if column.null_count:
            raise KeyTypeError(f"the key column holds {column.null_count} nulls; a key must not be null")
        enc = column.dictionary_encode()
        return enc.indices.to_numpy(zero_copy_only=False).astype(np.intp, copy=False), enc.dictionary.to_pylist()
    return factorize_keys(list(column))


def _copy_str(s: str) -> str:
    """An equal ``str`` made now (``s`` itself is what slicing or ``str()`` would return)."""
    return s.encode("utf-8", "surrogatepass").decode("utf-8", "surrogatepass")


def _pick(values: Any, idx: np.ndarray) -> Any:
    if isinstance(values, DictUniques):
        return DictUniques(values.dictionary, values.codes[idx])
    il = idx.tolist()
    if len(il) == 1:
        return [values[il[0]]]
    return list(operator.itemgetter(*il)(values)) if il else []


def key_selector(key: str | int | Callable[[Any], Any]) -> Callable[[Any], Any]:
    """A callable that extracts the key of a record.

    ``key`` may be a callable, an ``int`` (position in a tuple/list), or a ``str``
    (a dict item or an attribute, decided by the first record seen).
    """
    if callable(key):
        return key
    if isinstance(key, int):
        return operator.itemgetter(key)
    if isinstance(key, str):
        item = operator.itemgetter(key)
        attr = operator.attrgetter(key)

        class _ByName:
            __slots__ = ("fn",)

            def __init__(self) -> None:
                self.fn = None

            def __call__(self, record: Any) -> Any:
                if self.fn is None:
                    self.fn = item if isinstance(record, dict) else attr
                return self.fn(record)

            def resolved(self, record: Any) -> Callable[[Any], Any]:
                """The getter itself (decided by the first record seen, as a call does)."""
                if self.fn is None:
                    self.fn = item if isinstance(record, dict) else attr
                return self.fn

        return _ByName()
    raise JobError(f"key_by takes a callable, a field name or a position, found {key!r}")


class KeyGroupAssigner:
    """Key -> key group with a bounded memo (hashing is pure, so memoising is safe)."""

    def __init__(self, max_parallelism: int, memo_size: int = 1 << 20) -> None:
        self.max_parallelism = max_parallelism
        self.memo: dict[Any, int] = {}
        self.memo_size = memo_size

    def one(self, key: Any) -> int:
        try:
            return self.memo[key]
        except KeyError:
            pass
        except TypeError as exc:
            raise KeyTypeError(f"key {key!r} of type {type(key).__name__} is not hashable") from exc
        kg = murmur_hash(java_hash_code(key)) % self.max_parallelism
        if len(self.memo) >= self.memo_size:
            self.memo.clear()
        self.memo[key] = kg
        return kg

    def many(self, keys: list[Any]) -> np.ndarray:
        memo = self.memo
        try:
            return np.fromiter(map(memo.__getitem__, keys), dtype=np.int64, count=len(keys))
        except KeyError:
            pass
        except TypeError as exc:
            raise KeyTypeError(f"a key in {keys[:3]!r}... is not hashable") from exc
        missing = set(keys).difference(memo)
        if len(memo) + len(missing) > self.memo_size:
            memo.clear()
            missing = set(keys)
        maxp = self.max_parallelism
        if len(missing) > 64 and all(type(k) is str for k in missing):
            ordered = list(missing)
            kgs = assign_key_groups(np.array(ordered, dtype=object), maxp)
            memo.update(zip(ordered, kgs.tolist()))
        else:
            for k in missing:
                memo[k] = murmur_hash(java_hash_code(k)) % maxp
        return np.fromiter(map(memo.__getitem__, keys), dtype=np.int64, count=len(keys))


    def distinct(self, uniques: list[Any]) -> np.ndarray:
        """Key groups of distinct keys (a batch's ``uniques``); new strings are hashed in one vectorised pass."""
        memo = self.memo
        try:
            got = np.fromiter(map(memo.get, uniques, repeat(-1)), dtype=np.int64, count=len(uniques))
        except TypeError as exc:
            raise KeyTypeError(f"a key in {uniques[:3]!r}... is not hashable") from exc
        missing = np.flatnonzero(got < 0)
        if len(missing):
            ml = missing.tolist()
            miss = [uniques[ml[0]]] if len(ml) == 1 else list(operator.itemgetter(*ml)(uniques))
            maxp = self.max_parallelism
            if len(miss) > 16 and all(type(k) is str for k in miss):
                kgs = key_groups_for_hash_codes(java_string_hash_codes(miss), maxp)
            else:
                kgs = np.array([murmur_hash(java_hash_code(k)) % maxp for k in miss], dtype=np.int64)
            if len(memo) + len(miss) > self.memo_size:
                memo.clear()
            memo.update(zip(miss, kgs.tolist()))
            got[missing] = kgs
        return got


class Partitioner:
    """Splits one batch among the channels of an edge."""

    def route(self, batch: Batch, channels: list[Channel], sender_index: int) -> list[tuple[Channel, Batch]]:
        raise NotImplementedError

    name = "?"


class ForwardPartitioner(Partitioner):
    name = "forward"

    def route(self, batch, channels, sender_index):
        return [(channels[sender_index], batch)]


class RebalancePartitioner(Partitioner):
    """Round-robin record by record, starting where the last batch stopped."""

    name = "rebalance"

    def __init__(self) -> None:
        self._next = 0

    def route(self, batch, channels, sender_index):
        p = len(channels)
        if p == 1:
            if isinstance(batch, ColumnBatch):
                return [(channels[0], ColumnBatch(batch.columns, len(batch), batch.names, batch.timestamps))]
            return [(channels[0], Batch(batch.values, batch.timestamps))]
        out = []
        start = self._next
        for j in range(p):
            c = (start + j) % p
            vals = batch.values[j::p]
            if vals:
                ts = batch.timestamps[j::p] if batch.timestamps is not None else None
                out.append((channels[c], Batch(vals, ts)))
        self._next = (start + len(batch)) % p
        return out


class BroadcastPartitioner(Partitioner):
    name = "broadcast"

    def route(self, batch, channels, sender_index):
        return [(c, Batch(batch.values, batch.timestamps)) for c in channels]


class KeyGroupPartitioner(Partitioner):
    """``key_by``: each record to the subtask owning its key group.

    The keys of a batch are factorised once (``codes``/``uniques``, see
    :class:`~explorer.engine.channels.Batch`) and hashed once per distinct key.
    A :class:`~explorer.engine.channels.ColumnBatch` keyed by a column
    (``key_field``, a position or a column name) is factorised on that column
    directly and stays columnar.
    """

    name = "hash"

    def __init__(self, selector: Callable[[Any], Any], max_parallelism: int, parallelism: int,
                 key_field: int | str | None = None) -> None:
        self.selector = selector
        self.key_field = key_field
        self.assigner = KeyGroupAssigner(max_parallelism)
        #: keys of record batches seen so far -> their code in ``self.dictionary``
        self.intern: dict[Any, int] = {}
        self.dictionary = KeyDictionary([])
        self.intern_size = 1 << 20
        #: whether every key so far is a ``str``: the dictionary then holds its own copy of each,
        #: made when the key is first seen, so the copies lie together in memory (a record's key
        #: lies wherever its record was made), and a batch's distinct keys are handed on as these
        #: copies; every table keyed by them (keyed state, timers) then finds its stored key is the
        #: very object it is given, without reading a string from all over memory per lookup
        self.compact = True
        self.max_parallelism = max_parallelism
        self.parallelism = parallelism
        # owner of each key group, computed once
        self.owner = (np.arange(max_parallelism, dtype=np.int64) * parallelism) // max_parallelism

    def keys_of(self, values: list[Any]) -> list[Any]:
        sel = self.selector
        resolved = getattr(sel, "resolved", None)  # a field name: its getter, without a call per record
        if resolved is not None and values:
            sel = resolved(values[0])
        return list(map(sel, values))

    def _key_column(self, batch: ColumnBatch) -> int | None:
        f = self.key_field
        if f is None:
            return None
        if isinstance(f, int):
            return f if -len(batch.columns) <= f < len(batch.columns) else None
        names = batch.names or ()
        return names.index(f) if f in names else None

    def factorize(self, batch: Batch):
        """``(codes, uniques, keys, ukgs, ucodes, dictionary)`` of a batch: ``keys`` is None when the
        batch stays columnar; ``ucodes``/``dictionary`` are set for a dictionary-encoded key column,
        whose key groups come from the dictionary (``ukgs``); otherwise ``ukgs`` is None."""
        if isinstance(batch, ColumnBatch):
            col = self._key_column(batch)
            if col is not None:
                column = batch.columns[col]
                if isinstance(column, DictColumn):
                    codes, ucodes = pd.factorize(column.indices)
                    d = column.dictionary
                    return (codes, DictUniques(d, ucodes), None, d.key_groups(self.max_parallelism)[ucodes],
                            ucodes, d)
                codes, uniques = factorize_column(column)
                return codes, uniques, None, None, None, None
        keys = self.keys_of(batch.values)
        codes, uniques = factorize_keys(keys)  # a small hash table per batch
        ucodes = self.encode(uniques)  # one lookup per distinct key in the big one
        d = self.dictionary
        if self.compact:  # the dictionary's own copies travel on (see encode)
            uniques = _pick(d.values, ucodes)
        return codes, uniques, keys, d.key_groups(self.max_parallelism)[ucodes], ucodes, d

    def encode(self, keys: list[Any]) -> np.ndarray:
        """The code in :attr:`dictionary` of each of these *distinct* keys (a batch's ``uniques``),
        adding keys not seen before in the given order. The dictionary starts afresh when it
        reaches ``intern_size`` keys."""
        intern = self.intern
        try:
            g = np.fromiter(map(intern.get, keys, repeat(-1)), dtype=np.int64, count=len(keys))
        except TypeError as exc:
            raise KeyTypeError(f"a key in {keys[:3]!r}... is not hashable") from exc
        missing = np.flatnonzero(g < 0)
        if len(missing):
            if len(intern) + len(missing) > self.intern_size:
                intern = self.intern = {}
                self.dictionary = KeyDictionary([])
                missing = np.arange(len(keys))
            new_keys = _pick(keys, missing)
            if None in new_keys:
                raise KeyTypeError("a key is None; null keys are not allowed")
            if self.compact and not set(map(type, new_keys)) <= {str}:
                self.compact = False
            if self.compact:
                new_keys = list(map(_copy_str, new_keys))
            values = self.dictionary.values
            start = len(values)
            intern.update(zip(new_keys, range(start, start + len(new_keys))))
            values.extend(new_keys)
            g[missing] = np.arange(start, start + len(new_keys), dtype=np.int64)
        return g

    def route(self, batch, channels, sender_index):
        codes, uniques, keys, ukgs, ucodes, dictionary = self.factorize(batch)
        if ukgs is None:
            ukgs = self.assigner.distinct(uniques)
        kgs = ukgs[codes]
        columnar = keys is None
        p = self.parallelism
        if p == 1:
            return [(channels[0], _keyed(batch, columnar, batch.values if not columnar else None, batch.timestamps,
                                         keys, kgs, codes, uniques, ukgs, ucodes, dictionary))]
        owner_u = self.owner[ukgs]
        targets = owner_u[codes]
        out = []
        values = None if columnar else batch.values
        ts = batch.timestamps
        nu = len(uniques)
        for s in range(p):
            uidx = np.flatnonzero(owner_u == s)
            if not len(uidx):
                continue
            if len(uidx) == nu:
                out.append((channels[s], _keyed(batch, columnar, values, ts, keys, kgs, codes, uniques, ukgs,
                                                ucodes, dictionary)))
                continue
            idx = np.flatnonzero(targets == s)
            remap = np.empty(nu, dtype=codes.dtype)
            remap[uidx] = np.arange(len(uidx), dtype=codes.dtype)
            sub_codes = remap[codes[idx]]
            sub_uniques = _pick(uniques, uidx)
            il = idx.tolist()
            if len(il) == 1:
                i = il[0]
                sub_ts = None if ts is None else [ts[i]]
                sub_vals = None if columnar else [values[i]]
                sub_keys = None if columnar else [keys[i]]
            else:
                get = operator.itemgetter(*il)
                sub_ts = None if ts is None else list(get(ts))
                sub_vals = None if columnar else list(get(values))
                sub_keys = None if columnar else list(get(keys))
            if columnar:
                sub = ColumnBatch(batch.take(idx), len(il), batch.names, sub_ts, kgs[idx], sub_codes, sub_uniques,
                                  ukgs[uidx])
            else:
                sub = Batch(sub_vals, sub_ts, sub_keys, kgs[idx], sub_codes, sub_uniques, ukgs[uidx])
            if ucodes is not None:
                sub.ucodes, sub.dictionary = ucodes[uidx], dictionary
            out.append((channels[s], sub))
        return out


def _keyed(batch, columnar, values, ts, keys, kgs, codes, uniques, ukgs, ucodes=None, dictionary=None) -> Batch:
    if columnar:
        out = ColumnBatch(batch.columns, len(batch), batch.names, ts, kgs, codes, uniques, ukgs)
    else:
        out = Batch(values, ts, keys, kgs, codes, uniques, ukgs)
    out.ucodes, out.dictionary = ucodes, dictionary
    return out
