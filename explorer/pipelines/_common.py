"""What every example pipeline's generator shares: skewed keys, time, arrival order.

Skew model (one for every pipeline, so a notebook can turn the same knobs):

* a share ``hot_share`` of the records goes to the planted ``hot_keys``,
  evenly among them;
* the rest is spread over the background keys by a bounded Zipf law with
  exponent ``zipf_s`` (rank ``r`` gets weight ``r ** -zipf_s``; ``0`` is uniform).

Zipf with ``s = 1.1`` has a heavy head of its own: over 1,000 background keys
the busiest one carries about 14 % of the records (80 % x 1 / H), the second
about 7 %. The pipelines therefore plant one hot key by default, which then
carries 20 % and is the top key of the stream (what the explorer's hot-key
analysis is tested against). A planted key outranks the background exactly
when ``hot_share / len(hot_keys) > (1 - hot_share) * zipf_weights(n, s)[0]``;
:func:`planted_keys_dominate` checks it.

Event time: records get timestamps, then arrive *out of order by less than*
``max_delay_ms``: ``arrival = timestamp + U[0, max_delay_ms)``. A source with
``WatermarkStrategy.for_bounded_out_of_orderness(max_delay_ms)`` then never
sees a late record. Within one key the records arrive in timestamp order (the
key's timestamps are handed out in arrival order), so a per-key oracle in a
test can simply walk the input in order.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd

from ..engine.sources import CollectionSource, Source

__all__ = [
    "DEFAULT_START_MS",
    "ReplayClock",
    "arrival_order",
    "as_source",
    "factorize",
    "key_names",
    "planted_keys_dominate",
    "sample_keys",
]

#: 2026-01-01T00:00:00Z, the default start of generated event time
DEFAULT_START_MS = 1_767_225_600_000

MINUTE = 60_000
HOUR = 60 * MINUTE
DAY = 24 * HOUR


def as_source(records: Any, num_splits: int = 1):
    """The source a pipeline reads: ``records`` itself if it is a Source (a TestingSource with
    an ABORT marker, say), else a CollectionSource over the list."""
    return records if isinstance(records, Source) else CollectionSource(records, num_splits)


def key_names(keys: int | Sequence[Any], prefix: str, width: int = 5) -> list[Any]:
    """Background key names: ``keys`` itself if a sequence, else ``prefix + zero-padded rank``."""
    if isinstance(keys, (int, np.integer)):
        if keys <= 0:
            raise ValueError(f"keys must be positive, found {keys}")
        return [f"{prefix}{i:0{width}d}" for i in range(int(keys))]
    out = list(keys)
    if not out:
        raise ValueError("keys must not be empty")
    return out


def zipf_weights(n_keys: int, zipf_s: float) -> np.ndarray:
    if zipf_s < 0:
        raise ValueError(f"zipf_s must not be negative, found {zipf_s}")
    w = np.arange(1, n_keys + 1, dtype=np.float64) ** -float(zipf_s)
    return w / w.sum()


def planted_keys_dominate(n_keys: int, zipf_s: float, hot_keys: Sequence[Any], hot_share: float) -> bool:
    """Whether every planted key is expected to carry more records than any background key."""
    if not hot_keys:
        return False
    return hot_share / len(hot_keys) > (1.0 - hot_share) * float(zipf_weights(n_keys, zipf_s)[0])


def sample_keys(
    rng: np.random.Generator,
    n: int,
    keys: Sequence[Any],
    *,
    zipf_s: float = 1.1,
    hot_keys: Sequence[Any] = (),
    hot_share: float = 0.2,
) -> np.ndarray:
    """``n`` keys drawn by the skew model above, as an object array."""
    if not 0.0 <= hot_share <= 1.0:
        raise ValueError(f"hot_share must be within [0, 1], found {hot_share}")
    bg = np.empty(len(keys), dtype=object)
    bg[:] = list(keys)
    if zipf_s == 0:
        idx = rng.integers(0, len(keys), n)
    else:
        idx = rng.choice(len(keys), size=n, p=zipf_weights(len(keys), zipf_s))
    out = bg[idx]
    hot = list(hot_keys)
    if hot and hot_share > 0:
        is_hot = rng.random(n) < hot_share
        hk = np.empty(len(hot), dtype=object)
        hk[:] = hot
        out[is_hot] = hk[rng.integers(0, len(hot), int(is_hot.sum()))]
    return out


def arrival_order(
    rng: np.random.Generator, timestamps: np.ndarray, keys: np.ndarray, max_delay_ms: int
) -> tuple[np.ndarray, np.ndarray]:
    """Shuffle records into a bounded-out-of-order arrival order.

    Returns ``(order, ts)``: record ``order[i]`` arrives ``i``-th, with event
    time ``ts[i]``. Out-of-orderness is below ``max_delay_ms``; within one key
    timestamps do not decrease in arrival order (each key's timestamps are
    re-dealt in arrival order, which keeps the bound: the k-th smallest arrival
    lies within ``[t_(k), t_(k) + max_delay_ms)``).
    """
    ts = np.asarray(timestamps, dtype=np.int64)
    n = len(ts)
    if n == 0:
        return np.zeros(0, dtype=np.int64), ts
    jitter = rng.integers(0, max(1, int(max_delay_ms)), n) if max_delay_ms > 0 else np.zeros(n, dtype=np.int64)
    order = np.argsort(ts + jitter, kind="stable")
    ts_a = ts[order]
    codes, _ = factorize(np.asarray(keys, dtype=object)[order])
    by_key_arrival = np.argsort(codes, kind="stable")  # per key, positions in arrival order
    by_key_time = np.lexsort((ts_a, codes))  # per key, positions in time order
    out = np.empty_like(ts_a)
    out[by_key_arrival] = ts_a[by_key_time]
    return order, out


def factorize(values: np.ndarray) -> tuple[np.ndarray, list[Any]]:
    """Codes (first appearance order) and the distinct values, of an object array."""
    codes, uniques = pd.factorize(values)
    return codes, list(uniques)


class ReplayClock:
    """Processing time that follows the record being processed (for replaying history).

    State TTL runs on processing time, as in Flink. Replaying days of
    historical events in seconds would never expire anything; a function that
    calls :meth:`follow` with each record's event time before touching its
    state makes TTL behave as it did when those events were live. The clock is
    shared, not copied, when the engine copies a function for each subtask.

    It is the environment's clock, so everything else measured in processing
    time is measured in replayed time too. That is what makes a snapshot
    consistent (its creation time, the entries' last access and expiry are all
    replayed time, so expired-but-not-yet-cleaned entries show as such), but a
    batch of records can span hours of it: trigger checkpoints by record count
    and give them a timeout of days, e.g.
    ``env.enable_checkpointing(path, interval_records=10_000, timeout_ms=30 * DAY)``
    (the default 10-minute timeout aborts every checkpoint, savepoints included).
    """

    def __init__(self, start_ms: int = 0) -> None:
        self._now = int(start_ms)

    def now_ms(self) -> int:
        return self._now

    def follow(self, timestamp_ms: int | None) -> None:
        """Make ``timestamp_ms`` (the current record's event time) the processing time."""
        if timestamp_ms is not None:
            self._now = int(timestamp_ms)

    def __deepcopy__(self, memo: dict) -> "ReplayClock":
        return self

    def __repr__(self) -> str:
        return f"ReplayClock({self._now})"
