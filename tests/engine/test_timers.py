"""The timer queue against the plainest model of its contract: a list of live timers fired in
(timestamp, registration number) order, with registrations and deletions while it fires."""

from __future__ import annotations

import random

import pytest

from explorer.engine.timers import TimerQueue


class Model:
    def __init__(self) -> None:
        self.live: dict[tuple, tuple[int, int]] = {}  # (ts, key, ns) -> (seq, kg)
        self.seq = 0

    def register(self, ts, key, ns, kg):
        if (ts, key, ns) in self.live:
            return False
        self.seq += 1
        self.live[(ts, key, ns)] = (self.seq, kg)
        return True

    def delete(self, ts, key, ns):
        return self.live.pop((ts, key, ns), None) is not None

    def order(self):
        return [(ts, k, ns, kg) for (ts, k, ns), (seq, kg) in sorted(self.live.items(), key=lambda x: (x[0][0], x[1][0]))]

    def pop_due(self, time):
        o = self.order()
        if not o or o[0][0] > time:
            return None
        ts, k, ns, kg = o[0]
        del self.live[(ts, k, ns)]
        return (ts, k, ns, kg)


@pytest.mark.parametrize("seed", range(40))
def test_the_queue_fires_like_the_model_with_changes_while_firing(seed):
    rng = random.Random(seed)
    q, m = TimerQueue(), Model()
    keys = [f"k{i}" for i in range(rng.choice([3, 12, 40]))]
    span = rng.choice([5, 30, 200])  # few timestamps: big buckets, many ties
    now = 0

    def change():
        ts, k, ns = now + rng.randrange(-3, span), rng.choice(keys), rng.choice([None, None, "w"])
        if rng.random() < 0.6:
            kg = hash(k) % 7
            assert q.register(ts, k, ns, kg) == m.register(ts, k, ns, kg)
        elif rng.random() < 0.5:
            assert q.delete(ts, k, ns) == m.delete(ts, k, ns)
        else:  # delete something live
            if m.live:
                t, k2, n2 = rng.choice(sorted(m.live, key=repr))
                assert q.delete(t, k2, n2) and m.delete(t, k2, n2)
        if rng.random() < 0.1:
            batch = [(now + rng.randrange(0, span), rng.choice(keys)) for _ in range(rng.randrange(1, 6))]
            if rng.random() < 0.5:
                q.register_many([t for t, _ in batch], [k for _, k in batch], [hash(k) % 7 for _, k in batch])
                for t, k in batch:
                    m.register(t, k, None, hash(k) % 7)
            else:
                q.delete_many([t for t, _ in batch], [k for _, k in batch])
                for t, k in batch:
                    m.delete(t, k, None)

    for _ in range(60):
        for _ in range(rng.randrange(0, 30)):
            change()
        assert [(t.timestamp, t.key, t.namespace, t.key_group) for t in q] == m.order()
        assert len(q) == len(m.live)
        assert q.peek_time() == (m.order()[0][0] if m.live else None)
        now += rng.randrange(0, span)
        if rng.random() < 0.3:  # a whole watermark's timers at once
            got_all = [(t.timestamp, t.key, t.namespace, t.key_group) for t in q.pop_all_due(now)]
            want_all = []
            while (w := m.pop_due(now)) is not None:
                want_all.append(w)
            assert got_all == want_all
        while True:  # fire what is due, changing the queue between firings as on_timer may
            got = q.pop_due(now)
            want = m.pop_due(now)
            assert (None if got is None else (got.timestamp, got.key, got.namespace, got.key_group)) == want
            if got is None:
                break
            if rng.random() < 0.5:
                change()
        assert [(t.timestamp, t.key, t.namespace, t.key_group) for t in q] == m.order()


def test_a_big_bucket_fires_in_linear_time_in_registration_order():
    q = TimerQueue()
    n = 200_000
    for i in range(n):
        q.register(1000, i, None, i % 128)
    for i in range(0, n, 2):
        q.delete(1000, i, None)
    fired = []
    while (t := q.pop_due(1000)) is not None:
        fired.append(t.key)
    assert fired == list(range(1, n, 2))
    assert len(q) == 0 and q.peek_time() is None


def test_a_watermarks_timers_come_out_as_columns_in_firing_order():
    # pop_all_due_columns: one-timer buckets, a bucket of several (ties in registration order),
    # a timer moved before it was due (its old timestamp left stale) and one not due yet
    q = TimerQueue()
    q.register_many([30, 10, 20, 10, 50], ["a", "b", "c", "d", "e"], [1, 2, 3, 4, 5])
    q.delete(30, "a", None)
    q.register(40, "a", None, 1)
    q.register(20, "f", "w", 6)
    due = q.pop_all_due_columns(45)
    assert due.timestamps == [10, 10, 20, 20, 40]
    assert due.keys == ["b", "d", "c", "f", "a"] and due.namespaces == [None, None, None, "w", None]
    assert due.key_groups == [2, 4, 3, 6, 1]
    assert list(due) == [(10, "b", None, 2), (10, "d", None, 4), (20, "c", None, 3), (20, "f", "w", 6), (40, "a", None, 1)]
    assert due[-1].timestamp == 40 and due[1:3] == list(due)[1:3] and len(due) == 5
    assert len(q) == 1 and q.peek_time() == 50 and not q.pop_all_due_columns(49)


def test_timestamps_beyond_64_bits_keep_their_order():
    q = TimerQueue()
    big = 1 << 70
    for ts, k in [(big, "a"), (5, "b"), (-big, "c"), (big - 1, "d"), (5, "e")]:
        q.register(ts, k, None, 0)
    assert q.peek_time() == -big
    got = q.pop_all_due_columns(big - 1)
    assert got.timestamps == [-big, 5, 5, big - 1] and got.keys == ["c", "b", "e", "d"]
    q.register(7, "f", None, 1)  # a 64-bit one after Python ints
    assert [(t.timestamp, t.key) for t in q.pop_all_due(big)] == [(7, "f"), (big, "a")]
    assert len(q) == 0 and q.peek_time() is None


@pytest.mark.parametrize("seed", range(12))
def test_registering_many_at_once_is_registering_each_in_turn(seed):
    # batches of new timestamps (taken in one pass), with a timestamp twice in the batch, or one
    # that has a bucket already, or a timer registered again: the same queue as one by one
    rng = random.Random(seed)
    bulk, single = TimerQueue(), TimerQueue()
    for round_ in range(30):
        n = rng.randrange(5, 40)
        base = round_ * 1000
        ts = [base + rng.randrange(0, 5000 if rng.random() < 0.5 else 10 ** 6) for _ in range(n)]
        keys = [f"k{rng.randrange(50)}" for _ in range(n)]
        kgs = [hash(k) % 7 for k in keys]
        bulk.register_many(ts, keys, kgs)
        for t, k, g in zip(ts, keys, kgs):
            single.register(t, k, None, g)
        assert list(bulk) == list(single) and len(bulk) == len(single)
        now = base + rng.randrange(0, 3000)
        assert bulk.pop_all_due(now) == single.pop_all_due(now)


@pytest.mark.parametrize("seed", range(8))
def test_deleting_many_at_once_is_deleting_each_in_turn(seed):
    # batches of deletes that are all one-timer buckets of exactly those timers (taken in one pass),
    # or with a timestamp twice, a timer not there, a key equal but not the same object, a bucket of
    # several: the same queue as one by one
    rng = random.Random(seed)
    bulk, single = TimerQueue(), TimerQueue()
    live: list[tuple[int, str]] = []
    for round_ in range(30):
        n = rng.randrange(10, 40)
        ts = [round_ * 10_000 + rng.randrange(0, 50 if rng.random() < 0.3 else 10 ** 6) for _ in range(n)]
        keys = [f"k{rng.randrange(50)}" for _ in range(n)]
        kgs = [hash(k) % 7 for k in keys]
        bulk.register_many(ts, keys, kgs)
        single.register_many(ts, keys, kgs)
        live += zip(ts, keys)
        picked = rng.sample(live, min(len(live), rng.randrange(9, 30)))
        if rng.random() < 0.3:
            picked.append(picked[0])  # a timer deleted twice
        if rng.random() < 0.3:
            picked.append((-1, "nobody"))
        if rng.random() < 0.3:
            t, k = picked[1]
            picked[1] = (t, "".join(k))  # equal, not the same object
        d_ts, d_keys = [t for t, _ in picked], [k for _, k in picked]
        bulk.delete_many(d_ts, d_keys)
        for t, k in picked:
            single.delete(t, k, None)
        assert list(bulk) == list(single) and len(bulk) == len(single)
        now = round_ * 10_000 + rng.randrange(0, 3000)
        assert bulk.pop_all_due(now) == single.pop_all_due(now)
        live = [(t, k) for t, k in live if t > now]


@pytest.mark.parametrize("seed", range(5))
def test_snapshot_lists_the_timers_as_they_were_when_taken(seed):
    """A checkpoint takes the queue's snapshot at the barrier and lists it later: registrations
    (into buckets of several timers too), deletions and firings in between do not reach it."""
    r = random.Random(seed)
    q = TimerQueue()
    for _ in range(300):
        q.register(r.randrange(40), f"k{r.randrange(30)}", r.choice([None, "w"]), r.randrange(8))
    q.pop_all_due_columns(5)
    want = list(q)
    snap = q.snapshot()
    for _ in range(300):
        ts, k = r.randrange(60), f"k{r.randrange(30)}"
        if r.random() < 0.5:
            q.register(ts, k, None, r.randrange(8))
        else:
            q.delete(ts, k, None)
    q.pop_all_due_columns(20)
    assert list(snap) == want
    assert list(q.snapshot()) == list(q)
