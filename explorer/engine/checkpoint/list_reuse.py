"""Long lists of a heap list state converted once, not at every checkpoint.

A heap checkpoint writes the whole state each time (a full snapshot, as Flink's
HashMap backend does), and most of its asynchronous part is turning the
elements into Arrow values: reading each element's fields from wherever the
object lies in memory. A list state that only grows (a session's events, a
window's elements) holds, at each checkpoint, the same element objects as at the
one before plus a few new ones at the end; when its type is immutable
(:attr:`~explorer.format.types.TypeInfo.immutable`: numbers, strings, frozen
dataclasses of those), the same object converts to the same Arrow value, so
what was converted for it before is reused.

:class:`ListReuse` keeps, per address of a long list (``MIN_ELEMENTS`` or more),
the element objects it converted last time and their Arrow values. At the next
checkpoint an address whose list still starts with *the very same objects*
(checked by identity, element by element, never by equality) has only its new
tail converted; anything else (a list replaced, cleared, reordered, shortened,
an element swapped) is converted whole, as before. The table written is the same
either way. What it keeps is replaced by each checkpoint's own (lists gone since
are forgotten), so it holds at most one checkpoint's long lists, and it is only
an optimisation: a restored or a new table starts without it.
"""

from __future__ import annotations

from itertools import repeat
from operator import is_
from typing import Any

import numpy as np
import pyarrow as pa

from ...format.types import TypeInfo
from ..backends.table import ColumnSnapshot, StateTable
from ..descriptors import StateKind

__all__ = ["MIN_ELEMENTS", "ListReuse"]

#: lists shorter than this are converted at every checkpoint (their count is bounded by the
#: elements over this; what reuse saves on them would go to Python work per address)
MIN_ELEMENTS = 256


class ListReuse:
    """What one heap list state's last checkpoint converted for its long lists (see the module doc)."""

    __slots__ = ("value_info", "_kept")

    def __init__(self, value_info: TypeInfo) -> None:
        self.value_info = value_info
        #: (key_group, key, namespace) -> (the element objects converted, their Arrow values)
        self._kept: dict[tuple[Any, Any, Any], tuple[list[Any], pa.Array]] = {}

    @staticmethod
    def applies(table: StateTable) -> bool:
        """Whether ``table``'s snapshots can reuse conversions: list state of an immutable type,
        without TTL (its elements are (value, last access) pairs made anew on access)."""
        return table.kind is StateKind.LIST and not table.has_ttl and table.descriptor.value_info.immutable

    def values(self, snap: ColumnSnapshot) -> pa.Array | list[Any]:
        """The Arrow values of ``snap``'s elements, in order: what ``value_info.to_arrow_array``
        of them makes (the elements themselves when no list is long: converted as before).

        Runs in the asynchronous phase; the reuse kept is replaced by this snapshot's in one
        assignment, so two writes at once (concurrent checkpoints) each see a whole one."""
        counts = np.asarray(snap.counts, dtype=np.int64)
        entries = snap.entries
        long_ = np.flatnonzero(counts >= MIN_ELEMENTS)
        kept = self._kept
        if not len(long_):
            if kept:
                self._kept = {}
            return entries
        ends = np.cumsum(counts)
        starts = (ends - counts)[long_].tolist()
        lens = counts[long_].tolist()
        idx = long_.tolist()
        kgs, keys, nss = snap.key_groups, snap.keys, snap.namespaces
        # the elements to convert now: everything but the reused heads, in order
        fresh: list[Any] = []
        plan: list[tuple[int, int, pa.Array | None, int]] = []  # per long list: fresh from, to, reused head, its length
        pos = 0
        for i, s, n in zip(idx, starts, lens):
            fresh += entries[pos:s]
            old = kept.get((kgs[i], keys[i], nss[i]))
            m = 0
            head = None
            if old is not None and len(old[0]) <= n and all(map(is_, entries[s:s + len(old[0])], old[0])):
                m, head = len(old[0]), old[1]
            a = len(fresh)
            fresh += entries[s + m:s + n]
            plan.append((a, len(fresh), head, m))
            pos = s + n
        fresh += entries[pos:]
        converted = self.value_info.to_arrow_array(fresh)
        pieces: list[pa.Array] = []
        new_kept: dict[tuple[Any, Any, Any], tuple[list[Any], pa.Array]] = {}
        done = 0
        for (a, b, head, m), i, s, n in zip(plan, idx, starts, lens):
            tail = converted.slice(a, b - a)
            if a > done:
                pieces.append(converted.slice(done, a - done))
            whole = tail if head is None else pa.concat_arrays([head, tail])
            pieces.append(whole)
            new_kept[(kgs[i], keys[i], nss[i])] = (entries[s:s + n], whole)
            done = b
        if done < len(converted):
            pieces.append(converted.slice(done))
        self._kept = new_kept
        return pa.concat_arrays(pieces) if pieces else converted
