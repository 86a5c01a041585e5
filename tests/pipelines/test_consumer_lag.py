"""consumer_lag: a stateless map and filter; lag is producer minus consumer offset."""

from __future__ import annotations

from collections import Counter

import pytest

from explorer.engine import StreamEnvironment
from explorer.pipelines import consumer_lag
from explorer.pipelines.consumer_lag import OffsetReport


def run(reports, parallelism=1, **kw):
    env = StreamEnvironment(parallelism=parallelism)
    consumer_lag.build(env, reports, **kw)
    return env.execute("consumer_lag")


def test_seed_example():
    # seed 004: the producer is at 15; consumers read 10, 7 and 12 -> 5, 8 and 3 behind
    reports = [OffsetReport(0, "t", 0, f"consumer-{i}", 15, c) for i, c in enumerate((10, 7, 12))]
    assert [(lag.consumer, lag.lag) for lag in run(reports).output("lag")] == [
        ("consumer-0", 5), ("consumer-1", 8), ("consumer-2", 3)
    ]


@pytest.mark.parametrize("parallelism", [1, 3])
def test_lags_and_threshold(parallelism):
    reports = consumer_lag.generate(3000, seed=2)
    result = run(reports, parallelism, threshold=500)
    expected = Counter((r.ts, r.consumer, r.partition, r.producer_offset - r.consumer_offset) for r in reports)
    assert Counter((x.ts, x.consumer, x.partition, x.lag) for x in result.output("lag")) == expected
    lagging = Counter((x.ts, x.consumer, x.partition, x.lag) for x in result.output("lagging"))
    assert lagging == Counter({k: v for k, v in expected.items() if k[3] >= 500})
    # the planted slow consumer is the one that lags
    assert Counter(x.consumer for x in result.output("lagging")).most_common(1)[0][0] == consumer_lag.HOT_KEYS[0]
    # stateless: no keyed state anywhere
    assert result.state().empty
    assert not result.operators().keyed.any()


def test_same_input_same_output():
    reports = consumer_lag.generate(500, seed=3)
    assert run(reports).output("lag") == run(reports).output("lag") == list(map(consumer_lag.compute_lag, reports))


def test_offsets_are_consistent():
    reports = consumer_lag.generate(2000, seed=4)
    assert all(0 <= r.consumer_offset <= r.producer_offset for r in reports)
    per_partition = {}
    for r in reports:  # the producer never goes back
        assert r.producer_offset >= per_partition.get(r.partition, 0)
        per_partition[r.partition] = r.producer_offset
