"""The state time-to-live expiry rule, one pure function shared by the engine and the snapshot readers.

An entry last accessed at ``last_access_ms`` (epoch ms) with time-to-live
``ttl_ms`` expires at ``last_access_ms + ttl_ms``, saturating at
``2**63 - 1`` as Flink's ``TtlUtils`` does, and is expired at ``now_ms``
exactly when that time is ``<= now_ms``: at ``last_access + ttl - 1`` it is
still alive, at ``last_access + ttl`` it is gone. The engine's TTL
(:mod:`explorer.engine.ttl`: reads, cleanups, its RocksDB sweeper) and the
readers of stored state (:mod:`explorer.format.rocksdb`: a full snapshot
leaving expired entries out) all decide with :func:`is_expired`, or with
:func:`alive` on a column of last-access times.
"""

from __future__ import annotations

import numpy as np

__all__ = ["MAX_MS", "alive", "expires_at", "is_expired"]

#: the latest time in epoch ms (``Long.MAX_VALUE``): where expiry times saturate
MAX_MS = (1 << 63) - 1


def expires_at(last_access_ms: int, ttl_ms: int) -> int:
    """When an entry last accessed at ``last_access_ms`` expires (saturating, like Flink)."""
    t = last_access_ms + ttl_ms
    return MAX_MS if t > MAX_MS else t


def is_expired(last_access_ms: int, ttl_ms: int, now_ms: int) -> bool:
    """True when ``last_access_ms + ttl_ms <= now_ms``: the one rule for expiry."""
    return expires_at(last_access_ms, ttl_ms) <= now_ms


def alive(last_access_ms: np.ndarray, ttl_ms: int, now_ms: int) -> np.ndarray:
    """``not is_expired`` of each int64 last-access time, computed without overflowing int64."""
    if now_ms >= MAX_MS:
        return np.zeros(len(last_access_ms), dtype=bool)
    return last_access_ms > now_ms - ttl_ms
