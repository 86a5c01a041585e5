"""The one-ahead prefetching iterator: same items in the same order, errors where they happen."""

from __future__ import annotations

import threading

import pytest

from explorer.format.prefetch import map_ahead, map_fed, prefetch


def test_items_in_order_from_one_worker_thread():
    threads = set()

    def gen():
        for i in range(50):
            threads.add(threading.get_ident())
            yield i

    assert list(prefetch(gen())) == list(range(50))
    assert len(threads) == 1 and threading.get_ident() not in threads


def test_an_error_is_raised_at_its_item():
    def gen():
        yield 1
        yield 2
        raise ValueError("bad batch 3")

    got = []
    with pytest.raises(ValueError, match="bad batch 3"):
        for x in prefetch(gen()):
            got.append(x)
    assert got == [1, 2]


def test_closing_early_stops_the_producer():
    advanced = []

    def gen():
        for i in range(100):
            advanced.append(i)
            yield i

    it = prefetch(gen())
    assert next(it) == 0
    it.close()
    assert len(advanced) <= 2  # the current item and at most one ahead


def test_map_ahead_gives_results_in_order_from_worker_threads():
    threads = set()
    gate = threading.Barrier(2, timeout=30)

    def fn(i):
        threads.add(threading.get_ident())
        if i < 2:
            gate.wait()  # the first two items are computed at the same time, by two threads
        return i * i

    assert list(map_ahead(fn, range(40), workers=2)) == [i * i for i in range(40)]
    assert len(threads) == 2 and threading.get_ident() not in threads


def test_map_ahead_raises_an_error_at_its_item_and_stops_taking_items():
    taken = []

    def items():
        for i in range(100):
            taken.append(i)
            yield i

    def fn(i):
        if i == 3:
            raise ValueError("bad row group 3")
        return i

    got = []
    with pytest.raises(ValueError, match="bad row group 3"):
        for x in map_ahead(fn, items(), workers=2):
            got.append(x)
    assert got == [0, 1, 2]
    assert len(taken) <= 3 + 3  # no more than the workers' lead past the failed item


def test_map_fed_hands_a_result_on_before_the_next_item_is_made():
    """Items advanced in a thread of their own: the first result is not held back while a slow
    next item is made (map_ahead takes the next item first)."""
    made_second = threading.Event()
    first_taken = threading.Event()

    def items():
        yield 1
        assert first_taken.wait(30)  # the second item only once the first result is in the caller's hands
        made_second.set()
        yield 2

    got = map_fed(lambda x: x * 10, items(), workers=1)
    assert next(got) == 10
    first_taken.set()
    assert list(got) == [20]
    assert made_second.is_set()


def test_map_fed_raises_an_error_at_its_item():
    def fn(i):
        if i == 3:
            raise ValueError("bad batch 3")
        return i

    got = []
    with pytest.raises(ValueError, match="bad batch 3"):
        for x in map_fed(fn, iter(range(10)), workers=2):
            got.append(x)
    assert got == [0, 1, 2]
