"""The one-ahead prefetching iterator: same items in the same order, errors where they happen."""

from __future__ import annotations

import threading

import pytest

from explorer.format.prefetch import prefetch


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
