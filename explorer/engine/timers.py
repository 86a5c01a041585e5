"""Timers: event time and processing time, per key and namespace.

Like Flink's ``InternalTimerService``: registering the same (timestamp, key,
namespace) twice keeps one timer; deleting removes it; timers fire in
timestamp order (ties in registration order) when the watermark (event time)
or the clock (processing time) reaches them.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any, Iterator

EVENT_TIME = "event_time"
PROCESSING_TIME = "processing_time"


@dataclass(frozen=True, slots=True)
class Timer:
    timestamp: int
    key: Any
    namespace: Any
    key_group: int


class TimerQueue:
    """A deduplicated priority queue of timers of one time domain."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Any, Any, int]] = []
        self._live: dict[tuple[int, Any, Any], int] = {}  # (ts, key, ns) -> key group
        self._seq = 0

    def register(self, timestamp: int, key: Any, namespace: Any, key_group: int) -> bool:
        ident = (timestamp, key, namespace)
        if ident in self._live:
            return False
        self._live[ident] = key_group
        self._seq += 1
        heapq.heappush(self._heap, (timestamp, self._seq, key, namespace, key_group))
        return True

    def delete(self, timestamp: int, key: Any, namespace: Any) -> bool:
        return self._live.pop((timestamp, key, namespace), None) is not None

    def peek_time(self) -> int | None:
        h = self._heap
        while h:
            ts, _, key, ns, _ = h[0]
            if (ts, key, ns) in self._live:
                return ts
            heapq.heappop(h)
        return None

    def pop_due(self, time: int) -> Timer | None:
        """The next live timer with ``timestamp <= time``, removed; else None."""
        h = self._heap
        while h and h[0][0] <= time:
            ts, _, key, ns, kg = heapq.heappop(h)
            if self._live.pop((ts, key, ns), None) is not None:
                return Timer(ts, key, ns, kg)
        return None

    def __len__(self) -> int:
        return len(self._live)

    def __iter__(self) -> Iterator[Timer]:
        """Live timers in firing order."""
        seen = set()  # a timer deleted and registered again has a stale heap entry too
        for ts, _, key, ns, kg in sorted(self._heap):
            ident = (ts, key, ns)
            if ident not in seen and self._live.get(ident) == kg:
                seen.add(ident)
                yield Timer(ts, key, ns, kg)

    def clear(self) -> None:
        self._heap.clear()
        self._live.clear()


class TimerService:
    """What ``ctx.timer_service()`` returns inside a keyed process function."""

    def __init__(self, operator) -> None:
        self._op = operator

    def current_processing_time(self) -> int:
        return self._op.clock.now_ms()

    def current_watermark(self) -> int:
        return self._op.current_watermark

    # the four below go straight to the operator's queues for the current key (one call less per
    # timer operation than ``operator.register_timer``; timers are per record in many jobs)
    def register_event_time_timer(self, timestamp: int) -> None:
        op = self._op
        ctx = op.backend.ctx
        op.event_timers.register(int(timestamp), ctx.key, ctx.namespace, ctx.key_group)

    def register_processing_time_timer(self, timestamp: int) -> None:
        op = self._op
        ctx = op.backend.ctx
        op.processing_timers.register(int(timestamp), ctx.key, ctx.namespace, ctx.key_group)

    def delete_event_time_timer(self, timestamp: int) -> None:
        ctx = self._op.backend.ctx
        self._op.event_timers.delete(int(timestamp), ctx.key, ctx.namespace)

    def delete_processing_time_timer(self, timestamp: int) -> None:
        ctx = self._op.backend.ctx
        self._op.processing_timers.delete(int(timestamp), ctx.key, ctx.namespace)
