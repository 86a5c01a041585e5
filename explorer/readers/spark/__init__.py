"""Spark Structured Streaming checkpoints: :class:`SparkCheckpointReader` (``reader``, opened there and
composed of parts of one role each: ``checkpoint``, ``kinds``, ``buckets``, ``keyed``, ``jvm``,
``contract``, ``lookup``, ``changes``; the table in ``reader``'s module doc) and :mod:`.layout` (what the
checkpoint's files say without a JVM)."""

from .reader import SparkCheckpointReader
from .values import flatten_values

__all__ = ["SparkCheckpointReader", "flatten_values"]
