"""A snapshot as stored: which reader opens a path, and the :class:`StoredSnapshot` over it.

This is the layer under :mod:`explorer.analysis`: analyses take a ``StoredSnapshot`` (or a
DataFrame) and open paths with :func:`open_stored`. :class:`explorer.snapshot.Snapshot`,
what ``explorer.open`` returns, is a ``StoredSnapshot`` with the analyses as methods and a
notebook display.

One module per job:

* :mod:`.registry`: which reader opens a path (:data:`READERS`, :func:`register`,
  :func:`reader_for`, :func:`open_stored`), a job's checkpoint directory (:func:`checkpoints_in`,
  :func:`retained_checkpoints`, :func:`checkpoint_directory_of`) and its newest checkpoint;
* :mod:`.snapshot`: :class:`StoredSnapshot`, metadata and keyed state read in parts (pages,
  Arrow batches, one Arrow table, a Dataset);
* :mod:`.frames`: reader pieces assembled into the contract DataFrame;
* :mod:`.dataset`: an engine snapshot's Parquet files as one pyarrow Dataset;
* :mod:`.memory`: the memory available and the memory budget;
* :mod:`.cache`: :class:`AnalysisCache`, what analyses keep on a snapshot.
"""

from .cache import AnalysisCache
from .memory import (
    ANALYSIS_BYTES_PER_ROW,
    FRAME_BYTES_PER_ROW,
    available_memory,
    default_memory_budget,
    parse_memory_budget,
)
from .registry import (
    READERS,
    checkpoint_directory_of,
    checkpoints_in,
    open_stored,
    reader_for,
    register,
    register_optional_readers,
    retained_checkpoints,
)
from .snapshot import StoredSnapshot

__all__ = [
    "ANALYSIS_BYTES_PER_ROW",
    "FRAME_BYTES_PER_ROW",
    "READERS",
    "AnalysisCache",
    "StoredSnapshot",
    "available_memory",
    "checkpoint_directory_of",
    "checkpoints_in",
    "default_memory_budget",
    "open_stored",
    "parse_memory_budget",
    "reader_for",
    "register",
    "register_optional_readers",
    "retained_checkpoints",
]
