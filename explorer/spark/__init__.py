"""Apache Spark integration: a local session, Spark's key partitioning, engine functions on Spark.

The names users call, gathered from where each lives:

* :func:`get_spark` - the shared SparkSession (local[2], RocksDB state store, 4 shuffle partitions;
  :mod:`explorer.spark_session`)
* :func:`run_on_spark` - an example pipeline (:mod:`explorer.spark_engine.pipelines`), or an engine
  ``KeyedProcessFunction`` (:func:`keyed_process`) on ``transformWithState``
  (:mod:`explorer.spark_engine.adapter`)
* :func:`partition_ids` - which Spark partition (state store) a key lands in (Murmur3, seed 42;
  :mod:`explorer.keygroups.spark`)
* :func:`read_state` - a snapshot's keyed state as a Spark DataFrame, read in parallel by the executors
  through the ``state-explorer`` data source (:mod:`explorer.distributed.datasource`; :func:`register_datasource`)
* :mod:`explorer.distributed.analysis` - the analyses computed by Spark from that DataFrame (aggregates only
  come back to the driver)
* :class:`explorer.readers.spark.SparkCheckpointReader` - what ``explorer.open()`` uses for Spark checkpoints

Importing this package neither starts Spark nor imports pyspark: :func:`get_spark` does, and the data
source (a subclass of pyspark's ``DataSource``) is imported by :func:`read_state` and
:func:`register_datasource` when called.
"""

from typing import Any

from ..keygroups.spark import partition_ids, spark_hash
from ..pipelines import Pipeline
from ..spark_engine.adapter import SparkRun, keyed_process, run_on_spark as run_function, write_input
from ..spark_engine.pipelines import PipelineRun, engine_outputs, run_pipeline_on_spark
from ..spark_session import get_spark, stop_spark


def run_on_spark(what: Any, *args: Any, **kwargs: Any):
    """Run on Spark: an example pipeline (a :class:`~explorer.pipelines.Pipeline` or its name) or a function.

    ``run_on_spark("orders", n=3000, out="spark/")`` is
    :func:`~explorer.spark_engine.pipelines.run_pipeline_on_spark` (a :class:`PipelineRun`, its
    outputs equal to the engine's, :func:`engine_outputs`); ``run_on_spark(function, source,
    key, output_schema, checkpoint_dir, ...)`` is :func:`explorer.spark_engine.adapter.run_on_spark`
    (a :class:`SparkRun`).
    """
    if isinstance(what, (Pipeline, str)):
        return run_pipeline_on_spark(what, *args, **kwargs)
    return run_function(what, *args, **kwargs)


def read_state(spark: Any, path: Any, **options: Any):
    """The keyed state of the snapshot at ``path`` as a Spark DataFrame
    (:func:`explorer.distributed.datasource.read_state`).

    ``spark.read.format("state-explorer").load(path)`` after :func:`register_datasource`; one input
    partition per (operator, subtask, key-group range), read by the executors from ``path``.
    """
    from ..distributed.datasource import read_state as read  # pyspark's DataSource: imported when asked for

    return read(spark, path, **options)


def register_datasource(spark: Any) -> None:
    """Make ``spark.read.format("state-explorer")`` known to ``spark``
    (:func:`explorer.distributed.datasource.register`)."""
    from ..distributed.datasource import register  # pyspark's DataSource: imported when asked for

    register(spark)


__all__ = [
    "PipelineRun",
    "SparkRun",
    "engine_outputs",
    "get_spark",
    "keyed_process",
    "partition_ids",
    "read_state",
    "register_datasource",
    "run_on_spark",
    "run_pipeline_on_spark",
    "spark_hash",
    "stop_spark",
    "write_input",
]
