"""A heap list state checkpointed copy-on-write, its lists converted once.

A heap checkpoint writes the whole state each time (a full snapshot, as Flink's
HashMap backend does). Its cost was touching every element twice a checkpoint:
the synchronous phase copied a reference to each (CPython writes to every object
it references: a cache miss per element, the elements lying all over memory), and
the asynchronous one read each element's fields again to make Arrow values. A
list state that only grows (a session's events, a window's elements) holds, at
each checkpoint, the same element objects as at the one before plus a few new
ones at its end.

So, as Flink's copy-on-write state maps do, the synchronous phase takes each list
by reference with its length (:meth:`HeapStateTable.snapshot_columns
<explorer.engine.backends.heap.HeapStateTable.snapshot_columns>` once this table
has a :class:`ListReuse`): the table only ever appends to a list it holds, and
hands out a copy of one while a snapshot may still read it, so a snapshot's
elements are the first ``n`` of each list, untouched. And when the state's type is
immutable (:attr:`~explorer.format.types.TypeInfo.immutable`: numbers, strings,
frozen dataclasses of those), the same object converts to the same Arrow value:
per list, :class:`ListReuse` keeps the list object and how many of its elements
it converted, with the last checkpoint's Arrow values, and the next checkpoint
converts only each list's new tail (the rest is taken from those values, one
Arrow ``take`` for the whole state). A list that left the table in
between (:meth:`ListReuse.forget`, called by the table's ``pop_many``, the only way
out) or is another object (replaced, cleared) is converted whole. The table
written is the same either way.

What is kept is replaced by each checkpoint's own (lists gone since are
forgotten), so it holds at most one checkpoint's lists and values, and it is an
optimisation only: a restored or a new table starts without it.
"""

from __future__ import annotations

import threading
from itertools import chain
from typing import Any

import numpy as np
import pyarrow as pa

from ..backends.heap import HeapStateTable
from ..backends.table import ColumnSnapshot, StateTable
from ..descriptors import StateKind

__all__ = ["ListReuse"]


class ListReuse:
    """What one heap list state's last checkpoint converted for its lists (see the module doc)."""

    __slots__ = ("table", "_kept", "_kept_values", "_stale", "_lock", "_writing")

    def __init__(self, table: HeapStateTable) -> None:
        self.table = table
        #: (key_group, key, namespace) -> (the list, where its values start in ``_kept_values``,
        #: how many of its elements they are): what the last conversion made
        self._kept: dict[tuple[Any, Any, Any], tuple[list[Any], int, int]] = {}
        self._kept_values: pa.Array | None = None
        #: ids of lists handed out by the table since the last conversion (their reuse is off)
        self._stale: set[int] = set()
        self._lock = threading.Lock()
        self._writing = threading.Lock()  # one conversion at a time (concurrent checkpoints)

    @staticmethod
    def applies(table: StateTable) -> bool:
        """Whether ``table``'s snapshots can reuse conversions: a heap list state of an immutable
        type, without TTL (its elements are (value, last access) pairs made anew on access)."""
        return (isinstance(table, HeapStateTable) and table.kind is StateKind.LIST and not table.has_ttl
                and table.descriptor.value_info.immutable)

    def forget(self, lists: list[list[Any]]) -> None:
        """These lists left the table (the caller may change them): never reuse what was converted of them."""
        if lists:
            with self._lock:
                self._stale.update(map(id, lists))

    def values(self, snap: ColumnSnapshot) -> pa.Array:
        """The Arrow values of ``snap``'s elements in order: what ``value_info.to_arrow_array``
        of them makes. Runs in the asynchronous phase; releases ``snap``'s lists when done."""
        try:
            with self._writing:
                return self._values(snap)
        finally:
            if snap.lists is not None:
                self.table.release_snapshot(snap)

    def _values(self, snap: ColumnSnapshot) -> pa.Array:
        info = self.table.descriptor.value_info
        if snap.lists is None:  # taken by reference per element (no reuse kept for it)
            return info.to_arrow_array(snap.entries)
        with self._lock:
            stale, self._stale = self._stale, set()
        lists, counts = snap.lists, snap.counts
        kgs, keys, nss = snap.key_groups, snap.keys, snap.namespaces
        n_addr = len(lists)
        # per list, the head converted last time that is still its head (the same list object,
        # not handed out since, at least as long): where those values are, and how many
        skip = [0] * n_addr
        src = [0] * n_addr
        kept, kept_values = self._kept, self._kept_values
        if kept:
            get = kept.get
            for i, addr in enumerate(zip(kgs, keys, nss)):
                old = get(addr)
                if old is not None and old[0] is lists[i] and old[2] <= counts[i] and id(old[0]) not in stale:
                    skip[i], src[i] = old[2], old[1]
        fresh = list(chain.from_iterable(map(list.__getitem__, lists, map(slice, skip, counts))))
        converted = info.to_arrow_array(fresh)
        c = np.asarray(counts, dtype=np.int64)
        starts = np.cumsum(c) - c
        if any(skip):
            # row r, the p-th element of list a: reused value src[a] + p while p < skip[a], else
            # the converted one (the converted follow the reused values in one array)
            sk = np.asarray(skip, dtype=np.int64)
            fresh_c = c - sk
            fresh_starts = np.cumsum(fresh_c) - fresh_c
            addr = np.repeat(np.arange(n_addr, dtype=np.int64), c)
            p = np.arange(int(c.sum()), dtype=np.int64) - starts[addr]
            idx = np.where(p < sk[addr], np.asarray(src, dtype=np.int64)[addr] + p,
                           len(kept_values) + fresh_starts[addr] + p - sk[addr])
            values = pa.concat_arrays([kept_values, converted]).take(pa.array(idx))
        else:
            values = converted
        self._kept = dict(zip(zip(kgs, keys, nss), zip(lists, starts.tolist(), counts)))
        self._kept_values = values
        return values
