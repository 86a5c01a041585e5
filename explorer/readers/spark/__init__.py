"""Spark Structured Streaming checkpoints: :class:`SparkCheckpointReader` (through Spark's state
data source) and :mod:`.layout` (what the checkpoint's files say without a JVM)."""

from .reader import SparkCheckpointReader

__all__ = ["SparkCheckpointReader"]
