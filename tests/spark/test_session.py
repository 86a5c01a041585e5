"""The shared local SparkSession has the settings the Spark side relies on."""

from __future__ import annotations

import os
import sys

import pytest

from explorer.errors import JobError
from explorer.spark import get_spark
from explorer.spark_session import ROCKSDB_PROVIDER

pytestmark = pytest.mark.spark


def test_defaults(spark):
    c = spark.conf
    assert spark.sparkContext.master == "local[2]"
    assert c.get("spark.sql.shuffle.partitions") == "4"
    assert c.get("spark.sql.streaming.stateStore.providerClass") == ROCKSDB_PROVIDER
    assert c.get("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled") == "true"
    assert c.get("spark.sql.execution.arrow.pyspark.enabled") == "true"
    assert c.get("spark.sql.session.timeZone") == "UTC"
    assert os.environ["PYSPARK_PYTHON"] == sys.executable


def test_running_session_is_reused_and_guarded(spark):
    assert get_spark() is spark
    assert get_spark(**{"spark.sql.shuffle.partitions": "4"}) is spark  # SQL settings apply at run time
    with pytest.raises(JobError, match="already running"):
        get_spark("local[1]")
    with pytest.raises(JobError, match="cannot change"):
        get_spark(**{"spark.driver.memory": "3g"})


def test_a_spark_job_shows_its_stages(spark):
    """issue 30: a slow Spark job names its running stage while it runs (spark_progress)."""
    import io
    import time

    from explorer.spark_session import spark_progress

    def slow(batches):
        for b in batches:
            time.sleep(1.5)  # a job long enough for the poller (every 0.05 s) to see its stage
            yield b

    out = io.StringIO()
    with spark_progress("a short job", file=out, interval=0.05):
        spark.range(0, 2, numPartitions=2).mapInPandas(slow, "id long").collect()
    assert "a short job" in out.getvalue()
    assert "Spark stage " in out.getvalue() and " tasks" in out.getvalue(), out.getvalue()
