"""The heap backend: Python objects in one table per key group (like Flink's HashMap backend).

Layout per state: a list indexed by ``key_group - start``; each item maps a
namespace to a dict of ``key -> entry``. Values stay typed Python objects;
they are serialized (never pickled) only when a snapshot is written.
"""

from __future__ import annotations

from typing import Any, Iterator

from ...keygroups import KeyGroupRange
from ..state import StateDescriptor, StateKind
from .base import KeyedStateBackend, StateTable


class HeapStateTable(StateTable):
    def __init__(self, descriptor: StateDescriptor, key_groups: KeyGroupRange) -> None:
        super().__init__(descriptor, key_groups)
        self._start = key_groups.start
        self._groups: list[dict[Any, dict[Any, Any]]] = [{} for _ in range(len(key_groups))]

    def _ns_map(self, kg: int, ns: Any, create: bool) -> dict[Any, Any] | None:
        g = self._groups[kg - self._start]
        m = g.get(ns)
        if m is None and create:
            m = g[ns] = {}
        return m

    def get(self, key_group, key, namespace):
        m = self._groups[key_group - self._start].get(namespace)
        return None if m is None else m.get(key)

    def put(self, key_group, key, namespace, entry):
        g = self._groups[key_group - self._start]
        m = g.get(namespace)
        if m is None:
            m = g[namespace] = {}
        m[key] = entry

    def remove(self, key_group, key, namespace):
        g = self._groups[key_group - self._start]
        m = g.get(namespace)
        if m is not None:
            m.pop(key, None)
            if not m:
                del g[namespace]

    def get_many(self, key_groups, keys, namespace=None):
        groups, start, empty = self._groups, self._start, {}
        return [groups[g - start].get(namespace, empty).get(k) for g, k in zip(key_groups, keys)]

    def put_many(self, key_groups, keys, entries, namespace=None):
        groups, start = self._groups, self._start
        for g, k, e in zip(key_groups, keys, entries):
            grp = groups[g - start]
            m = grp.get(namespace)
            if m is None:
                m = grp[namespace] = {}
            m[k] = e

    def append(self, key_group, key, namespace, elements):
        g = self._groups[key_group - self._start]
        m = g.get(namespace)
        if m is None:
            m = g[namespace] = {}
        cur = m.get(key)
        if cur is None:
            m[key] = list(elements)
        else:
            cur.extend(elements)

    def map_get(self, key_group, key, namespace, user_key):
        d = self.get(key_group, key, namespace)
        return None if d is None else d.get(user_key)

    def map_put(self, key_group, key, namespace, user_key, entry):
        d = self.get(key_group, key, namespace)
        if d is None:
            self.put(key_group, key, namespace, {user_key: entry})
        else:
            d[user_key] = entry

    def map_remove(self, key_group, key, namespace, user_key):
        d = self.get(key_group, key, namespace)
        if d is not None:
            d.pop(user_key, None)
            if not d:
                self.remove(key_group, key, namespace)

    def map_contains(self, key_group, key, namespace, user_key):
        d = self.get(key_group, key, namespace)
        return d is not None and user_key in d

    def map_items(self, key_group, key, namespace) -> Iterator[tuple[Any, Any]]:
        d = self.get(key_group, key, namespace)
        return iter(()) if d is None else iter(list(d.items()))

    def addresses(self, key_groups: KeyGroupRange | None = None):
        start = self._start
        for i, g in enumerate(self._groups):
            kg = start + i
            if key_groups is not None and kg not in key_groups:
                continue
            for ns, m in list(g.items()):
                for key in list(m):
                    yield kg, key, ns

    def entries_per_key_group(self) -> dict[int, int]:
        out = {}
        kind = self.kind
        for i, g in enumerate(self._groups):
            n = 0
            for m in g.values():
                if kind in (StateKind.LIST, StateKind.MAP):
                    n += sum(len(v) for v in m.values())
                else:
                    n += len(m)
            if n:
                out[self._start + i] = n
        return out

    def __len__(self) -> int:
        return sum(len(m) for g in self._groups for m in g.values())


class _IncrementalCleanup:
    """Flink's incremental cleanup for the heap: each state access checks a few more entries."""

    def __init__(self, table: HeapStateTable, ttl_ms: int, size: int, clock) -> None:
        self.table = table
        self.ttl_ms = ttl_ms
        self.size = size
        self.clock = clock
        self._pending: list[tuple[int, Any, Any]] = []

    def __call__(self) -> None:
        if not self._pending:
            self._pending = list(self.table.addresses())
            self._pending.reverse()
            if not self._pending:
                return
        now = self.clock.now_ms()
        t = self.table
        for _ in range(min(self.size, len(self._pending))):
            kg, key, ns = self._pending.pop()
            t.drop_expired_at(kg, key, ns, now, self.ttl_ms)


class HeapStateBackend(KeyedStateBackend):
    """Keyed state as Python objects, one table per key group."""

    name = "heap"

    def _create_table(self, descriptor: StateDescriptor) -> StateTable:
        return HeapStateTable(descriptor, self.key_groups)

    def _cleanup_hook(self, descriptor, table):
        ttl = getattr(descriptor, "ttl", None)
        if ttl is None:
            return None
        inc = ttl.cleanup.heap_incremental()
        if inc is None:
            return None
        return _IncrementalCleanup(table, ttl.ttl_ms, inc.cleanup_size, self.clock)

    def run_incremental_cleanup_for_record(self) -> None:
        """Called once per record for states whose cleanup asks for it."""
        for st in self._states.values():
            ttl = getattr(st.descriptor, "ttl", None)
            if ttl is not None:
                inc = ttl.cleanup.heap_incremental()
                if inc is not None and inc.run_cleanup_for_every_record and st._cleanup is not None:
                    st._cleanup()

