"""Apache Flink savepoints and checkpoints, read in pure Python (no JVM).

Modules, one format each: ``datainput`` (Java DataInput), ``javaser`` (a safe
parser for the one Java-serialized object in ``_metadata``), ``metadata``
(``_metadata``), ``handles`` (where state bytes live), ``serializers``
(serializer snapshots and value decoders), ``statemeta`` (the keyed backend
header), ``fullformat`` (canonical savepoints, RocksDB full snapshots),
``heapformat`` (HashMap backend snapshots), ``compression`` (Snappy), ``rows`` (entries to
contract rows), ``operatorstate`` (operator and broadcast state), ``reader``
(``FlinkSnapshotReader``, opened there and composed of parts of one role each:
``layout`` the metadata's answers and ``find_metadata``, ``keyed`` keyed state
subtask by subtask, ``sstread`` RocksDB instances, ``pieces`` entries to
pieces with key groups checked, ``windows`` merged session windows,
``pyflinkstates`` PyFlink's Python states, ``operatorstate``, ``notes``).
RocksDB native/incremental snapshots are read with the SST format of
:mod:`explorer.format.sst`, which the engine uses too.

Value decoders for serializers beyond the built-in ones live in modules of
their own that call :func:`.serializers.register_snapshot_decoder` at import
(``valuetypes``: enums, java.time/java.sql, BigDecimal, arrays, Row, Either,
GlobalWindow; ``internals``: interval join, CEP, SQL runtime types); they are
imported here, once, so that every reader sees them. A new decoder module adds
itself to that import line.
"""

from . import avro, internals, kryo, pickles, valuetypes  # noqa: F401  (they register their snapshot decoders)
from .reader import FlinkSnapshotReader, find_metadata

__all__ = ["FlinkSnapshotReader", "find_metadata"]
