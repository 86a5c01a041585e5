"""The fast path of :mod:`explorer.pipelines.sessions`: the same job, column-wise, for the engine's
batches and the benchmarks.

:class:`BatchSessionWindowFunction` is :class:`~explorer.pipelines.sessions.SessionWindowFunction` (read
that first: it is the seed's function, one event and one timer at a time) plus ``process_batch`` and
``on_timer_batch`` (``engine.functions.KeyedProcessFunction``), which take a whole batch of records or of
due timers at once with NumPy: per distinct key the session end is read once and the session list, the end
and the timer written once. Both must give the same output, the same state and the same timers in the same
order for the same input, however it is batched; ``tests/pipelines/test_sessions.py`` runs the two
functions and the two paths of this one side by side and compares them.

Run a batch at a time, the function also keeps, per open session, its start, end, event count and
purchases (:class:`OpenSessions`) as it appends the events, so a closing session is summarised from those
figures instead of reading its events back. They are not state: the ``session`` list and ``sessionEnd`` are
written as the readable function writes them (the layout a snapshot shows is the same), nothing of the
figures is checkpointed, and a session they do not cover (open at a restore) is summarised from its list.

:func:`build` wires the job as :func:`~explorer.pipelines.sessions.build` does, with this function; the
pipeline registry (``PIPELINES["sessions"]``) and the benchmarks run it.
"""

from __future__ import annotations

from collections import deque
from itertools import chain, compress, repeat
from operator import attrgetter, eq, is_not, itemgetter
from typing import Sequence

import numpy as np

from ..engine import StreamEnvironment, TimerBatch, WatermarkStrategy
from ._common import as_source
from .sessions import (
    MAX_OUT_OF_ORDERNESS_MS,
    SESSION_GAP_MS,
    Event,
    SessionSummary,
    SessionWindowFunction,
    summarize,
)

__all__ = ["BatchSessionWindowFunction", "OpenSessions", "build", "make_summaries", "summarize_many"]

_TS = attrgetter("ts")  # sessions.timestamp_of, without a Python call per record
_KIND_OF = attrgetter("kind")
_TIMESTAMP, _KEY, _KEY_GROUP = itemgetter(0), itemgetter(1), itemgetter(3)  # of a Timer


def summarize_many(user_ids: list[str], sessions: list[list[Event]]) -> list[SessionSummary]:
    """``summarize`` of each ``(user_ids[i], sessions[i])`` (none empty), column-wise: the
    timestamps and kinds of all the sessions' events read in one pass each, start, end, count
    and purchases per session by NumPy reductions over the concatenation."""
    counts = list(map(len, sessions))
    flat = list(chain.from_iterable(sessions))
    # both fields read a few hundred events at a time: the second read finds the event in the cache
    # (the events of many sessions lie all over memory, and a cache miss per read is most of the cost)
    stamps: list = []
    kinds: list = []
    for i in range(0, len(flat), 256):
        chunk = flat[i:i + 256]
        stamps += map(_TS, chunk)
        kinds += map(_KIND_OF, chunk)
    times = np.array(stamps)
    if times.dtype != np.int64 or times.shape != (len(flat),) or not all(counts):
        return [summarize(u, events) for u, events in zip(user_ids, sessions)]
    offsets = np.zeros(len(counts), dtype=np.int64)
    np.cumsum(counts[:-1], out=offsets[1:])
    starts = np.minimum.reduceat(times, offsets).tolist()
    ends = np.maximum.reduceat(times, offsets).tolist()
    purchase = np.fromiter(map(eq, kinds, repeat("purchase")), dtype=bool, count=len(flat))
    purchases = np.add.reduceat(purchase.astype(np.int64), offsets).tolist()
    return make_summaries(user_ids, starts, ends, counts, purchases)



_SUMMARY_FIELDS = tuple(getattr(SessionSummary, f).__set__
                        for f in ("user_id", "session_id", "start_ms", "end_ms", "events", "purchases"))



def make_summaries(user_ids: list[str], starts: list[int], ends: list[int], counts: list[int],
                   purchases: list[int]) -> list[SessionSummary]:
    """``SessionSummary(user, f"{user}@{start}", start, end, count, purchases)`` of each, built a
    field at a time over all of them (the frozen dataclass's ``__init__`` sets its six fields
    through ``object.__setattr__``, a Python call each; the fields' slot descriptors set them
    the same way, from C)."""
    objs = list(map(object.__new__, repeat(SessionSummary, len(user_ids))))
    ids = [f"{u}@{t}" for u, t in zip(user_ids, starts)]  # an f-string: no format string parsed per id
    for field, column in zip(_SUMMARY_FIELDS, (user_ids, ids, starts, ends, counts, purchases)):
        deque(map(field, objs, column), maxlen=0)
    return objs



class OpenSessions:
    """Per key, what closing its open session emits besides the key - the earliest and latest
    timestamp, the number of events and of purchases - kept up to date as ``process_batch``
    appends the events to the ``session`` list, so a session is summarised without reading its
    events again (they lie all over memory by then; reading them back was a third of the job).

    Not state: nothing of it is checkpointed, and the ``session`` list and ``sessionEnd`` stay
    the state, written exactly as before. A function starts without it (``open``) and a session
    it does not cover (begun before a restore, or touched by ``process_element``/``on_timer``)
    is read from its list as before. Columns in NumPy arrays, a slot per key; a key keeps its
    slot after its session closes (marked not valid, and ``empty``: the function cleared the
    key's state, so its session end is known to be none without reading it), and slots of keys without an open session
    are dropped when they outnumber the rest."""

    __slots__ = ("slots", "start", "end", "events", "purchases", "valid", "empty", "size", "limit", "by_code",
                 "by_id")

    def __init__(self, capacity: int = 1024) -> None:
        self.slots: dict = {}
        self.size = 0
        #: slots made before those of keys without an open session are dropped
        self.limit = 1 << 20
        self.start = np.zeros(capacity, dtype=np.int64)
        self.end = np.zeros(capacity, dtype=np.int64)
        self.events = np.zeros(capacity, dtype=np.int64)
        self.purchases = np.zeros(capacity, dtype=np.int64)
        #: whether the slot's figures are those of the key's whole open session
        self.valid = np.zeros(capacity, dtype=bool)
        #: whether the key has no open session, as the function left it (its state cleared)
        self.empty = np.zeros(capacity, dtype=bool)
        #: per key dictionary (by id): the slot of each of its codes, -1 for none yet
        self.by_code: dict[int, np.ndarray] = {}
        #: the keys of ``slots`` when last looked at: their ids sorted, and each one's slot (see
        #: :meth:`slots_by_identity`); None until needed, and again when slots are renumbered
        self.by_id: tuple[np.ndarray, np.ndarray] | None = None

    def slots_of(self, keys: list, codes: np.ndarray | None = None, dictionary=None) -> np.ndarray:
        """Each key's slot (distinct keys); keys without one get a fresh slot, not valid. With
        the keys' ``codes`` in their ``dictionary`` (``KeyedRecords.unique_codes`` and
        ``key_dictionary``), a key seen before in that dictionary is found by its code, without
        a lookup by key."""
        if codes is None or dictionary is None:
            return self._slots_by_key(keys)
        table = self.by_code.get(dictionary.id)
        top = int(codes.max()) + 1 if len(codes) else 0
        if table is None or len(table) < top:
            grown = np.full(max(1024, top + top // 2), -1, dtype=np.int64)
            if table is not None:
                grown[:len(table)] = table
            elif len(self.by_code) >= 4:  # a few dictionaries (upstream subtasks) at a time
                self.by_code.clear()
            table = self.by_code[dictionary.id] = grown
        got = table[codes]
        missing = np.flatnonzero(got < 0)
        if len(missing):
            size = self.size
            found = self._slots_by_key(list(map(keys.__getitem__, missing.tolist())))
            if self.size < size:  # the slots were renumbered meanwhile (closed ones dropped)
                return self._slots_by_key(keys)
            got[missing] = found
            table[codes[missing]] = found
        return got

    def slots_by_identity(self, keys: Sequence) -> np.ndarray:
        """Each key's slot, -1 for none (keys may repeat; none gets a slot). A key that is the very
        object ``slots`` holds (the hash edge hands on the key dictionary's own copies, and timers
        and state keep them) is found by its ``id`` among those of the slots' keys, sorted: no
        string read per key (the keys lie all over memory by the time their timers fire); the
        others by a lookup by key. An id matches only the object itself while ``slots`` holds it,
        and a key leaves ``slots`` only when slots are renumbered, which drops the ids."""
        n = len(keys)
        if self.by_id is None:
            self._index_ids()
        ids, id_slots = self.by_id
        q = np.fromiter(map(id, keys), dtype=np.int64, count=n)
        pos = np.searchsorted(ids, q)
        np.minimum(pos, len(ids) - 1, out=pos)
        hit = ids[pos] == q if len(ids) else np.zeros(n, dtype=bool)
        got = np.where(hit, id_slots[pos] if len(ids) else -1, -1)
        if not hit.all():
            miss = np.flatnonzero(~hit)
            ml = miss.tolist()
            got[miss] = np.fromiter(map(self.slots.get, map(keys.__getitem__, ml), repeat(-1)), dtype=np.int64,
                                    count=len(ml))
            if len(ml) > max(256, n // 8):  # keys given slots since: index them next time
                self.by_id = None
        return got

    def _index_ids(self) -> None:
        n = len(self.slots)
        ids = np.fromiter(map(id, self.slots), dtype=np.int64, count=n)
        order = np.argsort(ids)
        self.by_id = (ids[order], np.fromiter(self.slots.values(), dtype=np.int64, count=n)[order])

    def _slots_by_key(self, keys: list) -> np.ndarray:
        got = np.fromiter(map(self.slots.get, keys, repeat(-1)), dtype=np.int64, count=len(keys))
        missing = np.flatnonzero(got < 0)
        if len(missing):
            k = len(missing)
            if self.size + k > self.limit:
                self._drop_closed()
            new = np.arange(self.size, self.size + k)
            self.size += k
            if self.size > len(self.start):
                self._grow(max(self.size, 2 * len(self.start)))
            added = list(map(keys.__getitem__, missing.tolist()))
            self.slots.update(zip(added, new.tolist()))
            if self.by_id is not None:  # their ids into the index while the keys are at hand
                ids, id_slots = self.by_id
                nid = np.fromiter(map(id, added), dtype=np.int64, count=k)
                o = np.argsort(nid)
                at = np.searchsorted(ids, nid[o])
                self.by_id = (np.insert(ids, at, nid[o]), np.insert(id_slots, at, new[o]))
            got[missing] = new
            self.valid[new] = False
            self.empty[new] = False
        return got

    def _grow(self, capacity: int) -> None:
        for name in ("start", "end", "events", "purchases", "valid", "empty"):
            old = getattr(self, name)
            grown = np.zeros(capacity, dtype=old.dtype)
            grown[:len(old)] = old
            setattr(self, name, grown)

    def _drop_closed(self) -> None:
        """Only the keys with a valid open session keep a slot (renumbered in order)."""
        keys = list(self.slots)
        old = np.fromiter(self.slots.values(), dtype=np.int64, count=len(keys))
        keep = np.flatnonzero(self.valid[old])
        live = old[keep]
        for name in ("start", "end", "events", "purchases", "valid", "empty"):
            col = getattr(self, name)
            col[:len(live)] = col[live]
        self.slots = dict(zip(map(keys.__getitem__, keep.tolist()), range(len(live))))
        self.by_code.clear()  # the slots are renumbered
        self.by_id = None  # (and keys left: their ids may be reused)
        self.size = len(live)
        self.limit = max(1 << 20, 2 * len(live))

    def close(self, slots: np.ndarray) -> None:
        """The sessions in these slots closed (and their state cleared)."""
        self.valid[slots] = False
        self.empty[slots] = True

    def uncover(self, slots: np.ndarray) -> None:
        """The sessions in these slots are no longer covered (whether open or not)."""
        self.valid[slots] = False
        self.empty[slots] = False

    def forget(self, key) -> None:
        """The key's session is no longer covered."""
        s = self.slots.get(key)
        if s is not None:
            self.valid[s] = False
            self.empty[s] = False



class BatchSessionWindowFunction(SessionWindowFunction):
    """:class:`~explorer.pipelines.sessions.SessionWindowFunction` with batch paths (see module doc)."""

    def __init__(self, gap_ms: int = SESSION_GAP_MS, *, ts_is_record_timestamp: bool = False) -> None:
        super().__init__(gap_ms)
        #: whether each record's event-time timestamp is its event's ``ts`` (``build`` assigns them
        #: so): ``process_batch`` then takes the batch's timestamps instead of reading every event again
        self.ts_is_record_timestamp = ts_is_record_timestamp

    def open(self, ctx):
        super().open(ctx)
        self.open_sessions = OpenSessions()

    def process_element(self, event: Event, ctx, out):
        self.open_sessions.forget(ctx.get_current_key())  # this path keeps no figures
        super().process_element(event, ctx, out)

    def _close(self, ctx, out) -> None:
        self.open_sessions.forget(ctx.get_current_key())
        super()._close(ctx, out)

    def process_batch(self, records, ctx, out):
        """``process_element`` for a whole batch, column-wise: per distinct key, the session end
        is read once and the session list, the end and the timer written once; the records are
        walked in arrival order only where a session closes before the watermark closes it (it
        is summarised at that record, with its timestamp).

        Per key, ``process_element`` leaves the end ``max(end before, t + gap)`` over its records
        so far (a closing record's ``t`` is at least that end, so the maximum is its own end),
        and a record closes the session when its ``t`` reaches the end before it. Both are
        running maxima per key: a sort by key and one accumulate, no Python call per record."""
        values, users, groups = records.values, records.uniques, records.unique_key_groups
        n, nu = len(values), len(users)
        if not n:
            return
        stamps = records.timestamps
        ts = np.array(stamps if self.ts_is_record_timestamp and stamps is not None else list(map(_TS, values)))
        codes = records.codes
        if ts.dtype != np.int64 or codes is None or ts.shape != (n,):
            return self._process_batch_records(records, ctx, out)
        purchase = np.fromiter(map(_KIND_OF, values), dtype=object, count=n) == "purchase"
        tmin = int(ts.min())
        span = int(ts.max()) - tmin + 1
        gap = self.gap_ms
        if span * nu >= 1 << 62 or tmin - gap < -(1 << 62) or tmin + span + gap > 1 << 62:
            return self._process_batch_records(records, ctx, out)
        # each key's session end before the batch: a session the open-session figures cover ends at
        # its latest timestamp plus the gap (what ``sessionEnd`` holds), a key whose session this
        # function closed has none; only the others are read
        agg = self.open_sessions
        slots = agg.slots_of(users, records.unique_codes, records.key_dictionary)
        known = agg.valid[slots]
        has0 = known.copy()  # whether the key has a session end before the batch
        e0 = np.where(known, agg.end[slots] + gap, _NO_END)  # that end, _NO_END for none
        unknown = ~(known | agg.empty[slots])
        if unknown.any():
            read = np.flatnonzero(unknown)
            rl = read.tolist()
            got = self.session_end.values_of(list(map(groups.__getitem__, rl)), list(map(users.__getitem__, rl)))
            try:
                e0[read] = np.array([_NO_END if e is None else e for e in got], dtype=np.int64)
            except (OverflowError, TypeError, ValueError):  # an end beyond int64: the record walk
                return self._process_batch_records(records, ctx, out)
            has0[read] = np.fromiter(map(is_not, got, repeat(None)), dtype=bool, count=len(got))
        # the records grouped by key (codes are positions in ``users``), arrival order within a key
        # (as 16-bit codes when they fit: NumPy's stable sort of those is a radix sort, 5x faster)
        order = np.argsort(codes.astype(np.uint16) if nu <= 1 << 16 else codes, kind="stable")
        sc = codes[order].astype(np.int64)
        st = ts[order]
        # the latest timestamp per key up to each record: keys sorted ascending, so offsetting each
        # key's timestamps past the previous key's keeps one running maximum from crossing keys
        base = sc * span - tmin
        upto = np.maximum.accumulate(st + base) - base
        first = np.empty(n, dtype=bool)
        first[0] = True
        np.not_equal(sc[1:], sc[:-1], out=first[1:])
        before = np.empty(n, dtype=np.int64)  # the end before each record, _NO_END for none
        before[0] = 0
        before[1:] = upto[:-1] + gap
        before[first] = _NO_END
        before = np.maximum(before, np.where(has0, e0, _NO_END)[sc])
        has = before != _NO_END
        closes = has & (st >= before)
        moves = ~has | (st + gap > before)  # a close moves the end too: t + gap > t >= before
        starts = np.flatnonzero(first)
        last = np.empty(nu, dtype=np.int64)
        last[:-1] = starts[1:] - 1
        last[-1] = n - 1
        final = np.maximum(upto[last] + gap, np.where(has0, e0, _NO_END))
        # the timers of the keys whose end moved, in the order of their last move
        last_move = np.maximum.reduceat(np.where(moves, order, -1), starts)
        moved = np.flatnonzero(~has0 | (final != e0))
        if len(moved):
            moved = moved[np.argsort(last_move[moved], kind="stable")]
            mv = moved.tolist()
            m_users = list(map(users.__getitem__, mv))
            m_groups = list(map(groups.__getitem__, mv))
            m_ends = final[moved].tolist()
            timers = ctx.timer_service()
            old = moved[has0[moved]]
            if len(old):
                timers.delete_event_time_timers(e0[old].tolist(), list(map(users.__getitem__, old.tolist())))
            timers.register_event_time_timers(m_ends, m_users, m_groups)
            self.session_end.update_many(m_groups, m_users, m_ends)
        # the events per key, in arrival order
        by_key = np.fromiter(values, dtype=object, count=n)[order].tolist()
        bounds = starts.tolist() + [n]
        # the open sessions' figures: what each key's session held before the batch (a key without
        # a session end has an empty list; one whose figures are not kept is not covered)
        covered = known | ~has0
        p_start = np.where(has0, agg.start[slots], _NO_START)
        p_end = np.where(has0, agg.end[slots], _NO_END)
        p_events = np.where(has0, agg.events[slots], 0)
        p_purchases = np.where(has0, agg.purchases[slots], 0)
        sp = purchase[order].astype(np.int64)
        if not closes.any():
            self.session.add_all_many(groups, users, list(map(by_key.__getitem__, map(slice, bounds, bounds[1:]))),
                                      handed_over=True, drawn_from=values)
            agg.start[slots] = np.minimum(p_start, np.minimum.reduceat(st, starts))
            agg.end[slots] = np.maximum(p_end, np.maximum.reduceat(st, starts))
            agg.events[slots] = p_events + np.diff(np.append(starts, n))
            agg.purchases[slots] = p_purchases + np.add.reduceat(sp, starts)
            agg.valid[slots] = covered
            agg.empty[slots] = False
            return
        # keys with a session closed inside the batch: each closed at its record, in arrival order.
        # Segments: each key's records cut at its closing records; a session closed at record p
        # ends with the segment before p (the key's first close: after what it held before)
        cpos = np.flatnonzero(closes)
        cut_at = first.copy()
        cut_at[cpos] = True
        cut = np.flatnonzero(cut_at)
        g_start, g_end = np.minimum.reduceat(st, cut), np.maximum.reduceat(st, cut)
        g_events, g_purchases = np.diff(np.append(cut, n)), np.add.reduceat(sp, cut)
        cu = sc[cpos]
        first_close = np.empty(len(cpos), dtype=bool)
        first_close[0] = True
        np.not_equal(cu[1:], cu[:-1], out=first_close[1:])
        seg = np.searchsorted(cut, cpos) - 1  # the segment before each closing record
        prev = cpos > starts[cu]  # it is the key's (not a segment of the key before)
        seg = np.where(prev, seg, 0)
        c_start = np.where(prev, g_start[seg], _NO_START)
        c_end = np.where(prev, g_end[seg], _NO_END)
        c_events = np.where(prev, g_events[seg], 0)
        c_purchases = np.where(prev, g_purchases[seg], 0)
        fc = first_close
        c_start[fc] = np.minimum(c_start[fc], p_start[cu[fc]])
        c_end[fc] = np.maximum(c_end[fc], p_end[cu[fc]])
        c_events[fc] += p_events[cu[fc]]
        c_purchases[fc] += p_purchases[cu[fc]]
        c_covered = ~fc | covered[cu]
        # each key's open session after the batch: from its last close on, or all it held plus the batch
        last_seg = np.searchsorted(cut, last, side="right") - 1
        has_close = np.zeros(nu, dtype=bool)
        has_close[cu] = True
        agg.start[slots] = np.where(has_close, g_start[last_seg], np.minimum(p_start, g_start[last_seg]))
        agg.end[slots] = np.where(has_close, g_end[last_seg], np.maximum(p_end, g_end[last_seg]))
        agg.events[slots] = np.where(has_close, 0, p_events) + g_events[last_seg]
        agg.purchases[slots] = np.where(has_close, 0, p_purchases) + g_purchases[last_seg]
        agg.valid[slots] = has_close | covered
        agg.empty[slots] = False
        arrival = order[cpos]
        by_arrival = np.argsort(arrival, kind="stable")
        seg_start: dict[int, int] = {}
        closed = []
        figures = []
        c_figs = zip(c_start.tolist(), c_end.tolist(), c_events.tolist(), c_purchases.tolist())
        c_figs = [f if ok else None for f, ok in zip(c_figs, c_covered.tolist())]
        for i, p, u, j in zip(arrival[by_arrival].tolist(), cpos[by_arrival].tolist(), cu[by_arrival].tolist(),
                              by_arrival.tolist()):
            cleared = u in seg_start
            f = c_figs[j]
            closed.append((users[u], groups[u],
                           None if f is not None else by_key[seg_start[u] if cleared else bounds[u]:p], cleared,
                           None if stamps is None else stamps[i]))
            figures.append(f)
            seg_start[u] = p
        self._close_in_batch(closed, out, figures)
        closing = sorted(seg_start)
        self.session.update_many([groups[u] for u in closing], [users[u] for u in closing],
                                 [by_key[seg_start[u]:bounds[u + 1]] for u in closing])
        rest = np.ones(nu, dtype=bool)
        rest[closing] = False
        if rest.any():
            ra = np.flatnonzero(rest)
            rl = ra.tolist()
            self.session.add_all_many(list(map(groups.__getitem__, rl)), list(map(users.__getitem__, rl)),
                                      list(map(by_key.__getitem__, map(slice, starts[ra].tolist(), (last[ra] + 1).tolist()))),
                                      handed_over=True, drawn_from=values)


    def _process_batch_records(self, records, ctx, out):
        """:meth:`process_batch` walking the records one by one (timestamps that are not all
        ints, or span too much of the int64 range for the column-wise path)."""
        users, groups = records.uniques, records.unique_key_groups
        agg = self.open_sessions
        agg.uncover(agg.slots_of(users))  # this path keeps no figures
        gap = self.gap_ms
        # per user: [end now, end before the batch, events added since the list was read or cleared,
        #            whether the stored list was cleared, the record that last moved the timer, key group, user]
        work = {u: [e, e, [], False, -1, g, u]
                for u, g, e in zip(users, groups, self.session_end.values_of(groups, users))}
        stamps = records.timestamps
        for i, (event, user) in enumerate(zip(records.values, records.keys)):
            w = work[user]
            end = w[0]
            t = event.ts
            if end is not None and t >= end:  # the gap has passed before the watermark: close first
                self._close_in_batch([(user, w[5], w[2], w[3], None if stamps is None else stamps[i])], out)
                w[0], w[2], w[3] = None, [], True
                end = None
            w[2].append(event)
            if end is None or t + gap > end:
                w[0] = t + gap
                w[4] = i
        ws = list(work.values())
        # the timers of the users whose session end moved, in the order of their last move
        moved = sorted((w for w in ws if w[0] != w[1]), key=_last_move)
        if moved:
            m_users = [w[6] for w in moved]
            m_groups = [w[5] for w in moved]
            m_ends = [w[0] for w in moved]
            timers = ctx.timer_service()
            old = [(w[1], w[6]) for w in moved if w[1] is not None]
            if old:
                timers.delete_event_time_timers([t for t, _ in old], [u for _, u in old])
            timers.register_event_time_timers(m_ends, m_users, m_groups)
            self.session_end.update_many(m_groups, m_users, m_ends)
        cleared = [(w[5], u, w[2]) for u, w in work.items() if w[3]]
        if cleared:
            self.session.update_many([c[0] for c in cleared], [c[1] for c in cleared], [c[2] for c in cleared])
        if len(cleared) < len(ws):
            kept = [(w[5], u, w[2]) for u, w in work.items() if not w[3]]
            self.session.add_all_many([c[0] for c in kept], [c[1] for c in kept], [c[2] for c in kept])


    def _close_in_batch(self, closed: list[tuple], out, figures: list | None = None) -> None:
        """``_close`` inside ``process_batch`` for sessions closed by the gap, in the order of
        their records: ``(user, key group, events added since the list was read or cleared,
        whether the stored list was cleared, the record's timestamp)`` each, and the session's
        ``(start, end, events, purchases)`` where the open-session figures cover it (``figures``,
        else None: the session is read). The stored list (unless cleared in this batch) and the
        events added since make a session that is read; the stored lists are read in one call,
        the sessions summarised in one."""
        summaries: list = [None] * len(closed)
        read = list(range(len(closed))) if figures is None else [j for j, f in enumerate(figures) if f is None]
        if read:
            first = [j for j in read if not closed[j][3]]
            sessions = {j: closed[j][2] for j in read}
            if first:
                got = self.session.get_many([closed[j][1] for j in first], [closed[j][0] for j in first])
                for j, stored in zip(first, got):
                    if stored:
                        sessions[j] = stored + sessions[j]
            kept = [j for j in read if sessions[j]]
            for j, summary in zip(kept, summarize_many([closed[j][0] for j in kept], [sessions[j] for j in kept])):
                summaries[j] = summary
        if figures is not None:
            fig = [j for j, f in enumerate(figures) if f is not None and f[2]]
            if fig:
                made = make_summaries([closed[j][0] for j in fig], *zip(*(figures[j] for j in fig)))
                for j, summary in zip(fig, made):
                    summaries[j] = summary
        kept = [j for j, summary in enumerate(summaries) if summary is not None]
        if kept:
            out.collect_all_with_timestamps([summaries[j] for j in kept], [closed[j][4] for j in kept])


    def on_timer_batch(self, timers, ctx, out):
        """``on_timer`` for the timers a watermark makes due, in firing order. A session the
        open-session figures cover has its end there (its latest timestamp plus the gap) and is
        summarised from them; the ends of the others are read in one call, and those closing
        read and summarised in one. The closing sessions' state is cleared in one call each."""
        if isinstance(timers, TimerBatch):  # the columns as the queue hands them out
            users, groups, stamps = timers.keys, timers.key_groups, timers.timestamps
        else:
            users = list(map(_KEY, timers))
            groups = list(map(_KEY_GROUP, timers))
            stamps = list(map(_TIMESTAMP, timers))
        agg = self.open_sessions
        slot = agg.slots_by_identity(users)
        covered = slot >= 0
        covered[covered] = agg.valid[slot[covered]]
        if covered.all():
            ends = (agg.end[slot] + self.gap_ms).tolist()
        else:
            ends = np.where(covered, agg.end[slot] + self.gap_ms, 0).tolist()
            read = np.flatnonzero(~covered).tolist()
            for j, e in zip(read, self.session_end.values_of([groups[j] for j in read], [users[j] for j in read])):
                ends[j] = e
        hit = list(map(eq, ends, stamps))  # the timer is the session's end: it closes
        closing = list(range(len(hit))) if all(hit) else list(compress(range(len(hit)), hit))
        if _repeats(slot, users):  # a user twice: later timers see the state the earlier cleared
            seen: set = set()
            closing = [i for i in closing if not (users[i] in seen or seen.add(users[i]))]
        if not closing:
            return
        if len(closing) == len(users):  # every timer closes its session (the usual case)
            c_users, c_groups, c_stamps = list(users), list(groups), list(stamps)
        else:
            c_users = list(map(users.__getitem__, closing))
            c_groups = list(map(groups.__getitem__, closing))
            c_stamps = list(map(stamps.__getitem__, closing))
        c_slot = slot[closing]
        c_covered = covered[closing]
        if c_covered.all():
            self.session.clear_many(c_groups, c_users)
            n = agg.events[c_slot]
            summaries = make_summaries(c_users, agg.start[c_slot].tolist(), agg.end[c_slot].tolist(), n.tolist(),
                                       agg.purchases[c_slot].tolist())
            if not n.all():
                summaries = [summary for summary, k in zip(summaries, n.tolist()) if k]
                c_stamps = [t for t, k in zip(c_stamps, n.tolist()) if k]
        else:
            by_pos: list = [None] * len(closing)
            read = np.flatnonzero(~c_covered).tolist()
            lists = self.session.pop_many([c_groups[j] for j in read], [c_users[j] for j in read])
            kept = [j for j, events in zip(read, lists) if events]
            for j, summary in zip(kept, summarize_many([c_users[j] for j in kept], [e for e in lists if e])):
                by_pos[j] = summary
            fig = np.flatnonzero(c_covered).tolist()
            if fig:
                self.session.clear_many([c_groups[j] for j in fig], [c_users[j] for j in fig])
                cs = c_slot[fig]
                for j, summary in zip(fig, make_summaries([c_users[j] for j in fig], agg.start[cs].tolist(),
                                                          agg.end[cs].tolist(), agg.events[cs].tolist(),
                                                          agg.purchases[cs].tolist())):
                    if summary.events:
                        by_pos[j] = summary
            kept = [j for j, summary in enumerate(by_pos) if summary is not None]
            summaries, c_stamps = [by_pos[j] for j in kept], [c_stamps[j] for j in kept]
        if summaries:
            out.collect_all_with_timestamps(summaries, c_stamps)
        agg.close(c_slot[c_slot >= 0])
        self.session_end.clear_many(c_groups, c_users)



def _repeats(slot: np.ndarray, users: Sequence) -> bool:
    """Whether a user appears twice among ``users``, whose open-session slots are ``slot`` (-1
    for none): equal users have the same slot, so the users with one repeat when their slots
    do (one sort of integers), and the few without one are compared as keys."""
    found = slot >= 0
    if found.all():
        return len(np.unique(slot)) < len(slot)
    some = slot[found]
    if len(np.unique(some)) < len(some):
        return True
    rest = [users[j] for j in np.flatnonzero(~found).tolist()]
    return len(set(rest)) < len(rest)



def _last_move(w: list) -> int:
    return w[4]



#: no session end (below any end a record can make)
_NO_END = -(1 << 63)

#: no session start (above any start a record can make)
_NO_START = (1 << 63) - 1



def build(
    env: StreamEnvironment,
    records: Sequence[Event],
    *,
    gap_ms: int = SESSION_GAP_MS,
    max_out_of_orderness_ms: int = MAX_OUT_OF_ORDERNESS_MS,
    num_splits: int = 1,
) -> None:
    """:func:`explorer.pipelines.sessions.build` with :class:`BatchSessionWindowFunction`, told that the
    records' timestamps are the events' ``ts``."""
    wm = WatermarkStrategy.for_bounded_out_of_orderness(max_out_of_orderness_ms).with_timestamp_assigner(_TS)
    (
        env.from_source(as_source(records, num_splits), wm, name="events", uid="events")
        .key_by("user_id")
        .process(BatchSessionWindowFunction(gap_ms, ts_is_record_timestamp=True), name="sessions", uid="sessions")
        .collect("sessions")
    )
