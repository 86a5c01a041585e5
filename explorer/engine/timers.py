"""Timers: event time and processing time, per key and namespace.

Like Flink's ``InternalTimerService``: registering the same (timestamp, key,
namespace) twice keeps one timer; deleting removes it; timers fire in
timestamp order (ties in registration order) when the watermark (event time)
or the clock (processing time) reaches them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from itertools import compress, repeat
from operator import is_, is_not, itemgetter, not_
from typing import Any, Iterator, NamedTuple

import numpy as np

from ..errors import JobError

EVENT_TIME = "event_time"
PROCESSING_TIME = "processing_time"


class Timer(NamedTuple):
    """A timer as the queue hands it out (a named tuple: one is made per firing)."""

    timestamp: int
    key: Any
    namespace: Any
    key_group: int


class TimerBatch(Sequence):
    """Timers as the queue hands a watermark's due ones out (``pop_all_due_columns``): a
    sequence of :class:`Timer` in firing order, held as four columns (``timestamps``, ``keys``,
    ``namespaces``, ``key_groups``, lists of the same length); a :class:`Timer` is made only
    when one is read as such, so a function reading the columns makes none."""

    __slots__ = ("timestamps", "keys", "namespaces", "key_groups")

    def __init__(self, timestamps: list[int], keys: list[Any], namespaces: list[Any], key_groups: list[int]) -> None:
        self.timestamps, self.keys, self.namespaces, self.key_groups = timestamps, keys, namespaces, key_groups

    def __len__(self) -> int:
        return len(self.timestamps)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return list(map(_new, repeat(Timer), zip(self.timestamps[i], self.keys[i], self.namespaces[i],
                                                      self.key_groups[i])))
        return _new(Timer, (self.timestamps[i], self.keys[i], self.namespaces[i], self.key_groups[i]))

    def __iter__(self) -> Iterator[Timer]:
        return map(_new, repeat(Timer), zip(self.timestamps, self.keys, self.namespaces, self.key_groups))

    def __eq__(self, other: Any) -> bool:
        return list(self) == (list(other) if isinstance(other, TimerBatch) else other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"TimerBatch({len(self)} timers)"


_FIRST, _SECOND, _THIRD = itemgetter(0), itemgetter(1), itemgetter(2)
_new = tuple.__new__  # a Timer from its fields without NamedTuple's Python-level __new__
_INT64_MAX = (1 << 63) - 1
_INT64_MIN = -(1 << 63)

class TimerSnapshot:
    """A :class:`TimerQueue`'s live timers at one moment (:meth:`TimerQueue.snapshot`), iterated
    in firing order."""

    __slots__ = ("_cur", "_buckets")

    def __init__(self, cur: tuple[int, list[tuple[tuple[Any, Any], int]]] | None, buckets: dict[int, Any]) -> None:
        self._cur, self._buckets = cur, buckets

    def __iter__(self) -> Iterator[Timer]:
        pending: dict[int, list[tuple[tuple[Any, Any], int]]] = {}
        if self._cur is not None:
            pending[self._cur[0]] = list(self._cur[1])
        for ts, b in self._buckets.items():
            items = [((b[0], b[1]), b[2])] if type(b) is tuple else b.items()
            if ts in pending:
                pending[ts].extend(items)
            else:
                pending[ts] = items
        new = tuple.__new__
        out: list[Timer] = []
        for ts in sorted(pending):
            out += [new(Timer, (ts, key, ns, kg)) for (key, ns), kg in pending[ts]]
        return iter(out)


class TimerQueue:
    """A deduplicated priority queue of timers of one time domain.

    Timers live in buckets per timestamp, ``timestamp -> {(key, namespace): key_group}`` (a dict,
    so in registration order; a bucket of one timer made as such is the triple ``(key,
    namespace, key_group)``, most are, and a triple is cheaper to make and to read when it fires
    than a dict, or than a pair holding a pair), over the buckets' timestamps in order, one entry
    per bucket made. Registering, deleting or moving a timer is a dict operation; a timestamp
    whose bucket is made is noted (``_fresh``) and put in order with the others when the queue's
    order is next needed (a watermark), only if its bucket still exists then; a deleted timer
    leaves nothing behind but, once its bucket is empty, a timestamp that is skipped when it
    reaches the front. The timestamps in order are a sorted NumPy array (``_sorted`` from
    ``_pos`` on; a watermark's new ones merged in one stable sort, the due ones taken as a prefix
    in one slice) rather than a binary heap (a push and a pop of log n steps per timestamp, in
    Python calls). Firing takes a whole bucket off (so a bucket of many timers is fired in linear
    time) and hands its timers out one by one; timers deleted meanwhile are skipped, timers
    registered meanwhile for that timestamp come after it, and one registered meanwhile for an
    earlier timestamp fires first. The order is
    exactly a heap's of ``(timestamp, registration number)``: timestamps ascending, ties in
    registration order, a timer deleted and registered again taking its new place.
    """

    __slots__ = ("_buckets", "_sorted", "_pos", "_fresh", "_n", "_cur_ts", "_cur", "_cur_live")

    def __init__(self) -> None:
        self._buckets: dict[int, Any] = {}  # a dict of timers, or one timer as (key, namespace, key_group)
        #: bucket timestamps in ascending order from ``_pos`` on (some stale: their bucket went, or
        #: twice); int64, or object (Python ints) once a timestamp does not fit in 64 bits
        self._sorted: np.ndarray = np.empty(0, dtype=np.int64)
        self._pos = 0
        #: timestamps whose bucket was made since the order was last needed: merged then, if their
        #: bucket still exists (a timer moved on before the watermark reached it costs no ordering)
        self._fresh: list[int] = []
        self._n = 0
        #: the bucket being fired: its timestamp, its timers not handed out yet (last first), and
        #: which of them are still registered (``(key, namespace) -> key_group``)
        self._cur_ts: int | None = None
        self._cur: list[tuple[Any, Any]] = []
        self._cur_live: dict[tuple[Any, Any], int] = {}

    def register(self, timestamp: int, key: Any, namespace: Any, key_group: int) -> bool:
        if timestamp == self._cur_ts and (key, namespace) in self._cur_live:
            return False
        b = self._buckets.get(timestamp)
        if b is None:
            self._buckets[timestamp] = (key, namespace, key_group)
            fresh = self._fresh
            fresh.append(timestamp)
            if len(fresh) > 65536 and len(fresh) > 2 * len(self._buckets):  # no watermark for long: stay bounded
                self._drain_fresh()
        elif type(b) is tuple:
            if _same(b, key, namespace):
                return False
            self._buckets[timestamp] = {(b[0], b[1]): b[2], (key, namespace): key_group}
        elif (key, namespace) in b:
            return False
        else:
            b[(key, namespace)] = key_group
        self._n += 1
        return True

    def register_many(self, timestamps: list[int], keys: list[Any], key_groups: list[int], namespace: Any = None) -> None:
        """:meth:`register` of each ``(timestamps[i], keys[i], key_groups[i])`` in order (one namespace)."""
        buckets, fresh = self._buckets, self._fresh
        cur_ts, cur_live = self._cur_ts, self._cur_live
        count = len(timestamps)
        if not cur_live and count > 8 and len(keys) == count == len(key_groups):
            # the timers whose timestamp has no bucket and comes first in the batch (most): their
            # buckets made in one C-level pass; the others (a bucket there already, or a timestamp
            # again) then one by one below, in order. Timers of different timestamps are independent,
            # and each timestamp's timers keep their order (the one making its bucket comes first).
            had = list(map(buckets.__contains__, timestamps))
            new = None
            try:
                arr = np.fromiter(timestamps, dtype=np.int64, count=count)
            except (OverflowError, TypeError, ValueError):  # beyond 64 bits: taken whole only if all new and distinct
                arr = None
            if arr is not None:
                first = np.zeros(count, dtype=bool)
                first[np.unique(arr, return_index=True)[1]] = True
                if any(had):
                    first &= ~np.fromiter(had, dtype=bool, count=count)
                if not first.all():
                    new = first
            elif any(had):
                new = np.zeros(count, dtype=bool)  # one by one
            if new is None:
                ts_new = timestamps
                made = zip(timestamps, zip(keys, repeat(namespace), key_groups))
            else:
                ts_new = list(compress(timestamps, new))
                made = zip(ts_new, zip(compress(keys, new), repeat(namespace), compress(key_groups, new)))
            before = len(buckets)
            buckets.update(made)
            if len(buckets) - before == len(ts_new):
                fresh += ts_new
                self._n += len(ts_new)
                if len(fresh) > 65536 and len(fresh) > 2 * len(buckets):
                    self._drain_fresh()
                    fresh = self._fresh
                if new is None:
                    return
                rest = ~new
                timestamps = list(compress(timestamps, rest))
                keys = list(compress(keys, rest))
                key_groups = list(compress(key_groups, rest))
            else:  # timestamps beyond 64 bits, some twice
                deque(map(buckets.pop, ts_new, repeat(None)), maxlen=0)
        if not cur_live:  # no bucket half fired: nothing to skip
            cur_ts = None
        n = 0
        for ts, key, kg in zip(timestamps, keys, key_groups):
            if ts == cur_ts and (key, namespace) in cur_live:
                continue
            b = buckets.get(ts)
            if b is None:
                buckets[ts] = (key, namespace, kg)
                fresh.append(ts)
                if len(fresh) > 65536 and len(fresh) > 2 * len(buckets):
                    self._drain_fresh()
                    fresh = self._fresh
            elif type(b) is tuple:
                if _same(b, key, namespace):
                    continue
                buckets[ts] = {(b[0], b[1]): b[2], (key, namespace): kg}
            elif (key, namespace) in b:
                continue
            else:
                b[(key, namespace)] = kg
            n += 1
        self._n += n

    def delete(self, timestamp: int, key: Any, namespace: Any) -> bool:
        b = self._buckets.get(timestamp)
        if b is not None and _take(self._buckets, timestamp, b, key, namespace):
            pass
        elif not (timestamp == self._cur_ts and self._cur_live.pop((key, namespace), -1) >= 0):
            return False
        self._n -= 1
        return True

    def delete_many(self, timestamps: list[int], keys: list[Any], namespace: Any = None) -> None:
        """:meth:`delete` of each ``(timestamps[i], keys[i])``."""
        buckets = self._buckets
        count = len(timestamps)
        if not self._cur_live and count > 8 and len(keys) == count:
            # the deletes whose bucket is the one-timer bucket of exactly that timer (most): those
            # buckets go in one C-level pass, the others one by one below. Timers of different
            # timestamps are independent; a timestamp twice, or also among the others, finds the
            # bucket gone after its first delete, as one by one.
            got = list(map(buckets.get, timestamps))
            simple = np.fromiter(map(is_, map(type, got), repeat(tuple)), dtype=bool, count=count)
            whole = simple.all()
            cand, ck = (got, keys) if whole else (list(compress(got, simple)), list(compress(keys, simple)))
            same = np.fromiter(map(is_, map(_FIRST, cand), ck), dtype=bool, count=len(cand))
            same &= np.fromiter(map(is_, map(_SECOND, cand), repeat(namespace)), dtype=bool, count=len(cand))
            if whole and same.all():
                gone = list(map(buckets.pop, timestamps, repeat(None)))
                self._n -= count - gone.count(None)
                return
            simple[simple] = same
            gone = list(map(buckets.pop, compress(timestamps, simple), repeat(None)))
            self._n -= len(gone) - gone.count(None)
            rest = ~simple
            timestamps, keys = list(compress(timestamps, rest)), list(compress(keys, rest))
        n = 0
        for ts, key in zip(timestamps, keys):
            b = buckets.get(ts)
            if b is not None and _take(buckets, ts, b, key, namespace):
                n += 1
            elif ts == self._cur_ts and self._cur_live.pop((key, namespace), -1) >= 0:
                n += 1
        self._n -= n

    def _drain_fresh(self) -> None:
        """The fresh timestamps whose bucket still exists merged into the order (one stable sort
        of the sorted rest followed by them: a merge)."""
        live = list(filter(self._buckets.__contains__, self._fresh))
        self._fresh = []
        if not live:
            return
        try:  # registered timestamps are Python ints (register_many takes them through _ints)
            new = np.fromiter(live, dtype=np.int64, count=len(live)) if set(map(type, live)) <= {int} else None
        except OverflowError:
            new = None
        if new is None or new.dtype != np.int64 or new.shape != (len(live),):  # beyond 64 bits: Python ints
            new = np.empty(len(live), dtype=object)
            new[:] = live
        rest = self._sorted[self._pos:]
        # int64 with object (Python ints) makes object, the int64 ones made Python ints
        merged = np.concatenate([rest, new]) if len(rest) else new
        self._sorted = np.sort(merged, kind="stable")
        self._pos = 0

    def _front(self) -> int | None:
        """The first timestamp in order, as a Python int (stale or not), or None."""
        pos, srt = self._pos, self._sorted
        if pos >= len(srt):
            return None
        return srt[pos] if srt.dtype == object else srt[pos].item()

    def _clean_top(self) -> int | None:
        """The smallest timestamp with a bucket (stale entries passed over), or None."""
        buckets = self._buckets
        if self._fresh:
            self._drain_fresh()
        srt, pos = self._sorted, self._pos
        n = len(srt)
        while pos < n:
            ts = srt[pos]
            ts = ts.item() if srt.dtype != object else ts
            if ts in buckets:
                self._pos = pos
                return ts
            pos += 1
        self._pos = pos
        return None

    def peek_time(self) -> int | None:
        top = self._clean_top()
        if self._cur_live and (top is None or top > self._cur_ts):
            return self._cur_ts
        return top

    def _suspend(self) -> None:
        """Put the rest of the bucket being fired back (an earlier timer was registered meanwhile)."""
        ts, live = self._cur_ts, self._cur_live
        rest = {ident: live[ident] for ident in reversed(self._cur) if ident in live}
        newer = self._buckets.get(ts)
        if newer is not None:
            rest.update(_as_dict(newer))  # registered while the bucket was fired: after the rest
            self._buckets[ts] = rest
        elif rest:
            self._buckets[ts] = rest
            self._fresh.append(ts)
        self._cur_ts, self._cur, self._cur_live = None, [], {}

    def pop_due(self, time: int) -> Timer | None:
        """The next live timer with ``timestamp <= time``, removed; else None."""
        while True:
            cur = self._cur
            if cur:
                ts = self._cur_ts
                if ts > time:
                    return None
                front = self._front()
                top = self._clean_top() if self._fresh or (front is not None and front < ts) else None
                if top is not None and top < ts:
                    self._suspend()
                    continue
                ident = cur.pop()
                kg = self._cur_live.pop(ident, -1)
                if kg < 0:
                    continue
                self._n -= 1
                return Timer(ts, ident[0], ident[1], kg)
            if self._cur_live or self._cur_ts is not None:
                self._cur_ts, self._cur_live = None, {}
            ts = self._clean_top()
            if ts is None or ts > time:
                return None
            self._pos += 1
            live = _as_dict(self._buckets.pop(ts))
            order = list(live)
            order.reverse()
            self._cur_ts, self._cur, self._cur_live = ts, order, live

    def pop_all_due(self, time: int) -> list[Timer]:
        """Every live timer with ``timestamp <= time``, removed, in firing order (whole buckets
        at a time)."""
        return list(self.pop_all_due_columns(time))

    def pop_all_due_columns(self, time: int) -> TimerBatch:
        """:meth:`pop_all_due` as columns: the due timestamps are a prefix of the order, taken in
        one slice, their buckets popped in one pass and read a column at a time (no
        :class:`Timer` made)."""
        if self._cur or self._cur_live:  # a bucket is half fired: hand the rest out one by one first
            pop = self.pop_due
            out: list[Timer] = []
            while (t := pop(time)) is not None:
                out.append(t)
            return TimerBatch(*(list(c) for c in zip(*out))) if out else TimerBatch([], [], [], [])
        if self._fresh:
            self._drain_fresh()
        srt, pos = self._sorted, self._pos
        if srt.dtype == object or _INT64_MIN <= time <= _INT64_MAX:
            end = pos + int(np.searchsorted(srt[pos:], time, side="right"))
        else:
            end = len(srt) if time > 0 else pos
        if end == pos:
            return TimerBatch([], [], [], [])
        due = srt[pos:end].tolist()
        self._pos = end
        buckets = list(map(self._buckets.pop, due, repeat(None)))
        live = list(map(is_not, buckets, repeat(None)))
        if not all(live):  # stale timestamps (their bucket went, or taken already)
            due = list(compress(due, live))
            buckets = list(compress(buckets, live))
        many = list(map(isinstance, buckets, repeat(dict)))  # buckets of several timers
        if not any(many):  # one timer per bucket (the usual case)
            stamps = due
            keys, nss, kgs = list(map(_FIRST, buckets)), list(map(_SECOND, buckets)), list(map(_THIRD, buckets))
        else:  # the runs of one-timer buckets a column at a time, the others timer by timer
            stamps, keys, nss, kgs = [], [], [], []
            prev = 0
            for j in [*compress(range(len(buckets)), many), len(buckets)]:
                run = buckets[prev:j]
                stamps += due[prev:j]
                keys += map(_FIRST, run)
                nss += map(_SECOND, run)
                kgs += map(_THIRD, run)
                if j < len(buckets):
                    b = buckets[j]
                    stamps += repeat(due[j], len(b))
                    keys += map(_FIRST, b)
                    nss += map(_SECOND, b)
                    kgs += b.values()
                prev = j + 1
        self._n -= len(stamps)
        return TimerBatch(stamps, keys, nss, kgs)

    def __len__(self) -> int:
        return self._n

    def __iter__(self) -> Iterator[Timer]:
        """Live timers in firing order (as they are when iteration starts)."""
        return iter(self.snapshot())

    def snapshot(self) -> "TimerSnapshot":
        """The live timers as they are now, for a checkpoint's synchronous phase: the buckets
        copied (a bucket of several timers is a dict the queue changes in place), no timer made
        or put in order; iterating the snapshot later gives what iterating the queue now would."""
        cur = None
        if self._cur_live:
            live = self._cur_live
            cur = (self._cur_ts, [(i, live[i]) for i in reversed(self._cur) if i in live])
        buckets = self._buckets.copy()
        for ts in [ts for ts, b in buckets.items() if type(b) is not tuple]:
            buckets[ts] = buckets[ts].copy()
        return TimerSnapshot(cur, buckets)

    def clear(self) -> None:
        self._buckets.clear()
        self._sorted = np.empty(0, dtype=np.int64)
        self._pos = 0
        self._fresh.clear()
        self._n = 0
        self._cur_ts, self._cur, self._cur_live = None, [], {}


def _as_dict(bucket: Any) -> dict[tuple[Any, Any], int]:
    """A bucket as a dict (a one-timer bucket made one)."""
    return {(bucket[0], bucket[1]): bucket[2]} if type(bucket) is tuple else bucket


def _same(b: tuple, key: Any, namespace: Any) -> bool:
    """Whether one-timer bucket ``b`` is the timer of ``(key, namespace)`` (as the pairs compare)."""
    k, ns = b[0], b[1]
    return (k is key or k == key) and (ns is namespace or ns == namespace)


def _take(buckets: dict, ts: int, b: Any, key: Any, namespace: Any) -> bool:
    """Remove the timer of ``(key, namespace)`` from bucket ``b`` of ``ts`` (and the bucket once
    empty); whether it was there."""
    if type(b) is tuple:
        if not _same(b, key, namespace):
            return False
        del buckets[ts]
        return True
    if b.pop((key, namespace), -1) < 0:
        return False
    if not b:
        del buckets[ts]
    return True


def _ints(timestamps: list[Any]) -> list[int]:
    """``timestamps`` as Python ints (as they are when they all are already)."""
    if set(map(type, timestamps)) <= {int}:
        return timestamps
    return [int(t) for t in timestamps]


class TimerService:
    """What ``ctx.timer_service()`` returns inside a keyed process function."""

    def __init__(self, operator) -> None:
        self._op = operator
        #: set while ``on_timer_batch`` runs: its timers are already off the queue, so it may not delete any
        self.firing_batch = False

    def _no_delete_in_batch(self) -> None:
        raise JobError(f"operator {self._op.name!r}: on_timer_batch deleted an event-time timer; the timers of "
                       "its batch are already taken off the queue, so only on_timer may delete timers")

    def current_processing_time(self) -> int:
        return self._op.clock.now_ms()

    def current_watermark(self) -> int:
        return self._op.current_watermark

    # the four below go straight to the operator's queues for the current key (one call less per
    # timer operation than ``operator.register_timer``; timers are per record in many jobs)
    def register_event_time_timer(self, timestamp: int) -> None:
        op = self._op
        ctx = op.backend.ctx
        op.event_timers.register(int(timestamp), ctx.key, ctx.namespace, ctx.key_group)

    def register_processing_time_timer(self, timestamp: int) -> None:
        op = self._op
        ctx = op.backend.ctx
        op.processing_timers.register(int(timestamp), ctx.key, ctx.namespace, ctx.key_group)

    def delete_event_time_timer(self, timestamp: int) -> None:
        if self.firing_batch:
            self._no_delete_in_batch()
        ctx = self._op.backend.ctx
        self._op.event_timers.delete(int(timestamp), ctx.key, ctx.namespace)

    def register_event_time_timers(self, timestamps: list[int], keys: list[Any], key_groups: list[int]) -> None:
        """``register_event_time_timer(timestamps[i])`` for ``keys[i]`` (in ``key_groups[i]``,
        default namespace), in this order: for ``process_batch``, which has no current key."""
        self._op.event_timers.register_many(_ints(timestamps), keys, key_groups)

    def delete_event_time_timers(self, timestamps: list[int], keys: list[Any]) -> None:
        """``delete_event_time_timer(timestamps[i])`` for ``keys[i]`` (default namespace)."""
        if self.firing_batch:
            self._no_delete_in_batch()
        self._op.event_timers.delete_many(_ints(timestamps), keys)

    def delete_processing_time_timer(self, timestamp: int) -> None:
        ctx = self._op.backend.ctx
        self._op.processing_timers.delete(int(timestamp), ctx.key, ctx.namespace)
