"""Spark Structured Streaming checkpoints, read through Spark's own state data source.

A streaming checkpoint directory holds ``metadata`` (the query id),
``offsets/<batch>`` (what each micro-batch read, with the batch's timestamp,
watermark and the SQL settings frozen at the first batch), ``commits/<batch>``
(batches that finished) and ``state/<operator>/<partition>/`` (the state
stores). The stores of the built-in operators (HDFS-backed and RocksDB, checkpoint
format v1 and v2) are read from their files without a JVM (:mod:`.stores`);
``transformWithState`` and the rest are read through Spark
(``format("state-metadata")`` and ``format("statestore")``). Either way the
answer is mapped onto the explorer's contract:

=======================  ===================================================
contract                 Spark
=======================  ===================================================
operator                 the stateful operator (``transformWithStateInPySparkExec``,
                         ``stateStoreSave`` ...), suffixed ``-<id>`` if two share a name
state                    the state variable (``transformWithState``) or the
                         state store name (``default`` for aggregations)
key_group                the state store partition (``partition_id``)
subtask                  the same partition id: Spark has no separate subtask,
                         each shuffle partition is one task and one store
max_parallelism          ``spark.sql.shuffle.partitions`` of the checkpoint
                         (frozen at its first batch)
checkpoint_id            the micro-batch id (``batch_id=`` reads an older one)
expires_at               ``ttlExpirationMs`` of TTL-enabled state variables,
                         ``expiresAtMicros`` of dropDuplicatesWithinWatermark,
                         ``timeoutTimestamp`` of a GroupState, a timer's time
value of a timer         its ``expiration_timestamp_ms`` (``readRegisteredTimers``)
key of join rows         the join key (``user_key``: the row's index for that key)
key of session windows   the grouping key (``user_key``: the session's start)
size_bytes               an estimate: the bytes of the key's and value's fields
=======================  ===================================================

What the files decide, before Spark is asked (:mod:`.layout`): the checkpoint
format version (v2: ``stateUniqueIds`` in ``commits/``, ``<v>_<uuid>`` files; the
session is set to it, Spark does not detect it), operators without ``_metadata``
(Spark 3.x: found from ``state/<op>/`` and noted), a copy whose metadata names
another folder's schema files (read through a folder pointing at the copy's own),
a missing partition folder (an error naming it, never fewer rows). Stores of the
built-in operators are read from their files without a JVM (:mod:`.stores`, every
checksum the files carry verified; ``jvm=True`` forces Spark's data source,
``jvm=False`` the files). Aggregation buffers repeat names (``count, sum, count``),
which ``toArrow()`` refuses: they are renamed by position (``count_2``) before; the
query's aliases are not in the checkpoint (a note says so).

Queries of the adapter's bucket layout (:mod:`explorer.format.spark_buckets`) keep all
keys' state in one Spark value per bucket (``__explorer_buckets``); this reader
decodes those values (Arrow IPC tables, format name and version checked) into
the same per-key rows: one state per descriptor, with the descriptor's kind,
``last_access`` and ``expires_at`` from the adapter's own TTL, and timers as
``event_timers`` / ``processing_timers``. ``key_group`` is the partition of the
key's bucket, where Spark keeps it.

Gaps of Spark's state reader in PySpark 4.3, worked around here:

* an unflattened MapState cannot go to pandas through Arrow (its map keys are
  structs): collections are always read flattened, and through ``toArrow()``;
* internal column families (``$ttl_*``, ``$procTimers_*``, ``$eventTimers_*``)
  cannot be read by name: timers are read with ``readRegisteredTimers``, TTL from
  the values' ``ttlExpirationMs``;
* the change feed of registered timers throws inside Spark: :meth:`changes`
  compares each batch's registered timers with the batch before instead;
* ``snapshotStartBatchId`` works only for batches whose snapshot (``<v>.zip``)
  exists: :meth:`snapshot_batches` lists them and other ids are refused clearly.

:class:`SparkCheckpointReader` opens the checkpoint and is composed of parts, one role each
(each a :class:`.part.SparkPart`):

===============  ====================================================================
``checkpoint``   the layout and metadata: ``info``, ``operators``, ``states``,
                 ``subtasks``, batches, ``detect``/``on_store``, whether the files are
                 read without a JVM (``jvm_free``)
``kinds``        operators without metadata, their kind inferred from their stores
``buckets``      the adapter's bucket layout decoded into states and rows
``keyed``        keyed state state by state (``keyed_pieces``), from the store files
                 without a JVM partition by partition, or through Spark
``jvm``          Spark's state data source: the session, ``statestore`` reads, the
                 fallback from the files and its notes
``contract``     decoded tables to contract pieces, and the Arrow helpers
``lookup``       ``key=`` lookups: ``key_query``, key filters, partition push-down
``changes``      ``changes`` (the change feed, the batch-by-batch diff, a batch's own
                 records), ``read_snapshot``, ``history``
===============  ====================================================================
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...errors import SnapshotFormatError, SnapshotNotFoundError
from ...format.untrusted import Roots
from . import layout
from .buckets import BucketLayout
from .changes import Changes
from .checkpoint import CheckpointLayout
from .contract import ContractRows
from .jvm import SparkSource
from .keyed import KeyedReads
from .kinds import OperatorKinds
from .lookup import KeyLookup

__all__ = ["SparkCheckpointReader"]


def _batch_ids(directory: Path) -> list[int]:
    if not directory.is_dir():
        return []
    return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())


class SparkCheckpointReader(CheckpointLayout, OperatorKinds, BucketLayout, KeyedReads, SparkSource, ContractRows,
                            KeyLookup, Changes):
    """One micro-batch of a Spark Structured Streaming checkpoint (the latest committed by default): opened here,
    read by its parts (see module doc)."""

    format_name = "spark-checkpoint"
    in_chk_folders = False  # one folder holds every batch

    def __init__(self, path: str | Path, batch_id: int | None = None, spark=None, jvm: bool | None = None,
                 mirror: layout.BatchMirror | None = None, allow_roots: Any = None) -> None:
        """``jvm=False`` reads HDFS-backed stores from their files only (no JVM started), ``True`` always through
        Spark's data source; ``None`` (default): from the files when every operator's store is HDFS-backed
        and of the built-in operators, through Spark otherwise.

        ``mirror``: the checkpoint is on an object store (``path`` is ignored); only the files of the batch
        read are fetched (:class:`.layout.BatchMirror`), the rest when a question needs them.

        Every file read resolves inside the checkpoint folder (symlinks followed, then checked); ``allow_roots``:
        more folders files may lie in (a ``state/`` folder linked to another disk)."""
        self._mirror = mirror
        if mirror is not None:
            if batch_id is None and mirror.committed:
                batch_id = mirror.committed[-1]
            path = mirror.batch(batch_id) if batch_id in mirror.committed else mirror.everything()
        super().__init__(path)
        self._jvm = jvm
        self._allow_roots = list(allow_roots or [])
        #: the folders this checkpoint's files may be read from (:class:`~explorer.format.untrusted.Roots`)
        self.roots = Roots([self.path], self._allow_roots, what="the checkpoint folder")
        if not self.detect(self.path):
            raise SnapshotNotFoundError(
                f"{self.path} is not a Spark Structured Streaming checkpoint: expected a 'metadata' file and "
                "'offsets/' and 'commits/' folders"
            )
        self._spark = spark
        self.committed = list(mirror.committed) if mirror is not None else _batch_ids(self.path / "commits")
        if not self.committed:
            raise SnapshotFormatError(f"{self.path}: the checkpoint has no committed micro-batch (commits/ is empty)")
        if batch_id is None:
            batch_id = self.committed[-1]
        elif batch_id not in self.committed:
            raise SnapshotFormatError(
                f"{self.path}: batch {batch_id} is not committed; committed batches are "
                f"{self.committed[0]}..{self.committed[-1]}"
            )
        self.batch_id = int(batch_id)
        #: checkpoint format version (1 or 2), from the commit log and the store files' names
        self.format_version = layout.checkpoint_format_version(self.path, self.committed, self.roots)

    def at_batch(self, batch_id: int) -> "SparkCheckpointReader":
        """The same checkpoint as of another committed micro-batch."""
        other = SparkCheckpointReader(self.path, batch_id=batch_id, spark=self._spark, jvm=self._jvm,
                                      mirror=self._mirror, allow_roots=self._allow_roots)
        if "_spark_path" in self.__dict__:
            other.__dict__["_spark_path"] = self.__dict__["_spark_path"]
        return other
