"""Deduplicate events by id, remembering ids for 24 hours (seed 001's ``Deduplicator``).

:class:`Deduplicator` keeps one ``ValueState[bool]`` named ``seen`` per event
id, with state TTL: 24 hours, ``UpdateType.ON_CREATE_AND_WRITE`` (reading a
duplicate does not extend the window), ``StateVisibility.NEVER_RETURN_EXPIRED``
and incremental cleanup. The first occurrence of an id is emitted; repeats
within 24 hours are dropped; an id seen again after its entry expired counts
as new and is emitted again.

TTL runs on processing time, as in Flink. Replaying a few days of history in
a second would expire nothing, so :func:`build` accepts a
:class:`~explorer.pipelines._common.ReplayClock` (also passed to the
environment): the function moves it to each record's event time before
touching state, and TTL then behaves as it did when the events were live.
Without one, TTL follows the environment's clock.

With a replay clock the result equals a plain walk over the input (emit
when the id's last emitted copy is 24 hours old or more) except in one
corner, as in Flink: incremental cleanup may drop an entry at a record time
up to the source's out-of-orderness (5 s) later than a duplicate that
arrives after it, which then counts as new.

::

    source "events" (event time) -> key_by(event_id) -> process "dedup" -> collect "unique"
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Sequence

import numpy as np

from ..engine import (
    CleanupStrategies,
    IncrementalCleanup,
    KeyedProcessFunction,
    StateTtlConfig,
    StateVisibility,
    StreamEnvironment,
    UpdateType,
    ValueStateDescriptor,
    WatermarkStrategy,
)
from ._common import DAY, DEFAULT_START_MS, ReplayClock, arrival_order, as_source, sample_keys

__all__ = ["Deduplicator", "Event", "SEEN", "TTL", "build", "generate"]

TTL = timedelta(hours=24)
TTL_MS = int(TTL.total_seconds() * 1000)
MAX_OUT_OF_ORDERNESS_MS = 5_000
HOT_KEYS = ("evt-retry-storm",)
DEFAULT_RECORDS = 50_000

#: the state of operator ``dedup``: has this id been seen in the last 24 hours?
SEEN = ValueStateDescriptor(
    "seen",
    bool,
    ttl=StateTtlConfig(
        TTL,
        update_type=UpdateType.ON_CREATE_AND_WRITE,
        visibility=StateVisibility.NEVER_RETURN_EXPIRED,
        cleanup=CleanupStrategies(incremental=IncrementalCleanup(cleanup_size=5, run_cleanup_for_every_record=False)),
    ),
)


@dataclass(frozen=True, slots=True)
class Event:
    event_id: str
    ts: int
    source: str
    payload: str


def timestamp_of(event: Event) -> int:
    return event.ts


class Deduplicator(KeyedProcessFunction):
    """Emit the first occurrence of each id; forget ids after 24 hours (state TTL)."""

    def __init__(self, replay_clock: ReplayClock | None = None) -> None:
        self.replay_clock = replay_clock

    def open(self, ctx):
        self.seen = ctx.get_state(SEEN)

    def process_element(self, event: Event, ctx, out):
        if self.replay_clock is not None:
            self.replay_clock.follow(ctx.timestamp())
        if self.seen.value() is None:
            self.seen.update(True)
            out.collect(event)


# --- input -------------------------------------------------------------------------------
_SOURCES = np.array(["web", "ios", "android", "partner-api"], dtype=object)


def generate(
    n: int = DEFAULT_RECORDS,
    *,
    keys: int | None = None,
    zipf_s: float = 1.1,
    hot_keys: Sequence[str] = HOT_KEYS,
    hot_share: float = 0.2,
    seed: int = 0,
    start_ms: int = DEFAULT_START_MS,
    duration_ms: int = 3 * DAY,
    max_out_of_orderness_ms: int = MAX_OUT_OF_ORDERNESS_MS,
) -> list[Event]:
    """``n`` deliveries of events over ``duration_ms`` (3 days), with duplicates.

    Ids are drawn from ``keys`` distinct ids (default ``n // 2``) by the skew
    model, so most ids are delivered once, some a few times, and the Zipf
    head and the planted retry storm (``evt-retry-storm``) thousands of times
    across all three days, so they are re-emitted once their 24 hours expire.
    Delivery times are uniform over the window; the id space grows with
    ``n`` without bound.
    """
    rng = np.random.default_rng(seed)
    n_ids = max(1, n // 2) if keys is None else int(keys)
    ids = [f"evt-{seed}-{i:08d}" for i in range(n_ids)]
    event_ids = sample_keys(rng, n, ids, zipf_s=zipf_s, hot_keys=hot_keys, hot_share=hot_share)
    ts = rng.integers(start_ms, start_ms + max(1, duration_ms), n)
    src = rng.choice(_SOURCES, n)
    arrive, ts_a = arrival_order(rng, ts, event_ids, max_out_of_orderness_ms)
    e, s = event_ids[arrive].tolist(), src[arrive].tolist()
    return [Event(e[i], t, s[i], f"payload-{e[i]}") for i, t in enumerate(ts_a.tolist())]


# --- job ---------------------------------------------------------------------------------
def build(
    env: StreamEnvironment,
    records: Sequence[Event],
    *,
    replay_clock: ReplayClock | None = None,
    max_out_of_orderness_ms: int = MAX_OUT_OF_ORDERNESS_MS,
    num_splits: int = 1,
) -> None:
    """Wire the job onto ``env``. Pass ``replay_clock`` (the one ``env`` was made with) to
    measure TTL in event time; ``build`` uses ``env.clock`` itself when it is a ReplayClock."""
    if replay_clock is None and isinstance(env.clock, ReplayClock):
        replay_clock = env.clock
    wm = WatermarkStrategy.for_bounded_out_of_orderness(max_out_of_orderness_ms).with_timestamp_assigner(timestamp_of)
    (
        env.from_source(as_source(records, num_splits), wm, name="events", uid="events")
        .key_by("event_id")
        .process(Deduplicator(replay_clock), name="dedup", uid="dedup")
        .collect("unique")
    )


def key_of(event: Event) -> str:
    return event.event_id
