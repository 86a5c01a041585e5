"""Per-key-group metrics and a heavy-hitter sketch of the hottest keys by traffic.

:class:`SpaceSaving` is the Space-Saving algorithm (Metwally, Agrawal, El Abbadi,
2005) with weighted updates: ``capacity`` counters; a key not yet counted
replaces the smallest counter and inherits its count as its error bound.
Every key whose true count exceeds ``total / capacity`` is guaranteed to be
in the sketch, and ``count - error <= true count <= count``.
"""

from __future__ import annotations

import heapq
from typing import Any, Iterable

import numpy as np

from ..ranking import nth_largest


class SpaceSaving:
    def __init__(self, capacity: int = 64) -> None:
        if capacity <= 0:
            raise ValueError(f"capacity must be positive, found {capacity}")
        self.capacity = capacity
        self.counts: dict[Any, int] = {}
        self.errors: dict[Any, int] = {}
        self.total = 0

    def update(self, key: Any, weight: int = 1) -> None:
        self.total += weight
        counts = self.counts
        if key in counts:
            counts[key] += weight
            return
        if len(counts) < self.capacity:
            counts[key] = weight
            self.errors[key] = 0
            return
        victim = min(counts, key=counts.__getitem__)
        floor = counts.pop(victim)
        self.errors.pop(victim, None)
        counts[key] = floor + weight
        self.errors[key] = floor

    def update_many(self, items: Iterable[tuple[Any, int]]) -> None:
        """Add a batch of (key, weight) pairs.

        The batch is summarised exactly (its ``capacity`` largest weights; every other key of
        the batch weighs at most the smallest of those) and merged in, which keeps the
        Space-Saving guarantees at a cost per batch, not per record.
        """
        items = list(items)
        if len(items) <= 8:
            for k, w in items:
                self.update(k, w)
            return
        top = heapq.nlargest(self.capacity, items, key=lambda kv: kv[1])
        self._merge_batch(top, sum(w for _, w in items), len(items))

    def update_counts(self, keys: list[Any], weights: np.ndarray) -> None:
        """``update_many(zip(keys, weights))`` with NumPy weights, choosing the batch's largest
        weights without a Python loop over every key; the resulting sketch is the same."""
        n = len(keys)
        if n <= 8:
            for k, w in zip(keys, weights.tolist()):
                self.update(k, w)
            return
        cap = self.capacity
        if n > cap:
            # heapq.nlargest is a stable descending sort cut at ``cap``: candidates are every weight
            # at least the cap-th largest, in their original order, then stably sorted
            kth = nth_largest(weights, cap)
            cand = np.flatnonzero(weights >= kth)
        else:
            cand = np.arange(n)
        order = cand[np.argsort(-weights[cand], kind="stable")][:cap]
        top = list(zip([keys[i] for i in order.tolist()], weights[order].tolist()))
        self._merge_batch(top, int(weights.sum()), n)

    def _merge_batch(self, top: list[tuple[Any, int]], total: int, n_items: int) -> None:
        batch = SpaceSaving(self.capacity)
        batch.total = total
        for k, w in top:
            batch.counts[k] = w
            batch.errors[k] = 0
        if n_items > self.capacity:
            # keys left out weigh at most the smallest kept weight: an exact floor for the merge
            floor = top[-1][1]
            merged = self.merge(batch, other_floor=floor)
        else:
            merged = self.merge(batch, other_floor=0)
        self.counts, self.errors, self.total = merged.counts, merged.errors, merged.total

    def top(self, n: int | None = None) -> list[tuple[Any, int, int]]:
        """(key, count, error) for the ``n`` largest counters, largest first."""
        items = heapq.nlargest(n or self.capacity, self.counts.items(), key=lambda kv: (kv[1], -self.errors[kv[0]]))
        return [(k, c, self.errors[k]) for k, c in items]

    def floor(self) -> int:
        """An upper bound of the count of any key not in the sketch."""
        return min(self.counts.values()) if len(self.counts) >= self.capacity else 0

    def merge(self, other: "SpaceSaving", other_floor: int | None = None) -> "SpaceSaving":
        """A sketch over both streams (the merge of Agarwal et al., 2012)."""
        out = SpaceSaving(max(self.capacity, other.capacity))
        keys = set(self.counts) | set(other.counts)
        min_a = self.floor()
        min_b = other.floor() if other_floor is None else other_floor
        merged = []
        for k in keys:
            c = self.counts.get(k, min_a) + other.counts.get(k, min_b)
            e = self.errors.get(k, min_a) + other.errors.get(k, min_b)
            merged.append((c, e, k))
        merged.sort(key=lambda t: (-t[0], t[1]))
        for c, e, k in merged[: out.capacity]:
            out.counts[k] = c
            out.errors[k] = e
        out.total = self.total + other.total
        return out

    def to_json(self) -> dict:
        return {
            "capacity": self.capacity,
            "total": self.total,
            "entries": [[k, c, e] for k, c, e in self.top()],
        }


class KeyGroupMetrics:
    """Records processed per key group of one subtask (entries and bytes come from the backend)."""

    def __init__(self, start: int, end: int) -> None:
        self.start = start
        self.records = np.zeros(max(0, end - start + 1), dtype=np.int64)

    def add(self, key_groups: np.ndarray) -> None:
        if len(key_groups):
            self.records += np.bincount(key_groups - self.start, minlength=len(self.records))

    def add_one(self, key_group: int) -> None:
        self.records[key_group - self.start] += 1
