"""explorer.spark_session.spark_progress announces a slow Spark read and shows its stages (issue 30),
polling an object with the two methods of Spark's StatusTracker; no Spark here (tests/spark has the real one)."""

from __future__ import annotations

import io
import threading
from dataclasses import dataclass

from explorer.spark_session import spark_progress, spark_stages


@dataclass
class StageInfo:  # the fields of pyspark's SparkStageInfo that are read
    name: str
    numTasks: int
    numCompletedTasks: int


class Tracker:
    """Spark's StatusTracker's two methods; ``polled`` is set once the stages were read twice."""

    def __init__(self, stages: dict[int, StageInfo]) -> None:
        self.stages = stages
        self.calls = 0
        self.polled = threading.Event()

    def getActiveStageIds(self) -> list[int]:  # noqa: N802 - Spark's name
        self.calls += 1
        if self.calls >= 2:
            self.polled.set()
        return list(self.stages)

    def getStageInfo(self, sid: int) -> StageInfo | None:  # noqa: N802 - Spark's name
        return self.stages.get(sid)


def test_spark_stages_reads_a_tracker():
    tracker = Tracker({3: StageInfo("toArrow at NativeMethodAccessorImpl.java:0", 8, 5)})
    assert spark_stages(tracker) == ["Spark stage 3 (toArrow): 5/8 tasks"]
    assert spark_stages(Tracker({})) == []


def test_spark_progress_prints_the_label_then_the_stages():
    tracker = Tracker({3: StageInfo("toArrow at NativeMethodAccessorImpl.java:0", 8, 5)})
    out = io.StringIO()
    with spark_progress("reading the state through Spark", tracker=tracker, file=out, interval=0.01):
        assert "reading the state through Spark" in out.getvalue()  # before any job runs
        assert tracker.polled.wait(5)
    assert "Spark stage 3 (toArrow): 5/8 tasks" in out.getvalue()
