"""Computing the next item of an iterator in a thread while the caller works on the current one.

For pipelines of bulk steps that mostly run outside the GIL (Parquet reads,
Arrow and NumPy kernels, RocksDB iteration, file writes): with two cores, the
producer's step overlaps the consumer's. One item is computed ahead, so memory
holds at most two items. The iterator is advanced in one worker thread only,
one step at a time; an exception raised by it is raised to the consumer at the
item where it happened; closing the generator early waits for the step under way.

:func:`map_ahead` is the same for independent items: ``fn`` of each computed by
several threads at once (each on its own item), the results in order;
:func:`map_fed` also advances the items in a thread of their own (when taking
the next item is itself work, e.g. walking the next key-group range).
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from contextvars import copy_context
from typing import Callable, Iterable, Iterator, TypeVar

__all__ = ["map_ahead", "map_fed", "prefetch"]

T = TypeVar("T")
U = TypeVar("U")
_END = object()


def prefetch(items: Iterable[T], name: str = "prefetch") -> Iterator[T]:
    """The items of ``items``, each computed in a worker thread while the previous one is used."""
    it = iter(items)

    def step():
        return next(it, _END)

    with ThreadPoolExecutor(1, thread_name_prefix=name) as pool:
        ahead = pool.submit(copy_context().run, step)
        while True:
            item = ahead.result()
            if item is _END:
                return
            ahead = pool.submit(copy_context().run, step)
            yield item


def map_ahead(fn: Callable[[T], U], items: Iterable[T], workers: int = 2, name: str = "prefetch") -> Iterator[U]:
    """``fn(item)`` for each of ``items``, in order, computed by ``workers`` threads ahead of the consumer
    (at most ``workers`` results waiting, so memory holds at most ``workers + 1``). ``items`` are taken in
    the consumer's thread; an exception raised by ``fn`` is raised at its item; closing the generator
    early cancels the calls not started and waits for those under way."""
    it = iter(items)
    pending: list = []
    with ThreadPoolExecutor(workers, thread_name_prefix=name) as pool:
        try:
            for item in it:
                pending.append(pool.submit(copy_context().run, fn, item))
                if len(pending) > workers:
                    yield pending.pop(0).result()
            while pending:
                yield pending.pop(0).result()
        finally:
            for f in pending:
                f.cancel()


def map_fed(fn: Callable[[T], U], items: Iterator[T], workers: int = 1, name: str = "prefetch",
            feeder_name: str = "prefetch-feed") -> Iterator[U]:
    """``fn`` of each of ``items``, in order, by ``workers`` threads, with ``items`` advanced in a thread of
    its own: a result is handed on as soon as it is ready, not after the next item is (:func:`map_ahead`
    takes the next item in the consumer's thread first, which holds the first result back while a slow
    item is made). At most ``workers + 1`` calls are under way or waiting; closing the generator early
    cancels those not started and waits for the rest."""
    pending: deque = deque()
    with ThreadPoolExecutor(1, thread_name_prefix=feeder_name) as feeder, \
            ThreadPoolExecutor(workers, thread_name_prefix=name) as pool:
        try:
            nxt = feeder.submit(copy_context().run, next, items, _END)
            while True:
                if nxt is not None and len(pending) <= workers:
                    wait([nxt, *list(pending)[:1]], return_when=FIRST_COMPLETED)
                    if nxt.done():
                        item = nxt.result()
                        if item is _END:
                            nxt = None
                        else:
                            pending.append(pool.submit(copy_context().run, fn, item))
                            nxt = feeder.submit(copy_context().run, next, items, _END)
                        continue
                if not pending:
                    return
                yield pending.popleft().result()
        finally:
            for f in pending:
                f.cancel()
