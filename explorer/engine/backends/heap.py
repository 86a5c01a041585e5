"""The heap backend: Python objects in one table per key group (like Flink's HashMap backend).

Layout per state: a list indexed by ``key_group - start``; each item maps a
namespace to a dict of ``key -> entry``. Values stay typed Python objects;
they are serialized (never pickled) only when a snapshot is written.
"""

from __future__ import annotations

import weakref
from itertools import chain, repeat
from operator import itemgetter
from typing import Any, Iterator

import numpy as np

from ...errors import StateError
from ...keygroups import KeyGroupRange
from ..state import StateDescriptor, StateKind
from .base import KeyedStateBackend, StateTable
from .table import ColumnSnapshot


class HeapStateTable(StateTable):
    """One state's entries, per key group a dict of namespace -> {key: entry}.

    A list state's stored lists are changed in place only by appending (``append``,
    ``append_many``); everything else stores a new list. A list leaves the table only
    through :meth:`pop_many`, which hands out a copy while a copy-on-write snapshot
    (:meth:`snapshot_columns` with ``snapshot_reuse`` set) may still read it, so such a
    snapshot's elements are the first ``n`` of each list, unchanged until it is written.
    """

    def __init__(self, descriptor: StateDescriptor, key_groups: KeyGroupRange) -> None:
        super().__init__(descriptor, key_groups)
        self._start = key_groups.start
        self._groups: list[dict[Any, dict[Any, Any]]] = [{} for _ in range(len(key_groups))]
        #: copy-on-write snapshots not yet written (see :meth:`release_snapshot`)
        self._pins: weakref.WeakSet[ColumnSnapshot] = weakref.WeakSet()

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

    def _ns_maps(self, n: int, namespace: Any) -> list[dict | None] | None:
        """Each key group's map of ``namespace`` (None where it has none) for a call on ``n`` keys,
        when they are many for the key groups (one lookup per key group instead of one per key);
        else None."""
        groups = self._groups
        if n < 256 or n * 2 < len(groups):
            return None
        return [g.get(namespace) for g in groups]

    def get_many(self, key_groups, keys, namespace=None):
        groups, start, empty = self._groups, self._start, {}
        maps = self._ns_maps(len(keys), namespace)
        if maps is not None:
            maps = [empty if m is None else m for m in maps]
            return [maps[g - start].get(k) for g, k in zip(key_groups, keys)]
        return [groups[g - start].get(namespace, empty).get(k) for g, k in zip(key_groups, keys)]

    def put_many(self, key_groups, keys, entries, namespace=None):
        groups, start = self._groups, self._start
        maps = self._ns_maps(len(keys), namespace)
        if maps is not None:
            for g, k, e in zip(key_groups, keys, entries):
                m = maps[g - start]
                if m is None:
                    m = maps[g - start] = groups[g - start][namespace] = {}
                m[k] = e
            return
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

    def remove_many(self, key_groups, keys, namespace=None):
        groups, start = self._groups, self._start
        maps = self._ns_maps(len(keys), namespace)
        if maps is not None:
            for g, k in zip(key_groups, keys):
                m = maps[g - start]
                if m is not None:
                    m.pop(k, None)
                    if not m:
                        del groups[g - start][namespace]
                        maps[g - start] = None
            return
        for g, k in zip(key_groups, keys):
            grp = groups[g - start]
            m = grp.get(namespace)
            if m is not None:
                m.pop(k, None)
                if not m:
                    del grp[namespace]

    def pop_many(self, key_groups, keys, namespace=None):
        out = self._pop_many(key_groups, keys, namespace)
        if self.kind is StateKind.LIST:
            reuse = self.snapshot_reuse
            if reuse is not None:  # these lists are the caller's now: no conversion of theirs is reused
                reuse.forget([e for e in out if e is not None])
            if self._pins:  # a snapshot may still read them: the caller gets copies
                out = [None if e is None else list(e) for e in out]
        return out

    def _pop_many(self, key_groups, keys, namespace=None):
        groups, start = self._groups, self._start
        out = []
        maps = self._ns_maps(len(keys), namespace)
        if maps is not None:
            for g, k in zip(key_groups, keys):
                m = maps[g - start]
                if m is None:
                    out.append(None)
                    continue
                out.append(m.pop(k, None))
                if not m:
                    del groups[g - start][namespace]
                    maps[g - start] = None
            return out
        for g, k in zip(key_groups, keys):
            grp = groups[g - start]
            m = grp.get(namespace)
            if m is None:
                out.append(None)
                continue
            out.append(m.pop(k, None))
            if not m:
                del grp[namespace]
        return out

    def append_many(self, key_groups, keys, lists, namespace=None, handed_over=False):
        groups, start = self._groups, self._start
        own = handed_over and set(map(type, lists)) <= {list}  # a new key's list kept, not copied
        maps = self._ns_maps(len(keys), namespace)
        if maps is not None:
            for g, k, elems in zip(key_groups, keys, lists):
                if not elems:
                    continue
                m = maps[g - start]
                if m is None:
                    m = maps[g - start] = groups[g - start][namespace] = {}
                cur = m.get(k)
                if cur is None:
                    m[k] = elems if own else list(elems)
                else:
                    cur.extend(elems)
            return
        for g, k, elems in zip(key_groups, keys, lists):
            if not elems:
                continue
            grp = groups[g - start]
            m = grp.get(namespace)
            if m is None:
                m = grp[namespace] = {}
            cur = m.get(k)
            if cur is None:
                m[k] = elems if own else list(elems)
            else:
                cur.extend(elems)

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

    def rows(self, key_groups: KeyGroupRange | None = None):
        """:meth:`StateTable.rows` straight from the per-key-group dicts (the same rows in the
        same order: key groups ascending, then namespaces and keys as inserted)."""
        start, ttl, kind = self._start, self.has_ttl, self.kind
        for i, g in enumerate(self._groups):
            if not g:
                continue
            kg = start + i
            if key_groups is not None and kg not in key_groups:
                continue
            out: list = []
            for ns, m in list(g.items()):
                if kind is StateKind.LIST:
                    for key, elems in list(m.items()):
                        if ttl:
                            out += [(kg, key, ns, j, e[0], e[1]) for j, e in enumerate(elems)]
                        else:
                            out += [(kg, key, ns, j, e, None) for j, e in enumerate(elems)]
                elif kind is StateKind.MAP:
                    for key, d in list(m.items()):
                        if ttl:
                            out += [(kg, key, ns, uk, e[0], e[1]) for uk, e in list(d.items())]
                        else:
                            out += [(kg, key, ns, uk, e, None) for uk, e in list(d.items())]
                elif ttl:
                    out += [(kg, key, ns, None, e[0], e[1]) for key, e in list(m.items()) if e is not None]
                else:
                    out += [(kg, key, ns, None, e, None) for key, e in list(m.items()) if e is not None]
            yield from out

    def snapshot_columns(self) -> ColumnSnapshot | None:
        """The rows of a value or list state copied column-wise (references only: per address its
        key group, key and namespace, per element a reference; no tuple per row). None for map state.

        With ``snapshot_reuse`` set (a list state whose checkpoints reuse conversions), the lists
        are taken copy-on-write instead: per address the list and its length, no element touched;
        the snapshot holds them until :meth:`release_snapshot` (see the class doc)."""
        kind = self.kind
        if kind is StateKind.MAP:
            return None
        is_list = kind is StateKind.LIST
        if is_list and self.snapshot_reuse is not None and not self.has_ttl:
            return self._snapshot_lists()
        counts: list[int] | None = [] if is_list else None
        entries: list[Any] = []

        def each(m: dict) -> None:
            if counts is not None:
                vals = m.values()
                counts.extend(map(len, vals))
                entries.extend(chain.from_iterable(vals))
            else:
                entries.extend(m.values())

        kgs, keys, nss = self._columns_of_maps(each)
        return ColumnSnapshot(kind, self.has_ttl, kgs, keys, nss, counts, entries)

    def _columns_of_maps(self, each: Any) -> tuple[list[int], list[Any], list[Any]]:
        """The key group, key and namespace of every entry, in table order, each (namespace's) map of entries
        also given to ``each``."""
        kgs: list[int] = []
        keys: list[Any] = []
        nss: list[Any] = []
        start = self._start
        for i, g in enumerate(self._groups):
            if not g:
                continue
            kg = start + i
            for ns, m in g.items():
                n = len(m)
                kgs += [kg] * n
                nss += [ns] * n
                keys += m
                each(m)
        return kgs, keys, nss

    def _snapshot_lists(self) -> ColumnSnapshot:
        lists: list[list[Any]] = []
        kgs, keys, nss = self._columns_of_maps(lambda m: lists.extend(m.values()))
        snap = ColumnSnapshot(StateKind.LIST, False, kgs, keys, nss, list(map(len, lists)), None, lists)
        self._pins.add(snap)
        return snap

    def release_snapshot(self, snap: ColumnSnapshot) -> None:
        """A copy-on-write snapshot is written: its lists may be handed out as they are again."""
        self._pins.discard(snap)

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


class ColumnarValueTable(StateTable):
    """A value state of plain numbers kept in columns: the heap table of the built-in aggregates.

    ``key -> slot`` is one dict; per slot a key group, a value (a NumPy array of
    ``dtype``) and whether it is live. A batch reads and writes the values of its
    distinct keys with one dict lookup each and NumPy arithmetic, never a Python
    object per entry. To everything else it is an ordinary table: ``get``/``put``
    hold Python numbers, and ``addresses``/``rows`` list entries in key-group
    order and, within a key group, in insertion order, exactly as
    :class:`HeapStateTable` does, so snapshots are the same. Only the default
    namespace and no TTL (what the aggregates use).
    """

    def __init__(self, descriptor: StateDescriptor, key_groups: KeyGroupRange, dtype: Any) -> None:
        super().__init__(descriptor, key_groups)
        if self.has_ttl or descriptor.kind is not StateKind.VALUE:
            raise StateError(f"state {descriptor.name!r}: a columnar table holds value state without TTL only")
        self.dtype = np.dtype(dtype)
        self.slot: dict[Any, int] = {}
        self._keys: list[Any] = []
        self._kg = np.zeros(1024, dtype=np.int64)
        self.values = np.zeros(1024, dtype=self.dtype)
        self._live = np.zeros(1024, dtype=bool)
        self._n = 0
        #: the live slots in rows' order with their key groups, keys and namespaces, for snapshots,
        #: while no key is added (``_n``, the first item) or removed (then it is dropped)
        self._layout: tuple[int, np.ndarray, list, list, list] | None = None
        #: per key dictionary of a columnar source: the slot of each dictionary value (-1: not known yet)
        self._dict_slots: dict[int, tuple[Any, np.ndarray]] = {}

    def _grow(self, need: int) -> None:
        cap = len(self._kg)
        if need <= cap:
            return
        while cap < need:
            cap *= 2
        for name in ("_kg", "values", "_live"):
            old = getattr(self, name)
            new = np.zeros(cap, dtype=old.dtype)
            new[: self._n] = old[: self._n]
            setattr(self, name, new)

    def _check_ns(self, namespace: Any) -> None:
        if namespace is not None:
            raise StateError(f"state {self.name!r}: a columnar table holds the default namespace only, "
                             f"found namespace {namespace!r}")

    def slots_for(self, keys: list[Any], key_groups: np.ndarray) -> np.ndarray:
        """The slots of distinct ``keys``; keys not stored yet get new zeroed slots, in the given order."""
        slot = self.slot
        slots = np.array(list(map(slot.get, keys, repeat(-1))), dtype=np.int64)
        missing = np.flatnonzero(slots < 0)
        if len(missing):
            ml = missing.tolist()
            new_keys = [keys[ml[0]]] if len(ml) == 1 else list(itemgetter(*ml)(keys))
            start = self._n
            end = start + len(ml)
            self._grow(end)
            slot.update(zip(new_keys, range(start, end)))
            self._keys.extend(new_keys)
            self._kg[start:end] = key_groups[missing]
            self.values[start:end] = 0
            self._live[start:end] = True
            self._n = end
            slots[missing] = np.arange(start, end, dtype=np.int64)
        return slots

    def slots_for_codes(self, dictionary: Any, codes: np.ndarray, keys: list[Any], key_groups: np.ndarray) -> np.ndarray:
        """:meth:`slots_for` for keys given as codes into a shared ``KeyDictionary`` (``keys[j]`` is
        ``dictionary.values[codes[j]]``): slots found once per dictionary value are remembered, so
        later batches find theirs by NumPy indexing alone."""
        entry = self._dict_slots.get(dictionary.id)
        if entry is None:
            entry = self._dict_slots[dictionary.id] = (dictionary, np.full(len(dictionary), -1, dtype=np.int64))
        cache = entry[1]
        if len(cache) < len(dictionary):  # the dictionary grew
            cache = np.concatenate([cache, np.full(len(dictionary) - len(cache), -1, dtype=np.int64)])
            self._dict_slots[dictionary.id] = (dictionary, cache)
        slots = cache[codes]
        missing = np.flatnonzero(slots < 0)
        if len(missing):
            vals = dictionary.values
            found = self.slots_for([vals[c] for c in codes[missing].tolist()], key_groups[missing])
            slots[missing] = found
            cache[codes[missing]] = found
        return slots

    def get(self, key_group, key, namespace):
        self._check_ns(namespace)
        s = self.slot.get(key)
        return None if s is None else self.values[s].item()

    def put(self, key_group, key, namespace, entry):
        self._check_ns(namespace)
        s = self.slot.get(key)
        if s is None:
            s = int(self.slots_for([key], np.array([key_group], dtype=np.int64))[0])
        self.values[s] = entry

    def remove(self, key_group, key, namespace):
        self._check_ns(namespace)
        s = self.slot.pop(key, None)
        if s is not None:
            self._live[s] = False
            self._keys[s] = None
            self._layout = None
            self._dict_slots.clear()  # remembered slots may point at this one

    def map_get(self, key_group, key, namespace, user_key):
        raise StateError(f"state {self.name!r} is value state, not map state")

    map_put = map_remove = map_items = map_get

    def _order(self, key_groups: KeyGroupRange | None = None) -> np.ndarray:
        n = self._n
        live = np.flatnonzero(self._live[:n])
        kg = self._kg[live]
        if key_groups is not None:
            keep = (kg >= key_groups.start) & (kg <= key_groups.end)
            live, kg = live[keep], kg[keep]
        return live[np.argsort(kg, kind="stable")]

    def addresses(self, key_groups: KeyGroupRange | None = None):
        order = self._order(key_groups)
        keys = self._keys
        for s, kg in zip(order.tolist(), self._kg[order].tolist()):
            yield kg, keys[s], None

    def rows(self, key_groups: KeyGroupRange | None = None):
        order = self._order(key_groups)
        keys = self._keys
        for s, kg, v in zip(order.tolist(), self._kg[order].tolist(), self.values[order].tolist()):
            yield (kg, keys[s], None, None, v, None)

    def snapshot_columns(self) -> ColumnSnapshot:
        """The rows copied column-wise at the barrier: the live slots in :meth:`rows`' order, their
        key groups and values copied out of the arrays (plain numbers: the copy is the snapshot),
        the keys as references. No tuple per row, as :meth:`rows` would make in the synchronous phase."""
        layout = self._layout
        if layout is None or layout[0] != self._n:  # keys added or removed since the last one
            order = self._order()
            keys = self._keys
            layout = self._layout = (self._n, order, self._kg[order].tolist(),
                                     list(map(keys.__getitem__, order.tolist())), [None] * len(order))
        _, order, kgs, keys, nss = layout  # shared by the snapshots of one layout, which never change them
        return ColumnSnapshot(StateKind.VALUE, False, kgs, keys, nss, None, self.values[order].tolist())

    def entries_per_key_group(self) -> dict[int, int]:
        n = self._n
        kg = self._kg[:n][self._live[:n]]
        if not len(kg):
            return {}
        counts = np.bincount(kg - self.key_groups.start)
        nz = np.flatnonzero(counts)
        return dict(zip((nz + self.key_groups.start).tolist(), counts[nz].tolist()))

    def __len__(self) -> int:
        return int(self._live[: self._n].sum())


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

    def _create_columnar_table(self, descriptor: StateDescriptor, dtype: Any) -> StateTable | None:
        if getattr(descriptor, "ttl", None) is not None or descriptor.kind is not StateKind.VALUE:
            return None
        return ColumnarValueTable(descriptor, self.key_groups, dtype)

    def _cleanup_hook(self, descriptor, table):
        ttl = getattr(descriptor, "ttl", None)
        if ttl is None:
            return None
        inc = ttl.cleanup.heap_incremental()
        if inc is None:
            return None
        return _IncrementalCleanup(table, ttl.ttl_ms, inc.cleanup_size, self.clock)

    def get_state(self, descriptor, columnar=None):
        st = super().get_state(descriptor, columnar)
        self.per_record_cleanup = self._needs_per_record_cleanup()
        return st

    per_record_cleanup = False
    """Whether some registered state asks for incremental cleanup on every record (checked per
    record by the keyed operator, so records pay for it only when it is configured)."""

    def _needs_per_record_cleanup(self) -> bool:
        for st in self._states.values():
            ttl = getattr(st.descriptor, "ttl", None)
            if ttl is not None:
                inc = ttl.cleanup.heap_incremental()
                if inc is not None and inc.run_cleanup_for_every_record and st._cleanup is not None:
                    return True
        return False

    def run_incremental_cleanup_for_record(self) -> None:
        """Called once per record for states whose cleanup asks for it."""
        for st in self._states.values():
            ttl = getattr(st.descriptor, "ttl", None)
            if ttl is not None:
                inc = ttl.cleanup.heap_incremental()
                if inc is not None and inc.run_cleanup_for_every_record and st._cleanup is not None:
                    st._cleanup()
