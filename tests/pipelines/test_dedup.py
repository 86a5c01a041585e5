"""dedup: first occurrences under a 24-hour TTL equal a plain walk with a dict of last-emitted times."""

from __future__ import annotations

from collections import Counter

import pytest

from explorer.engine import ManualClock, StateVisibility, StreamEnvironment, UpdateType
from explorer.pipelines import ReplayClock, dedup
from explorer.pipelines.dedup import Event

H = 3_600_000
T0 = 1_767_258_000_000


def expected_unique(events, ttl_ms=24 * H):
    emitted_at: dict[str, int] = {}
    out = []
    for e in events:
        w = emitted_at.get(e.event_id)
        if w is None or w + ttl_ms <= e.ts:  # expired exactly at last write + TTL
            out.append(e)
            emitted_at[e.event_id] = e.ts
    return out


def run(events, parallelism=1, clock=None, **kw):
    env = StreamEnvironment(parallelism=parallelism, clock=clock or ReplayClock(), **kw)
    dedup.build(env, events)
    return env.execute("dedup")


def ev(event_id, hours):
    return Event(event_id, T0 + int(hours * H), "web", "p")


def test_descriptor_is_the_seeds():
    ttl = dedup.SEEN.ttl
    assert dedup.SEEN.name == "seen" and dedup.SEEN.type is bool
    assert ttl.ttl_ms == 24 * H
    assert ttl.update_type is UpdateType.ON_CREATE_AND_WRITE
    assert ttl.visibility is StateVisibility.NEVER_RETURN_EXPIRED
    assert ttl.cleanup.heap_incremental() is not None


def test_duplicates_within_24_hours_are_dropped_and_later_ones_kept():
    events = [
        ev("a", 0),
        ev("b", 1),
        ev("a", 2),  # duplicate
        ev("a", 24 - 1 / 3600_000),  # one millisecond before expiry: duplicate
        ev("a", 24),  # exactly 24 h after the first: expired, emitted again
        ev("a", 30),  # within 24 h of the re-emission: duplicate (reads do not extend)
        ev("b", 26),  # b's entry expired at 25 h
    ]
    got = run(events).output("unique")
    assert got == expected_unique(events)
    assert [(e.event_id, e.ts - T0) for e in got] == [("a", 0), ("b", H), ("a", 24 * H), ("b", 26 * H)]


def test_reading_a_duplicate_does_not_extend_the_ttl():
    # OnCreateAndWrite: duplicates only read; the window counts from the write
    events = [ev("x", 0), ev("x", 20), ev("x", 23), ev("x", 24.5)]
    assert [e.ts - T0 for e in run(events).output("unique")] == [0, int(24.5 * H)]


@pytest.mark.parametrize("parallelism", [1, 3])
def test_generated_input_matches_a_plain_walk(parallelism):
    events = dedup.generate(6000, seed=3)
    got = run(events, parallelism).output("unique")
    expected = expected_unique(events)
    assert Counter(got) == Counter(expected)
    # the hot ids span three days, so they were emitted again after expiry
    assert Counter(e.event_id for e in expected)["evt-retry-storm"] >= 3
    assert len({e.event_id for e in events}) < len(expected) < len(events)


def test_independent_of_batching():
    events = dedup.generate(3000, seed=4)
    assert Counter(run(events, 1, batch_size=3).output("unique")) == Counter(run(events, 3).output("unique"))


def test_state_carries_last_access_in_event_time():
    events = [ev("a", 0), ev("b", 5), ev("a", 6)]
    state = run(events).state("dedup", "seen")
    assert dict(zip(state.key, state.last_access)) == {"a": T0, "b": T0 + 5 * H}
    assert state.value.tolist() == [True, True]


def test_without_a_replay_clock_ttl_follows_processing_time():
    # the clock never moves: nothing expires during the run, every id is emitted once
    events = [ev("a", 0), ev("a", 48), ev("b", 49), ev("a", 96)]
    got = run(events, clock=ManualClock(0)).output("unique")
    assert [(e.event_id, e.ts) for e in got] == [("a", T0), ("b", T0 + 49 * H)]


def test_replay_clock_is_shared_by_the_copies_of_the_function():
    import copy

    clock = ReplayClock()
    fn = dedup.Deduplicator(clock)
    assert copy.deepcopy(fn).replay_clock is clock
    clock.follow(5)
    clock.follow(None)
    assert clock.now_ms() == 5
