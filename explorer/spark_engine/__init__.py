"""The engine on Apache Spark: engine ``KeyedProcessFunction``s and the example pipelines on
Structured Streaming's ``transformWithState``.

* :mod:`.adapter` - ``run_on_spark(function, ...)``: one function on Spark, state per key
  (:mod:`.statemap`: the engine's state objects over Spark's state variables) or per key-group
  bucket (:mod:`.buckets`: the engine's own state objects over in-memory tables, stored in
  the versioned value of :mod:`explorer.format.spark_buckets`);
* :mod:`.context` - what the function sees on Spark (its context, timers, outputs);
* :mod:`.pipelines` - every example pipeline of :mod:`explorer.pipelines` on Spark, with the
  engine's outputs to compare.

Users call these through :mod:`explorer.spark`. This package's ``__init__`` imports nothing:
Spark's Python workers import the processor modules they unpickle, and only those.
"""
