"""Session summaries per user, closed by a 30-minute inactivity timer (seed 000).

:class:`SessionWindowFunction` is the seed's ``SessionWindowFunction`` in Python, a plain keyed process
function: per user, the open session's events in a ``ListState[Event]`` named ``session`` and its end in
a ``ValueState[int]`` named ``sessionEnd``; every event deletes the pending event-time timer and registers
a new one 30 minutes after it; when the timer fires the session is summarised and the state cleared.

One thing the seed leaves to chance is handled explicitly: an event that arrives 30 minutes or more after
the session's last event, before the watermark has fired the old timer (both can be in one batch), closes
the old session first instead of extending it. The result is then the same however the input is batched
or partitioned: per user, sessions split at gaps of 30 minutes or more.

The engine's benchmarks run the same job column-wise, a batch of records at a time:
:mod:`explorer.pipelines.sessions_batch` (``BatchSessionWindowFunction``, a subclass of this one). Both
must give the same output, state and timers for the same input, and the tests compare them; this module
is the one to read.

::

    source "events" (bounded out-of-orderness) -> key_by(user_id) -> process "sessions" -> collect "sessions"
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..engine import (
    KeyedProcessFunction,
    ListStateDescriptor,
    StreamEnvironment,
    ValueStateDescriptor,
    WatermarkStrategy,
)
from ._common import DEFAULT_START_MS, HOUR, MINUTE, arrival_order, factorize, as_source, key_names, sample_keys

__all__ = ["Event", "SESSION_GAP_MS", "SessionSummary", "SessionWindowFunction", "build", "generate"]

#: inactivity that ends a session
SESSION_GAP_MS = 30 * MINUTE
MAX_OUT_OF_ORDERNESS_MS = 5_000
HOT_KEYS = ("bot-crawler-1",)
DEFAULT_RECORDS = 50_000

KINDS = ("view", "click", "add_to_cart", "purchase")
_KIND_P = (0.62, 0.28, 0.07, 0.03)
PAGES = ("/", "/search", "/product", "/cart", "/checkout", "/account", "/help")


@dataclass(frozen=True, slots=True)
class Event:
    """A user's interaction."""

    user_id: str
    ts: int
    kind: str
    page: str


@dataclass(frozen=True, slots=True)
class SessionSummary:
    """What the job emits when a session ends."""

    user_id: str
    session_id: str
    start_ms: int
    end_ms: int
    events: int
    purchases: int


def timestamp_of(event: Event) -> int:
    return event.ts


def summarize(user_id: str, events: list[Event]) -> SessionSummary:
    times = [e.ts for e in events]
    start = min(times)
    return SessionSummary(user_id, f"{user_id}@{start}", start, max(times), len(events),
                          [e.kind for e in events].count("purchase"))


class SessionWindowFunction(KeyedProcessFunction):
    """Per-user sessions with an inactivity gap (30 minutes unless told otherwise)."""

    SESSION = ListStateDescriptor("session", Event)
    SESSION_END = ValueStateDescriptor("sessionEnd", int)

    def __init__(self, gap_ms: int = SESSION_GAP_MS) -> None:
        if gap_ms <= 0:
            raise ValueError(f"the session gap must be positive, found {gap_ms} ms")
        self.gap_ms = int(gap_ms)

    def open(self, ctx):
        self.session = ctx.get_list_state(self.SESSION)
        self.session_end = ctx.get_state(self.SESSION_END)

    def process_element(self, event: Event, ctx, out):
        timers = ctx.timer_service()
        end = self.session_end.value()
        if end is not None and event.ts >= end:
            # the gap has passed, but the watermark has not fired the timer yet: close the session first
            timers.delete_event_time_timer(end)
            self._close(ctx, out)
            end = None
        self.session.add(event)
        new_end = event.ts + self.gap_ms
        if end is not None:
            if new_end <= end:  # an out-of-order event inside the session: its timer stays
                return
            timers.delete_event_time_timer(end)
        timers.register_event_time_timer(new_end)
        self.session_end.update(new_end)

    def on_timer(self, timestamp: int, ctx, out):
        if self.session_end.value() == timestamp:  # (a timer of a session closed early is stale)
            self._close(ctx, out)

    def _close(self, ctx, out) -> None:
        """Emit the session's summary and clear its state."""
        events = self.session.get()
        if events:
            out.collect(summarize(ctx.get_current_key(), events))
        self.session.clear()
        self.session_end.clear()


# --- input -------------------------------------------------------------------------------
def generate(
    n: int = DEFAULT_RECORDS,
    *,
    keys: int | Sequence[str] = 1000,
    zipf_s: float = 1.1,
    hot_keys: Sequence[str] = HOT_KEYS,
    hot_share: float = 0.2,
    seed: int = 0,
    start_ms: int = DEFAULT_START_MS,
    duration_ms: int = 12 * HOUR,
    max_out_of_orderness_ms: int = MAX_OUT_OF_ORDERNESS_MS,
) -> list[Event]:
    """``n`` events over ``duration_ms`` in (bounded out-of-order) arrival order.

    Each user's events are bursts: a user starts a visit, acts every few
    seconds to minutes, and comes back after a break of half an hour to a few
    hours, so sessions form and close naturally. Busy users (the Zipf head,
    the planted bot) make long sessions with big ``session`` list state;
    session ids (user @ start) form an unbounded key space downstream.
    """
    rng = np.random.default_rng(seed)
    if n <= 0:
        return []
    users = sample_keys(rng, n, key_names(keys, "user-"), zipf_s=zipf_s, hot_keys=hot_keys, hot_share=hot_share)
    # per user: a start in the window, then gaps; some gaps are breaks (> 30 min)
    codes, uniq = factorize(users)
    order = np.argsort(codes, kind="stable")
    sc = codes[order]
    first = np.r_[True, sc[1:] != sc[:-1]]
    per_user = np.bincount(sc, minlength=len(uniq))
    # within a visit: a few seconds to a minute apart; about four breaks (> 30 min) per user
    in_visit = np.minimum(MINUTE, 0.5 * duration_ms / np.maximum(per_user, 1))[sc]
    gaps = rng.exponential(1.0, n) * in_visit
    p_break = np.minimum(0.5, 4.0 / np.maximum(per_user, 1))[sc]
    is_break = rng.random(n) < p_break
    gaps = np.where(is_break, SESSION_GAP_MS + rng.exponential(1.5 * HOUR, n), gaps)
    gaps = gaps.astype(np.int64) + max_out_of_orderness_ms  # keep one user's events apart
    starts = rng.integers(0, max(1, duration_ms // 4), len(uniq))[sc]
    gaps[first] = 0
    cum = np.cumsum(gaps)
    base = np.maximum.accumulate(np.where(first, cum, 0))
    ts_sorted = start_ms + starts + (cum - base)
    ts = np.empty(n, dtype=np.int64)
    ts[order] = ts_sorted
    kinds = rng.choice(np.array(KINDS, dtype=object), n, p=_KIND_P)
    pages = rng.choice(np.array(PAGES, dtype=object), n)
    arrive, ts_a = arrival_order(rng, ts, users, max_out_of_orderness_ms)
    u, k, p = users[arrive].tolist(), kinds[arrive].tolist(), pages[arrive].tolist()
    return [Event(u[i], t, k[i], p[i]) for i, t in enumerate(ts_a.tolist())]


# --- job ---------------------------------------------------------------------------------
def build(
    env: StreamEnvironment,
    records: Sequence[Event],
    *,
    gap_ms: int = SESSION_GAP_MS,
    max_out_of_orderness_ms: int = MAX_OUT_OF_ORDERNESS_MS,
    num_splits: int = 1,
) -> None:
    """Wire the job onto ``env``: event time from ``Event.ts`` with bounded out-of-orderness.
    (``sessions_batch.build`` wires the same job with the batch function.)"""
    wm = WatermarkStrategy.for_bounded_out_of_orderness(max_out_of_orderness_ms).with_timestamp_assigner(timestamp_of)
    (
        env.from_source(as_source(records, num_splits), wm, name="events", uid="events")
        .key_by("user_id")
        .process(SessionWindowFunction(gap_ms), name="sessions", uid="sessions")
        .collect("sessions")
    )


def key_of(event: Event) -> str:
    return event.user_id
