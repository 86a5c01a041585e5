"""State Explorer past one machine: a snapshot read by Spark's executors, the analyses computed there.

* :mod:`.datasource` - the ``state-explorer`` PySpark data source: a snapshot's keyed state as a
  Spark DataFrame, one input partition per (operator, subtask, key-group range), and the
  aggregates a partition computes itself;
* :mod:`.analysis` - the analyses of :mod:`explorer.analysis` on Spark from that DataFrame (only
  aggregates come back to the driver).

Both import pyspark. This package's ``__init__`` imports nothing: a data source worker imports
:mod:`.datasource` and only what a partition read needs.
"""
