"""Routing records between subtasks: key selectors, key-group assignment, partitioners.

A hash edge (``key_by``) sends each record to the subtask that owns its key
group, exactly as Flink's KeyGroupStreamPartitioner does. The key and key
group computed for routing travel with the batch, so the keyed operator does
not compute them again.
"""

from __future__ import annotations

import operator
from typing import Any, Callable

import numpy as np

from ..errors import JobError, KeyTypeError
from ..keygroups import assign_key_groups, java_hash_code, murmur_hash
from .channels import Batch, Channel


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
            return [(channels[0], Batch(batch.values, batch.timestamps))]
        out = []
        start = self._next
        for j in range(p):
            c = (start + j) % p
            vals = batch.values[j::p]
            if vals:
                ts = batch.timestamps[j::p] if batch.timestamps is not None else None
                out.append((channels[c], Batch(vals, ts)))
        self._next = (start + len(batch.values)) % p
        return out


class BroadcastPartitioner(Partitioner):
    name = "broadcast"

    def route(self, batch, channels, sender_index):
        return [(c, Batch(batch.values, batch.timestamps)) for c in channels]


class KeyGroupPartitioner(Partitioner):
    """``key_by``: each record to the subtask owning its key group."""

    name = "hash"

    def __init__(self, selector: Callable[[Any], Any], max_parallelism: int, parallelism: int) -> None:
        self.selector = selector
        self.assigner = KeyGroupAssigner(max_parallelism)
        self.max_parallelism = max_parallelism
        self.parallelism = parallelism
        # owner of each key group, computed once
        self.owner = (np.arange(max_parallelism, dtype=np.int64) * parallelism) // max_parallelism

    def keys_of(self, values: list[Any]) -> list[Any]:
        return list(map(self.selector, values))

    def route(self, batch, channels, sender_index):
        keys = self.keys_of(batch.values)
        kgs = self.assigner.many(keys)
        p = self.parallelism
        if p == 1:
            return [(channels[0], Batch(batch.values, batch.timestamps, keys, kgs))]
        targets = self.owner[kgs]
        out = []
        values, ts = batch.values, batch.timestamps
        for s in range(p):
            idx = np.flatnonzero(targets == s)
            if not len(idx):
                continue
            if len(idx) == len(values):
                out.append((channels[s], Batch(values, ts, keys, kgs)))
                continue
            il = idx.tolist()
            if len(il) == 1:
                i = il[0]
                out.append((channels[s], Batch([values[i]], None if ts is None else [ts[i]], [keys[i]], kgs[idx])))
                continue
            get = operator.itemgetter(*il)
            out.append(
                (
                    channels[s],
                    Batch(list(get(values)), None if ts is None else list(get(ts)), list(get(keys)), kgs[idx]),
                )
            )
        return out
