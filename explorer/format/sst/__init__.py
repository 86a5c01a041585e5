"""RocksDB SST files (block-based tables), read without RocksDB, for the engine and the Flink reader.

* :mod:`.file` -- one SST file: footer, blocks, properties, entries one by one
  (:class:`~.file.SstFile`, :class:`~.file.SstError`);
* :mod:`.columns` -- the data blocks of a column family's files parsed at once
  into key and value byte ranges (NumPy and the numba kernels of :mod:`.kernels`,
  imported only when a file is read, so ``import explorer`` does not load numba);
* :mod:`.instance` -- the visible entries of one RocksDB instance: the newest
  version of each key, merge operands combined.

Nothing here knows what the keys and values mean: the Flink reader
(:mod:`explorer.readers.flink`) and the engine's full snapshots
(:mod:`explorer.engine.checkpoint.sst_view`) decode them in their own layouts.
"""
