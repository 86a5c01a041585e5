"""Apache Spark integration: a local session, Spark's key partitioning, engine functions on Spark.

Importing this package neither starts Spark nor imports pyspark; :func:`get_spark` does. The engine
adapter (:mod:`explorer.spark.adapter`, :mod:`explorer.spark.pipelines`: the engine, numba) is imported
when one of its names is first used, so that a Python worker reading the ``state-explorer`` data source
imports only what a partition read needs.

* :func:`get_spark` - the shared SparkSession (local[2], RocksDB state store, 4 shuffle partitions)
* :func:`run_on_spark` - an example pipeline (:mod:`explorer.spark.pipelines`), or an engine
  ``KeyedProcessFunction`` (:func:`keyed_process`) on ``transformWithState``
* :func:`partition_ids` - which Spark partition (state store) a key lands in (Murmur3, seed 42)
* :func:`read_state` - a snapshot's keyed state as a Spark DataFrame, read in parallel by the executors
  through the ``state-explorer`` data source (:mod:`explorer.spark.datasource`; :func:`register_datasource`)
* :mod:`explorer.spark.analysis` - the analyses computed by Spark from that DataFrame (aggregates only
  come back to the driver)
* :class:`explorer.readers.spark.SparkCheckpointReader` - what ``explorer.open()`` uses for Spark checkpoints
"""

import importlib
from typing import Any

from ..keygroups.spark import partition_ids, spark_hash
from ..spark_session import get_spark, stop_spark

#: names of the engine adapter, imported on first use (see the module doc)
_ADAPTER_NAMES = {"SparkRun": "adapter", "keyed_process": "adapter", "write_input": "adapter",
                  "adapter": None, "pipelines": None,
                  "PipelineRun": "pipelines", "engine_outputs": "pipelines", "run_pipeline_on_spark": "pipelines"}


def __getattr__(name: str) -> Any:
    if name not in _ADAPTER_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(f"{__name__}.{_ADAPTER_NAMES[name] or name}")  # the engine, numba: on first use
    return module if _ADAPTER_NAMES[name] is None else getattr(module, name)


def run_on_spark(what: Any, *args: Any, **kwargs: Any):
    """Run on Spark: an example pipeline (a :class:`~explorer.pipelines.Pipeline` or its name) or a function.

    ``run_on_spark("orders", n=3000, out="spark/")`` is
    :func:`~explorer.spark.pipelines.run_pipeline_on_spark` (a :class:`PipelineRun`, its
    outputs equal to the engine's, :func:`engine_outputs`); ``run_on_spark(function, source,
    key, output_schema, checkpoint_dir, ...)`` is :func:`explorer.spark.adapter.run_on_spark`
    (a :class:`SparkRun`).
    """
    from ..pipelines import Pipeline

    if isinstance(what, (Pipeline, str)):
        return __getattr__("run_pipeline_on_spark")(what, *args, **kwargs)
    return __getattr__("adapter").run_on_spark(what, *args, **kwargs)

def read_state(spark: Any, path: Any, **options: Any):
    """The keyed state of the snapshot at ``path`` as a Spark DataFrame (:func:`explorer.spark.datasource.read_state`).

    ``spark.read.format("state-explorer").load(path)`` after :func:`register_datasource`; one input
    partition per (operator, subtask, key-group range), read by the executors from ``path``.
    """
    from .datasource import read_state as read  # pyspark's DataSource: imported when asked for

    return read(spark, path, **options)


def register_datasource(spark: Any) -> None:
    """Make ``spark.read.format("state-explorer")`` known to ``spark`` (:func:`explorer.spark.datasource.register`)."""
    from .datasource import register  # pyspark's DataSource: imported when asked for

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
