"""Spark Structured Streaming checkpoints: :class:`SparkCheckpointReader` (through Spark's state
data source) and :mod:`.layout` (what the checkpoint's files say without a JVM)."""

from .reader import SparkCheckpointReader
from .values import flatten_values

__all__ = ["SparkCheckpointReader", "flatten_values"]
