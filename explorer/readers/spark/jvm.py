"""The JVM path: a Spark checkpoint's state read through Spark's own state data source.

:class:`SparkSource` is the part of :class:`~.reader.SparkCheckpointReader` that starts (or takes) a
SparkSession, points it at the folder Spark may read (the checkpoint, or for a moved copy one whose
metadata names the copy's schema files: ``layout.resolved_copy``; no symlink may lead out), sets the
session's checkpoint format version (Spark does not detect v2) and reads ``format("statestore")``.
:meth:`SparkSource._read` is the one read of a state: from the store files when the reader is JVM-free
(``keyed``), falling back to Spark with a note when the files cannot be read without it.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Any

import pyarrow as pa

from ...errors import ReaderError, SnapshotFormatError, VersionGoneError
from ...spark_session import get_spark, log_path, root_cause, spark_progress
from ..base import KeyedStateQuery
from . import layout
from .keys import unique_names
from .part import SparkPart

_FORMAT_CONF = "spark.sql.streaming.stateStore.checkpointFormatVersion"


def spark_cause(exc: BaseException) -> str:
    """Spark's cause in one line (the JVM's root exception, not Py4J's first line) and where the JVM log is."""
    return f"{root_cause(exc)} (Spark's full output: {log_path()})"


class SparkSource(SparkPart):
    """Spark's state data source over this checkpoint (see module doc)."""

    @property
    def spark(self):
        if self._spark is None:
            self._spark = get_spark()
        return self._spark

    @cached_property
    def _spark_path(self) -> Path:
        """The folder Spark reads: the checkpoint, or for a moved copy one whose metadata points at the copy."""
        self._everything()
        layout.check_links(self.path, self.roots)  # Spark follows links itself: none may lead out
        resolved = layout.resolved_copy(self.path, roots=self.roots)
        if resolved != self.path.resolve():
            self.notes.append(
                f"{self.path} was copied from elsewhere: its operator metadata names schema files of the original "
                "folder; they are read from this copy instead")
        return resolved

    def _use_format_version(self) -> None:
        """Spark reads a v2 checkpoint only when the session's format version says 2 (it does not detect it)."""
        if self.spark.conf.get(_FORMAT_CONF, "1") != str(self.format_version):
            self.spark.conf.set(_FORMAT_CONF, str(self.format_version))

    def _frame(self, op: dict[str, Any], options: dict[str, str], extra: dict[str, Any] | None = None):
        self._use_format_version()
        r = self.spark.read.format("statestore").option("path", str(self._spark_path))
        r = r.option("operatorId", op["operator_id"])
        if not (extra and "readChangeFeed" in extra):  # Spark refuses batchId together with the change feed
            r = r.option("batchId", self.batch_id)
        for k, v in {**options, **(extra or {})}.items():
            r = r.option(k, v)
        return r.load()

    def _read(self, op, st, query: KeyedStateQuery, extra=None) -> pa.Table:
        from pyspark.sql import functions as F

        where = (f"state {st['state']!r} of operator {op['operator']!r} at batch {self.batch_id} in "
                 f"{self.path}/state/{op['operator_id']}")
        self._check_partitions(op, query)
        if self.jvm_free and not extra:
            try:
                t = self._store_table(op, st, query)
            except SnapshotFormatError as exc:
                if self._jvm is False or isinstance(exc, VersionGoneError):  # Spark needs the same files
                    raise
                self.notes.append(f"{where}: read through Spark's data source: {exc}")
            else:
                return t
        try:
            df = self._frame(op, st["options"], extra)
            if query.key_groups is not None:
                df = df.where(F.col("partition_id").isin([int(k) for k in query.key_groups]))
            if query.keys is not None and query.key_groups is None:
                parts = self._partitions_of(op, st, df.schema["key"].dataType, query.keys)
                if parts is not None:
                    df = df.where(F.col("partition_id").isin(parts))
            with spark_progress(f"reading {where} through Spark"):
                return unique_field_names(df).toArrow()
        except ReaderError:
            raise
        except Exception as exc:
            raise ReaderError(f"reading {where} through Spark's state data source failed: {spark_cause(exc)}") from exc


def unique_field_names(df):
    """``df`` with the value struct's repeated field names made unique, positionally (``toArrow()``
    refuses repeats; Spark names aggregation buffers by function: ``count, sum, count, sum``).

    The n-th repeat of a name gets ``_<n>``: ``count, sum, count_2, sum_2, sum_3, min, max``.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructField, StructType

    out = []
    changed = False
    for f in df.schema.fields:
        t = f.dataType
        if isinstance(t, StructType):
            names = unique_names([x.name for x in t.fields])
            if names != [x.name for x in t.fields]:
                changed = True
                new = StructType([StructField(n, x.dataType, x.nullable) for n, x in zip(names, t.fields)])
                out.append(F.col(f.name).cast(new).alias(f.name))
                continue
        out.append(F.col(f.name))
    return df.select(*out) if changed else df
