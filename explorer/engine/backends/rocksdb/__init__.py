"""The embedded RocksDB backend, by role.

* :mod:`.backend` -- :class:`RocksDBStateBackend`: the database, its column
  families, write batches, bulk loads, native checkpoints and restores, and
  what ``rocksdict`` can and cannot do;
* :mod:`.table` -- :class:`RocksDBStateTable`: one keyed state in its column
  family, with the per-batch write buffer in front of it;
* :mod:`.staging` -- :class:`StagingDir` and :func:`sweep_staging`: scratch
  folders next to the database that a dead owner cannot leak.

The byte layout of keys and values (format version :data:`FORMAT_VERSION`)
and its codec are not here: they live in :mod:`explorer.format.rocksdb.layout`,
where the readers of native files and SST files use them too. The package
logs under its own name, ``explorer.engine.backends.rocksdb``.
"""

from ....format.rocksdb.layout import FORMAT_VERSION
from .backend import INGEST_FILE_BYTES, RocksDBStateBackend, warm_kernels_in_background
from .staging import STAGING_KINDS, StagingDir, remove_created_dirs, sweep_staging
from .table import BUFFER_ENTRIES, RocksDBStateTable

__all__ = [
    "BUFFER_ENTRIES",
    "FORMAT_VERSION",
    "INGEST_FILE_BYTES",
    "RocksDBStateBackend",
    "RocksDBStateTable",
    "STAGING_KINDS",
    "StagingDir",
    "remove_created_dirs",
    "sweep_staging",
    "warm_kernels_in_background",
]
