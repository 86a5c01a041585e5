"""Clocks. Everything time-dependent in the engine takes one; tests use :class:`ManualClock`.

Times inside the engine are integer epoch milliseconds.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """A source of processing time, in epoch milliseconds."""

    def now_ms(self) -> int: ...


class SystemClock:
    """Wall-clock processing time."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def __repr__(self) -> str:
        return "SystemClock()"


class ManualClock:
    """A clock that moves only when told to. Never sleeps."""

    def __init__(self, start_ms: int = 0) -> None:
        self._now = int(start_ms)

    def now_ms(self) -> int:
        return self._now

    def advance(self, ms: int) -> int:
        if ms < 0:
            raise ValueError(f"a clock cannot go backwards (advance by {ms} ms)")
        self._now += int(ms)
        return self._now

    def set(self, now_ms: int) -> None:
        if now_ms < self._now:
            raise ValueError(f"a clock cannot go backwards (from {self._now} to {now_ms})")
        self._now = int(now_ms)

    def __repr__(self) -> str:
        return f"ManualClock({self._now})"
