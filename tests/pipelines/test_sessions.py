"""sessions: summaries equal a plain split of each user's events at 30-minute gaps."""

from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np
import pytest

from explorer.engine import StreamEnvironment
from explorer.pipelines import sessions, sessions_batch
from explorer.pipelines.sessions import Event, SessionSummary

MIN = 60_000
T0 = 1_767_258_000_000  # 2026-01-01T09:00Z


def expected_sessions(events, gap_ms=30 * MIN):
    by_user = defaultdict(list)
    for e in events:
        by_user[e.user_id].append(e)
    out = []
    for user, evs in by_user.items():
        evs.sort(key=lambda e: e.ts)
        current = [evs[0]]
        for prev, e in zip(evs, evs[1:]):
            if e.ts - prev.ts >= gap_ms:
                out.append(current)
                current = []
            current.append(e)
        out.append(current)
    return Counter(
        SessionSummary(
            user_id=s[0].user_id,
            session_id=f"{s[0].user_id}@{s[0].ts}",
            start_ms=s[0].ts,
            end_ms=s[-1].ts,
            events=len(s),
            purchases=sum(e.kind == "purchase" for e in s),
        )
        for s in out
    )


def run(events, parallelism=1, **kw):
    build_kw = {k: kw.pop(k) for k in list(kw) if k in ("gap_ms",)}
    env = StreamEnvironment(parallelism=parallelism, **kw)
    sessions_batch.build(env, events, **build_kw)
    return env.execute("sessions")


@pytest.fixture(scope="module")
def events():
    return sessions.generate(5000, keys=40, seed=11, duration_ms=6 * 60 * MIN)


@pytest.mark.parametrize("parallelism", [1, 3])
def test_sessions_split_at_30_minute_gaps(events, parallelism):
    result = run(events, parallelism)
    got = Counter(result.output("sessions"))
    assert got == expected_sessions(events)
    assert sum(s.events for s in got.elements()) == len(events)
    # every session was closed by its timer, so no state is left
    assert result.state("sessions").empty


def test_independent_of_batching_and_parallelism(events):
    a = Counter(run(events, 1).output("sessions"))
    b = Counter(run(events, 3, batch_size=7).output("sessions"))
    c = Counter(run(events, 2, batch_size=4096).output("sessions"))
    assert a == b == c
    assert len(a) > 40  # users come back: more sessions than users


def test_seed_walkthrough():
    # seed 000: 10:00, 10:15, 10:20 -> one session, its timer fires at 10:50
    evs = [Event("alice", T0 + m * MIN, "view", "/") for m in (60, 75, 80)]
    evs.append(Event("alice", T0 + 150 * MIN, "purchase", "/checkout"))  # 11:30: a new session
    got = run(evs).output("sessions")
    assert got == [
        SessionSummary("alice", f"alice@{T0 + 60 * MIN}", T0 + 60 * MIN, T0 + 80 * MIN, 3, 0),
        SessionSummary("alice", f"alice@{T0 + 150 * MIN}", T0 + 150 * MIN, T0 + 150 * MIN, 1, 1),
    ]


def test_gap_boundary():
    # exactly 30 minutes of silence ends the session; one millisecond less does not
    evs = [
        Event("bob", T0, "view", "/"),
        Event("bob", T0 + 30 * MIN - 1, "view", "/"),
        Event("bob", T0 + 60 * MIN - 1, "view", "/"),
    ]
    got = run(evs).output("sessions")
    assert [(s.start_ms, s.events) for s in got] == [(T0, 2), (T0 + 60 * MIN - 1, 1)]


def test_timer_is_moved_not_added():
    # every event deletes the old timer: at most one pending timer per user
    from explorer.engine.testing import KeyedProcessFunctionHarness

    h = KeyedProcessFunctionHarness(sessions.SessionWindowFunction(), key_selector=lambda e: e.user_id)
    for m in (0, 5, 10):
        h.process_element(Event("carol", T0 + m * MIN, "view", "/"), timestamp=T0 + m * MIN)
    assert [t.timestamp for t in h.timers()] == [T0 + 40 * MIN]
    assert h.state("sessionEnd") == T0 + 40 * MIN
    assert len(h.state("session")) == 3
    h.advance_watermark(T0 + 40 * MIN - 1)
    assert h.output == []
    h.advance_watermark(T0 + 40 * MIN)
    assert [s.events for s in h.output] == [3]
    assert h.state("session") == [] and h.state("sessionEnd") is None


def test_custom_gap():
    evs = [Event("dan", T0 + m * MIN, "view", "/") for m in (0, 6, 20)]
    assert [s.events for s in run(evs, gap_ms=10 * MIN).output("sessions")] == [2, 1]
    with pytest.raises(ValueError, match="gap"):
        sessions.SessionWindowFunction(0)


def test_generator_keeps_each_users_events_in_time_order():
    evs = sessions.generate(3000, keys=30, seed=2)
    last = {}
    for e in evs:
        assert e.ts >= last.get(e.user_id, e.ts)
        last[e.user_id] = e.ts
    # out of order across users, but by less than the watermark's bound
    high = max_seen = evs[0].ts
    for e in evs:
        max_seen = max(max_seen, e.ts)
        assert e.ts > max_seen - sessions.MAX_OUT_OF_ORDERNESS_MS - 1
        high = max(high, max_seen - e.ts)
    assert high > 0
    assert evs == sessions.generate(3000, keys=30, seed=2)


def _run_rounds(events, backend, batch_process, rounds, batch_size, build=sessions_batch.build):
    """The job after ``rounds`` scheduler rounds (None: to the end): outputs, state rows, timers."""
    env = StreamEnvironment(parallelism=1, batch_size=batch_size, state_backend=backend, batch_process=batch_process)
    build(env, events)
    client = env.execute_async()
    client.run(max_rounds=rounds)
    op = client.runtime.subtasks_of("sessions")[0].operator
    timers = [(t.timestamp, t.key, t.key_group) for t in op.event_timers]
    state = client.result().state("sessions")
    rows = sorted(map(repr, state.itertuples(index=False)))
    out = list(client.result().output("sessions"))
    client.close()
    return out, rows, timers


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
@pytest.mark.parametrize("tick", [1, 60_000])
def test_the_batch_path_leaves_what_the_record_path_leaves(events, backend, tick, monkeypatch):
    # process_batch against process_element record by record: the same outputs in the same order,
    # the same state and the same timers in the same firing order, at several points of the run;
    # with timestamps on whole minutes many timers tie, and ties fire in registration order
    events = [Event(e.user_id, e.ts - e.ts % tick, e.kind, e.page) for e in events]
    closes = []
    real = sessions_batch.BatchSessionWindowFunction._close_in_batch
    monkeypatch.setattr(sessions_batch.BatchSessionWindowFunction, "_close_in_batch",
                        lambda self, *a: (closes.append(1), real(self, *a)))
    for rounds in (3, 12, 25, None):
        batched = _run_rounds(events, backend, True, rounds, 256)
        per_record = _run_rounds(events, backend, False, rounds, 256)
        assert batched == per_record
        if rounds == 12:
            assert batched[1] and batched[2]  # mid-run: open sessions and pending timers compared
    assert closes  # sessions closed by the gap inside a batch, before the watermark, were compared too
    assert Counter(batched[0]) == expected_sessions(events)
    if tick > 1:
        assert len({t for t, *_ in batched[2]}) < len(batched[2]) or len(batched[0]) > len({s.end_ms for s in batched[0]})


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_the_readable_function_and_the_fast_path_leave_the_same(events, backend):
    # sessions.SessionWindowFunction (the seed's function, a record and a timer at a time) and
    # sessions_batch's (a batch of records or of timers at a time, the job the registry runs) on the
    # same input: the same outputs in the same order, the same state and the same timers, mid-run too
    events = [Event(e.user_id, e.ts - e.ts % 60_000, e.kind, e.page) for e in events]
    for rounds in (3, 12, None):
        fast = _run_rounds(events, backend, True, rounds, 256)
        readable = _run_rounds(events, backend, True, rounds, 256, build=sessions.build)
        assert readable == fast
        if rounds == 12:
            assert fast[1] and fast[2]  # mid-run: open sessions and pending timers compared
    assert Counter(fast[0]) == expected_sessions(events)
    assert not hasattr(sessions.SessionWindowFunction, "process_batch")  # (the readable one took no batch path)


def test_the_record_walk_of_process_batch_leaves_what_the_record_path_leaves(events, monkeypatch):
    # process_batch walks the records one by one when its column-wise path cannot take the batch
    # (timestamps that are not all ints, or span too much of the int64 range): that walk too
    # leaves exactly what process_element does
    events = [Event(e.user_id, e.ts - e.ts % 60_000, e.kind, e.page) for e in events]
    walk = sessions_batch.BatchSessionWindowFunction._process_batch_records
    monkeypatch.setattr(sessions_batch.BatchSessionWindowFunction, "process_batch", walk)
    for rounds in (12, None):
        assert _run_rounds(events, "heap", True, rounds, 256) == _run_rounds(events, "heap", False, rounds, 256)


def test_timestamps_too_far_apart_for_the_column_path_take_the_record_walk(monkeypatch):
    walked = []
    real = sessions_batch.BatchSessionWindowFunction._process_batch_records
    monkeypatch.setattr(sessions_batch.BatchSessionWindowFunction, "_process_batch_records",
                        lambda self, *a: (walked.append(1), real(self, *a))[1])
    far = 1 << 61
    evs = [Event(u, t, "purchase" if i % 3 == 0 else "view", "/")
           for i, (u, t) in enumerate([("a", T0), ("b", far), ("a", T0 + 31 * MIN), ("b", far + MIN), ("c", -far)])]
    got = Counter(run(evs, batch_size=64).output("sessions"))
    assert walked
    assert got == expected_sessions(evs)


def test_summarize_many_is_summarize_of_each(events):
    by_user = defaultdict(list)
    for e in events:
        by_user[e.user_id].append(e)
    users = sorted(by_user)
    lists = [by_user[u][: 1 + i * 7 % 600] for i, u in enumerate(users)]
    assert sessions_batch.summarize_many(users, lists) == [sessions.summarize(u, evs) for u, evs in zip(users, lists)]
    assert any(s.purchases for s in sessions_batch.summarize_many(users, lists))


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_sessions_are_summarised_from_their_figures_without_reading_their_events(events, backend, monkeypatch):
    # from a fresh start every session is covered by the figures process_batch keeps: none is read
    # back (neither summarised from its events nor popped from the list state), and the summaries
    # are those of the events
    read = []
    monkeypatch.setattr(sessions_batch, "summarize_many", lambda *a: read.append(1) or [])
    got = run(events, batch_size=256, state_backend=backend).output("sessions")
    assert not read
    assert Counter(got) == expected_sessions(events)


def test_a_session_begun_before_a_restore_is_read_from_its_list(events, tmp_path, monkeypatch):
    # the figures are not state: after a restore, the sessions open at the savepoint are read from
    # their lists (as before the figures existed) and the results are still exactly once
    day = 86_400_000
    read = []
    real = sessions_batch.summarize_many
    monkeypatch.setattr(sessions_batch, "summarize_many", lambda *a: read.append(len(a[0])) or real(*a))

    def make():
        env = StreamEnvironment(parallelism=1, batch_size=128)
        env.enable_checkpointing(tmp_path / "chk", interval_records=10**9, timeout_ms=365 * day, asynchronous=False)
        sessions_batch.build(env, events)
        return env

    client = make().execute_async("sessions")
    client.run(until=lambda rt: rt.round >= 12)
    assert not client.finished
    savepoint = client.stop_with_savepoint(tmp_path / "sp")
    first = client.result().output("sessions")
    assert not read
    second = make().execute("sessions", restore_from=savepoint).output("sessions")
    assert read  # the sessions open at the savepoint
    assert Counter(first) + Counter(second) == expected_sessions(events)


def test_the_batch_path_reads_each_events_ts_unless_told_they_are_the_record_timestamps(events):
    # SessionWindowFunction() on its own reads event.ts (its records' timestamps may be others);
    # build() says they are the events' ts. Both leave the same sessions, in the same order
    def job(fn, assign):
        from explorer.engine import WatermarkStrategy

        env = StreamEnvironment(parallelism=1, batch_size=256)
        wm = WatermarkStrategy.for_bounded_out_of_orderness(sessions.MAX_OUT_OF_ORDERNESS_MS).with_timestamp_assigner(assign)
        env.from_collection(events, wm).key_by("user_id").process(fn, name="sessions").collect("sessions")
        return env.execute("sessions").output("sessions")

    told = job(sessions_batch.BatchSessionWindowFunction(ts_is_record_timestamp=True), sessions.timestamp_of)
    assert job(sessions_batch.BatchSessionWindowFunction(), sessions.timestamp_of) == told
    assert Counter(told) == expected_sessions(events)


def test_open_sessions_drop_the_slots_of_closed_sessions():
    agg = sessions_batch.OpenSessions(capacity=4)
    keys = [f"u{i}" for i in range(10)]
    slots = agg.slots_of(keys)
    assert sorted(slots.tolist()) == list(range(10)) and not agg.valid[slots].any()
    agg.start[slots], agg.events[slots] = np.arange(10) * 100, np.arange(10) + 1
    agg.valid[slots] = True
    agg.close(slots[::2])  # u0, u2, ... closed
    assert agg.slots_of(keys).tolist() == slots.tolist()  # kept while there is room
    agg.limit = 12
    fresh = agg.slots_of(["v0", "v1", "v2"])  # past the limit: only the open ones keep a slot
    assert len(agg.slots) == 5 + 3 and agg.size == 8 and agg.limit == 1 << 20
    again = agg.slots_of(keys[1::2])
    assert agg.valid[again].all()
    assert agg.start[again].tolist() == [100, 300, 500, 700, 900] and agg.events[again].tolist() == [2, 4, 6, 8, 10]
    assert not agg.valid[fresh].any() and set(fresh.tolist()).isdisjoint(again.tolist())
    assert not agg.valid[agg.slots_of(["u0"])].any()  # a closed session's key comes back without figures


def test_open_sessions_find_slots_by_dictionary_code_as_by_key():
    from explorer.engine.channels import KeyDictionary

    d = KeyDictionary([f"u{i}" for i in range(2000)])
    by_code, by_key = sessions_batch.OpenSessions(capacity=4), sessions_batch.OpenSessions(capacity=4)
    rng = np.random.default_rng(1)
    for step in range(40):
        codes = rng.choice(2000, size=int(rng.integers(1, 60)), replace=False)
        keys = [d.values[c] for c in codes.tolist()]
        got = by_code.slots_of(keys, codes, d)
        assert got.tolist() == by_code.slots_of(keys).tolist()  # the code's slot is the key's
        assert len(set(got.tolist())) == len(keys)
        by_key.slots_of(keys)
        by_code.valid[got[::2]] = True  # some sessions open, the rest closed
        if step == 25:
            by_code.limit = by_code.size  # the next new key drops the closed ones' slots
    assert by_code.limit == 1 << 20 and set(by_code.slots) <= set(by_key.slots)


def test_open_sessions_find_slots_by_identity_as_by_key():
    # keys that are the objects the slots hold, equal copies of them, keys without a slot, keys
    # given slots after the ids were indexed, repeats, and a renumbering (closed ones dropped)
    agg = sessions_batch.OpenSessions(capacity=4)
    rng = np.random.default_rng(2)
    held = [f"user-{i}" for i in range(3000)]
    for step in range(30):
        fresh = rng.choice(3000, size=int(rng.integers(1, 400)))
        agg.slots_of([held[i] for i in np.unique(fresh).tolist()])
        agg.valid[rng.choice(agg.size, size=agg.size // 2)] = True
        asked = rng.choice(3000, size=int(rng.integers(1, 600))).tolist()
        keys = [held[i] if i % 3 else "".join(held[i]) for i in asked]  # a third equal copies
        keys.append("nobody")
        got = agg.slots_by_identity(keys)
        assert got.tolist() == [agg.slots.get(k, -1) for k in keys]
        if step == 20:
            agg.limit = agg.size  # the next new key renumbers the slots
    assert agg.limit == 1 << 20
