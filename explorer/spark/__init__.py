"""Apache Spark integration: a local session, Spark's partitioning, and running engine functions on Spark.

Importing this package does not start Spark or import pyspark; :func:`get_spark` does.
"""

from .session import get_spark, stop_spark

__all__ = ["get_spark", "stop_spark"]
