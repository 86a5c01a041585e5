"""Computing the next item of an iterator in a thread while the caller works on the current one.

For pipelines of bulk steps that mostly run outside the GIL (Parquet reads,
Arrow and NumPy kernels, RocksDB iteration, file writes): with two cores, the
producer's step overlaps the consumer's. One item is computed ahead, so memory
holds at most two items. The iterator is advanced in one worker thread only,
one step at a time; an exception raised by it is raised to the consumer at the
item where it happened; closing the generator early waits for the step under way.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Iterable, Iterator, TypeVar

__all__ = ["prefetch"]

T = TypeVar("T")
_END = object()


def prefetch(items: Iterable[T], name: str = "prefetch") -> Iterator[T]:
    """The items of ``items``, each computed in a worker thread while the previous one is used."""
    it = iter(items)

    def step():
        return next(it, _END)

    with ThreadPoolExecutor(1, thread_name_prefix=name) as pool:
        ahead = pool.submit(step)
        while True:
            item = ahead.result()
            if item is _END:
                return
            ahead = pool.submit(step)
            yield item
