"""Consumer lag: a stateless pipeline (the first example of seed 004), for contrast.

Every :class:`OffsetReport` carries both positions, the producer's latest
offset and one consumer's committed offset at one moment, so the lag is
computed from that record alone: a ``map``. The same input always gives the
same output, however often it is replayed; no keyed state, no snapshot
content beyond the source's offsets.

::

    source "offset-reports" -> map "lag" -> collect "lag"
                                        -> filter "lagging" -> collect "lagging"
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Sequence

import numpy as np

from ..engine import StreamEnvironment
from ._common import DEFAULT_START_MS, as_source, key_names, sample_keys

__all__ = ["ConsumerLag", "OffsetReport", "build", "compute_lag", "generate"]

HOT_KEYS = ("consumer-slow-batch-export",)
DEFAULT_RECORDS = 20_000
DEFAULT_THRESHOLD = 1_000


@dataclass(frozen=True, slots=True)
class OffsetReport:
    """At ``ts``: the producer has written up to ``producer_offset``; ``consumer`` has read up to ``consumer_offset``."""

    ts: int
    topic: str
    partition: int
    consumer: str
    producer_offset: int
    consumer_offset: int


@dataclass(frozen=True, slots=True)
class ConsumerLag:
    ts: int
    topic: str
    partition: int
    consumer: str
    lag: int


def compute_lag(report: OffsetReport) -> ConsumerLag:
    return ConsumerLag(
        report.ts,
        report.topic,
        report.partition,
        report.consumer,
        max(0, report.producer_offset - report.consumer_offset),
    )


def is_lagging(threshold: int, lag: ConsumerLag) -> bool:
    return lag.lag >= threshold


def generate(
    n: int = DEFAULT_RECORDS,
    *,
    keys: int | Sequence[str] = 200,
    zipf_s: float = 1.1,
    hot_keys: Sequence[str] = HOT_KEYS,
    hot_share: float = 0.2,
    seed: int = 0,
    start_ms: int = DEFAULT_START_MS,
    partitions: int = 4,
    interval_ms: int = 250,
) -> list[OffsetReport]:
    """``n`` offset reports, one every ``interval_ms``, from consumers chosen by the skew model.

    The producer writes about 40 messages per report interval to each
    partition. Each consumer has its own speed: the busiest reporters keep up,
    and the planted ``consumer-slow-batch-export`` falls behind by thousands.
    """
    rng = np.random.default_rng(seed)
    names = key_names(keys, "consumer-", 3)
    consumers = sample_keys(rng, n, names, zipf_s=zipf_s, hot_keys=hot_keys, hot_share=hot_share)
    part = rng.integers(0, partitions, n)
    ts = start_ms + np.arange(n, dtype=np.int64) * interval_ms
    produced = np.cumsum(rng.poisson(40, (n, partitions)), axis=0)[np.arange(n), part]
    all_names = list(hot_keys) + names
    mean_lag = {c: float(rng.lognormal(3.0, 1.2)) for c in all_names}
    for c in hot_keys:
        mean_lag[c] = 5_000.0
    lag_mean = np.array([mean_lag[c] for c in consumers.tolist()])
    lags = np.minimum(produced, rng.poisson(lag_mean))
    consumed = produced - lags
    c_, p_, pr_, co_ = consumers.tolist(), part.tolist(), produced.tolist(), consumed.tolist()
    return [OffsetReport(t, "clicks", p_[i], c_[i], pr_[i], co_[i]) for i, t in enumerate(ts.tolist())]


def build(env: StreamEnvironment, records: Sequence[OffsetReport], *, threshold: int = DEFAULT_THRESHOLD,
          num_splits: int = 1) -> None:
    """Wire the job onto ``env``: every lag to ``lag``, lags of ``threshold`` or more to ``lagging``."""
    lags = env.from_source(as_source(records, num_splits), name="offset-reports", uid="offset-reports").map(
        compute_lag, name="lag", uid="lag"
    )
    lags.collect("lag")
    lags.filter(partial(is_lagging, threshold), name="lagging", uid="lagging").collect("lagging")


def key_of(report: OffsetReport) -> str:
    return report.consumer
