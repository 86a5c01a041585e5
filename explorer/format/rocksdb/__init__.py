"""The engine's RocksDB state on disk (format version 1): its one home, for the engine and the readers.

* :mod:`.layout` -- the byte layout of raw keys and values, its row-by-row
  codec and the one chunked range scan; the RocksDB backend
  (:mod:`explorer.engine.backends.rocksdb`) writes with it;
* :mod:`.native` -- a subtask's native files (incremental checkpoints) opened
  read-only and decoded into rows or the canonical keyed-state table;
* :mod:`.columns` -- raw entries decoded column-wise (NumPy, Arrow) into that table;
* :mod:`.encode` -- the inverse: table rows encoded column-wise into sorted raw
  entries, for a restore's bulk load.

The SST files themselves are read by :mod:`explorer.format.sst`.
"""
