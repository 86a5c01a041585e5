"""Apache Spark integration: a local session, Spark's key partitioning, engine functions on Spark.

Importing this package neither starts Spark nor imports pyspark; :func:`get_spark` does.

* :func:`get_spark` - the shared SparkSession (local[2], RocksDB state store, 4 shuffle partitions)
* :func:`run_on_spark` - an example pipeline (:mod:`explorer.spark.pipelines`), or an engine
  ``KeyedProcessFunction`` (:func:`keyed_process`) on ``transformWithState``
* :func:`partition_ids` - which Spark partition (state store) a key lands in (Murmur3, seed 42)
* :mod:`explorer.spark.analysis` - analyses with Spark SQL over a snapshot's Parquet pieces
* :class:`explorer.readers.spark.SparkCheckpointReader` - what ``explorer.open()`` uses for Spark checkpoints
"""

from typing import Any

from ..pipelines import Pipeline
from . import adapter
from .adapter import SparkRun, keyed_process, write_input
from .partitioning import partition_ids, spark_hash
from .pipelines import PipelineRun, engine_outputs, run_pipeline_on_spark
from .session import get_spark, stop_spark


def run_on_spark(what: Any, *args: Any, **kwargs: Any):
    """Run on Spark: an example pipeline (a :class:`~explorer.pipelines.Pipeline` or its name) or a function.

    ``run_on_spark("orders", n=3000, out="spark/")`` is
    :func:`~explorer.spark.pipelines.run_pipeline_on_spark` (a :class:`PipelineRun`, its
    outputs equal to the engine's, :func:`engine_outputs`); ``run_on_spark(function, source,
    key, output_schema, checkpoint_dir, ...)`` is :func:`explorer.spark.adapter.run_on_spark`
    (a :class:`SparkRun`).
    """
    if isinstance(what, (Pipeline, str)):
        return run_pipeline_on_spark(what, *args, **kwargs)
    return adapter.run_on_spark(what, *args, **kwargs)

__all__ = [
    "PipelineRun",
    "SparkRun",
    "engine_outputs",
    "get_spark",
    "keyed_process",
    "partition_ids",
    "run_on_spark",
    "run_pipeline_on_spark",
    "spark_hash",
    "stop_spark",
    "write_input",
]
