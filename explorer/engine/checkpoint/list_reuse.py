"""A heap list state checkpointed copy-on-write, its long lists converted once.

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
per list of ``MIN_ELEMENTS`` or more, :class:`ListReuse` keeps the list object,
how many of its elements it converted and their Arrow values, and the next
checkpoint converts only that list's new tail. A list that left the table in
between (:meth:`ListReuse.forget`, called by the table's ``pop_many``, the only way
out) or is another object (replaced, cleared) is converted whole. The table
written is the same either way.

What is kept is replaced by each checkpoint's own (lists gone since are
forgotten), so it holds at most one checkpoint's long lists, and it is an
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

__all__ = ["MIN_ELEMENTS", "ListReuse"]

#: lists shorter than this are converted at every checkpoint (what reuse would save on them
#: goes to Python work and an Arrow piece per list)
MIN_ELEMENTS = 256


class ListReuse:
    """What one heap list state's last checkpoint converted for its long lists (see the module doc)."""

    __slots__ = ("table", "_kept", "_stale", "_lock", "_writing")

    def __init__(self, table: HeapStateTable) -> None:
        self.table = table
        #: (key_group, key, namespace) -> (the list, how many of its elements were converted, their values)
        self._kept: dict[tuple[Any, Any, Any], tuple[list[Any], int, pa.Array]] = {}
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
        kept = self._kept
        c = np.asarray(counts, dtype=np.int64)
        long_ = np.flatnonzero(c >= MIN_ELEMENTS).tolist()
        kgs, keys, nss = snap.key_groups, snap.keys, snap.namespaces
        # per long list, the head converted before that is still its head (the same list object,
        # not handed out since, at least as long): reused; every other element is converted now
        heads: list[tuple[int, int, pa.Array | None]] = []  # (address, converted before, their values)
        skip = [0] * len(lists)
        for i in long_:
            lst = lists[i]
            old = kept.get((kgs[i], keys[i], nss[i]))
            if old is not None and old[0] is lst and old[1] <= counts[i] and id(lst) not in stale:
                skip[i] = old[1]
                heads.append((i, old[1], old[2]))
            else:
                heads.append((i, 0, None))
        fresh_counts = c - np.asarray(skip, dtype=np.int64)
        fresh = list(chain.from_iterable(map(list.__getitem__, lists, map(slice, skip, counts))))
        converted = info.to_arrow_array(fresh)
        ends = np.cumsum(fresh_counts).tolist()
        pieces: list[pa.Array] = []
        new_kept: dict[tuple[Any, Any, Any], tuple[list[Any], int, pa.Array]] = {}
        done = 0
        for i, m, head in heads:
            n_fresh = int(fresh_counts[i])
            at = ends[i] - n_fresh  # where this list's new elements start among the converted
            tail = converted.slice(at, n_fresh)
            if head is not None:
                if at > done:
                    pieces.append(converted.slice(done, at - done))
                pieces.append(head)
                done = at
                whole = pa.concat_arrays([head, tail])
            else:
                whole = pa.concat_arrays([tail])  # its own buffers, not the whole conversion's
            new_kept[(kgs[i], keys[i], nss[i])] = (lists[i], int(counts[i]), whole)
        self._kept = new_kept
        if not pieces:
            return converted
        if done < len(converted):
            pieces.append(converted.slice(done))
        return pa.concat_arrays(pieces)
