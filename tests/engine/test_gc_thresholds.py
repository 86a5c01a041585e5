"""While a job runs, CPython's collector runs less often; its thresholds come back afterwards."""

from __future__ import annotations

import gc

import pytest

from explorer.engine import KeyedProcessFunction, StreamEnvironment
from explorer.engine.runtime import JOB_GC_THRESHOLDS


class SeeThresholds(KeyedProcessFunction):
    def __init__(self, fail_at: int | None = None) -> None:
        self.fail_at = fail_at

    def process_element(self, value, ctx, out):
        if value[1] == self.fail_at:
            raise RuntimeError("user code failed")
        out.collect(gc.get_threshold())


def _run(fail_at=None):
    env = StreamEnvironment(parallelism=2, batch_size=16)
    env.from_collection([(f"k{i % 5}", i) for i in range(100)]).key_by(0).process(
        SeeThresholds(fail_at), name="see").collect("seen")
    return env.execute("gc").output("seen")


@pytest.fixture
def thresholds():
    saved = gc.get_threshold()
    yield saved
    gc.set_threshold(*saved)


def test_a_job_runs_with_raised_thresholds_and_puts_them_back(thresholds):
    gc.set_threshold(700, 10, 10)
    seen = set(_run())
    assert seen == {tuple(max(a, b) for a, b in zip((700, 10, 10), JOB_GC_THRESHOLDS))}
    assert gc.get_threshold() == (700, 10, 10)


def test_thresholds_come_back_when_the_job_fails(thresholds):
    gc.set_threshold(500, 7, 9)
    with pytest.raises(Exception, match="user code failed"):
        _run(fail_at=37)
    assert gc.get_threshold() == (500, 7, 9)


def test_higher_thresholds_and_a_disabled_collector_are_left_alone(thresholds):
    gc.set_threshold(10**6, 50, 500)
    assert set(_run()) == {(10**6, 50, 500)}
    gc.set_threshold(0, 10, 10)  # automatic collection off: stays off
    assert set(_run()) == {(0, 10, 10)}
    assert gc.get_threshold() == (0, 10, 10)
