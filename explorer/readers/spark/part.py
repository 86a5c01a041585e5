"""The base of every part of :class:`~.reader.SparkCheckpointReader`.

The reader is composed of parts of one role each (``checkpoint``, ``kinds``, ``buckets``, ``keyed``,
``jvm``, ``contract``, ``lookup``, ``changes``; the table in ``reader``'s module doc). Each subclasses
:class:`~explorer.readers.base.SnapshotReader` through :class:`SparkPart`, so that the error boundary
wraps the reader methods each part defines (``SnapshotReader.__init_subclass__`` wraps a class's own
methods only). :class:`SparkPart` names what ``SparkCheckpointReader.__init__`` sets and every part reads.
"""

from __future__ import annotations

from typing import Any

from ...format.untrusted import Roots
from ..base import SnapshotReader
from .layout import BatchMirror


class SparkPart(SnapshotReader):
    """What the parts of a Spark reader share (set by ``SparkCheckpointReader.__init__``)."""

    #: the folders this checkpoint's files may be read from
    roots: Roots
    #: committed micro-batch ids, oldest first
    committed: list[int]
    #: the micro-batch read
    batch_id: int
    #: checkpoint format version (1 or 2)
    format_version: int
    _jvm: bool | None
    _spark: Any
    _mirror: BatchMirror | None
    _allow_roots: list
