"""Apache Spark integration: a local session, Spark's key partitioning, engine functions on Spark.

Importing this package neither starts Spark nor imports pyspark; :func:`get_spark` does.

* :func:`get_spark` - the shared SparkSession (local[2], RocksDB state store, 4 shuffle partitions)
* :func:`run_on_spark` / :func:`keyed_process` - an engine ``KeyedProcessFunction`` on ``transformWithState``
* :func:`partition_ids` - which Spark partition (state store) a key lands in (Murmur3, seed 42)
* :mod:`explorer.spark.analysis` - analyses with Spark SQL over a snapshot's Parquet pieces
* :class:`explorer.readers.spark.SparkCheckpointReader` - what ``explorer.open()`` uses for Spark checkpoints
"""

from .adapter import SparkRun, keyed_process, run_on_spark, write_input
from .partitioning import partition_ids, spark_hash
from .session import get_spark, stop_spark

__all__ = [
    "SparkRun",
    "get_spark",
    "keyed_process",
    "partition_ids",
    "run_on_spark",
    "spark_hash",
    "stop_spark",
    "write_input",
]
